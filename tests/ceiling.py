"""A ceiling on what one test may cost (pytest plugin; tests/conftest.py loads it).

A test fails when its call and the setup of its own (function-scoped) fixtures take longer than
the ceiling of its kind: ``ceiling_parallel_s`` for a test marked ``parallel``, ``ceiling_s``
for any other (pyproject.toml sets both; unset, nothing is checked). A fixture of a wider scope
(module, class, session) is made once for many tests, so its setup is not charged to the test
that happened to need it first: it is held to the same ceiling on its own, and a slow one fails
that test's setup, naming the fixture. Teardown is not charged.

What is slow for a reason says so: ``@pytest.mark.slow(reason="...")`` on a test, and
``@slow_setup("...")`` under ``@pytest.fixture`` on a shared fixture (pytest ignores marks on
fixtures). A ``slow`` mark without a reason is an error of its own. pytest-timeout's 10-minute
limit still applies to both.

Without this a new test costs what it costs, and `make test` grows a minute at a time; with it,
a test that outgrows its kind is a failure that names the test and what to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

import pytest

#: the ini keys (pyproject.toml) holding each kind's ceiling in seconds
INI = {"parallel": "ceiling_parallel_s", "other": "ceiling_s"}
#: the attribute :func:`slow_setup` leaves on a fixture's function
REASON_ATTR = "slow_setup_reason"

#: the test whose phase is running, and the shared fixtures set up in that phase
_current = pytest.StashKey["pytest.Item | None"]()
_shared = pytest.StashKey[list[tuple[str, float, "str | None"]]]()  # fixture, seconds, reason
_own = pytest.StashKey[float]()  # the seconds charged to the test so far

F = TypeVar("F", bound=Callable[..., Any])


def slow_setup(reason: str) -> Callable[[F], F]:
    """Declare why a shared fixture's setup may take longer than the ceiling (put it under
    ``@pytest.fixture``, next to the function)."""
    if not reason.strip():
        raise ValueError("slow_setup needs a reason")

    def declare(func: F) -> F:
        setattr(func, REASON_ATTR, reason)
        return func

    return declare


def pytest_addoption(parser: pytest.Parser) -> None:
    for kind, key in INI.items():
        which = "a `parallel` test" if kind == "parallel" else "any other test"
        parser.addini(key, f"seconds {which} may take (its call and its own fixtures' setup) "
                      f"unless marked slow; unset: no ceiling", default=None)


def ceiling(item: pytest.Item) -> tuple[float | None, str]:
    """(seconds or None, the ini key it comes from) for ``item``'s kind."""
    key = INI["parallel" if item.get_closest_marker("parallel") else "other"]
    value = item.config.getini(key)
    return (float(value) if value not in (None, "") else None), key


def slow_reason(item: pytest.Item) -> str | None:
    """The reason of ``item``'s ``slow`` mark: None without the mark, '' for a mark without
    a reason."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return None
    reason = mark.kwargs.get("reason", mark.args[0] if mark.args else "")
    return reason.strip() if isinstance(reason, str) else ""


def _phase(item: pytest.Item) -> None:
    item.config.stash[_current] = item
    item.stash[_shared] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_own] = 0.0
    _phase(item)
    if slow_reason(item) == "":
        pytest.fail('@pytest.mark.slow needs a reason: @pytest.mark.slow(reason="why this test '
                    'cannot be cheaper")', pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _phase(item)  # a shared fixture the test asks for by name (request.getfixturevalue)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
                         ) -> Generator[None, Any, Any]:
    """Times the setup of every fixture of a scope wider than the function."""
    if fixturedef.scope == "function":
        return (yield)
    started = time.perf_counter()
    try:
        return (yield)
    finally:
        item = request.config.stash.get(_current, None)
        if item is not None:
            item.stash[_shared].append((fixturedef.argname, time.perf_counter() - started,
                                        getattr(fixturedef.func, REASON_ATTR, None)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    limit, key = ceiling(item)
    if limit is None or call.when == "teardown" or report.skipped:
        return report
    shared = item.stash.get(_shared, [])
    item.stash[_own] = item.stash.get(_own, 0.0) + max(
        0.0, report.duration - sum(seconds for _, seconds, _ in shared))
    over = [(name, seconds) for name, seconds, reason in shared if seconds > limit and not reason]
    if over:
        _fail(report, "; ".join(
            f"fixture {name!r} took {seconds:.1f} s to set up, over the {limit:g} s ceiling "
            f"({key} in pyproject.toml): make it cheaper, or say why it cannot be with "
            f"@slow_setup(\"...\") (tests/ceiling.py) under its @pytest.fixture"
            for name, seconds in over))
    spent = item.stash[_own]
    if call.when == "call" and slow_reason(item) is None and spent > limit:
        _fail(report, f"{item.nodeid} took {spent:.1f} s (its call and its own fixtures' "
                      f"setup), over the {limit:g} s ceiling ({key} in pyproject.toml): make it "
                      f"cheaper, or mark it @pytest.mark.slow(reason=\"...\") saying why it "
                      f"cannot be")
    return report


def _fail(report: pytest.TestReport, message: str) -> None:
    """``report`` failed with ``message`` (after the test's own failure, if it had one)."""
    if report.outcome == "failed":
        report.sections.append(("ceiling", message))
        return
    report.outcome = "failed"
    report.longrepr = message
