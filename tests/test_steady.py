"""The steady-state warm-up rule (dlperf.worker.steady) on synthetic step-time series, on a fake
clock, and end to end on a real tiny training run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.worker import steady


def test_judge_by_hand():
    # times 1.00, 1.02, 1.04, 1.06, 1.08: mean 1.04, slope 0.02/step -> drift 0.08/1.04
    cv, drift = steady.judge([1.00, 1.02, 1.04, 1.06, 1.08])
    assert drift == pytest.approx(0.08 / 1.04)
    sd = (sum((t - 1.04) ** 2 for t in [1.00, 1.02, 1.04, 1.06, 1.08]) / 4) ** 0.5
    assert cv == pytest.approx(sd / 1.04)


@pytest.mark.parametrize("series, expected", [
    ([1.0, 1.01, 0.99, 1.0, 1.005], True),            # steady
    ([2.0, 1.8, 1.6, 1.4, 1.2], False),                # still speeding up (warm-up trend)
    ([1.0, 1.0, 1.0, 1.0, 1.2], False),                # a late slow step: drift and spread
    ([1.0, 1.12, 1.0, 1.12, 1.0], False),              # no trend but alternating: spread
    ([1.0, 1.0, 1.0, 1.0], False),                     # too few steps to judge
])
def test_is_steady(series, expected):
    assert steady.is_steady(series) is expected


class FakeClock:
    """Steps 'take' the next time of a series; the clock only moves inside step()."""

    def __init__(self, times):
        self.times, self.now = list(times), 0.0

    def __call__(self):
        return self.now

    def step(self):
        self.now += self.times.pop(0) if self.times else 1.0


def test_warm_up_stops_when_steady():
    series = [3.0, 2.0, 1.5, 1.2, 1.05, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    clock = FakeClock(series)
    out = steady.warm_up(clock.step, clock)
    assert out["stop"] == "steady"
    # steps 5..9 = 1.05, 1, 1, 1, 1: CV 2.2%, slope -0.01/step -> drift -3.96%: steady;
    # steps 4..8 = 1.2, 1.05, 1, 1, 1 (drift -16%) were not
    assert out["steps"] == 9
    assert out["step_times_s"] == pytest.approx(series[:9])
    assert out["drift"] == pytest.approx(-0.04 / 1.01)
    assert not steady.is_steady(series[:8])
    assert abs(out["drift"]) <= steady.MAX_DRIFT and out["cv"] <= steady.MAX_CV


def test_warm_up_drifting_hits_the_step_bound():
    clock = FakeClock([1.0 + 0.05 * i for i in range(100)])  # always getting slower
    out = steady.warm_up(clock.step, clock, max_steps=30, max_s=1e9)
    assert out["stop"] == "max_steps" and out["steps"] == 30
    assert out["drift"] > steady.MAX_DRIFT


def test_warm_up_never_steady_hits_the_time_bound():
    clock = FakeClock([1.0, 1.3] * 50)  # alternating forever
    out = steady.warm_up(clock.step, clock, max_steps=1000, max_s=10.0)
    assert out["stop"] == "max_seconds"
    # 1.0 + 1.3 + 1.0 + ... = 10.2 s after 9 steps: the first check past the 10 s bound
    assert out["steps"] == 9 and sum(out["step_times_s"]) == pytest.approx(10.2)
    assert out["cv"] > steady.MAX_CV


def test_real_tiny_run_records_its_warm_up(tmp_path: Path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model", "resnet50",
         "--image-size", "32", "--num-classes", "10", "--batch-size", "2", "--steps", "3",
         "--repeats", "1", "--db", str(tmp_path / "r.db"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["case"]["warmup_steps"] == "auto"
    (stop,) = result["warmup"]["stop"]
    (done,) = result["warmup"]["steps"]
    assert stop in ("steady", "max_steps", "max_seconds")
    assert done >= 1 + steady.WINDOW  # the first step, then at least one judged window
    if stop != "steady":
        assert any(w.startswith("warm-up never became steady") for w in result["warnings"])
