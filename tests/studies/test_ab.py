"""`dlperf ab`: interleaving order, the ratio and its bootstrap interval by hand, and two real
tiny cases through the command."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import dlperf_main, own_lock
from dlperf.studies import ab
from dlperf.errors import UsageError

TINY = ["--framework", "torch", "--model", "bert-base", "--seq-len", "16", "--knob", "layers=1",
        "--knob", "hidden=32", "--knob", "heads=2", "--knob", "intermediate=64", "--knob",
        "vocab_size=500", "--warmup-steps", "2", "--steps", "3"]


@pytest.mark.parallel
def test_order_alternates_who_goes_first():
    assert ab.order(3) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B")]


@pytest.mark.parallel
def test_ratio_ci_by_hand():
    # identical pairs: every resample gives 2.0
    assert ab.ratio_ci(np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0])) == (2.0, 2.0)
    # two pairs (1, 2) and (2, 2): resampled index pairs 00, 01, 10, 11 give A medians
    # 1, 1.5, 1.5, 2 and B medians 2, so ratios 2, 4/3, 4/3, 1, each end with ~25% mass:
    # the 2.5th and 97.5th percentiles are exactly 1 and 2
    assert ab.ratio_ci(np.array([1.0, 2.0]), np.array([2.0, 2.0])) == (1.0, 2.0)
    assert ab.ratio_ci(np.array([1.0]), np.array([2.0])) is None


@pytest.mark.parallel
@pytest.mark.parametrize("ratio, ci, pairs, verdict", [
    (1.01, (0.90, 1.10), 6, "same"),      # within the threshold
    (1.10, (0.95, 1.20), 6, "same"),      # interval includes 1
    (1.10, (1.05, 1.15), 6, "faster"),
    (0.90, (0.85, 0.95), 6, "slower"),
    (0.90, (0.85, 0.95), 5, "slower"),    # AUTO_MIN_PAIRS: 2^-5 < 0.05
    (0.90, (0.85, 0.95), 4, "inconclusive"),  # 2^-4 = 0.0625: chance alone does it that often
    (1.30, None, 1, "inconclusive"),      # no interval: no claim either way
    (1.01, None, 1, "same"),              # ... but within the threshold is the same
])
def test_verdict(ratio, ci, pairs, verdict):
    assert ab.verdict(ratio, ci, 0.02, pairs) == verdict


@pytest.mark.parallel
def test_too_few_pairs_are_inconclusive_and_say_how_many_would_do():
    """3 pairs each 10 % slower: the interval excludes 1, but 3 pairs of no change all go one
    way 1 time in 8 (11.1 % false "slower" on real repeats, docs/calibration.md); 5 decide."""
    def summary(pairs: int) -> dict:
        made = ab.Comparison(pairs=pairs)
        for index in range(pairs):
            made.turns += [ab.Turn("A", index, 100.0 + index, "ok"),
                           ab.Turn("B", index, 90.0 + index, "ok")]
        return made.summary()

    three = summary(3)
    assert three["ci95"][1] < 1.0 and three["verdict"] == "inconclusive"
    assert three["why_inconclusive"] == (
        "3 pair(s) cannot reach p < 0.05: all 3 moving one way by chance alone has p 0.125 "
        "(the sign test's bound; needs 5); rerun with --pairs 5 or more")
    assert ab.AUTO_MIN_PAIRS == 5
    five = summary(ab.AUTO_MIN_PAIRS)
    assert five["verdict"] == "slower" and "why_inconclusive" not in five


@pytest.mark.parallel
def test_sides_split_on_measuring_commands_only():
    sides = ab.split_sides(["--", "run", "--model", "x", "--", "external", "--name", "h",
                            "--", "python", "loop.py"])
    assert sides == [["run", "--model", "x"], ["external", "--name", "h", "--", "python",
                                                "loop.py"]]
    with pytest.raises(UsageError, match="need exactly two"):
        ab.split_sides(["--", "run", "--model", "x"])
    with pytest.raises(UsageError, match="--repeats is set by dlperf ab"):
        ab.split_sides(["--", "run", "--repeats", "3", "--", "run"])


def test_two_real_tiny_cases(tmp_path: Path):
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", "2", "--json", str(out),
         "--", "run", *TINY, "--batch-size", "2", "--", "run", *TINY, "--batch-size", "4"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    a, b = data["a"]["values"], data["b"]["values"]
    assert data["pairs"] == 2 and len(a) == len(b) == 2 and all(v > 0 for v in a + b)
    assert data["ratio"] == pytest.approx(statistics.median(b) / statistics.median(a))
    low, high = data["ci95"]
    assert low <= data["ratio"] <= high
    assert data["verdict"] == ab.verdict(data["ratio"], (low, high), 0.02, 2)
    assert data["sides"]["B"][-2:] == ["--batch-size", "4"]
    # the order on stderr: A B, B A (two pairs show the swap; the order of more is
    # test_order_alternates_who_goes_first's)
    turns = [line.split(":")[0].split()[-1] for line in proc.stderr.splitlines()
             if line.startswith("pair ")]
    assert turns == ["A", "B", "B", "A"]
    assert f"B/A = {data['ratio']:.3f}" in proc.stdout
    # each side names the device its turns ran on, in the JSON and on the B/A line
    assert data["a"]["devices"] == data["b"]["devices"] == ["cpu"]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("B/A = "))
    assert line.endswith(f"pairs: {data['verdict']} (A on cpu, B on cpu)")
    assert not (tmp_path / "dlperf.db").exists()  # the turns use ab's own scratch database


def test_a_failing_side_ends_the_comparison_with_its_reason(tmp_path: Path):
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", "2", "--json", str(out),
         "--", "run", *TINY, "--batch-size", "2", "--", "run", *TINY, "--batch-size", "2",
         "--precision", "tf32"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 1
    data = json.loads(out.read_text())
    (failed,) = data["failed"]
    assert failed["side"] == "B" and failed["status"] == "unsupported"
    assert "tf32 needs a CUDA device" in failed["error"]


def external_side(rate: float) -> list[str]:
    """A measuring command that needs no framework: `dlperf external` around a script that
    prints a fixed rate twice (the first line is its warm-up)."""
    script = f"print('rate: {rate}'); print('rate: {rate}')"
    return ["external", "--name", f"fixed{rate:g}", "--metric", r"rate: ([\d.]+)", "--",
            sys.executable, "-c", script]


@pytest.mark.parallel
@pytest.mark.parametrize("b_rate, verdict", [(100.0, "same"), (120.0, "faster")])
def test_auto_pairs_stop_once_the_verdict_is_settled(b_rate, verdict, tmp_path: Path):
    out = tmp_path / "ab.json"
    # `dlperf ab` in this process (its measuring commands are still fresh processes), on a
    # measurement lock of its own: never holding up a measuring test
    proc = dlperf_main("ab", "--pairs", "auto", "--json", str(out),
                       "--", *external_side(100.0), "--", *external_side(b_rate),
                       timeout=600, env=own_lock("ab-auto"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["verdict"] == verdict
    # the interval is a point from the first pairs on: settled at the least pairs auto takes
    assert data["pairs_policy"] == {"most": ab.AUTO_PAIRS, "taken": ab.AUTO_MIN_PAIRS,
                                    "settled": True}
    assert data["pairs"] == ab.AUTO_MIN_PAIRS


@pytest.mark.parallel
def test_a_comparison_is_settled_only_when_its_interval_decides():
    def comparison(pairs: list[tuple[float, float]]) -> ab.Comparison:
        made = ab.Comparison(pairs=20, auto=True)
        for index, (a, b) in enumerate(pairs):
            made.turns += [ab.Turn("A", index, a, "ok"), ab.Turn("B", index, b, "ok")]
        return made

    least = ab.AUTO_MIN_PAIRS
    assert comparison([(100, 110 + k % 2) for k in range(least)]).settled()  # clearly faster
    assert comparison([(100, 100 + 0.1 * (k % 2)) for k in range(least)]).settled()  # the same
    assert not comparison([(100, 100 + 0.1 * (k % 2))
                           for k in range(least - 1)]).settled()  # too few
    noisy = [(100, b) for b in (90, 112, 95, 108, 101, 93)]
    assert not comparison(noisy).settled()  # the interval straddles the threshold
