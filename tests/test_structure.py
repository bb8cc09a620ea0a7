"""The shape of the source tree, read from the code itself (``ast``), not from a list kept by hand.

- no import cycle among dlperf's modules (importing one's own package ``__init__`` does not count);
- the worker side (``worker/``, ``backends/``, ``models``, ``data/``), which runs inside each
  framework's own Python (3.7 for TensorFlow 1.15), imports no harness module and parses as 3.7;
- at most 15 modules at the top level of ``src/dlperf``; no module over 800 lines; no function
  over 80 lines unless its docstring says why it is not split.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import dlperf

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

ROOT = Path(dlperf.__file__).resolve().parent
WORKER_SIDE = ("dlperf.worker", "dlperf.backends", "dlperf.models", "dlperf.data")
MAX_TOP_LEVEL = 15
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


MODULES = modules()


def owner(name: str) -> str | None:
    """The dlperf module an imported name lives in (``dlperf.a.b.func`` -> ``dlperf.a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: Module) -> dict[str, int]:
    """Every dlperf module ``module`` imports (at any depth in the file), with a line number."""
    edges: dict[str, int] = {}
    for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            found = owner(target) if target.startswith("dlperf") else None
            if found and found != module.name:
                edges.setdefault(found, node.lineno)
    return edges


GRAPH = {name: imports(module) for name, module in MODULES.items()}


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
        for target in sorted(GRAPH[name]):
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

    for name in sorted(GRAPH):
        if name not in state:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


def on_worker_side(name: str) -> bool:
    return any(name == side or name.startswith(side + ".") for side in WORKER_SIDE)


def test_the_graph_sees_the_imports_it_must():
    # the checker itself: a known edge of each kind is found (absolute, from-import of a module)
    assert "dlperf.spec" in GRAPH["dlperf.runner"]
    assert "dlperf.worker.workload" in GRAPH["dlperf.worker.loop"]


def test_no_import_cycle():
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{a} (line {GRAPH[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_worker_side_imports_no_harness_module():
    edges = [f"{source} imports {target} (line {line})"
             for source, targets in GRAPH.items() if on_worker_side(source)
             for target, line in targets.items()
             if not on_worker_side(target) and target != "dlperf"]
    assert not edges, "the worker side must not import the harness:\n" + "\n".join(edges)


def test_worker_side_parses_as_python_3_7():
    for name, module in MODULES.items():
        if on_worker_side(name):
            ast.parse(module.path.read_text(), str(module.path), feature_version=(3, 7))


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
