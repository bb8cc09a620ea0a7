"""benchmarks/spread_vs_bare.py: dlperf's run-to-run spread beside the bare same-recipe torch loop,
on a tiny case of 2 interleaved pairs; the table's figures are the repeats' own (no timing is
judged)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "spread_vs_bare.py"


def test_two_pairs_on_a_tiny_case_make_the_table(tmp_path):
    out_json, out_md = tmp_path / "s.json", tmp_path / "s.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--pairs", "2", "--image-size", "32",
                           "--batch-size", "2", "--warmup-steps", "1", "--steps", "2",
                           "--json", str(out_json), "--markdown", str(out_md)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(out_json.read_text())
    assert found["pairs"] == 2 and found["failed"] is None
    assert found["loop"] == "benchmarks/handwritten/torch_resnet50.py"
    rows = []
    for key in ("dlperf", "bare"):
        side = found[key]
        values = side["repeats"]
        assert len(values) == 2 and all(v > 0 for v in values)
        assert side["median"] == pytest.approx(statistics.median(values))
        assert side["cv"] == pytest.approx(statistics.stdev(values) / statistics.mean(values))
        rows.append(", ".join(f"{v:.2f}" for v in values)
                    + f" | {side['median']:.2f} | {side['cv']:.2%} |")
    diff = (found["dlperf"]["cv"] - found["bare"]["cv"]) * 100
    assert found["cv_difference_points"] == pytest.approx(diff)
    table = out_md.read_text()
    assert table == done.stdout
    lines = table.splitlines()
    assert lines[0].startswith("torch ResNet-50, image 32, batch 2, fp32, 1 warm-up + 2 timed "
                               "steps; 2 pairs, interleaved in fresh processes")
    assert lines[2:4] == ["| side | samples/s per repeat | median | CV |", "|---|---|---:|---:|"]
    assert lines[4] == f"| dlperf run | {rows[0]}"
    assert lines[5] == f"| bare loop (benchmarks/handwritten/torch_resnet50.py) | {rows[1]}"
    assert lines[-1] == f"CV difference (dlperf - bare): {diff:+.2f} points"


@pytest.mark.parallel
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--pairs", "1"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "spread_vs_bare.py: error: --pairs: 1 must be between 2 and 1000"]
