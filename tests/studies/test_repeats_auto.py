"""`--repeats auto` / `--target-ci`: fresh-process repeats until the 95 % interval of the median
is within the target, or the budget ends; what it took is in the result."""

from __future__ import annotations

import json

import pytest

from conftest import TINY_RESNET, dlperf, dlperf_main
from dlperf import runner, stats
from dlperf.spec import AUTO_REPEATS, DEFAULT_TARGET_CI, Case


def records(values: list[float]) -> list[dict]:
    return [{"status": "ok", "throughput": v} for v in values]


@pytest.mark.parallel
def test_a_quiet_series_stops_early_and_a_noisy_one_goes_on():
    case = Case("torch", "resnet50", 2, repeats="auto")
    assert (case.repeats, case.target_ci) == (AUTO_REPEATS, DEFAULT_TARGET_CI)
    quiet = [100.0, 100.2, 99.9]
    assert stats.half_width(quiet) < DEFAULT_TARGET_CI
    assert runner.enough(case, records(quiet), 1.0)
    assert not runner.enough(case, records(quiet[:2]), 1.0)  # fewer than 3: no interval yet
    noisy = [100.0, 88.0, 112.0, 95.0]
    assert stats.half_width(noisy) > DEFAULT_TARGET_CI
    assert not runner.enough(case, records(noisy), 1.0)
    # the time budget ends it whatever the interval
    timed = Case("torch", "resnet50", 2, repeats="auto", max_time_s=30.0)
    assert runner.enough(timed, records(noisy), 31.0)
    # a fixed count never stops early
    assert not runner.enough(Case("torch", "resnet50", 2, repeats=5), records(quiet), 1e9)


@pytest.mark.parallel
@pytest.mark.parametrize("args, words", [
    (["--target-ci=-1%"], "target_ci"),
    (["--target-ci", "60%"], "target_ci"),
    (["--target-ci", "soon"], "--target-ci"),
    (["--repeats", "2", "--target-ci", "2%"], "repeats: 2 is too few"),
    (["--max-time", "60"], "max_time_s: bounds repeats"),
])
def test_bad_targets_are_one_line(args, words, tmp_path):
    proc = dlperf_main("run", *TINY_RESNET, *args, "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.db").exists()


def test_a_spent_time_budget_stops_the_repeats_and_says_so(tmp_path):
    """A target no 2-core host reaches in one repeat, and 1 s of budget: the first repeat takes
    longer, so no second starts; the result says how many it took and that the target was not
    reached (the early stop on a tight interval: the constructed series above)."""
    out = tmp_path / "r.json"
    proc = dlperf("run", *TINY_RESNET, "--repeats", "6", "--target-ci", "0.1%", "--max-time",
                  "1", "--db", str(tmp_path / "r.db"), "--json", str(out), check=True)
    result = json.loads(out.read_text())
    policy = result["repeats_policy"]
    assert policy == {"target_ci": 0.001, "most": 6, "max_time_s": 1.0, "taken": 1,
                      "half_width": None, "reached": False}
    assert result["throughput"]["n"] == 1
    assert "wider than the target ±0.1%: the budget (6 repeats or 1 s) ended first" \
        in " ".join(result["warnings"])
    assert "ended first" in proc.stdout + proc.stderr
