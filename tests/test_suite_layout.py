"""The test suite's own layout, read from its files (``ast``): what `make test`'s scheduling
relies on and a new test file could silently break."""

from __future__ import annotations

import ast
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


def session_fixtures() -> set[str]:
    """The names of the fixtures declared ``scope="session"`` anywhere under tests/."""
    names = set()
    for path in TESTS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(map(is_session_scoped,
                                                             node.decorator_list)):
                names.add(node.name)
    return names


def files_using(fixture: str) -> tuple[str, ...]:
    """The test files with a function (a test or a fixture) that takes ``fixture``."""
    users = []
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and fixture in [a.arg for a in node.args.args]:
                users.append(f"tests/{path.name}")
                break
    return tuple(users)


def test_each_session_fixture_is_dealt_with_every_file_that_uses_it():
    """conftest.SESSION_FIXTURE_FILES keeps a session fixture's files on one xdist process, so
    its real runs are made once: a file that starts using one must join its group."""
    assert set(SESSION_FIXTURE_FILES) == session_fixtures()
    for fixture, files in SESSION_FIXTURE_FILES.items():
        assert files_using(fixture) == files, fixture
