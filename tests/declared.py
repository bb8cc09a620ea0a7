"""What each test runs, said next to the test: ``@covers(framework, models, tasks, precisions)``.

A backend's ``SUPPORT`` declares (model, task, precision) per device kind; issue 26 asks that
every declared combination be run by some test. A test that really runs combinations (a real
worker, or the backend's own ``build`` and a step in this process) says which with ``covers``;
``tests/backends/test_declared_tested.py`` reads every decorator from the test files with ``ast`` (no test
module is imported, nothing runs) and fails on a declared combination no test covers, on a
``covers`` naming a combination that is not declared (a stale claim), and on a decorator it
cannot read.

Each of ``models``, ``tasks`` and ``precisions`` is one name or a tuple of names: the test runs
their product. The arguments must be literals or module-level constants of literals (the reader
does not import the test). ``device`` is ``"cpu"`` (the default) or ``"cuda"`` (tests/gpu/).

The decorator returns the test unchanged, so it composes with any pytest decorator and needs
no registered marker.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, TypeVar, Union

F = TypeVar("F", bound=Callable)
Names = Union[str, tuple, list]


class Combo(NamedTuple):
    framework: str
    model: str
    task: str
    precision: str
    device: str


def _names(value: Names) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def combos(framework: str, models: Names, tasks: Names, precisions: Names,
           device: str = "cpu") -> list[Combo]:
    """The combinations one ``covers`` names."""
    return [Combo(framework, m, t, p, device)
            for m, t, p in itertools.product(_names(models), _names(tasks), _names(precisions))]


def covers(framework: str, models: Names, tasks: Names, precisions: Names,
           device: str = "cpu") -> Callable[[F], F]:
    """This test runs every (model, task, precision) of the product with ``framework`` on
    ``device``; read statically by tests/backends/test_declared_tested.py."""
    claimed = combos(framework, models, tasks, precisions, device)

    def mark(test: F) -> F:
        test.covers = [*getattr(test, "covers", []), *claimed]  # type: ignore[attr-defined]
        return test
    return mark


class Claim(NamedTuple):
    test: str          # "tests/test_x.py::test_name"
    combos: list[Combo]


class Unreadable(Exception):
    """A ``covers`` whose arguments are not literals or module constants."""


def _constants(tree: ast.Module) -> dict[str, object]:
    """The module's top-level NAME = literal assignments (later ones win)."""
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = _literal(node.value, found)
            except Unreadable:
                pass
    return found


def _literal(node: ast.AST, constants: dict[str, object]) -> object:
    if isinstance(node, ast.Name):
        if node.id in constants:
            return constants[node.id]
        raise Unreadable(f"{node.id} is not a module-level constant")
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_literal(item, constants) for item in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # ("a",) + OTHER
        left, right = _literal(node.left, constants), _literal(node.right, constants)
        if isinstance(left, tuple) and isinstance(right, tuple):
            return left + right
        raise Unreadable("only tuples are added")
    try:
        return ast.literal_eval(node)
    except ValueError as error:
        raise Unreadable(ast.dump(node)) from error


def _is_covers(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "covers") or (
        isinstance(func, ast.Attribute) and func.attr == "covers")


def claims_in(path: Path, root: Path) -> Iterator[Claim]:
    """Every ``covers`` on a test function (module level or in a class) of one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _constants(tree)
    relative = path.relative_to(root).as_posix()
    scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    scopes += [(node.name + "::", node.body) for node in tree.body
               if isinstance(node, ast.ClassDef)]
    for prefix, body in scopes:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            found = []
            for decorator in node.decorator_list:
                if not _is_covers(decorator):
                    continue
                try:
                    args = [_literal(a, constants) for a in decorator.args]
                    kwargs = {k.arg: _literal(k.value, constants) for k in decorator.keywords}
                    found += combos(*args, **kwargs)  # type: ignore[arg-type]
                except (Unreadable, TypeError) as error:
                    raise Unreadable(f"{relative}:{decorator.lineno}: covers(...) must be "
                                     f"literals or module constants: {error}") from error
            if found:
                if not node.name.startswith("test"):
                    raise Unreadable(f"{relative}:{node.lineno}: covers on {node.name}, "
                                     "which pytest does not collect")
                yield Claim(f"{relative}::{prefix}{node.name}", found)


def all_claims(root: Path) -> list[Claim]:
    """Every claim under ``root``/tests, in file order."""
    return [claim for path in sorted((root / "tests").rglob("test_*.py"))
            for claim in claims_in(path, root)]
