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
