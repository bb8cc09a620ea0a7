"""The worker side imports nothing from the harness and stays valid Python 3.7."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
WORKER_SIDE = [SRC / "dlperf" / "__init__.py",
               *sorted((SRC / "dlperf" / "models").rglob("*.py")),
               *sorted((SRC / "dlperf" / "worker").rglob("*.py")),
               *sorted((SRC / "dlperf" / "backends").rglob("*.py"))]
HARNESS_ONLY = ("rich", "yaml", "scipy", "psutil", "dlperf.spec", "dlperf.runner",
                "dlperf.store", "dlperf.cli", "dlperf.display", "dlperf.stats")


def test_worker_and_torch_backend_import_no_harness_module():
    code = ("import sys, dlperf.worker.__main__, dlperf.backends.torch, dlperf.models; "
            f"print([m for m in {HARNESS_ONLY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"


def python37() -> str | None:
    found = shutil.which("python3.7")
    pyenv = Path.home() / ".pyenv" / "versions"
    candidates = sorted(pyenv.glob("3.7*/bin/python3.7")) if pyenv.is_dir() else []
    for candidate in [*(str(c) for c in candidates), found]:
        if candidate and subprocess.run([candidate, "--version"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.parallel
def test_worker_side_is_valid_python_37():
    interpreter = python37()
    if interpreter is None:
        pytest.fail("no Python 3.7 interpreter found; the worker must stay 3.7-compatible")
    for path in WORKER_SIDE:
        proc = subprocess.run([interpreter, "-c",
                               "import ast,sys; ast.parse(open(sys.argv[1]).read())",
                               str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"


def test_worker_core_imports_and_reports_under_python_37(tmp_path):
    """Not just parsing: 3.7 evaluates annotations, so import the framework-free worker parts."""
    interpreter = python37()
    if interpreter is None:
        pytest.fail("no Python 3.7 interpreter found; the worker must stay 3.7-compatible")
    code = ("import dlperf.models, dlperf.worker.loop, dlperf.worker.__main__ as w; "
            "print(dlperf.models.get('resnet50').params(), w.classify(MemoryError()))")
    out = subprocess.run([interpreter, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["25557032", "oom"]
