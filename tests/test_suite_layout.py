"""The test suite's own layout, read from its files (``ast``): what `make test`'s scheduling
relies on and a new test file could silently break."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SESSION_FIXTURE_FILES

# reads the test files and measures nothing: `make test` runs it beside another
pytestmark = pytest.mark.parallel

TESTS = Path(__file__).resolve().parent


def is_session_scoped(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value == "session"
        for k in decorator.keywords)


def functions(pattern: str) -> Iterator[tuple[Path, ast.FunctionDef]]:
    """Every function (tests, fixtures, helpers) of the files under tests/ matching ``pattern``."""
    for path in sorted(TESTS.glob(pattern)):
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
            if f"tests/{path.name}" not in users[name]:
                users[name].append(f"tests/{path.name}")
    return {name: tuple(files) for name, files in users.items()}


def test_each_session_fixture_is_dealt_with_every_file_that_uses_it():
    """conftest.SESSION_FIXTURE_FILES keeps a session fixture's files on one xdist process, so
    its real runs are made once: a file that starts using one must join its group."""
    fixtures = session_fixtures()
    assert set(SESSION_FIXTURE_FILES) == fixtures
    assert users_of(fixtures) == SESSION_FIXTURE_FILES
