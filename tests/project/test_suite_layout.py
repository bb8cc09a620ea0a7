"""The test suite's own layout, read from its files (``ast``): what `make test`'s scheduling
relies on and a new test file could silently break."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from work_units import SESSION_FIXTURE_FILES

# reads the test files and measures nothing: `make test` runs it beside another
pytestmark = pytest.mark.parallel

TESTS = Path(__file__).resolve().parents[1]


def is_session_scoped(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value == "session"
        for k in decorator.keywords)


def functions(pattern: str) -> Iterator[tuple[Path, ast.FunctionDef]]:
    """Every function (tests, fixtures, helpers) of the files under tests/ matching ``pattern``
    (the GPU suite, run on its own by `make gpu-check`, aside)."""
    for path in sorted(TESTS.rglob(pattern)):
        if path.relative_to(TESTS).parts[0] == "gpu":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                yield path, node


def session_fixtures() -> set[str]:
    """The names of the fixtures declared ``scope="session"`` anywhere under tests/."""
    return {node.name for _, node in functions("*.py")
            if any(map(is_session_scoped, node.decorator_list))}


def users_of(fixtures: set[str]) -> dict[str, tuple[str, ...]]:
    """Per fixture, the test files with a function (a test or a fixture) that takes it."""
    users: dict[str, list[str]] = {name: [] for name in fixtures}
    for path, node in functions("test_*.py"):
        for name in fixtures.intersection(a.arg for a in node.args.args):
            file = str(path.relative_to(TESTS.parent))
            if file not in users[name]:
                users[name].append(file)
    return {name: tuple(files) for name, files in users.items()}


def test_each_session_fixture_is_dealt_with_every_file_that_uses_it():
    """work_units.SESSION_FIXTURE_FILES keeps a session fixture's files on one xdist process, so
    its real runs are made once: a file that starts using one must join its group."""
    fixtures = session_fixtures()
    assert set(SESSION_FIXTURE_FILES) == fixtures
    assert users_of(fixtures) == SESSION_FIXTURE_FILES


#: the folders of tests/ that are not an area of src/dlperf: the repository's own checks, the
#: GPU suite (`make gpu-check`) and the files the tests read
NOT_AREAS = {"project", "gpu", "fixtures"}


def test_tests_are_laid_out_as_the_sources_are():
    """Every test file is in a folder named for what it tests: an area of src/dlperf (a package
    such as projection/, or a module such as stats.py) or one of NOT_AREAS; none at the top level,
    where only the shared helpers live."""
    src = TESTS.parent / "src" / "dlperf"
    areas = {p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    areas |= {p.stem for p in src.glob("*.py")}
    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "test files at tests/'s top level"
    folders = {p.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")}
    assert folders - NOT_AREAS <= areas, sorted(folders - NOT_AREAS - areas)


def test_no_test_file_imports_another():
    """What test files share is a helper module at tests/'s top level (CONTRIBUTING): a test
    module imported by another runs its module-level code twice and ties two areas together."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(TESTS)}: {n}" for n in names
                      if n.split(".")[0].startswith("test_")]
    assert not found, found
