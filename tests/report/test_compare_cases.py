"""`dlperf compare A.json B.json` on two different cases (fp32 vs amp-bf16, as `make run` does):
what differs is stated as information, and the verdict rests on a test that can decide."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import dlperf_main
import pytest

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def result(precision: str, repeats: list[float], batch_size: int = 16) -> dict:
    case = {"framework": "torch", "model": "resnet50", "task": "train", "precision": precision,
            "batch_size": batch_size, "repeats": len(repeats), "timeout_s": 600.0}
    ordered = sorted(repeats)
    return {"status": "ok", "case": case, "case_key": json.dumps(case, sort_keys=True),
            "label": f"torch resnet50 train bs{batch_size} {precision}",
            "throughput": {"median": ordered[len(ordered) // 2], "repeats": repeats}}


def write(path: Path, data: dict) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_two_cases_name_their_differences_without_a_warning(tmp_path):
    fp32 = write(tmp_path / "fp32.json", result("fp32", [15.9, 15.9, 14.9]))
    bf16 = write(tmp_path / "bf16.json", result("amp-bf16", [7.5, 7.4, 7.7]))
    out = tmp_path / "cmp.json"
    proc = dlperf_main("compare", fp32, bf16, "--test", "welch", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "different cases, compared as asked: precision: fp32 → amp-bf16" in proc.stdout
    # three repeats a side: Welch decides, so nothing on the screen is a warning
    assert "!" not in proc.stdout + proc.stderr
    case = json.loads(out.read_text())["cases"][0]
    assert case["differs"] == ["precision: fp32 → amp-bf16"]
    assert case["verdict"] == "slower" and case["significant"] and case["notes"] == []

    # every field that differs is named, the batch size too
    other = write(tmp_path / "bs32.json", result("amp-bf16", [7.5, 7.4, 7.7], batch_size=32))
    proc = dlperf_main("compare", fp32, other, "--test", "welch")
    assert "batch_size: 16 → 32; precision: fp32 → amp-bf16" in proc.stdout

    # the same case on both sides has nothing to declare
    again = write(tmp_path / "again.json", result("fp32", [15.8, 15.9, 16.0]))
    proc = dlperf_main("compare", fp32, again, "--test", "welch")
    assert proc.returncode == 0 and "different cases" not in proc.stdout


def test_too_few_repeats_for_the_test_is_inconclusive_and_exits_0(tmp_path):
    """Mann-Whitney (the default) cannot reach p < 0.05 with 3 repeats a side: a 20 % drop is
    "inconclusive", says why and what would decide, and --fail-on-regression exits 0 (as gate
    does for inconclusive); Welch's t decides the same repeats, exit 1."""
    base = write(tmp_path / "base.json", result("fp32", [100.0, 101.0, 99.0]))
    cand = write(tmp_path / "cand.json", result("fp32", [80.0, 81.0, 79.0]))
    out = tmp_path / "cmp.json"
    proc = dlperf_main("compare", base, cand, "--fail-on-regression", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "1 inconclusive" in said and "regression" not in said
    assert ("inconclusive: -20.0% is beyond the 5% threshold but 3 repeats a side cannot reach "
            "p < 0.05 with Mann-Whitney (smallest p 0.1; needs 4 a side); rerun with --repeats 4 "
            "or --test "
            "welch") in said
    data = json.loads(out.read_text())
    assert data["counts"]["inconclusive"] == 1 and data["cases"][0]["verdict"] == "inconclusive"
    proc = dlperf_main("compare", base, cand, "--fail-on-regression", "--test", "welch")
    assert proc.returncode == 1 and "1 regression(s) beyond 5%" in proc.stdout


def test_a_ratios_interval_is_shown_to_the_decimals_at_which_its_ends_differ():
    from dlperf.report import ratios
    # two decimals where they tell the ends apart; more where they do not (amp-bf16 at 0.11x
    # fp32 on a CPU without bf16 read 0.11-0.11), two significant digits below 0.1, at most four
    assert ratios.decimals_apart(0.85, 0.97) == 2
    assert ratios.decimals_apart(0.1086, 0.1123) == 3
    assert ratios.decimals_apart(0.0915, 0.0949) == 3
    assert ratios.decimals_apart(0.00915, 0.00949) == 4
    assert ratios.decimals_apart(1.00001, 1.00002) == ratios.MOST_DECIMALS == 4
    assert [ratios.ratio_text(v) for v in (1.234, 0.1, 0.0916, 0.00123)] == \
        ["1.23", "0.10", "0.092", "0.0012"]
    # a pair whose interval lies within 0.105-0.115: the ratio and both ends at three decimals
    fp32 = result("fp32", [15.9, 16.0, 16.1, 16.0, 15.95])
    bf16 = result("amp-bf16", [1.75, 1.76, 1.77, 1.76, 1.755])
    compared = ratios.between(fp32, bf16)
    assert compared is not None and compared.ci is not None
    low, high = compared.ci
    assert 0.105 <= low < high < 0.115
    shown = f"{compared.ratio:.3f}"
    assert compared.cell().startswith(f"{shown}× ({low:.3f}–{high:.3f}) slower, "), compared.cell()
    assert f"is {shown}× fp32 (95 % CI {low:.3f}–{high:.3f}; " in compared.sentence()
