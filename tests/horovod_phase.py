"""Which framework tests wait for the Horovod builds (a pytest plugin; tests/conftest.py loads it).

`make test` compiles Horovod's three environments (about 400 CPU-s from an empty cache) at idle
CPU priority beside its first phases, on the cycles their tests leave idle, instead of before
any test; the tests that use a ``<fw>+horovod`` environment run after the builds, in a phase of
their own. Which tests those are is read from the test's id, the one place that already says it:
every one names Horovod as a word (``test_horovod.py``, ``test_env_horovod.py``,
``test_horovod_across_two_emulated_hosts``, ``[tensorflow1-horovod-mpi]``); this plugin marks
them ``horovod``.

A test that needs a Horovod environment without naming it would run before its build and skip
("... is not installed"): while the builds run (``DLPERF_TEST_HOROVOD_PENDING=1``, set by `make
test` for the phase beside them), such a skip fails instead, saying what to do.
"""

from __future__ import annotations

import os
import re
from typing import Generator

import pytest

#: set by `make test` for the framework tests that run while the Horovod builds are under way
PENDING = "DLPERF_TEST_HOROVOD_PENDING"
MARK = "horovod"


def names_horovod(nodeid: str) -> bool:
    """Whether a test's id names Horovod as a word (its file, its name or its parameters)."""
    return MARK in re.split(r"[^a-z0-9]+", nodeid.lower())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if names_horovod(item.nodeid):
            item.add_marker(MARK)


def skipped_for_want_of_horovod(report: pytest.TestReport) -> bool:
    """A skip whose reason is a Horovod environment that is not there (yet)."""
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    return "horovod" in reason.lower() and "not installed" in reason.lower()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (os.environ.get(PENDING) == "1" and report.skipped and MARK not in item.keywords
            and skipped_for_want_of_horovod(report)):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped for want of a Horovod environment while `make test` was "
            f"still building them: a test that uses one must name Horovod in its id (its file, "
            f"name or parameters; tests/horovod_phase.py) so that it runs after the builds. "
            f"The skip: {report.longrepr}")
    return report
