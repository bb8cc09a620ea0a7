"""The shape of the source tree, read from the code itself (``ast``), not from a list kept by hand.

- no import cycle among dlperf's modules (importing one's own package ``__init__`` does not count);
- the worker side, which runs inside each framework's own Python (3.7 for TensorFlow 1.15) and is
  found from the code (``worker_side.py``: what the harness runs with a framework's Python and
  everything that imports), imports none of the harness's own packages and parses as 3.7;
- at most 15 modules at the top level of ``src/dlperf``; no module over 800 lines; no function
  over 80 lines unless its docstring says why it is not split.
"""

from __future__ import annotations

import ast
import functools
import subprocess

import pytest

from worker_side import MODULES, Module, harness_only_imports, imports, python37, tree, \
    third_party_imports, worker_side

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

MAX_TOP_LEVEL = 15
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


@functools.lru_cache(maxsize=1)
def graph() -> dict[str, dict[str, int]]:
    """Each dlperf module's imports of dlperf modules, with a line each: parsed when a test
    first asks (once per process, the trees shared with worker_side's), not at collection,
    where every xdist process paid its seconds whether or not it ran these tests."""
    return {name: imports(module, tree(name)) for name, module in MODULES.items()}


def counted(source: str, target: str) -> bool:
    """An edge to one's own package's __init__ (or an ancestor's) is not a cycle edge."""
    return not (MODULES[target].is_package and source.startswith(target + "."))


def find_cycle() -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph()[name]):
            if not counted(name, target):
                continue
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph()):
        if name not in state:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_the_imports_it_must():
    # the checker itself: a known edge of each kind is found (absolute, from-import of a module)
    assert "dlperf.spec" in graph()["dlperf.runner"]
    assert "dlperf.worker.workload" in graph()["dlperf.worker.loop"]


def test_no_import_cycle():
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{a} (line {graph()[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_the_worker_side_is_found_from_the_code():
    # the derivation itself: what the worker process runs, the backends it imports by name,
    # a package that declares itself, and a harness module its import does not reach
    side = worker_side()
    assert "dlperf.worker.loop" in side and "dlperf.backends.torch.backend" in side
    assert "dlperf.backends.mindspore.resnet" in side and "dlperf.models.resnet" in side
    assert {name for name in MODULES if name.startswith("dlperf.data.")} <= set(side)
    assert "dlperf.launchers.horovod_gloo" in side  # run by the <fw>+horovod environment's Python
    assert "dlperf.runner" not in side and "dlperf.store" not in side


def test_worker_side_imports_nothing_only_the_harness_has():
    """A framework's environment has the standard library, numpy, Pillow and its framework: none
    of dlperf's other requirements (rich, PyYAML, scipy, ...), so no worker-side module, nor
    anything it imports, may import one."""
    side, harness = worker_side(), harness_only_imports()
    found = [f"{name} imports {top} ({harness[top]}, line {line}); on the worker side as "
             f"{side[name]}"
             for name in sorted(side) for top, line in third_party_imports(name).items()
             if top in harness]
    assert not found, "the worker side must not need the harness's packages:\n" + "\n".join(found)


def test_worker_side_parses_as_python_3_7():
    """Under a real Python 3.7 (TensorFlow 1.15's), every file in one interpreter."""
    interpreter = python37()
    if interpreter is None:
        pytest.fail("no Python 3.7 interpreter found; the worker side must stay 3.7-compatible")
    paths = [str(MODULES[name].path) for name in sorted(worker_side())]
    code = ("import ast, sys\nfor path in sys.argv[1:]:\n    try:\n"
            "        ast.parse(open(path).read(), path)\n"
            "    except SyntaxError as error:\n        print(path, error)\n")
    proc = subprocess.run([interpreter, "-c", code, *paths], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stdout, proc.stdout + proc.stderr


def test_top_level_holds_at_most_15_modules():
    top = sorted(name for name, module in MODULES.items()
                 if name.count(".") == 1 and not module.is_package)
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules: {top}"


def test_no_module_over_800_lines():
    long = {name: n for name, module in MODULES.items()
            if (n := len(module.path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def long_functions() -> list[str]:
    found = []
    for name, module in MODULES.items():
        for node in ast.walk(ast.parse(module.path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                why = (ast.get_docstring(node) or "").lower()
                if lines > MAX_FUNCTION_LINES and "not split" not in why:
                    found.append(f"{name}.{node.name} ({lines} lines, line {node.lineno})")
    return found


def test_no_function_over_80_lines_without_its_reason():
    found = long_functions()
    assert not found, ("functions over 80 lines whose docstring does not say why they are "
                       "'not split':\n" + "\n".join(found))


@pytest.mark.parametrize("source,line", [
    ("from dlperf import spec\n", "dlperf.spec"),
    ("from dlperf.launchers import launch\n", "dlperf.launchers.launch"),
    ("from . import loop\n", "dlperf.worker.loop"),
])
def test_an_import_of_each_form_is_resolved(tmp_path, source, line):
    path = tmp_path / "probe.py"
    path.write_text(source)
    probe = Module("dlperf.worker.probe", path, False)
    assert line in imports(probe)
