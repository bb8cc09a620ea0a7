"""Every declared CPU combination no other test runs, run for real: one worker process per
framework (tests/matrix_worker.py: the worker's own ``run``, case after case), tiny shapes.

What each test runs is its ``@covers`` (tests/declared.py), read back at run time from the test
function itself, so the claim tests/test_declared_tested.py checks and the cases run here are one
list. A declared combination must end ``ok``: a combination the framework cannot run is a false
declaration, to be dropped from ``SUPPORT`` with its reason. Inference cases also check their
latency summary (the harness's ``stats.latency_ms`` over the window's synchronised steps): every
percentile present and ordered. Plus `dlperf infer` end to end, and torch.compile training.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY_BERT, dlperf, load, pinned_env, tiny_bert_knobs, tiny_nets
from declared import covers
from dlperf import envs, stats
from dlperf.spec import Case

HERE = Path(__file__).resolve().parent
PERCENTILES = ("p50", "p90", "p95", "p99", "p99_9")
TIMEOUT = 1500

#: tiny knobs (and batch) per model: the real network on the smallest shapes
BERT = tiny_bert_knobs(1)
KNOBS = {
    "resnet50": {"image_size": 32, "num_classes": 10},
    "resnet101": {"image_size": 32, "num_classes": 10},
    "resnet152": {"image_size": 32, "num_classes": 10},
    # VGG and AlexNet with a narrow classifier: every layer, a tenth of the weights or less
    "vgg16": {"image_size": 32, "num_classes": 10, "classifier_width": 64},
    "vgg19": {"image_size": 32, "num_classes": 10, "classifier_width": 64},
    "googlenet": {"image_size": 32, "num_classes": 10},
    "alexnet": {"image_size": 64, "num_classes": 10, "classifier_width": 64},
    "bert-base": BERT,
    "gpt": {"layers": 1, "hidden": 64, "heads": 2, "vocab_size": 1000, "seq_len": 16},
    "wide-deep": {"vocab_size": 1000, "deep_embedding_size": 4, "hidden_units": 2,
                  "hidden_size": 32},
    "face-resnet50": {"image_size": 16, "num_classes": 100},  # its smallest: 4 stride-2 stages
}
# 2 where a BatchNorm meets a 1x1 map (it needs two values per channel); VGG and AlexNet have
# none, so one sample: half the work of torch's amp-fp16 training, whose fp16 convolution
# backward on a CPU is far the matrix's slowest step
BATCH = {"wide-deep": 16, "face-resnet50": 4, "vgg16": 1, "vgg19": 1, "alexnet": 1}

# what no other test runs, framework by framework (the other tests carry their own @covers)
RESNET_BERT = ("resnet50", "bert-base")
OTHER_VISION = ("resnet101", "resnet152", "vgg16", "vgg19", "googlenet", "alexnet")
TORCH_ALL = RESNET_BERT + OTHER_VISION + ("gpt", "wide-deep", "face-resnet50")
TORCH_LOW = ("amp-bf16", "amp-fp16", "bf16", "fp16", "int8")
ORT_MODELS = OTHER_VISION + ("bert-base",)
ORT_ALL = ("fp32", "fp16", "int8")  # bf16: declared on cuda only (no CPU kernels)


def cases_of(test, both_modes: tuple[str, ...] = ()) -> list[dict]:
    """The worker cases of a test's own @covers: tiny, 1 warm-up step, 2 timed, the framework's
    default compile mode (and the other mode too for the models in ``both_modes``, where the
    framework has both), and its default threads: one per CPU this process may use (one in
    `make test`'s pinned framework phase, where two threads on one core made torch's backward
    several times slower)."""
    from dlperf.spec import support

    out = []
    for combo in test.covers:
        modes = [None]
        if combo.model in both_modes and len(support(combo.framework).modes) == 2:
            modes = [False, True]
        for compiled in modes:
            case = Case(combo.framework, combo.model, BATCH.get(combo.model, 2),
                        task=combo.task, precision=combo.precision, device=combo.device,
                        knobs=KNOBS[combo.model], compile=compiled, warmup_steps=1, steps=2,
                        repeats=1, timeout_s=TIMEOUT)
            out.append(case.to_dict())
    return out


def run_matrix(test, tmp_path: Path, python: str | None = None,
               both_modes: tuple[str, ...] = (), allowed=lambda result: False) -> list[dict]:
    """Every case of ``test``'s @covers in one worker process of its framework's environment
    (``python``, else the CPU one); each must be ``ok`` with finite losses, each inference with
    ordered latency percentiles. ``allowed(result)``: a non-ok result the caller accepts."""
    cases = cases_of(test, both_modes)
    framework = cases[0]["framework"]
    if python is None:
        python = sys.executable if framework in ("torch", "onnxruntime") \
            else pinned_env(framework)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out = tmp_path / "out.json"
    proc = subprocess.run([python, str(HERE / "matrix_worker.py"), str(tmp_path / "cases.json"),
                           str(out)], capture_output=True, text=True, timeout=TIMEOUT,
                          env=envs.worker_env()
                          if python != sys.executable else None)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = load(out)
    assert [r["case"] for r in results] == [
        {k: c[k] for k in ("model", "task", "precision", "compile")} for c in cases]
    failed = [f"{r['case']}: {r['status']} {r['error']}" for r in results
              if r["status"] != "ok" and not allowed(r)]
    assert not failed, "declared, but did not run:\n" + "\n".join(failed)
    for result in results:
        if result["status"] != "ok":
            continue
        assert math.isfinite(result["loss_first"]) and math.isfinite(result["loss_last"])
        assert result["window_steps"] >= 2
        if result["case"]["task"] == "infer":
            latency = stats.latency_ms([result["latencies_s"]])
            values = [latency[p] for p in PERCENTILES]
            assert values == sorted(values) and latency["min"] <= values[0]
            assert values[-1] <= latency["max"] and latency["n"] == result["window_steps"]
    return results


@covers("torch", RESNET_BERT, "train", "amp-fp16")
@covers("torch", RESNET_BERT, "infer", ("amp-bf16", "amp-fp16", "fp16"))
@covers("torch", "bert-base", "infer", ("bf16", "int8"))
@covers("torch", OTHER_VISION, ("train",), ("amp-bf16", "amp-fp16"))
@covers("torch", OTHER_VISION, "infer", TORCH_LOW)
@covers("torch", ("gpt", "wide-deep", "face-resnet50"), "train", ("amp-bf16", "amp-fp16"))
@covers("torch", ("gpt", "wide-deep", "face-resnet50"), "infer", ("fp32",) + TORCH_LOW)
@pytest.mark.slow(reason="76 declared torch combinations no other test runs, case after case in "
                         "one worker: one process for all of them, where a test each would pay "
                         "76 interpreter starts and torch imports")
def test_torch_matrix(tmp_path: Path) -> None:
    results = run_matrix(test_torch_matrix, tmp_path)
    casts = {r["case"]["precision"]: r["info"].get("cast_dtype") for r in results
             if r["case"]["precision"] in ("bf16", "fp16")}
    assert casts == {"bf16": "bfloat16", "fp16": "float16"}


@covers("onnxruntime", "resnet50", "infer", "fp16")
@covers("onnxruntime", ORT_MODELS, "infer", ORT_ALL)
@pytest.mark.slow(reason="from an empty cache it first exports and quantizes 22 ONNX files, the "
                         "deep ResNet-101/152 and GoogLeNet graphs most of it; seconds once "
                         "they are in the shared cache")
def test_onnxruntime_matrix(tmp_path: Path) -> None:
    run_matrix(test_onnxruntime_matrix, tmp_path)


@covers("jax", RESNET_BERT, "infer", ("fp32", "amp-bf16"))
@covers("jax", "resnet50", "train", "amp-bf16")
@covers("jax", "bert-base", "train", "fp32")
@covers("jax", "gpt", "train", "fp32")
@covers("jax", "gpt", "infer", ("fp32", "amp-bf16"))
@covers("jax", "wide-deep", ("train", "infer"), "amp-bf16")
def test_jax_matrix(tmp_path: Path) -> None:
    run_matrix(test_jax_matrix, tmp_path)


@covers("tensorflow", RESNET_BERT, "infer", ("fp32", "amp-bf16", "amp-fp16"))
@covers("tensorflow", "resnet50", "train", ("amp-bf16", "amp-fp16"))
@covers("tensorflow", "bert-base", "train", ("fp32", "amp-fp16"))
def test_tensorflow_matrix(tmp_path: Path) -> None:
    run_matrix(test_tensorflow_matrix, tmp_path)


@covers("tensorflow1", RESNET_BERT, "infer", "fp32")
def test_tensorflow1_matrix(tmp_path: Path) -> None:
    run_matrix(test_tensorflow1_matrix, tmp_path)


@covers("paddle", RESNET_BERT, "infer", "fp32")
def test_paddle_matrix(tmp_path: Path) -> None:
    run_matrix(test_paddle_matrix, tmp_path)


@covers("mxnet", "bert-base", "infer", "fp32")
@covers("mxnet", "resnet50", "infer", "amp-bf16")
def test_mxnet_matrix(tmp_path: Path) -> None:
    run_matrix(test_mxnet_matrix, tmp_path)


@covers("mindspore", "resnet50", "infer", "fp32")
def test_mindspore_matrix(tmp_path: Path) -> None:
    run_matrix(test_mindspore_matrix, tmp_path)


@covers("oneflow", "bert-base", "infer", "fp32")
def test_oneflow_matrix(tmp_path: Path) -> None:
    run_matrix(test_oneflow_matrix, tmp_path)


INFER_TINY = ["--model", "resnet50", "--image-size", "32", "--warmup-steps", "2", "--steps", "5",
              "--batch-sizes", "2", "--repeats", "1"]


@pytest.mark.parametrize("framework", ["tensorflow", "tensorflow1", "paddle", "jax"])
def test_dlperf_infer_end_to_end(framework: str, tmp_path: Path) -> None:
    """`dlperf infer` in each framework that declares inference and has no infer test of its
    own: an ``ok`` result with every latency percentile present, ordered and consistent with
    the throughput (tests/test_infer.py's check)."""
    from test_infer import check_latency

    pinned_env(framework)
    out = tmp_path / "r.json"
    proc = dlperf("infer", "--framework", framework, *INFER_TINY, "--db", str(tmp_path / "r.db"),
                  "--json", str(out), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = load(out)
    check_latency(result, 2)
    assert result["case"]["task"] == "infer" and result["latency_ms"]["n"] == 5
    assert result["env"]["worker"]["framework"]["task"] == "infer"


@covers("torch", "bert-base", "train", "fp32")
def test_torch_compile_training(tmp_path: Path) -> None:
    """torch.compile *training* (the compiled forward, backward and optimizer step) through
    `dlperf run --compile`: ok, finite losses that move, recorded as torch.compile."""
    out = tmp_path / "r.json"
    proc = dlperf("run", *TINY_BERT[:-4], *tiny_nets(1)["bert-base"][6:], "--compile",
                  "--warmup-steps", "1", "--steps", "3", "--repeats", "1",
                  "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = load(out)
    assert result["status"] == "ok", result["error"]
    assert result["case"]["compile"] is True and result["case"]["task"] == "train"
    info = result["env"]["worker"]["framework"]
    assert info["compile"] is True
    first, last = result["loss"]["first"][0], result["loss"]["last"][0]
    assert math.isfinite(first) and math.isfinite(last) and first != last
