"""MXNet 1.9.1: its environment, its Gluon models, its AdamW, and real tiny runs.

The environment comes from the pinned set the project ships (`make test` installs it first
through `make envs`; the fixture's install is then a no-op, or does the install itself when run
alone). Everything else runs real code in that environment: the model files and the optimizer
in its interpreter, and the real `dlperf` command with real workers.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from dlperf import envs, models
from conftest import CUT_RESNET50, CUT_RESNET50_FLAGS, dlperf_main, pinned_env, tiny_nets
from declared import covers
from refusal import declared_refusal
from measured import check_measured
from snippets import run_snippets, snippet_output
from cpu_kind import check_bf16_refused, mxnet_bf16_refusal

TIMEOUT = 1200
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
TINY = tiny_nets(bert_layers=2)
SHORT = ["--warmup-steps", "1", "--steps", "2", "--repeats", "1"]


@pytest.fixture(scope="module")
def mxnet_env() -> str:
    """The environment, installed from its pinned set (cached: a no-op when current)."""
    return pinned_env("mxnet")


#: the in-interpreter checks (each test's own code, below), run in one MXNet interpreter
SNIPPETS: dict[str, str] = {}

@pytest.fixture(scope="module")
def in_env(mxnet_env) -> dict[str, str]:
    """What each of SNIPPETS printed, all run in one MXNet interpreter (one start-up and import
    of MXNet for the three checks instead of one each), each in a namespace of its own; one
    that raised printed FAILED and its traceback, which its test shows."""
    return run_snippets(mxnet_env, SNIPPETS, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def bf16_refusal(mxnet_env) -> str | None:
    """What this CPU can do, asked the way the backend asks (tests/cpu_kind.py)."""
    return mxnet_bf16_refusal()


def refused_for_bf16(proc, result, extra, refusal: str | None) -> bool:
    """Where the CPU has no bf16 kernel, an amp-bf16 case must be refused with the probe's
    reason (and is then done); elsewhere it must run."""
    if "amp-bf16" not in extra or refusal is None:
        return False
    assert proc.returncode == 1, result["error"]
    check_bf16_refused(result, refusal)
    return True


def measure(tmp_path, *args: str, env: dict[str, str] | None = None
            ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`dlperf run` through dlperf's main in this process: its worker is a fresh process."""
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", "mxnet", *args, *SHORT, "--db",
                       str(tmp_path / "r.db"), "--json", str(out), env=env, timeout=MAIN_TIMEOUT)
    return proc, json.loads(out.read_text())


def test_environment_matches_pinned_set(mxnet_env):
    st = envs.status("mxnet")
    assert st.state == "installed", st
    assert st.version == "1.9.1"
    assert st.python and st.python.startswith("3.11.")
    pins = envs.registry.get("mxnet").requirement_lines()
    assert pins and all("==" in line for line in pins)  # every package pinned exactly
    pinned = envs.registry.get("mxnet").pinned()
    assert pinned["mxnet"] == "1.9.1"
    numpy = pinned["numpy"]
    assert tuple(int(x) for x in numpy.split(".")[:2]) < (1, 24)  # mxnet 1.9 needs < 1.24
    assert envs.install("mxnet", say=lambda line: None).action == "up to date"


def test_envs_check_runs_a_tiny_training_case(mxnet_env):
    # through dlperf's main in this process: the import check and the worker are processes
    proc = dlperf_main("envs", "check", "mxnet", timeout=MAIN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "import ok, version 1.9.1" in proc.stdout
    assert "tiny training step ok" in proc.stdout


SNIPPETS["params"] = """
import json
from dlperf.backends.mxnet import bert, resnet
from dlperf.backends.mxnet.workload import count_params
print("PARAMS=" + json.dumps({"resnet50": count_params(resnet.ResNet50(1000)),
                              "resnet50 max_blocks=1": count_params(resnet.ResNet50(1000, 1)),
                              "bert-base": count_params(bert.BertForPreTraining())}))
"""


def test_both_models_have_the_catalogue_parameter_count(in_env):
    """Built inside MXNet's own interpreter at default (full-size) knobs, and ResNet-50 cut to
    one block per stage (``max_blocks=1``); no forward needed."""
    out = snippet_output(in_env, "params")
    built = json.loads(next(x for x in out.splitlines() if x.startswith("PARAMS="))[7:])
    assert built == {"resnet50": models.get("resnet50").params(),
                     "resnet50 max_blocks=1": models.get("resnet50").params({"max_blocks": 1}),
                     "bert-base": models.get("bert-base").params()}
    assert built == {"resnet50": 25_557_032, "resnet50 max_blocks=1": 10_064_936,
                     "bert-base": 110_106_428}


SNIPPETS["adamw"] = """
import json, numpy as np, mxnet as mx
from mxnet import autograd, gluon
from dlperf.backends.mxnet.optim import AdamW
lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.01
rng = np.random.RandomState(0)
errors = {}
for count in (1, 5):   # 1 weight: adamw_update; 5 weights: _multi_adamw_update in groups of 4
    params = gluon.ParameterDict()
    init = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(count)]
    for i, w in enumerate(init):
        p = params.get("w%d" % i, shape=w.shape)
        p.initialize(init=mx.init.Constant(mx.nd.array(w)))
    trainer = gluon.Trainer(params, AdamW(learning_rate=lr, beta1=b1, beta2=b2, epsilon=eps,
                                          wd=wd), update_on_kvstore=False)
    ref = [w.astype(np.float64) for w in init]
    m = [np.zeros_like(w) for w in ref]
    v = [np.zeros_like(w) for w in ref]
    for t in range(1, 6):
        grads = [rng.standard_normal(w.shape).astype(np.float32) for w in init]
        with autograd.record():  # d/dw sum(w * g) = g
            total = mx.nd.add_n(*[(p.data() * mx.nd.array(g)).sum()
                                  for p, g in zip(params.values(), grads)])
        total.backward()
        trainer.update(1)
        for i, g in enumerate(grads):
            ref[i] *= 1 - lr * wd
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g.astype(np.float64) ** 2
            ref[i] -= lr * (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps)
    errors[count] = max(float(np.abs(p.data().asnumpy() - r).max())
                        for p, r in zip(params.values(), ref))
    errors["moved_%d" % count] = max(float(np.abs(p.data().asnumpy() - w).max())
                                     for p, w in zip(params.values(), init))
print("ERR=" + json.dumps(errors))
"""


def test_adamw_is_torch_adamw_arithmetic(in_env):
    """The Trainer's AdamW (fused multi-tensor and single-tensor paths) against PyTorch's
    AdamW formula written out in numpy, over several steps with a gradient each step."""
    out = snippet_output(in_env, "adamw")
    errors = json.loads(next(x for x in out.splitlines() if x.startswith("ERR="))[4:])
    assert errors["moved_1"] > 1e-2 and errors["moved_5"] > 1e-2  # five steps of lr 1e-2
    assert errors["1"] < 1e-5 and errors["5"] < 1e-5, errors


SNIPPETS["resnet_step"] = """
import json, numpy as np, mxnet as mx
from mxnet import autograd
from dlperf.backends.mxnet.backend import build
case = dict(model="resnet50", knobs=dict({"image_size": 32, "num_classes": 10}, **%r),
            task="train", batch_size=4, precision="fp32", device="cpu", seed=0)
ours, ref = build(case), build(case)
net, (images, labels) = ref.objective.model, ref.inputs
start = [p.data().asnumpy() for p in ref.trainer._params]
losses = []
for _ in range(3):
    handle = ours.step()
    losses.append((ours.loss_value(handle), handle.shape))
    with autograd.record():
        mean = -mx.nd.mean(mx.nd.pick(mx.nd.log_softmax(net(images), axis=-1), labels, axis=-1))
    mean.backward()
    ref.trainer.step(1)
    losses[-1] += (float(mean.asscalar()),)
ours.sync()
pairs = list(zip(ours.trainer._params, ref.trainer._params, start))
print("OUT=" + json.dumps({
    "error": max(float(np.abs(a.data().asnumpy() - b.data().asnumpy()).max()) for a, b, _ in pairs),
    "moved": max(float(np.abs(b.data().asnumpy() - s).max()) for _, b, s in pairs),
    "losses": losses, "desc": ours.info["loss"]}))
""" % (CUT_RESNET50,)  # the cut ResNet-50 (conftest's): the recipe is the same at any depth


def test_resnet_step_is_the_mean_cross_entropy_recipe(in_env):
    """Gluon's per-sample loss averaged by ``Trainer.step(batch)`` (what the backend runs) moves
    the weights exactly as one mean cross-entropy scalar with ``step(1)`` (the recipe of every
    other backend), and the loss it reports is the batch mean."""
    out = snippet_output(in_env, "resnet_step")
    got = json.loads(next(x for x in out.splitlines() if x.startswith("OUT="))[4:])
    assert got["moved"] > 1e-3  # three SGD steps of lr 0.1 moved the weights
    assert got["error"] < 1e-5 * max(1.0, got["moved"]), got
    for ours, shape, mean in got["losses"]:
        assert shape == [4]  # per-sample losses, averaged by the Trainer
        assert math.isclose(ours, mean, rel_tol=1e-5, abs_tol=1e-6), got["losses"]
    assert "SoftmaxCrossEntropyLoss" in got["desc"] and "step(batch)" in got["desc"]


CASES = [
    ("resnet50", []),  # the whole network's training run
    # its variants on the cut network (conftest's CUT_RESNET50), every operator of the whole one
    ("resnet50", ["--compile", *CUT_RESNET50_FLAGS]),
    ("bert-base", []),
    ("bert-base", ["--compile"]),
    ("resnet50", ["--compile", "--precision", "amp-bf16", *CUT_RESNET50_FLAGS]),
    ("bert-base", ["--precision", "amp-bf16"]),
]


@covers("mxnet", ("resnet50", "bert-base"), "train", ("fp32", "amp-bf16"))
@pytest.mark.parametrize("model,extra", CASES, ids=[f"{m}-{'-'.join(e) or 'imperative'}"
                                                   for m, e in CASES])
def test_tiny_training_case_runs_ok(mxnet_env, bf16_refusal, model, extra, tmp_path):
    # the imperative ResNet-50 also checks that OMP_NUM_THREADS is applied and recorded: one
    # real run for both (the other cases keep the backend's own thread count)
    omp = {"OMP_NUM_THREADS": "1"} if (model, extra) == ("resnet50", []) else None
    proc, result = measure(tmp_path, *TINY[model], *extra, env=omp)
    if refused_for_bf16(proc, result, extra, bf16_refusal):
        return
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    assert math.isfinite(result["loss"]["first"][0]) and math.isfinite(result["loss"]["last"][0])
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir("mxnet")) in json.dumps(worker)  # ran in MXNet's environment
    info = worker["framework"]
    assert info["mxnet_version"] == "1.9.1" and info["onednn"] is True
    compiled = "--compile" in extra
    assert info["compile"] is compiled
    assert info["compile_mode"] == ("hybridize(static_alloc=True, static_shape=True)" if compiled
                                    else "imperative (Gluon blocks not hybridized)")
    assert info["layout"] == ("NCHW" if model == "resnet50" else "batch-major (B, S, H)")
    assert info["omp_num_threads"] >= 1 and info["engine"]["MXNET_ENGINE_TYPE"]
    if "amp-bf16" in extra:
        # amp really converted the network's matrix operators to bf16
        assert info["compute_dtype"] == "bfloat16"
        heavy = "Convolution" if model == "resnet50" else "FullyConnected"
        assert info["op_dtypes"]["bfloat16"][heavy] >= 1
        assert heavy not in info["op_dtypes"].get("float32", {})
    else:
        assert info["compute_dtype"] == "float32" and "op_dtypes" not in info
    if model == "bert-base":
        assert info["optimizer"].startswith("AdamW") and "global-norm clip 1" in info["optimizer"]
    if omp:
        assert info["omp_num_threads"] == 1
        assert info["omp_threads_set_by"].startswith("OMP_NUM_THREADS")


@covers("mxnet", "resnet50", "infer", "fp32")
@covers("mxnet", "bert-base", "infer", "amp-bf16")
@pytest.mark.parametrize("model,extra", [("resnet50", CUT_RESNET50_FLAGS),
                                         ("bert-base", ["--compile", "--precision", "amp-bf16"])],
                         ids=["resnet50-fp32", "bert-base-compile-amp-bf16"])
def test_tiny_inference_case_runs_ok(mxnet_env, bf16_refusal, model, extra, tmp_path):
    proc, result = measure(tmp_path, *TINY[model], "--task", "infer", *extra)
    if refused_for_bf16(proc, result, extra, bf16_refusal):
        return
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    info = result["env"]["worker"]["framework"]
    assert info["task"] == "infer" and info["optimizer"] is None
    assert result["latency_ms"]["n"] >= 2


def test_amp_bf16_is_refused_with_the_probes_reason_where_onednn_has_no_bf16(mxnet_env, tmp_path):
    """An AVX2-only CPU (an AMD EPYC Zen 3), made on any CPU by capping oneDNN's instruction set:
    the BERT case (no convolution at all) is refused naming the bf16 kernel probe and the cap."""
    proc, result = measure(tmp_path, *TINY["bert-base"], "--precision", "amp-bf16",
                           env={"DNNL_MAX_CPU_ISA": "AVX2"})
    assert refused_for_bf16(proc, result, ["amp-bf16"], "mxnet 1.9.1 has no bf16 kernel")
    assert "DNNL_MAX_CPU_ISA=AVX2" in result["error"]
    assert result["repeats_done"] == 1


UNSUPPORTED = [
    (["--precision", "amp-fp16"],  # run for real: the whole reason
     "precision amp-fp16: mxnet 1.9.1 has no float16 kernels on a CPU: mxnet.contrib.amp "
     "float16 casts a convolution and MXNet fails with 'FP16 gemm on cpu not implemented!'"),
    (["--precision", "tf32"], "needs a CUDA device"),
    (["--precision", "amp-bf16", "--option", "onednn=off"],
     "option onednn=off runs in fp32 only, not amp-bf16: oneDNN has MXNet's only bf16 kernels"),
    (["--task", "infer", "--precision", "bf16"], "whole-model bf16 cast is not offered"),
    (["--task", "infer", "--precision", "int8"], "mxnet.contrib.quantization"),
    (["--device", "cuda"], "CPU build"),
]


# run for real: a precision the declaration refuses on the CPU, and a device this build cannot
# use (refused by the worker's device resolution, before the declaration); the other precisions
# take the first one's path and differ only in the declared reason, checked on the case their
# flags build
UNSUPPORTED_REAL = [UNSUPPORTED[0], UNSUPPORTED[-1]]
UNSUPPORTED_DECLARED = [extra for extra, _ in UNSUPPORTED[:-1]]


@pytest.mark.parametrize("extra,phrase", UNSUPPORTED_REAL,
                         ids=[" ".join(e) for e, _ in UNSUPPORTED_REAL])
def test_unsupported_combination_reports_unsupported(mxnet_env, extra, phrase, tmp_path):
    out = tmp_path / "result.json"
    device = [] if "--device" in extra else ["--device", "cpu"]
    proc = dlperf_main("run", "--framework", "mxnet", *TINY["resnet50"], *extra, *device,
                       "--warmup-steps", "1", "--steps", "2", "--repeats", "3",
                       "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=MAIN_TIMEOUT)
    result = json.loads(out.read_text())
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert result["status"] == "unsupported"
    assert phrase in result["error"]
    assert result["repeats_done"] == 1  # an unsupported case is not retried
    if extra in UNSUPPORTED_DECLARED:  # (cuda is refused earlier, by MXNet finding no GPU)
        assert result["error"].endswith(": " + phrase), result["error"]  # the whole reason


@pytest.mark.parallel
@pytest.mark.parametrize("extra,phrase", UNSUPPORTED[:-1],
                         ids=[" ".join(e) for e, _ in UNSUPPORTED[:-1]])
def test_unsupported_combination_is_declared_with_its_reason(extra, phrase):
    """What the worker checks on the CPU (its SUPPORT.check, before MXNet builds anything), on
    the case `dlperf run` builds from these flags: refused, for the declared reason."""
    why = declared_refusal("--framework", "mxnet", *TINY["resnet50"], *extra, "--device", "cpu")
    assert why is not None and phrase in why
