"""The per-test ceiling (tests/ceiling.py) on tiny inner test runs (pytester), with ceilings of
a fraction of a second: a test that sleeps past its kind's ceiling fails naming it, the time of
its own fixtures' setup counts and a shared fixture's does not, and what says why (a ``slow``
mark with its reason, ``slow_setup`` on a shared fixture) passes."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ("pytester",)

# runs pytest in this process on files it writes; nothing measured, no framework
pytestmark = pytest.mark.parallel

# the inner runs' ceilings: far below the sleeps that pass them, far above what a test that
# does nothing takes
TINY = ("-p", "ceiling", "-o", "ceiling_s=0.2", "-o", "ceiling_parallel_s=0.1", "-p",
        "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning")

INNER = """
import time
import pytest
from ceiling import slow_setup

@pytest.fixture
def slow_own():
    time.sleep(0.15)

@pytest.fixture(scope="module")
def shared():
    time.sleep(0.3)

@pytest.fixture(scope="module")
@slow_setup("made once for every test of the module")
def declared():
    time.sleep(0.3)

def test_quick():
    pass

def test_sleeps_past_the_ceiling():
    time.sleep(0.3)

@pytest.mark.parallel
def test_a_parallel_test_has_the_lower_ceiling():
    time.sleep(0.15)

def test_own_fixture_counts(slow_own):
    time.sleep(0.1)

@pytest.mark.slow(reason="waits out a real 60 s deadline")
def test_marked_slow_with_its_reason():
    time.sleep(0.3)

@pytest.mark.slow
def test_marked_slow_without_a_reason():
    pass

def test_a_shared_fixture_is_not_charged_to_the_test(declared):
    pass
"""


def outcomes(pytester: pytest.Pytester, source: str, *args: str) -> tuple[dict[str, str], str]:
    """{test name: passed/failed/error} of an inner run of ``source``, and its output."""
    pytester.makepyfile(test_inner=source)
    result = pytester.runpytest_inprocess(*TINY, "-rA", *args)
    found = {}
    for line in result.outlines:
        for word in ("PASSED", "FAILED", "ERROR"):
            if line.startswith(word + " test_inner.py::"):
                found[line.split("::")[1].split()[0]] = word.lower()
    return found, result.stdout.str()


def test_over_the_ceiling_fails_naming_the_test_and_what_to_do(pytester):
    found, out = outcomes(pytester, INNER)
    assert found == {
        "test_quick": "passed",
        "test_sleeps_past_the_ceiling": "failed",
        "test_a_parallel_test_has_the_lower_ceiling": "failed",
        "test_own_fixture_counts": "failed",
        "test_marked_slow_with_its_reason": "passed",
        "test_marked_slow_without_a_reason": "error",
        "test_a_shared_fixture_is_not_charged_to_the_test": "passed",
    }, out
    assert re.search(r"test_inner\.py::test_sleeps_past_the_ceiling took \d+\.\d s \(its call and "
                     r"its own fixtures' setup\), over the 0\.2 s ceiling \(ceiling_s in "
                     r"pyproject\.toml\): make it cheaper, or mark it "
                     r'@pytest\.mark\.slow\(reason="\.\.\."\) saying why it cannot be', out), out
    assert "over the 0.1 s ceiling (ceiling_parallel_s in pyproject.toml)" in out
    assert '@pytest.mark.slow needs a reason: @pytest.mark.slow(reason="' in out


def test_a_slow_shared_fixture_fails_the_setup_naming_the_fixture(pytester):
    source = INNER.replace("def test_quick():\n", "def test_quick(shared):\n")
    found, out = outcomes(pytester, source, "-k", "quick or shared")
    assert found == {"test_quick": "error",
                     "test_a_shared_fixture_is_not_charged_to_the_test": "passed"}, out
    assert re.search(r"fixture 'shared' took \d+\.\d s to set up, over the 0\.2 s ceiling "
                     r"\(ceiling_s in pyproject\.toml\): make it cheaper, or say why it cannot "
                     r"be with @slow_setup", out), out


def test_no_ceiling_set_checks_nothing(pytester):
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "ceiling", "-p", "no:cacheprovider", "-k",
                                          "past_the_ceiling or own_fixture")
    result.assert_outcomes(passed=2)
