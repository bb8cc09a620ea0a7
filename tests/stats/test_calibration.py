"""benchmarks/calibration.py's machinery: on constructed pools whose noise is known, each rule's
false-alarm rate and power come out as arithmetic says, and a store's pools are judged apart; on
a couple of real repeats of each declared pool (its case on the tiniest shapes), collect
interleaves them and judge runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CUT_RESNET50_FLAGS, pinned_env, script_main, tiny_bert_knobs
from dlperf.store import Store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration  # noqa: E402


@pytest.mark.parallel
def test_rates_on_constructed_noise():
    rng = np.random.default_rng(1)
    base = 100 + rng.normal(0, 1.0, 600)  # CV 1 %
    planted = {share: (100 + rng.normal(0, 1.0, 300)) * (1 - share) for share in (0.01, 0.10)}
    asserted = ("relative 30% (TorchBench-style)", "relative 7% (TorchBench-style)",
                "dlperf compare (Welch)", "dlperf compare (Mann-Whitney)",
                "z-score 5 (conbench-style)", "t-test threshold (Bencher-style)")
    found = calibration.rates(base, planted, 5, 400,
                              rules={name: calibration.RULES[name] for name in asserted})
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


SCRIPT = str(ROOT / "benchmarks" / "calibration.py")
# the case `collect` measured before the pools were declared (docs/calibration.md's first tables)
BEFORE_POOLS = ["--framework", "torch", "--model", "resnet50", "--image-size", "32",
                "--batch-size", "2", "--warmup-steps", "3", "--steps", "6",
                "--threads-per-process", "1"]


def script(*args: str) -> subprocess.CompletedProcess[str]:
    """The script in a process of its own: for its pool of processes (`--jobs 2`)."""
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=300)


def answer(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The script's answer from its `main` in this process (conftest.script_main: no fresh
    interpreter's imports); never with a pool of processes (`--jobs 1` where it would judge)."""
    return script_main("calibration", *args, env=env)


@pytest.mark.parallel
def test_remeasure_pairs_in_abs_order_cancel_drift_and_use_gates_threshold():
    """gate --remeasure's draws: 2n consecutive repeats in ab's turn order (A B, B A, ...).
    On a pool falling 1 % a repeat, that order leaves no false alarm, where taking every first
    repeat as A would always say "slower"; its threshold is gate's 3 %, not ab's 2 %."""
    a, b = calibration.remeasure_pairs(np.arange(6.0), 3)
    assert a.tolist() == [0.0, 3.0, 4.0] and b.tolist() == [1.0, 2.0, 5.0]
    falling = 100 * 0.99 ** np.arange(40)
    strict = calibration.dlperf_ab(0.0)
    window = falling[:12]
    assert not strict(*calibration.remeasure_pairs(window, 6))
    assert strict(window[0::2], window[1::2])  # A always first: the drift reads as "slower"
    rules = {calibration.REMEASURE: strict}
    assert calibration.rates(falling, {}, 6, 50, rules=rules)[calibration.REMEASURE] == {
        "false_alarm": 0.0}
    # 2.5 % slower in every cycle, quietly: ab's 2 % threshold always fires, gate's 3 % never
    rng = np.random.default_rng(4)
    base = 100 + rng.normal(0, 0.01, 60)
    planted = {0.025: base * 0.975}
    found = calibration.rates(base, planted, 5, 50)
    assert found["dlperf ab (pairs)"]["power_2%"] == 1.0
    assert found[calibration.REMEASURE]["power_2%"] == 0.0
    # i.i.d. noise, no threshold: a false "slower" needs all 5 pairs to move one way (2^-5)
    noise = 100 + rng.normal(0, 1.0, 600)
    assert 0.0 < calibration.rates(noise, {}, 5, 1000, rules=rules)[calibration.REMEASURE][
        "false_alarm"] <= 1 / 32 + 0.017


def store_pools(db: Path, values: dict[str, dict[float, list[float]]]) -> None:
    """One single-repeat result per value, of each named pool's declared case, cycle by cycle
    (every pool, unplanted then its planted shares), as `collect` stores them."""
    with Store(db) as store:
        for cycle in range(max(len(v) for by_share in values.values() for v in by_share.values())):
            for name, by_share in values.items():
                for share, pool in by_share.items():
                    if cycle >= len(pool):
                        continue
                    flags = [*calibration.POOLS.get(name, BEFORE_POOLS[:-2]),
                             "--plant-slowdown", f"{share:g}"]
                    case = calibration.declared_case(tuple(flags)).to_dict()
                    run = store.start_run("k", "x", case, {})
                    store.finish_run(run, {"status": "ok", "case": case, "label": "x",
                                           "throughput": {"median": pool[cycle],
                                                          "repeats": [pool[cycle]]}})


@pytest.mark.parallel
def test_pools_of_a_store_are_judged_apart_and_summed_up(tmp_path):
    """Each pool is its own case: judged alone, then side by side. A pool with two levels 20 %
    apart raises relative-7 % false alarms, a steady one none; a 20 % planted slowdown is always
    caught by it; results of another case are counted and left out."""
    rng = np.random.default_rng(5)
    steady = list(100 + rng.normal(0, 0.1, 8))
    db = tmp_path / "cal.db"
    store_pools(db, {
        "torch-resnet50": {0.0: steady, 0.2: [v * 0.8 for v in steady]},
        "torch-bert": {0.0: [100.0, 80.0] * 4},
        "paddle-resnet50": {0.0: [50.0, 51.0, 50.5, 50.2]},
        "another case": {0.0: [7.0, 7.0]},  # no declared pool's: BEFORE_POOLS without threads
    })
    out, md = tmp_path / "c.json", tmp_path / "c.md"
    proc = script("judge", "--db", str(db), "--repeats", "2", "3", "--draws", "30",
                  "--json", str(out), "--markdown", str(md), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    # the draws shared by two processes or made by one: the same rates, to the last digit
    alone = tmp_path / "alone.json"
    one = answer("judge", "--db", str(db), "--repeats", "2", "3", "--draws", "30",
                 "--json", str(alone), "--jobs", "1")
    assert one.returncode == 0 and one.stdout == proc.stdout, one.stderr
    assert json.loads(alone.read_text()) == json.loads(out.read_text())
    assert "2 result(s) in" in proc.stderr and "of no pool judged here" in proc.stderr
    assert "pool torch-resnet50-2proc: no result" in proc.stderr
    found = json.loads(out.read_text())
    pools = found["pools"]
    assert list(pools) == ["torch-resnet50", "torch-bert", "paddle-resnet50"]
    assert pools["torch-resnet50"]["repeats"] == 8 and pools["torch-resnet50"]["planted"] == {
        "20%": 8}
    assert pools["paddle-resnet50"]["too_few"] == [3]  # A/A at 3 a side needs 6 repeats
    assert set(pools["paddle-resnet50"]["rates"]) == {"2"}
    for entry in pools.values():
        assert all(set(by_rule) == set(calibration.RULES) for by_rule in entry["rates"].values())
    relative = "relative 7% (TorchBench-style)"
    assert pools["torch-resnet50"]["rates"]["2"][relative] == {"false_alarm": 0.0,
                                                               "power_20%": 1.0}
    assert pools["torch-bert"]["rates"]["2"][relative]["false_alarm"] > 0.0
    row = found["summary"]["2"][relative]
    assert row["false_alarm"]["torch-resnet50"] == 0.0
    assert row["false_alarm_worst"] == pools["torch-bert"]["rates"]["2"][relative]["false_alarm"]
    assert row["power_20%_mean"] == 1.0  # the one pool with that share
    assert set(found["summary"]["3"][relative]["false_alarm"]) == {"torch-resnet50",
                                                                   "torch-bert"}
    text = md.read_text()
    assert text == proc.stdout
    for heading in ("### pool torch-resnet50", "### pool torch-bert", "### pool paddle-resnet50",
                    "### all pools", "**2 repeats a side, all pools**",
                    "| dlperf gate --remeasure (pairs) |", "not judged at 3 repeats a side"):
        assert heading in text
    # --pool judges that pool alone
    proc = answer("judge", "--db", str(db), "--repeats", "2", "--draws", "10",
                  "--pool", "torch-bert", "--jobs", "1")
    assert proc.returncode == 0 and "### pool torch-bert" in proc.stdout
    assert "### pool torch-resnet50" not in proc.stdout


@pytest.mark.parallel
def test_a_database_collected_before_the_pools_is_the_resnet50_pool(tmp_path):
    assert calibration.pool_key(calibration.declared_case(tuple(BEFORE_POOLS)).to_dict()) == \
        calibration.pool_key(calibration.declared_case(
            tuple(calibration.POOLS[calibration.DEFAULT_POOL])).to_dict())
    db = tmp_path / "before.db"
    planted = [9.0, 9.5, 9.2, 9.7]
    store_pools(db, {"torch-resnet50": {0.0: [10.0, 11.0, 12.0, 13.0], 0.05: planted}})
    assert calibration.pools(db) == ([10.0, 11.0, 12.0, 13.0], {0.05: planted})
    proc = answer("judge", "--db", str(db), "--repeats", "2", "--draws", "10",
                  "--pool", "torch-resnet50", "--jobs", "1")
    assert proc.returncode == 0 and proc.stderr == ""
    assert "4 unplanted repeats; planted: 5%: 4" in proc.stdout


@pytest.mark.parallel
@pytest.mark.parametrize("args, line", [
    (["collect", "--pool", "nope"], "argument --pool: invalid choice: 'nope'"),
    (["collect", "--cycles", "0"], "--cycles: at least 1"),
    (["collect", "--shares", "0.7"], "--shares: fractions above 0 and at most 0.5"),
    (["judge", "--repeats", "0"], "--repeats and --draws: at least 1"),
    (["judge", "--jobs", "0"], "--jobs: at least 1"),
    (["judge"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_stored(args, line, tmp_path):
    db = tmp_path / "cal.db"
    proc = answer(*args, "--db", str(db))
    assert proc.returncode == 2 and line in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not db.exists()


@pytest.mark.parallel
def test_a_pool_without_its_environment_is_left_out_in_one_line(tmp_path):
    db = tmp_path / "cal.db"
    proc = answer("collect", "--db", str(db), "--pool", "paddle-resnet50", "--cycles", "1",
                  env={"DLPERF_ENVS": str(tmp_path / "no-envs")})
    assert proc.returncode == 1 and not db.exists()
    assert proc.stderr.splitlines() == [
        "calibration.py: pool paddle-resnet50 left out: framework paddle is not installed: run "
        "`dlperf envs install paddle`", "calibration.py: no pool to measure"]


def tiny(*names: str) -> dict[str, list[str]]:
    """The declared pools' cases on the tiniest shapes: fewer steps, BERT narrowed and ResNet-50
    cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is how collect
    interleaves and tells the pools apart, whatever the networks' depth."""
    narrow = [flag for name, value in tiny_bert_knobs(1).items() if name != "seq_len"
              for flag in ("--knob", f"{name}={value}")]
    return {name: [*calibration.POOLS[name], "--warmup-steps", "1", "--steps", "2",
                   *(narrow if "bert" in name else CUT_RESNET50_FLAGS)] for name in names}


def collect_and_judge(tmp_path: Path, pools: dict[str, list[str]]) -> list[dict]:
    """Two cycles of ``pools``, A/A only: each pool's results told apart, interleaved, judged;
    the stored results."""
    db = tmp_path / "cal.db"
    assert calibration.collect(db, 2, [], pools) == 0
    found, other = calibration.pools_of(db, pools)
    assert other == 0 and list(found) == list(pools)
    assert all(len(p.base) == 2 and not p.planted for p in found.values())
    with Store(db, readonly=True) as store:
        stored = store.results()
    # interleaved: each cycle every pool in turn
    assert [calibration.pool_key(r["case"]) for r in stored] == [
        calibration.pool_key(calibration.declared_case(tuple(flags)).to_dict())
        for flags in pools.values()] * 2
    judged = calibration.judge(found, [1], draws=20)
    assert list(judged["pools"]) == list(pools)
    rates = judged["summary"]["1"][calibration.REMEASURE]
    assert set(rates["false_alarm"]) == set(pools)
    assert all(0.0 <= v <= 1.0 for v in rates["false_alarm"].values())
    return stored


def test_collect_interleaves_single_process_pools_on_real_runs(tmp_path):
    """torch ResNet-50 and BERT in dlperf's environment, paddle in its own: two cycles."""
    pinned_env("paddle")
    pools = tiny("torch-resnet50", "torch-bert", "paddle-resnet50")
    paddle = [r for r in collect_and_judge(tmp_path, pools) if r["case"]["framework"] == "paddle"]
    assert len(paddle) == 2
    assert all(r["environment"]["name"] == "paddle" and r["environment"]["python"] != sys.executable
               for r in paddle)


@pytest.mark.spans_cores
def test_collect_measures_the_two_process_pool_on_real_runs(tmp_path):
    stored = collect_and_judge(tmp_path, tiny("torch-resnet50-2proc"))
    assert [(r["launch"]["launcher"], r["launch"]["processes"]) for r in stored] == [
        ("torchrun", 2)] * 2
