"""The steady-state warm-up rule (dlperf.worker.steady) on synthetic step-time series, on a fake
clock, and end to end on a real tiny training run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import dlperf_main
from dlperf.worker import steady


@pytest.mark.parallel
def test_judge_by_hand():
    # times 1.00, 1.02, 1.04, 1.06, 1.08: mean 1.04, slope 0.02/step -> drift 0.08/1.04
    cv, drift = steady.judge([1.00, 1.02, 1.04, 1.06, 1.08])
    assert drift == pytest.approx(0.08 / 1.04)
    sd = (sum((t - 1.04) ** 2 for t in [1.00, 1.02, 1.04, 1.06, 1.08]) / 4) ** 0.5
    assert cv == pytest.approx(sd / 1.04)


@pytest.mark.parallel
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


@pytest.mark.parallel
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


@pytest.mark.parallel
def test_warm_up_drifting_hits_the_step_bound():
    clock = FakeClock([1.0 + 0.05 * i for i in range(100)])  # always getting slower
    out = steady.warm_up(clock.step, clock, max_steps=30, max_s=1e9)
    assert out["stop"] == "max_steps" and out["steps"] == 30
    assert out["drift"] > steady.MAX_DRIFT


@pytest.mark.parallel
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
         # bounded: on a busy host the rule may never call it steady (200 steps by default)
         "--warmup-max-steps", str(2 * steady.WINDOW + 2),
         "--repeats", "1", "--db", str(tmp_path / "r.db"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["case"]["warmup_steps"] == "auto"
    (stop,) = result["warmup"]["stop"]
    (done,) = result["warmup"]["steps"]
    assert stop in ("steady", "max_steps", "max_seconds")
    assert done >= 1 + steady.WINDOW  # the first step, then at least one judged window
    assert done <= 1 + 2 * steady.WINDOW + 2
    if stop != "steady":
        assert any(w.startswith("warm-up never became steady") for w in result["warnings"])


# ------------------------------------------------------------------------------------------------
# several ranks: the vote (steady.agreed) and warm_up with a vote
# ------------------------------------------------------------------------------------------------

GO, STEADY, STEPS, SECONDS = (steady.KEEP_GOING, steady.STEADY, steady.AT_MAX_STEPS,
                              steady.AT_MAX_SECONDS)


@pytest.mark.parallel
@pytest.mark.parametrize("verdicts, stop", [
    ([STEADY], "steady"),                      # one process: its own verdict
    ([GO], None),
    ([STEADY, STEADY, STEADY], "steady"),      # every rank steady at the same step
    ([STEADY, GO, STEADY], None),              # one rank still settling: all keep going
    ([STEADY, STEPS], "max_steps"),            # any rank at a bound ends it for all
    ([GO, SECONDS, STEADY], "max_seconds"),
    ([STEPS, SECONDS], "max_seconds"),         # the time bound first, as for one rank
    ([], None),
])
def test_agreed(verdicts, stop):
    assert steady.agreed(verdicts) == stop


@pytest.mark.parallel
def test_verdict_steady_before_the_bounds():
    flat = [1.0] * 5
    assert steady.verdict(flat, 1e9, max_steps=5, max_s=1.0) == STEADY
    assert steady.verdict([1.0, 2.0] * 3, 1e9, max_steps=6, max_s=1.0) == SECONDS
    assert steady.verdict([1.0, 2.0] * 3, 0.0, max_steps=6, max_s=1.0) == STEPS
    assert steady.verdict([1.0, 2.0] * 3, 0.0, max_steps=7, max_s=1.0) == GO


def scripted_peer(verdicts):
    """A vote with one peer (rank 1) whose verdicts after each step are ``verdicts``."""
    calls = []

    def vote(mine):
        calls.append(mine)
        return [mine, verdicts[len(calls) - 1]]
    return vote, calls


@pytest.mark.parallel
@pytest.mark.parametrize("peer, steps, stop", [
    # this rank is steady from step 5 on; the peer settles at step 8: all stop at 8
    ([GO] * 7 + [STEADY], 8, "steady"),
    # the peer hits its time bound at step 3, before this rank could judge a window
    ([GO, GO, SECONDS], 3, "max_seconds"),
    # the peer never settles: the shared step bound ends both at the same step
    ([GO] * 11 + [STEPS], 12, "max_steps"),
])
def test_warm_up_stops_where_the_vote_says(peer, steps, stop):
    clock = FakeClock([1.0] * 50)  # steady from the 5th step on
    vote, calls = scripted_peer(peer)
    out = steady.warm_up(clock.step, clock, max_steps=12, vote=vote)
    assert (out["stop"], out["steps"]) == (stop, steps)
    assert len(calls) == steps  # one vote per step, none after the last
    assert out["vote"] == "all ranks" and out["verdicts"] == [calls[-1], peer[steps - 1]]
    assert out["cv"] == pytest.approx(0.0)  # this rank's own window, as for one process


@pytest.mark.parallel
def test_one_process_calls_no_vote():
    clock = FakeClock([1.0] * 10)
    out = steady.warm_up(clock.step, clock)
    assert (out["stop"], out["steps"]) == ("steady", 5)
    assert "vote" not in out and "verdicts" not in out


@pytest.mark.parallel
def test_ranks_with_different_step_times_stop_at_the_same_step():
    """Two ranks in threads, each on its own clock, exchanging verdicts through a barrier as a
    backend's all-reduce would: rank 0 settles at step 5, rank 1 (a slower warm-up) only later;
    both stop together, steady, at rank 1's step."""
    series = [[1.0] * 40, [3.0, 2.5, 2.0, 1.6, 1.3, 1.1] + [1.0] * 34]
    slots = [0, 0]
    exchange = threading.Barrier(2)
    results = [None, None]

    def rank(me):
        clock = FakeClock(series[me])

        def vote(mine):
            slots[me] = mine
            exchange.wait()
            everyone = list(slots)
            exchange.wait()  # nobody overwrites a slot before both have read
            return everyone
        results[me] = steady.warm_up(clock.step, clock, max_steps=30, vote=vote)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    slow = FakeClock(series[1])
    alone = steady.warm_up(slow.step, slow)  # where rank 1 would stop on its own
    assert results[0]["steps"] == results[1]["steps"] == alone["steps"] > 5
    assert [r["stop"] for r in results] == ["steady", "steady"]
    assert results[0]["verdicts"] == results[1]["verdicts"] == [STEADY, STEADY]


# ------------------------------------------------------------------------------------------------
# --warmup-max-steps: validated, part of the case (and its identity only when set), honoured
# ------------------------------------------------------------------------------------------------


@pytest.mark.parallel
def test_warmup_max_steps_zero_is_refused_in_one_line(tmp_path: Path):
    # through dlperf's main in this process: refused at validation (test_fuzz_cli checks that a
    # real process answers alike)
    proc = dlperf_main("run", "--framework", "torch", "--model", "resnet50", "--batch-size", "2",
                       "--warmup-max-steps", "0", "--db", str(tmp_path / "r.db"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "warmup_max_steps: 0 must be an integer >= 1" in lines[0], lines
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parallel
def test_warmup_max_steps_in_cases_and_sweeps(tmp_path: Path):
    from dlperf.studies import sweep
    from dlperf.spec import Case

    plain = Case(framework="torch", model="resnet50", batch_size=2)
    capped = Case(framework="torch", model="resnet50", batch_size=2, warmup_max_steps=12)
    assert plain.warmup_max_steps == steady.MAX_STEPS
    # at its default the field stays out of the identity: stored results keep their keys
    assert "warmup_max_steps" not in plain.identity() and plain.key() != capped.key()
    assert capped.to_dict()["warmup_max_steps"] == 12  # what the worker receives
    # a fixed count ignores the bound, so the bound changes no identity there
    assert (Case(framework="torch", model="resnet50", batch_size=2, warmup_steps=3).key()
            == Case(framework="torch", model="resnet50", batch_size=2, warmup_steps=3,
                    warmup_max_steps=12).key())
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndefaults:\n  framework: torch\n  model: resnet50\n"
                    "  batch_size: 2\n  warmup-max-steps: 12\nmatrix:\n  devices: [1, 2]\n")
    assert [c.warmup_max_steps for c in sweep.load(path).cases] == [12, 12]
    path.write_text(path.read_text().replace("warmup-max-steps: 12", "warmup_max_steps: 0"))
    with pytest.raises(sweep.SpecError, match=r"s\.yaml:6: warmup_max_steps: 0 must be"):
        sweep.load(path)


def test_real_tiny_run_honours_warmup_max_steps(tmp_path: Path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model", "resnet50",
         "--image-size", "32", "--num-classes", "10", "--batch-size", "2", "--steps", "3",
         "--warmup-max-steps", "3", "--repeats", "1", "--db", str(tmp_path / "r.db"),
         "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["case"]["warmup_max_steps"] == 3
    # 3 steps after the first cannot fill a 5-step window: the bound ends the warm-up
    assert result["warmup"] == {"steps": [4], "stop": ["max_steps"]}
    assert any(w.startswith("warm-up never became steady") for w in result["warnings"])
