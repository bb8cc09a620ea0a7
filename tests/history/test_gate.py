"""`dlperf gate` on constructed stored results: a verdict only where its test can reach p < 0.05
with the repeats there are; "inconclusive" (exit 0, the reason and what would decide) where it
cannot, never a threshold's verdict alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import dlperf_main
from dlperf.commands.gate import repeats_verdict

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def side(path: Path, label: str, repeats: list[float], run_id: int) -> str:
    """A result JSON file of one labelled case with these per-repeat throughputs."""
    case = {"framework": "torch", "model": "resnet50", "task": "train", "precision": "fp32",
            "batch_size": 16, "repeats": len(repeats), "run_label": label}
    ordered = sorted(repeats)
    path.write_text(json.dumps({"status": "ok", "case": case, "label": f"resnet50 {label}",
                                "run_id": run_id, "throughput": {
                                    "median": ordered[len(ordered) // 2], "repeats": repeats}}))
    return str(path)


def test_repeats_verdict_knows_what_each_test_can_reach():
    base, cand = [100.0, 101.0, 99.0], [80.0, 81.0, 79.0]
    # one-sided Mann-Whitney with 3 and 3: smallest p 1/C(6,3) = 0.05, not below 0.05
    verdict, p_value, why = repeats_verdict(base, cand, 0.8, 0.03, "mannwhitney")
    assert (verdict, p_value) == ("inconclusive", None)
    assert why == ("3 repeats a side cannot reach p < 0.05 with Mann-Whitney (smallest p 0.05; "
                   "needs 4 a side); measure 4 repeats a side, or use --test welch or "
                   "--remeasure")
    assert repeats_verdict(base, cand, 0.8, 0.03, "welch")[0] == "slower"
    assert repeats_verdict([*base, 100.5], [*cand, 80.5], 0.8, 0.03, "mannwhitney")[0] == \
        "slower"
    verdict, _, why = repeats_verdict([100.0], cand, 0.8, 0.03, "welch")
    assert verdict == "inconclusive" and why == (
        "1 and 3 repeats cannot reach p < 0.05 with Welch's t (needs 2 a side); measure 2 "
        "repeats a side, or use --remeasure")
    # significant but within --max-slowdown: a pass
    assert repeats_verdict(base, [v * 0.99 for v in base], 0.99, 0.03, "welch")[0] == "pass"


def test_inconclusive_exits_0_and_says_why(tmp_path):
    base = side(tmp_path / "a.json", "a", [100.0, 101.0, 99.0], 1)
    cand = side(tmp_path / "b.json", "b", [80.0, 81.0, 79.0], 2)
    out = tmp_path / "gate.json"
    db = str(tmp_path / "none.db")
    proc = dlperf_main("gate", "--baseline", base, "--candidate", cand, "--db", db,
                       "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "inconclusive: 3 repeats a side cannot reach p < 0.05 with Mann-Whitney" in said
    case = json.loads(out.read_text())["cases"][0]
    assert case["verdict"] == "inconclusive" and "; needs 4 a side)" in case["why_inconclusive"]
    # Welch's t decides the same repeats: a slowdown, exit 1
    proc = dlperf_main("gate", "--baseline", base, "--candidate", cand, "--db", db,
                       "--test", "welch")
    assert proc.returncode == 1 and "slower" in proc.stdout
    # and Mann-Whitney with 4 a side
    base4 = side(tmp_path / "a4.json", "a", [100.0, 101.0, 99.0, 100.5], 3)
    cand4 = side(tmp_path / "b4.json", "b", [80.0, 81.0, 79.0, 80.5], 4)
    proc = dlperf_main("gate", "--baseline", base4, "--candidate", cand4, "--db", db)
    assert proc.returncode == 1 and "slower" in proc.stdout
