"""The wall-and-CPU timeline (tests/cpu_timeline.py) on a tiny inner test run (pytester, in a
subprocess so that its CPU clocks are its own): one line per test where it ran, its CPU time
counting a child it waited for, the tests that waited most listed first, earlier runs' lines
kept and left out; without the variable, nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

# runs pytest on files it writes; nothing measured, no framework
pytestmark = pytest.mark.parallel

# CPU burnt until the clock says so, not for a wall time: the same on a busy host. The sleep
# outwaits the burning child's wait (its wall less its CPU) until that child gets under a sixth
# of a core: at 0.5 s it did not, beside `make test`'s installs (0.82 s wall for 0.31 s of CPU)
INNER = """
import subprocess, sys, time

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"

def test_sleeps():
    time.sleep(1.5)

def test_burns():
    exec(BURN)

def test_waits_for_a_child_that_burns():
    subprocess.run([sys.executable, "-c", BURN], check=True)
"""


TESTS = Path(__file__).resolve().parents[1]  # where the plugin is


# a second file that costs less CPU than test_inner.py's
OTHER = """
import time

def test_sleeps_too():
    time.sleep(0.2)
"""


def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    pytester.makepyfile(test_inner=INNER, test_other=OTHER)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # not an xdist worker
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return pytester.runpytest_subprocess("-p", "cpu_timeline", "-p", "no:cacheprovider")


def test_each_test_has_its_wall_and_cpu_time_and_the_waiting_one_comes_first(
        pytester, tmp_path, monkeypatch):
    path = tmp_path / "timeline.jsonl"
    path.write_text('{"run": "an earlier one", "id": "x", "start": 0, "end": 9, "cpu_s": 0}\n')
    monkeypatch.setenv("DLPERF_TEST_TIMELINE", str(path))
    result = inner(pytester, monkeypatch)
    assert result.ret == 0, result.stdout.str()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["run"] == "an earlier one"  # kept
    mine = {row["id"].split("::")[1]: row for row in rows[1:]}
    assert set(mine) == {"test_sleeps", "test_burns", "test_waits_for_a_child_that_burns",
                         "test_sleeps_too"}
    assert len({row["run"] for row in mine.values()}) == 1
    assert all(row["worker"] == "main" for row in mine.values())
    sleeps = mine["test_sleeps"]
    assert sleeps["end"] - sleeps["start"] >= 1.5 and sleeps["cpu_s"] < 0.25
    assert mine["test_burns"]["cpu_s"] >= 0.25
    assert mine["test_waits_for_a_child_that_burns"]["cpu_s"] >= 0.25
    out = result.stdout.str()
    assert "the 4 tests that waited most (wall - CPU; DLPERF_TEST_TIMELINE=" in out
    listed = [line for line in result.outlines if "s wall" in line and "s CPU" in line]
    assert len(listed) == 4 and listed[0].endswith("test_inner.py::test_sleeps"), listed
    # each file's tests summed, the costliest in CPU first, its share of the run's CPU
    assert "the 2 test files that cost the most CPU (of 2)" in out
    files = [line.split() for line in result.outlines if "CPU-s" in line and "wall-s" in line]
    assert [(f[-1], f[-3]) for f in files] == [("test_inner.py", "3"), ("test_other.py", "1")]
    inner_cpu = sum(row["cpu_s"] for name, row in mine.items() if name != "test_sleeps_too")
    assert float(files[0][0]) == pytest.approx(inner_cpu, abs=0.06)
    assert float(files[1][0]) < 0.25 <= float(files[0][0])


def test_without_the_variable_nothing_is_written_or_shown(pytester, tmp_path, monkeypatch):
    monkeypatch.delenv("DLPERF_TEST_TIMELINE", raising=False)
    result = inner(pytester, monkeypatch)
    assert result.ret == 0
    assert "waited most" not in result.stdout.str()
    assert not list(tmp_path.glob("*.jsonl"))
