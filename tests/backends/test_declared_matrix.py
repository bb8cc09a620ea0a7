"""Every declared CPU combination no other test runs, run for real: one worker process per
framework (tests/matrix_worker.py: the worker's own ``run``, case after case), tiny shapes.

What each test runs is its ``@covers`` (tests/declared.py), read back at run time from the test
function itself, so the claim tests/backends/test_declared_tested.py checks and the cases run here are one
list. A declared combination must end ``ok``: a combination the framework cannot run is a false
declaration, to be dropped from ``SUPPORT`` with its reason. Inference cases also check their
latency summary (the harness's ``stats.latency_ms`` over the window's synchronised steps): every
percentile present and ordered. Plus `dlperf infer` end to end, and torch.compile training.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import TINY_BERT, dlperf, load, pinned_env, tiny_nets
from declared import covers
from cpu_kind import check_bf16_refused, mxnet_bf16_refusal
from matrix import TIMEOUT, run_matrix
from measured import check_latency
from dlperf.backends.onnxruntime.export import FP16_RECIPE

# what no other test runs, framework by framework (the other tests carry their own @covers)
RESNET_BERT = ("resnet50", "bert-base")
OTHER_VISION = ("resnet101", "resnet152", "vgg16", "vgg19", "googlenet", "alexnet")
TORCH_ALL = RESNET_BERT + OTHER_VISION + ("gpt", "wide-deep", "face-resnet50")
TORCH_LOW = ("amp-bf16", "amp-fp16", "bf16", "fp16", "int8")
ORT_MODELS = OTHER_VISION + ("bert-base",)
ORT_ALL = ("fp32", "fp16", "int8")  # bf16: declared on cuda only (no CPU kernels)


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
@pytest.mark.slow(reason="from an empty cache it first makes 23 ONNX files (8 exports, 8 "
                         "fp16 conversions of them, 7 int8 quantizations), the deep "
                         "ResNet-101/152 most of it; seconds once they are in the shared cache")
def test_onnxruntime_matrix(tmp_path: Path) -> None:
    """And each fp16 file is the fp32 export converted (not a second export): the same network,
    so on the same batch its outputs match the fp32 file's to float16's precision."""
    results = run_matrix(test_onnxruntime_matrix, tmp_path)
    made = {(r["case"]["model"], r["case"]["precision"]): r for r in results}
    for model in ORT_MODELS + ("resnet50",):
        onnx = made[model, "fp16"]["info"]["onnx"]
        assert onnx["fp16"]["converter"].startswith(FP16_RECIPE), onnx
        if (model, "fp32") not in made:
            continue
        assert onnx["export"]["path"] == made[model, "fp32"]["info"]["onnx"]["path"]
        half, full = made[model, "fp16"]["loss_first"], made[model, "fp32"]["loss_first"]
        # the outputs' mean: ~1e-2 to ~1e-5 here (GoogLeNet's ~1e-14); fp16 within 0.2 % of
        # fp32's, where int8's lands 1-5 % away
        assert half == pytest.approx(full, rel=1e-2, abs=1e-6), model


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
def test_mxnet_matrix(tmp_path: Path) -> None:
    run_matrix(test_mxnet_matrix, tmp_path)


@covers("mxnet", "resnet50", "infer", "amp-bf16")
def test_mxnet_bf16_matrix(tmp_path: Path) -> None:
    """amp-bf16 runs where the CPU has MXNet's bf16 kernels (AVX-512) and is refused with the
    probe's reason where it has not (AVX2); a worker of its own, as a refused primitive can
    leave MXNet unable to create the next one in its process."""
    refusal = mxnet_bf16_refusal()
    results = run_matrix(test_mxnet_bf16_matrix, tmp_path,
                         allowed=lambda result: refusal is not None)
    for result in results:
        if refusal is None:
            assert result["status"] == "ok", result["error"]
        else:
            check_bf16_refused(result, refusal)


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
    the throughput (tests/studies/test_infer.py's check)."""
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
