"""`make test`'s framework phase pins each pytest-xdist worker to its own slice of the CPUs
(``DLPERF_TEST_SHARE_CPUS``, tests/conftest.py). A worker that dies (a framework's abort takes
its process with it) is replaced by xdist under a new name, gw2 of two: it must take a slice
too, where it once asked for an empty one and every later test of the run errored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

pytest_plugins = ("pytester",)

# inner pytest runs on two xdist workers; no framework
pytestmark = pytest.mark.parallel

INNER = """
import json, os

def record(tag):
    with open(os.environ["SEEN"], "a") as out:
        out.write(json.dumps({"test": tag, "worker": os.environ["PYTEST_XDIST_WORKER"],
                              "cpus": sorted(os.sched_getaffinity(0))}) + "\\n")

def test_0_dies():
    record("dies")
    os._exit(1)

def test_1_after():
    record("after")

def test_2_after():
    record("after")

def test_3_after():
    record("after")
"""


def test_a_worker_started_in_place_of_a_dead_one_takes_a_slice(pytester, tmp_path, monkeypatch):
    seen = tmp_path / "seen.jsonl"
    monkeypatch.setenv("SEEN", str(seen))
    monkeypatch.setenv("DLPERF_TEST_SHARE_CPUS", "1")
    # the suite's own conftest as the inner run's plugin: what `make test` loads
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(TESTS), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "conftest", "-n", "2", "--dist", "load",
                                           "-p", "no:cacheprovider", "-q")
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    host = sorted(os.sched_getaffinity(0))
    # a worker died in the first test and xdist started gw2 in its place; every test after it
    # ran, and the replacement's start went through (it once failed the run with an error)
    result.assert_outcomes(passed=3, failed=1)
    assert "node down" in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    for line in lines:
        assert line["cpus"] and set(line["cpus"]) <= set(host), line
        if len(host) >= 2:  # two workers on two or more CPUs: each its own slice, not all
            assert line["cpus"] != host, line
