"""GPU tests: collected only where ``nvidia-smi -L`` lists a GPU.

Elsewhere every module of this folder but ``test_gpu.py`` is left out of collection, and
``test_gpu.py`` skips itself at module level, so a CPU machine's summary holds exactly one line
for the whole folder: ``SKIPPED [1] tests/gpu/test_gpu.py: no GPU: nvidia-smi lists none``.
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def cuda_env():
    """Install (or find current) a framework's cuda variant the way a user does:
    `dlperf envs install FW --variant cuda`; returns the interpreter that runs its worker."""
    from dlperf import envs

    done: dict[str, str] = {}

    def install(framework: str) -> str:
        if framework not in done:
            proc = dlperf("envs", "install", framework, "--variant", "cuda", timeout=3600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            done[framework] = envs.interpreter(framework, "cuda")
        return done[framework]
    return install
