"""`dlperf compare`: the statistics against hand-computed values, then real results end to end."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from conftest import dlperf, dlperf_main, load
from dlperf import stats
from dlperf.commands import compare as compare_command
from dlperf.report import compare as cmp

SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")


def synthetic(values: list[float], label: str = "case", status: str = "ok") -> dict:
    """Per-repeat numbers shaped as the comparison reads them (statistics tests only)."""
    median = statistics.median(values) if values else None
    return {"label": label, "status": status, "error": None if status == "ok" else "boom",
            "throughput": {"median": median, "repeats": values}}


# -- the statistics ----------------------------------------------------------------------------


@pytest.mark.parallel
def test_mann_whitney_exact_p_values():
    # 4 vs 4 with complete separation: 2 of the C(8,4) = 70 rankings are as extreme
    result = cmp.significance([1, 2, 3, 4], [5, 6, 7, 8])
    assert result.p_value == pytest.approx(2 / 70) and result.usable()
    assert stats.mannwhitney_min_p(2, 2) == pytest.approx(1 / 3)
    assert stats.mannwhitney_min_p(3, 3) == pytest.approx(0.1)
    assert stats.mannwhitney_min_p(7, 7) == pytest.approx(2 / 3432)
    # 2 vs 2 can never reach 0.05: the p-value is shown but never counts as significant
    small = cmp.significance([1, 2], [5, 6])
    assert small.p_value == pytest.approx(1 / 3) and not small.usable()
    assert "2 repeats a side cannot reach p < 0.05 with Mann-Whitney (smallest p 0.333; needs 4 a side)" in \
        small.text()


@pytest.mark.parallel
def test_welch_t_test_by_hand():
    a, b = [10.0, 11.0, 12.0], [20.0, 24.0, 28.0]
    var_a, var_b = 1.0, 16.0  # sample variances
    se = math.sqrt(var_a / 3 + var_b / 3)
    t = (11.0 - 24.0) / se
    df = (var_a / 3 + var_b / 3) ** 2 / ((var_a / 3) ** 2 / 2 + (var_b / 3) ** 2 / 2)
    assert df == pytest.approx(2.249, abs=1e-3)  # not Student's 4
    expected = 2 * scipy_stats.t.sf(abs(t), df)
    result = cmp.significance(a, b, test="welch")
    assert result.p_value == pytest.approx(expected) and result.usable()


@pytest.mark.parallel
def test_tests_that_cannot_be_computed_are_never_significant():
    one = cmp.significance([100.0], [120.0])
    assert one.p_value is None and one.reason == ("1 repeat a side cannot reach p < 0.05 with "
                                                   "Mann-Whitney (smallest p 1; needs 4 a side)")
    flat = cmp.significance([5.0, 5.0], [6.0, 6.0], test="welch")
    assert flat.p_value is None and "no variance" in flat.reason
    item = cmp.compare_pair("k", synthetic([100.0]), synthetic([80.0]))
    # no verdict from the threshold alone: inconclusive, saying why and what would decide
    assert item.verdict == "inconclusive" and item.test.brief() == "n/a" and not item.regressed
    assert item.notes == ["inconclusive: -20.0% is beyond the 5% threshold but 1 repeat a side "
                          "cannot reach p < 0.05 with Mann-Whitney (smallest p 1; needs 4 a "
                          "side); rerun with "
                          "--repeats 4 or --test welch"]
    summary = cmp.Comparison([item], 0.05, 0.05, "mannwhitney").to_dict()
    assert summary["cases"][0]["significant"] is False
    assert summary["counts"]["inconclusive"] == 1
    # Welch's t with no variance on either side is undefined: inconclusive too, with that reason
    flat_item = cmp.compare_pair("k", synthetic([5.0, 5.0]), synthetic([6.0, 6.0]), test="welch")
    assert flat_item.verdict == "inconclusive" and "no variance" in flat_item.notes[0]


@pytest.mark.parallel
def test_three_repeats_a_side_are_inconclusive_for_mann_whitney_only():
    """Mann-Whitney's smallest two-sided p with 3 and 3 is 2/C(6,3) = 0.1: a 20 % drop is
    "inconclusive" (the threshold alone raised 12 % false alarms, docs/calibration.md), Welch's
    t and Mann-Whitney with 4 a side decide it, and a change under the threshold is "same"."""
    base, cand = [100.0, 101.0, 99.0], [80.0, 81.0, 79.0]
    mw = cmp.compare_pair("k", synthetic(base), synthetic(cand))
    assert mw.verdict == "inconclusive" and mw.test.p_value == pytest.approx(0.1)
    assert mw.notes[0].endswith("3 repeats a side cannot reach p < 0.05 with Mann-Whitney "
                                "(smallest p 0.1; needs 4 a side); rerun with --repeats 4 or "
                                "--test welch")
    assert cmp.compare_pair("k", synthetic(base), synthetic(cand), test="welch").verdict == \
        "slower"
    assert cmp.compare_pair("k", synthetic([*base, 100.5]),
                            synthetic([*cand, 80.5])).verdict == "slower"
    # a stricter alpha needs more: 2/C(8,4) = 0.029 is not below 0.01, 2/C(10,5) = 0.008 is
    strict = cmp.compare_pair("k", synthetic([*base, 100.5]), synthetic([*cand, 80.5]),
                              alpha=0.01)
    assert strict.verdict == "inconclusive" and "; needs 5 a side)" in strict.notes[0]
    assert cmp.compare_pair("k", synthetic(base), synthetic([v * 0.98 for v in base])).verdict \
        == "same"


@pytest.mark.parallel
def test_verdicts_respect_threshold_and_significance():
    base = [100.0, 101.0, 99.0, 100.5]
    faster = cmp.compare_pair("k", synthetic(base), synthetic([v * 1.2 for v in base]))
    assert faster.verdict == "faster" and faster.ratio == pytest.approx(1.2)
    slower = cmp.compare_pair("k", synthetic(base), synthetic([v * 0.8 for v in base]))
    assert slower.verdict == "slower" and slower.regressed
    # significant but smaller than the threshold
    tiny = cmp.compare_pair("k", synthetic(base), synthetic([v * 1.03 for v in base]))
    assert tiny.verdict == "same" and tiny.test.p_value < 0.05
    # beyond the threshold but within the noise
    noisy = cmp.compare_pair("k", synthetic([100.0, 150.0, 80.0, 120.0]),
                             synthetic([110.0, 160.0, 90.0, 130.0]))
    assert noisy.verdict == "same" and "within the noise" in noisy.notes[0]
    failed = cmp.compare_pair("k", synthetic(base), synthetic([], status="oom"))
    assert failed.verdict == "failed" and failed.regressed
    fixed = cmp.compare_pair("k", synthetic([], status="crash"), synthetic(base))
    assert fixed.verdict == "fixed" and not fixed.regressed


@pytest.mark.parallel
def test_geometric_mean_and_matching():
    a = {"case_key": "a", **synthetic([10.0, 10.0], "a")}
    b = {"case_key": "b", **synthetic([10.0, 10.0], "b")}
    c = {"case_key": "c", **synthetic([10.0, 10.0], "c")}
    result = cmp.compare([a, b, c], [{**a, **synthetic([20.0, 20.0], "a")},
                                     {**b, **synthetic([5.0, 5.0], "b")}])
    assert result.geometric_mean == pytest.approx(1.0)  # sqrt(2 x 0.5)
    assert [x.verdict for x in result.cases][-1] == "only in baseline"
    two = cmp.compare([a, b], [{**a, **synthetic([11.0], "a")},
                               {**b, **synthetic([12.1], "b")}])
    assert two.geometric_mean == pytest.approx(math.sqrt(1.1 * 1.21))


@pytest.mark.parallel
def test_command_and_library_offer_the_same_tests():
    assert compare_command.TESTS == cmp.TESTS
    assert compare_command.DEFAULT_ALPHA == cmp.DEFAULT_ALPHA


# -- real results --------------------------------------------------------------------------------


def measured(tmp_path: Path, name: str, step_s: str, repeats: int = 5) -> Path:
    """A real external result: the fake training script timed by when its lines arrive. Through
    dlperf's main in this process: each repeat is still a fresh process of the script, and a
    harness interpreter of its own checks nothing test_fuzz_cli does not."""
    out = tmp_path / f"{name}.json"
    dlperf_main("external", "--name", "fake", "--step-regex", r"step (\d+)", "--samples-per-step",
                "32", "--repeats", str(repeats), "--db", str(tmp_path / "c.db"), "--json",
                str(out), "--", sys.executable, SCRIPT, env={"FAKE_STEP_S": step_s},
                timeout=120, check=True)
    return out


@pytest.fixture(scope="module")
def fast_and_slow(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    return measured(tmp, "fast", "0.05"), measured(tmp, "slow", "0.15")


def test_a_real_regression_fails_the_gate(fast_and_slow, tmp_path):
    fast, slow = fast_and_slow
    assert load(fast)["case_key"] == load(slow)["case_key"]  # same case, other behaviour
    out = tmp_path / "cmp.json"
    # the gate as a real process (its exit status is what CI reads), the other two through
    # dlperf's main in this process while it runs (SciPy imported once, not in two more
    # interpreters)
    gate_argv = [sys.executable, "-m", "dlperf.cli", "compare", str(fast), str(slow),
                 "--fail-on-regression", "--json", str(out)]
    with subprocess.Popen(gate_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as running:
        reverse = dlperf_main("compare", str(slow), str(fast), "--fail-on-regression")
        wide = dlperf_main("compare", str(fast), str(slow), "--threshold", "90%",
                           "--fail-on-regression")
        stdout, stderr = running.communicate(timeout=300)
    gate = subprocess.CompletedProcess(gate_argv, running.returncode, stdout, stderr)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "slower" in gate.stdout and "1 regression(s) beyond 5%" in gate.stdout
    result = json.loads(out.read_text())
    case = result["cases"][0]
    assert case["verdict"] == "slower" and case["significant"] is True
    assert case["p_value"] == pytest.approx(2 / math.comb(10, 5))  # 5 vs 5, fully separated
    assert case["ratio"] < 0.6 and result["geometric_mean_ratio"] == pytest.approx(case["ratio"])
    assert len(case["baseline_repeats"]) == len(case["candidate_repeats"]) == 5
    # the other way round it got faster, and the gate passes
    assert reverse.returncode == 0 and "faster" in reverse.stdout
    # a threshold wider than the change calls it the same
    assert wide.returncode == 0 and "same" in wide.stdout


def test_sweep_names_database_files_and_run_ids(fixture_db, tmp_path):
    db = str(fixture_db.path)
    out = tmp_path / "self.json"
    # through dlperf's main in this process (SciPy imported once): the gate's exit status as a
    # real process is test_a_real_regression_fails_the_gate's
    proc = dlperf_main("compare", "fixture", db, "--db", db, "--fail-on-regression",
                       "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    counts = result["counts"]
    oks = sum(1 for r in fixture_db.sweep_json if r["status"] == "ok")
    failures = len(fixture_db.sweep_json) - oks
    # the sweep against the whole database: its own cases are the same, the OOM sweep's cases
    # are only in the candidate
    assert counts["same"] == oks + failures and counts["only in candidate"] == 2
    assert result["geometric_mean_ratio"] == pytest.approx(1.0)
    assert "geometric mean" in proc.stdout
    run_ids = sorted(r["run_id"] for r in fixture_db.sweep_json if r["status"] == "ok")
    # run ids, bare and prefixed
    proc = dlperf_main("compare", str(run_ids[0]), f"run:{run_ids[1]}", "--db", db, check=True)
    assert "different cases" in proc.stdout


BAD_INPUT = [
    (["nope", "fixture"], "BASELINE: 'nope' is not a file, a run id or a sweep"),
    (["fixture", "99999"], "CANDIDATE: no finished run with id 99999"),
    (["fixture", "fixture", "--threshold", "lots"], "expected a percentage like 5%"),
    (["fixture", "fixture", "--alpha", "2"], "--alpha: 2.0 must be between 0 and 1"),
]


# the first as a real process, the rest through dlperf's main in this process (each fresh
# interpreter pays ~1.5 s importing SciPy before it refuses)
@pytest.mark.parametrize("args, message, run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line_and_exit_2(args, message, run, fixture_db):
    proc = run("compare", *args, "--db", str(fixture_db.path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parallel
def test_a_file_that_is_not_results_is_exit_2(tmp_path):
    bogus = tmp_path / "bogus.json"
    bogus.write_text(json.dumps({"hello": 1}))
    proc = dlperf_main("compare", str(bogus), str(bogus))
    assert proc.returncode == 2 and "compare reads dlperf result objects" in proc.stderr
