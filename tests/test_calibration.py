"""benchmarks/calibration.py's machinery: on constructed pools whose noise is known, each rule's
false-alarm rate and power come out as arithmetic says; on a few real repeats of a tiny case,
collect and judge run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration  # noqa: E402


@pytest.mark.parallel
def test_rates_on_constructed_noise():
    rng = np.random.default_rng(1)
    base = 100 + rng.normal(0, 1.0, 600)  # CV 1 %
    planted = {share: (100 + rng.normal(0, 1.0, 300)) * (1 - share) for share in (0.01, 0.10)}
    found = calibration.rates(base, planted, 5, 400)
    # a 30 % threshold never fires on 1 % noise nor on a 10 % change
    assert found["relative 30% (TorchBench-style)"] == {"false_alarm": 0.0, "power_1%": 0.0,
                                                        "power_10%": 0.0}
    # a 7 % threshold: silent on noise, always on a 10 % change
    assert found["relative 7% (TorchBench-style)"]["false_alarm"] == 0.0
    assert found["relative 7% (TorchBench-style)"]["power_10%"] == 1.0
    # dlperf's compare needs both a 5 % change and significance: never on noise, always at 10 %
    for test in ("Welch", "Mann-Whitney"):
        assert found[f"dlperf compare ({test})"]["false_alarm"] <= 0.01
        assert found[f"dlperf compare ({test})"]["power_10%"] >= 0.99
    # a z-score of 5 on 1 % noise: a 1 % change (1 sd) is rarely caught (only when 5 repeats
    # happen to give a small sd), 10 % (10 sd) always
    assert found["z-score 5 (conbench-style)"]["power_1%"] <= 0.1
    assert found["z-score 5 (conbench-style)"]["power_10%"] >= 0.99
    # a t-test threshold: a 95 % prediction interval, so about 2.5 % false alarms (one side)
    assert 0.0 < found["t-test threshold (Bencher-style)"]["false_alarm"] < 0.08


@pytest.mark.parallel
def test_known_false_alarm_rates_of_each_verdict():
    """Rates arithmetic fixes: Welch's one-sided test at 0.05 with no threshold (gate, limit 0)
    on normal noise alarms 5 % of A/A draws; compare's Mann-Whitney with 3 a side and ab with
    fewer than 5 pairs never decide ("inconclusive"), whatever the change; ab with 5 pairs and
    no threshold alarms only when every pair went the same way: at most 2^-5 = 3.1 %."""
    rng = np.random.default_rng(2)
    base = 100 + rng.normal(0, 1.0, 600)
    planted = {0.10: (100 + rng.normal(0, 1.0, 600)) * 0.90}
    paired = frozenset({"ab", "ab, threshold 0"})

    def rate(rule: str, n: int, draws: int, with_planted: bool = True) -> dict[str, float]:
        rules = {"gate welch, limit 0": calibration.dlperf_gate("welch", limit=0.0),
                 "compare mw": calibration.dlperf_compare("mannwhitney"),
                 "ab": calibration.dlperf_ab(), "ab, threshold 0": calibration.dlperf_ab(0.0)}
        return calibration.rates(base, planted if with_planted else {}, n, draws,
                                 rules={rule: rules[rule]}, paired=paired)[rule]

    # 1000 draws: a rate's standard error at 5 % is 0.7 points
    assert 0.03 <= rate("gate welch, limit 0", 5, 1000, False)["false_alarm"] <= 0.07
    assert rate("compare mw", 3, 200) == {"false_alarm": 0.0, "power_10%": 0.0}
    assert rate("ab", 3, 200) == {"false_alarm": 0.0, "power_10%": 0.0}
    assert 0.0 < rate("ab, threshold 0", 5, 1000, False)["false_alarm"] <= 1 / 32 + 0.017
    assert rate("ab", 5, 100)["power_10%"] == 1.0
    assert rate("compare mw", 5, 100)["power_10%"] == 1.0


@pytest.mark.parallel
def test_history_false_alarms_and_power_on_known_series():
    """history's change points on series of one-repeat results: a level series of 1 % noise
    gives none; a 10 % step is found with 5 results a side and never with 3 (Mann-Whitney over
    3 and 3 repeats cannot reach its alpha of 0.01, so the candidate is never confirmed)."""
    rng = np.random.default_rng(3)
    base = 100 + rng.normal(0, 1.0, 300)
    planted = {0.10: (100 + rng.normal(0, 1.0, 300)) * 0.90}
    rules = {"history": calibration.dlperf_history}
    assert calibration.rates(base, planted, 3, 100, rules=rules)["history"] == {
        "false_alarm": 0.0, "power_10%": 0.0}
    assert calibration.rates(base, planted, 5, 100, rules=rules)["history"] == {
        "false_alarm": 0.0, "power_10%": 1.0}


@pytest.mark.parallel
def test_too_small_a_pool_is_said():
    with pytest.raises(SystemExit, match="A/A needs 10 unplanted repeats"):
        calibration.rates([1.0] * 9, {}, 5, 10)


def test_collect_and_judge_on_a_few_real_repeats(tmp_path):
    db = tmp_path / "cal.db"
    script = str(ROOT / "benchmarks" / "calibration.py")
    subprocess.run([sys.executable, script, "collect", "--db", str(db), "--cycles", "4",
                    "--shares", "0.2"], check=True, timeout=600)
    base, planted = calibration.pools(db)
    assert len(base) == 4 and list(planted) == [0.2] and len(planted[0.2]) == 4
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, script, "judge", "--db", str(db), "--repeats", "2",
                           "--draws", "50", "--json", str(out)], check=True, capture_output=True,
                          text=True, timeout=120)
    assert "pools: 4 unplanted repeats; planted: 20%: 4" in proc.stdout
    found = json.loads(out.read_text())["2"]
    assert set(found) == set(calibration.RULES)
    assert all(0.0 <= v["false_alarm"] <= 1.0 and "power_20%" in v for v in found.values())
