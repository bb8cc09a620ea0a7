"""The tests that wait for `make test`'s Horovod builds (a pytest plugin; tests/conftest.py loads it).

`make test` compiles Horovod's three environments (about 400 CPU-s from an empty cache) at idle
CPU priority beside its parallel and framework phases, on the cycles their tests leave, instead
of before any test. The tests that use a ``<fw>+horovod`` environment are dealt last in the
framework phase while the builds are under way (tests/work_units.py), each framework's apart
from its other tests, and each waits, before its timeout starts, until `make test` says the
builds have ended (``DLPERF_TEST_BUILDS_DONE`` names the file it then writes, holding their
exit status).

Which tests those are is read from the test's id, the one place that already says it: every
one names Horovod as a word (``test_horovod.py``, ``test_env_horovod.py``,
``test_horovod_across_two_emulated_hosts``, ``[tensorflow1-horovod-mpi]``); this plugin marks
them ``horovod``. A test that needs a Horovod environment without naming it would run before
its build and skip ("... is not installed"): under `make test` such a skip fails, saying what to
do.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Generator

import pytest

#: set by `make test`: the file its Horovod builds' exit status is written to when they end
BUILDS_DONE = "DLPERF_TEST_BUILDS_DONE"
MARK = "horovod"
#: the longest a test waits for the builds (three take 7-12 min beside a busy framework phase on
#: 2 cores): past it the test runs anyway, and fails or skips (which fails) where one is missing
LONGEST_WAIT_S = 2700.0


def names_horovod(nodeid: str) -> bool:
    """Whether a test's id names Horovod as a word (its file, its name or its parameters)."""
    return MARK in re.split(r"[^a-z0-9]+", nodeid.lower())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if names_horovod(item.nodeid):
            item.add_marker(MARK)


def builds_pending() -> bool:
    """Whether `make test`'s Horovod builds are under way (this is a run of it, and their end
    has not been written yet)."""
    done = os.environ.get(BUILDS_DONE)
    return bool(done) and not Path(done).exists()


def wait_for_the_builds(done: Path, poll_s: float = 1.0, longest_s: float = LONGEST_WAIT_S
                        ) -> float:
    """Seconds waited until ``done`` exists (`make test` writes it whole when the builds end),
    at most ``longest_s``."""
    started = time.monotonic()
    while not done.exists() and time.monotonic() - started < longest_s:
        time.sleep(poll_s)
    return time.monotonic() - started


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A ``horovod`` test under `make test` first waits for the builds: outside its timeout and
    its ceiling (tests/ceiling.py), which hold what the test itself costs, not the builds'."""
    done = os.environ.get(BUILDS_DONE)
    if done and item.get_closest_marker(MARK) is not None:
        waited = wait_for_the_builds(Path(done))
        item.user_properties.append(("waited_for_horovod_builds_s", round(waited, 1)))
    return (yield)


def skipped_for_want_of_horovod(report: pytest.TestReport) -> bool:
    """A skip whose reason is a Horovod environment that is not there (yet)."""
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    return "horovod" in reason.lower() and "not installed" in reason.lower()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (os.environ.get(BUILDS_DONE) and report.skipped and item.get_closest_marker(MARK) is None
            and skipped_for_want_of_horovod(report)):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped for want of a Horovod environment under `make test`, which "
            f"builds them beside its tests: a test that uses one must name Horovod in its id "
            f"(its file, name or parameters; tests/horovod_phase.py) so that it waits for the "
            f"builds. The skip: {report.longrepr}")
    return report
