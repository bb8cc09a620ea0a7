"""The worker side runs in a framework's interpreter: importing it loads none of the harness's
own packages, and it imports and runs under Python 3.7. Which modules are the worker side, and
their Python 3.7 syntax, are ``test_structure.py``'s (from ``worker_side.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from worker_side import ROOT, harness_only_imports, python37, worker_side

SRC = ROOT.parent


# run in a clean interpreter: no framework is loaded (an import of one fails, and the module
# importing it is left out), so what gets loaded is the worker side's own doing
BLOCK_FRAMEWORKS = """
import importlib, importlib.abc, sys
class NoFramework(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names and top not in ALLOWED:
            raise ImportError("no framework here: " + name, name=top)
sys.meta_path.insert(0, NoFramework())
imported = []
for name in NAMES:
    try:
        importlib.import_module(name)
        imported.append(name)
    except ImportError as error:
        if not error.name or error.name.partition(".")[0] == "dlperf":
            raise
print(len(imported), [m for m in HARNESS if m in sys.modules])
"""


@pytest.mark.parallel
def test_importing_the_worker_side_loads_no_harness_package():
    """Every worker-side module that imports without a framework, in a clean interpreter: none
    of dlperf's harness-only requirements (rich, PyYAML, ...) is loaded."""
    harness = sorted(harness_only_imports())
    allowed = ["dlperf", "numpy", "PIL", *harness]
    code = (f"NAMES = {sorted(worker_side())!r}\nHARNESS = {harness!r}\n"
            f"ALLOWED = {allowed!r}\n" + BLOCK_FRAMEWORKS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    count, loaded = out.stdout.split(" ", 1)
    assert loaded.strip() == "[]", out.stdout
    # the framework-free part at least: the worker's entry point, its loop, the catalogue
    assert int(count) >= 30, out.stdout


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
