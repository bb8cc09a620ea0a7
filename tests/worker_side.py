"""Which of dlperf's modules run inside a framework's interpreter (the worker side), read from the
code rather than from a list of folders kept by hand.

The worker side is everything such an interpreter can load, starting from
- what the harness starts with a framework's Python: ``[python, "-m", "dlperf.X", ...]`` anywhere
  in the code, where the interpreter is not the harness's own ``sys.executable`` (a package run
  so is wholly on the worker side: ``python -m dlperf.worker``);
- a package whose own docstring says it is on the worker side (``dlperf.data``: the harness also
  runs ``make_images``, and the worker reads the folders it writes);
then following every import: ``import``/``from`` at any depth, the parents a module's import
loads, and ``importlib.import_module``/``__import__`` of a name built from a ``"dlperf..."`` text
(``"dlperf.backends." + framework`` reaches every backend).

Used by ``test_structure.py`` (the side's imports and Python 3.7) and
``test_worker_isolation.py`` (importing it in a clean interpreter).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import dlperf

ROOT = Path(dlperf.__file__).resolve().parent
DECLARED = re.compile(r"\bworker side\b", re.IGNORECASE)
# a module name as the code spells it for an import: "dlperf.a.b", "dlperf.a.%s.b", "dlperf.a."
NAME = re.compile(r"dlperf(\.(?:[A-Za-z_]\w*|%s))*\.?")
# what the worker side may import of dlperf's own requirements (CONTRIBUTING.md: numpy, and
# Pillow to read a dataset folder); every other requirement is the harness's alone
WORKER_MAY_IMPORT = frozenset({"numpy", "pillow"})


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def find_modules(root: Path = ROOT) -> dict[str, Module]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


MODULES = find_modules()


@lru_cache(maxsize=None)
def tree(name: str) -> ast.Module:
    module = MODULES[name]
    return ast.parse(module.path.read_text(), str(module.path))


def owner(name: str) -> str | None:
    """The dlperf module an imported name lives in (``dlperf.a.b.func`` -> ``dlperf.a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: Module, parsed: ast.Module | None = None) -> dict[str, int]:
    """Every dlperf module ``module`` imports (at any depth in the file), with a line number."""
    edges: dict[str, int] = {}
    if parsed is None:
        parsed = ast.parse(module.path.read_text(), str(module.path))
    for node in ast.walk(parsed):
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


def dynamic_imports(name: str) -> set[str]:
    """The modules ``importlib.import_module(...)``/``__import__(...)`` may load here: every
    module matching a ``"dlperf..."`` text in the argument (``%s`` one name, a trailing dot any)."""
    found: set[str] = set()
    for call in ast.walk(tree(name)):
        if not (isinstance(call, ast.Call) and call.args and (
                getattr(call.func, "attr", None) == "import_module"
                or getattr(call.func, "id", None) in ("import_module", "__import__"))):
            continue
        for node in ast.walk(call.args[0]):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and NAME.fullmatch(node.value):
                pattern = re.escape(node.value.rstrip(".")).replace(re.escape("%s"), r"[^.]+")
                pattern += r"\..+" if node.value.endswith(".") else ""
                found |= {other for other in MODULES if re.fullmatch(pattern, other)}
    return found


def _is_sys_executable(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "executable"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def started_in_framework() -> dict[str, str]:
    """Each module the harness runs with ``-m`` under an interpreter that is not its own, and
    where (``module:line``)."""
    found: dict[str, str] = {}
    for name in MODULES:
        for node in ast.walk(tree(name)):
            if not isinstance(node, (ast.List, ast.Tuple)):
                continue
            items = node.elts
            for python, flag, target in zip(items, items[1:], items[2:]):
                if (isinstance(flag, ast.Constant) and flag.value == "-m"
                        and isinstance(target, ast.Constant) and target.value in MODULES
                        and not _is_sys_executable(python)):
                    found.setdefault(target.value, f"{name}:{node.lineno}")
    return found


def declared_packages() -> set[str]:
    """Packages whose docstring says they are on the worker side."""
    return {name for name, module in MODULES.items()
            if module.is_package and DECLARED.search(ast.get_docstring(tree(name)) or "")}


def _subtree(package: str) -> set[str]:
    return {name for name in MODULES if name == package or name.startswith(package + ".")}


@lru_cache(maxsize=None)
def worker_side() -> dict[str, str]:
    """Every worker-side module, with why: the root it was reached from, or the importer."""
    why: dict[str, str] = {}
    todo: list[tuple[str, str]] = []
    for root, where in started_in_framework().items():
        members = _subtree(root) if MODULES[root].is_package else {root}
        todo += [(name, f"run with a framework's Python at {where}") for name in members]
    for package in declared_packages():
        todo += [(name, f"its package's docstring: {package}") for name in _subtree(package)]
    while todo:
        name, reason = todo.pop()
        if name in why:
            continue
        why[name] = reason
        parts = name.split(".")
        todo += [(".".join(parts[:i]), f"a parent of {name}") for i in range(1, len(parts))]
        todo += [(target, f"imported by {name} (line {line})")
                 for target, line in imports(MODULES[name], tree(name)).items()]
        todo += [(target, f"imported by name in {name}") for target in dynamic_imports(name)]
    return why


def harness_only_imports() -> dict[str, str]:
    """Top-level import names of dlperf's own requirements (no extras) that the worker side may
    not import, each with its distribution: a framework's environment does not have them."""
    wanted = set()
    for line in importlib.metadata.requires("dlperf") or []:
        if "extra ==" in line:
            continue
        dist = re.match(r"[A-Za-z0-9_.\-]+", line)
        if dist and dist.group(0).lower() not in WORKER_MAY_IMPORT:
            wanted.add(dist.group(0).lower())
    return {name: dists[0] for name, dists in importlib.metadata.packages_distributions().items()
            if any(d.lower() in wanted for d in dists) and not name.startswith("_")
            and name.isidentifier()}


def third_party_imports(name: str) -> dict[str, int]:
    """Top-level names of what ``name`` imports outside dlperf (absolute imports only)."""
    found: dict[str, int] = {}
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for imported in names:
            top = imported.partition(".")[0]
            if top != "dlperf":
                found.setdefault(top, node.lineno)
    return found


def python37() -> str | None:
    """A Python 3.7 interpreter (the worker side's oldest: TensorFlow 1.15's), or None."""
    found = shutil.which("python3.7")
    pyenv = Path.home() / ".pyenv" / "versions"
    candidates = sorted(pyenv.glob("3.7*/bin/python3.7")) if pyenv.is_dir() else []
    for candidate in [*(str(c) for c in candidates), found]:
        if candidate and subprocess.run([candidate, "--version"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None
