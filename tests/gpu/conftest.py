"""GPU tests: collected only where ``nvidia-smi -L`` lists a GPU.

Elsewhere every module of this folder but ``test_gpu.py`` is left out of collection, and
``test_gpu.py`` skips itself at module level, so a CPU machine's summary holds exactly one line
for the whole folder: ``SKIPPED [1] tests/gpu/test_gpu.py: no GPU: nvidia-smi lists none``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from conftest import dlperf, gpus_listed

NO_GPU = "no GPU: nvidia-smi lists none; the GPU tests in tests/gpu/ did not run"
SKIPPING_MODULE = "test_gpu.py"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if gpus_listed() or collection_path.name == SKIPPING_MODULE \
            or not collection_path.name.startswith("test_"):
        return None
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the short GPU check (tests/gpu/check_order.py): its order, what never ran first."""
    from gpu.check_order import budget, rank

    if budget() is not None:
        items.sort(key=lambda item: rank(item.name))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """In the short GPU check: a test that would start after its budget is skipped, saying how
    to run it alone."""
    from gpu.check_order import STARTED_VARIABLE, budget, spent

    seconds = budget()
    if seconds is None:
        return
    started = float(os.environ.setdefault(STARTED_VARIABLE, str(time.time())))
    if spent(seconds, started):
        pytest.skip(f"the GPU check's {seconds:g} s were spent before it; run it alone: "
                    f".venv/bin/python -m pytest -q tests/gpu -k {item.name.split('[')[0]}")


GIVEN = "DLPERF_GPU_PYTHON"


def given_interpreters(text: str) -> dict[str, str]:
    """``DLPERF_GPU_PYTHON=torch=/opt/py/bin/python3,jax=...``: frameworks whose CUDA build is
    already in an interpreter (a GPU machine that cannot reach the package index, a build of
    your own), used as they are instead of installing the cuda variant. torch lives in
    dlperf's own environment, so its entry must be the interpreter that runs the tests."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, path = item.partition("=")
        found = shutil.which(path) if sep else None
        if not found:
            raise pytest.UsageError(f"{GIVEN}: {item!r} is not FRAMEWORK=INTERPRETER with an "
                                    "interpreter that exists")
        out[name] = found
    torch = out.get("torch")
    if torch and os.path.realpath(torch) != os.path.realpath(sys.executable):
        raise pytest.UsageError(f"{GIVEN}: torch lives in dlperf's own environment: name the "
                                f"interpreter running the tests ({sys.executable}), or run "
                                f"pytest with {torch}")
    return out


@pytest.fixture(scope="session")
def cuda_env():
    """Install (or find current) a framework's cuda variant the way a user does:
    `dlperf envs install FW --variant cuda`; returns the interpreter that runs its worker.
    A framework named in DLPERF_GPU_PYTHON is taken from the interpreter given there."""
    from dlperf import envs

    done: dict[str, str] = given_interpreters(os.environ.get(GIVEN, ""))

    def install(framework: str) -> str:
        if framework not in done:
            proc = dlperf("envs", "install", framework, "--variant", "cuda", timeout=3600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            done[framework] = envs.interpreter(framework, "cuda")
        return done[framework]
    return install
