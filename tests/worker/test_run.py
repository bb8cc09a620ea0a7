"""`dlperf run` end to end: real workers, a real SQLite file, the JSON contract."""

from __future__ import annotations

import math
import sqlite3

import pytest

from conftest import TINY_BERT, dlperf, dlperf_main, load
from dlperf import models
from declared import covers

CONTRACT = {"schema", "case", "model", "status", "error", "unit", "throughput", "latency_ms",
            "timings", "memory", "flops", "monitor", "env"}


@pytest.fixture(scope="module")
def resnet_run(tiny_resnet_run):
    """`dlperf run` of TINY_RESNET, two repeats: the session's one run (tests/tiny_runs.py)."""
    return tiny_resnet_run["proc"], tiny_resnet_run["result"], tiny_resnet_run["db"]


@covers("torch", "resnet50", "train", "fp32")
def test_resnet_result_follows_the_contract(resnet_run):
    proc, result, _ = resnet_run
    assert CONTRACT <= set(result)
    assert result["schema"] == 1 and result["status"] == "ok" and result["error"] is None
    assert result["unit"] == "samples/s"
    case = result["case"]
    assert (case["framework"], case["model"], case["batch_size"]) == ("torch", "resnet50", 2)
    assert case["knobs"]["image_size"] == 32
    assert result["model"]["params"] == 25_557_032 == models.get("resnet50").params()
    tp = result["throughput"]
    assert len(tp["repeats"]) == 2 and tp["min"] <= tp["median"] <= tp["max"]
    assert all(v > 0 for v in tp["repeats"])
    for key in ("build_s", "first_step_s", "warmup_s", "window_s"):
        assert len(result["timings"][key]) == 2
    # throughput is window samples over window time, repeat by repeat
    windows = result["timings"]["window_s"]
    assert sorted(tp["repeats"]) == pytest.approx(sorted(3 * 2 / w for w in windows))
    assert result["flops"]["per_sample"] == models.get("resnet50").flops_per_sample(
        {"image_size": 32})
    assert result["flops"]["achieved_per_s"] == pytest.approx(
        result["flops"]["per_sample"] * tp["median"])
    assert result["memory"]["peak_host_bytes"] > 100 * 2**20
    assert result["loss"]["last"] and all(math.isfinite(v) for v in result["loss"]["last"])
    env = result["env"]
    assert env["cpu"]["logical_cores"] >= 1 and env["libraries"]["torch"]
    assert env["worker"]["framework"]["torch_version"].startswith("2.")
    assert "num_threads" in env["worker"]["framework"]
    row = next(line for line in proc.stdout.splitlines() if "resnet50" in line)
    assert row.rstrip(" │").split("│")[-1].strip() == "ok", row


def test_every_repeat_is_a_row_in_sqlite(resnet_run):
    _, result, db = resnet_run
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"
    runs = con.execute("SELECT id, case_key, status, case_json, env_json FROM runs").fetchall()
    assert len(runs) == 1 and runs[0][2] == "ok" and runs[0][1] == result["case_key"]
    rows = con.execute("SELECT repeat_index, status, throughput FROM repeats WHERE run_id=? "
                       "ORDER BY repeat_index", (runs[0][0],)).fetchall()
    assert [r[0] for r in rows] == [0, 1] and {r[1] for r in rows} == {"ok"}
    assert sorted(r[2] for r in rows) == pytest.approx(sorted(result["throughput"]["repeats"]))


@covers("torch", "bert-base", "train", "fp32")
def test_bert_runs_with_catalogue_parameter_count(tmp_path):
    out = tmp_path / "b.json"
    # the full BERT-Base (the parameter count is the catalogue's): 1 warm-up step and the
    # smallest window (2 steps) instead of TINY_BERT's 2 and 3; in fp32, as autocast's bf16 on
    # a CPU without bf16 instructions (an AVX2-only EPYC) took 69 s of make test for the same
    # count (tests/models/test_models.py runs BERT's amp-bf16 training at tiny width)
    dlperf("run", *TINY_BERT, "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
           "--db", str(tmp_path / "b.db"), "--json", str(out), check=True)
    result = load(out)
    assert result["status"] == "ok"
    assert result["model"]["params"] == 110_106_428
    assert result["case"]["knobs"]["seq_len"] == 16
    assert (result["case"]["warmup_steps"], result["case"]["steps"]) == (1, 2)  # the last flag wins
    assert result["env"]["worker"]["framework"]["precision"] == "fp32"


def test_results_command_lists_stored_runs(resnet_run):
    _, _, db = resnet_run
    # reads the stored database: through dlperf's main in this process (what it prints is
    # checked, not a fresh interpreter; test_fuzz_cli checks both answer alike)
    proc = dlperf_main("results", "--db", str(db), check=True)
    assert "resnet50" in proc.stdout and "1 result(s)" in proc.stdout


@pytest.mark.parallel
def test_models_and_sysinfo_commands():
    models_out = dlperf_main("models", check=True).stdout
    assert "25,557,032" in models_out and "110,106,428" in models_out
    info = dlperf_main("sysinfo", check=True).stdout
    assert "CPU" in info and "torch" in info
