"""`dlperf infer`: batch sweeps per engine, latency percentiles, int8, speedups, bad input.

Real workers on the smallest catalogue shapes (ResNet-50 at image 32; for --compile, AlexNet at
image 64, the smallest graph). The ONNX export and its int8 quantization are cached in
~/.cache/dlperf/onnx, so only a first run pays for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import dlperf, dlperf_main, load
from dlperf import stats
from dlperf.spec import Case, SpecError
from dlperf.worker.loop import allowed_late
from declared import covers
from measured import PERCENTILES, check_latency

TINY = ["--model", "resnet50", "--image-size", "32", "--warmup-steps", "2", "--steps", "5"]
# --compile: compiling the graph, not running it, is the cost, so the catalogue's smallest graph
# (AlexNet's 8 layers, at its smallest power-of-two image; ResNet-50 has 53 convolutions): with
# an empty inductor cache the test took 43 CPU-s against ResNet-50's 92 (2-core EPYC)
TINY_GRAPH = ["--model", "alexnet", "--image-size", "64", "--warmup-steps", "2", "--steps", "5"]
#: seconds an in-process `dlperf infer` may take (pytest-timeout's own limit)
TIMEOUT_S = 600


def infer(tmp_path: Path, db: Path, *args: str, name: str = "out.json",
          expect: int = 0, tiny: Sequence[str] = TINY) -> list[dict]:
    """`dlperf infer TINY ARGS` through ``dlperf_main``, in this process: every repeat's worker
    is still a fresh process, but the harness's imports are not paid again per call."""
    out = tmp_path / name
    proc = dlperf_main("infer", *tiny, *args, "--db", str(db), "--json", str(out),
                       timeout=TIMEOUT_S)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    results = load(out)
    assert isinstance(results, list)
    return results


@covers("torch", "resnet50", "infer", "fp32")
def test_torch_eager_sweep(tmp_path: Path, db: Path) -> None:
    results = infer(tmp_path, db, "--framework", "torch", "--batch-sizes", "1,2",
                    "--repeats", "2")
    assert [r["case"]["batch_size"] for r in results] == [1, 2]
    for result, batch in zip(results, (1, 2)):
        check_latency(result, batch)
        assert result["case"]["task"] == "infer"
        assert result["latency_ms"]["n"] == 2 * 5  # pooled over both repeats
        assert result["speedup_vs_fp32"]["value"] == 1.0
        assert result["model"]["params"] == result["model"]["catalogue_params"]


def test_torch_compile_sweep(tmp_path: Path, db: Path) -> None:
    # one batch size: each compiles the network afresh (the eager sweep covers the sweep itself)
    results = infer(tmp_path, db, "--framework", "torch", "--compile", "--batch-sizes", "2",
                    "--repeats", "1", tiny=TINY_GRAPH)
    assert [r["case"]["batch_size"] for r in results] == [2]
    check_latency(results[0], 2)
    assert results[0]["env"]["worker"]["framework"]["compile"] is True


@covers("onnxruntime", "resnet50", "infer", ("fp32", "int8"))
def test_onnxruntime_fp32_and_int8(tmp_path: Path, db: Path) -> None:
    results = infer(tmp_path, db, "--framework", "onnxruntime", "--precision", "int8,fp32",
                    "--batch-sizes", "1,2", "--repeats", "1")
    # fp32 runs first whatever the order given, so int8 rows find their baseline
    assert [(r["case"]["precision"], r["case"]["batch_size"]) for r in results] == [
        ("fp32", 1), ("fp32", 2), ("int8", 1), ("int8", 2)]
    for result in results:
        check_latency(result, result["case"]["batch_size"])
        assert result["model"]["params"] == 25_557_032
        info = result["env"]["worker"]["framework"]
        assert "CPUExecutionProvider" in info["providers"]
    int8 = results[2]["env"]["worker"]["framework"]["onnx"]["int8"]
    assert int8["format"] == "QDQ" and int8["calibration_samples"] >= 8
    assert "held-out" in int8["calibration_data"]
    for int8_result, fp32_result in zip(results[2:], results[:2]):
        found = int8_result["speedup_vs_fp32"]
        assert found["source"] == "this invocation"
        assert found["value"] == pytest.approx(int8_result["throughput"]["median"]
                                               / fp32_result["throughput"]["median"])

    # the fp32 baseline is now in the database: a later int8 run finds it there
    again = infer(tmp_path, db, "--framework", "onnxruntime", "--precision", "int8",
                  "--batch-sizes", "1", "--repeats", "1", name="again.json")
    assert again[0]["speedup_vs_fp32"]["source"] == "database"
    assert again[0]["speedup_vs_fp32"]["baseline_run_id"] == results[0]["run_id"]


def test_min_duration_extends_the_window(tmp_path: Path, db: Path) -> None:
    results = infer(tmp_path, db, "--framework", "onnxruntime", "--batch-sizes", "1",
                    "--steps", "2", "--min-duration", "1.0", "--repeats", "1")
    result = results[0]
    check_latency(result, 1)
    assert result["timings"]["window_s"][0] >= 1.0
    assert result["latency_ms"]["n"] > 2


@covers("torch", "resnet50", "infer", ("bf16", "int8"))
def test_torch_bf16_and_int8_without_baseline(tmp_path: Path, db: Path) -> None:
    out = tmp_path / "lowp.json"
    proc = dlperf_main("infer", *TINY, "--framework", "torch", "--precision", "bf16,int8",
                       "--batch-sizes", "2", "--repeats", "1", "--db", str(db), "--json",
                       str(out), timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no fp32 baseline" in proc.stdout
    bf16, int8 = load(out)
    check_latency(bf16, 2)
    check_latency(int8, 2)
    assert bf16["env"]["worker"]["framework"]["cast_dtype"] == "bfloat16"
    assert "FX" in int8["env"]["worker"]["framework"]["int8"]["method"]
    assert bf16["speedup_vs_fp32"] is None and int8["speedup_vs_fp32"] is None


def test_int8_on_an_engine_without_it_is_unsupported(tmp_path: Path, db: Path) -> None:
    """Only the worker knows what its framework can do, so this is an `unsupported` result
    (exit 1) with the reason, not a usage error."""
    out = tmp_path / "u.json"
    proc = dlperf("infer", *TINY, "--framework", "torch", "--compile", "--precision", "int8",
                  "--batch-sizes", "1", "--repeats", "1", "--db", str(db), "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (result,) = load(out)
    assert result["status"] == "unsupported"
    assert "without --compile" in result["error"]
    assert "unsupported" in proc.stdout


def test_warmup_max_steps_bounds_auto(tmp_path: Path, db: Path) -> None:
    """--warmup-max-steps reaches the worker as in `dlperf run`: 3 iterations after the first
    cannot fill the 5-iteration window, so the bound ends the warm-up."""
    (result,) = infer(tmp_path, db, "--framework", "torch", "--batch-sizes", "1", "--repeats",
                      "1", "--warmup-steps", "auto", "--warmup-max-steps", "3")
    check_latency(result, 1)
    assert result["case"]["warmup_steps"] == "auto"
    assert result["case"]["warmup_max_steps"] == 3
    assert result["warmup"] == {"steps": [4], "stop": ["max_steps"]}


BAD_INPUT = [
    (["--batch-sizes", "0"], "--batch-sizes"),
    (["--batch-sizes", "1,x"], "--batch-sizes"),
    (["--scenario", "batch"], "--scenario"),
    (["--precision", "int4"], "--precision"),
    (["--scenario", "single-stream", "--batch-sizes", "8"], "batch_size"),
    (["--rate", "5"], "--rate"),
    (["--scenario", "server"], "--target-latency-ms"),
    (["--min-duration", "-1"], "--min-duration"),
    # the same field, check and message as `dlperf run`
    (["--warmup-max-steps", "0"], "warmup_max_steps: 0 must be an integer >= 1"),
    (["--warmup-max-steps", "-3"], "warmup_max_steps: -3 must be an integer >= 1"),
    (["--warmup-max-steps", "nan"], "--warmup-max-steps: invalid integer: 'nan'"),
    (["--warmup-max-steps", "2.5"], "--warmup-max-steps: invalid integer: '2.5'"),
]


# the first as a real process, the rest through dlperf's main in this process
@pytest.mark.parallel
@pytest.mark.parametrize("args, field, run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line_and_exit_2(args: list[str], field: str, run, db: Path) -> None:
    proc = run("infer", "--framework", "torch", "--model", "resnet50", *args,
               "--db", str(db), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert not db.exists()  # nothing was measured


@pytest.mark.parallel
def test_latency_summary_is_ordered_and_pooled() -> None:
    rng = np.random.default_rng(0)
    repeats = [list(rng.lognormal(-4, 0.5, size=n)) for n in (50, 80, 3)]
    summary = stats.latency_ms(repeats)
    pooled = np.concatenate([np.asarray(r) for r in repeats]) * 1000
    assert summary["n"] == 133
    assert summary["p99"] == pytest.approx(np.percentile(pooled, 99))
    assert summary["mean"] == pytest.approx(pooled.mean())
    assert [summary[p] for p in PERCENTILES] == sorted(summary[p] for p in PERCENTILES)
    assert stats.latency_ms([[], []]) is None


@pytest.mark.parallel
@pytest.mark.parametrize("queries", [1, 2, 10, 99, 100, 101, 250, 1000, 1234])
def test_allowed_late_is_exactly_the_p99_budget(queries: int) -> None:
    """One more late query than `allowed_late(n)` breaks the bound whatever the values (so the
    server probe may stop early); with exactly that many, p99 can still be within it."""
    bound = 1.0
    budget = allowed_late(queries)
    barely = np.array([0.5] * (queries - budget) + [bound * (1 + 1e-9)] * budget)
    assert np.percentile(barely, 99) <= bound
    if budget + 1 <= queries:
        broken = np.array([0.0] * (queries - budget - 1) + [bound * (1 + 1e-9)] * (budget + 1))
        assert np.percentile(broken, 99) > bound


@pytest.mark.parallel
def test_new_case_fields_keep_old_keys() -> None:
    """Cases stored before scenarios existed keep their key (sweep --resume relies on it)."""
    case = Case("torch", "resnet50", 2)
    assert "scenario" not in case.identity() and "server" not in case.identity()
    served = Case("torch", "resnet50", 1, task="infer", scenario="server",
                  server={"rate_qps": 5, "target_latency_ms": 50, "min_queries": 10})
    assert served.key() != Case("torch", "resnet50", 1, task="infer").key()
    with pytest.raises(SpecError, match="scenario"):
        Case("torch", "resnet50", 2, scenario="server")
    with pytest.raises(SpecError, match="server"):
        Case("torch", "resnet50", 1, task="infer", scenario="server", server={"rate_qps": 5})
    assert math.isclose(Case.from_dict(served.to_dict()).server["rate_qps"], 5)
