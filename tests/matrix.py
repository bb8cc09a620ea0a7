"""Running a test's declared combinations (its ``@covers``, tests/declared.py) for real: one
worker process of the framework's environment runs them case after case
(tests/matrix_worker.py), at tiny shapes. Shared by tests/backends/test_declared_matrix.py and
the GPU suite (tests/gpu/)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from conftest import CUT_RESNET50, load, pinned_env, tiny_bert_knobs
from declared import Combo
from measured import PERCENTILES
from dlperf import envs, stats
from dlperf.spec import Case

HERE = Path(__file__).resolve().parent
TIMEOUT = 1500

#: tiny knobs (and batch) per model: the real network on the smallest shapes
BERT = tiny_bert_knobs(1)
KNOBS = {
    # cut to a bottleneck a stage: every operator of ResNet-50, as the 1-layer BERT has every
    # operator of BERT-Base
    "resnet50": {"image_size": 32, "num_classes": 10, **CUT_RESNET50},
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


def batch_of(combo: Combo) -> int:
    """The case's batch: its model's, but face-resnet50 at 2 on a CPU (its 1x1 map's BatchNorm
    needs no more) save torch's amp-fp16 training, whose loss turns NaN at 2 (finite at 4);
    amp-bf16 training there (bf16 emulated on a CPU without its instructions) takes half the
    time of batch 4's. The GPU suite (tests/gpu/) keeps batch 4."""
    if combo.model == "face-resnet50" and combo.device == "cpu" \
            and (combo.task, combo.precision) != ("train", "amp-fp16"):
        return 2
    return BATCH.get(combo.model, 2)


def knobs_of(combo: Combo) -> dict:
    """The case's knobs: its model's, but ResNet-101/152 on a CPU at image 16 (every stage still
    runs, the last two on 1x1 maps, whose BatchNorm has its two values per channel at batch 2).
    torch's int8 build feeds 32 calibration samples through every histogram observer, a third
    less time at 16 than at 32; ONNX Runtime's int8 calibration runs them through every tensor's
    MinMax outputs, its int8 case ~0.7 CPU-s less of ~7-11 (its export and fp16 conversion do
    not depend on the image; fp16's output mean still within 2e-4 of fp32's, relative). Not
    torch training in amp-fp16 or amp-bf16: on those 1x1 maps the fp16 loss turns NaN (as
    face-resnet50's does at batch 2), and the bf16 loss climbs (2.2 to 27-46 in three steps)
    and, with oneDNN's AMX kernels (a Xeon with AMX), turns NaN when the case runs again in the
    same process; at 32 it falls, the same in every run. The GPU suite keeps 32."""
    if combo.framework in ("torch", "onnxruntime") and combo.device == "cpu" \
            and combo.model in ("resnet101", "resnet152") \
            and (combo.task, combo.precision) not in (("train", "amp-fp16"),
                                                      ("train", "amp-bf16")):
        return {**KNOBS[combo.model], "image_size": 16}
    return KNOBS[combo.model]


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
            case = Case(combo.framework, combo.model, batch_of(combo),
                        task=combo.task, precision=combo.precision, device=combo.device,
                        knobs=knobs_of(combo), compile=compiled, warmup_steps=1, steps=2,
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
