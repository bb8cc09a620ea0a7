"""Caffe2 (torch 1.8.1's cp37 wheel): its environment, its ResNet-50, its optimizer, real tiny runs.

The environment comes from the pinned set (`make test` installs it first through `make envs`;
the fixture's install is then a no-op, or does the install itself when run alone). The network
and the optimizer are checked in Caffe2's own interpreter; the runs are the real `dlperf`
command with real workers. Tiny shapes: the whole file takes well under a minute on 2 cores.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from dlperf import envs, models
from dlperf.spec import Case
from conftest import dlperf, dlperf_main, pinned_env, tiny_nets
from declared import covers
from refusal import declared_refusal
from measured import check_measured
from snippets import run_snippets, snippet_output

TIMEOUT = 600
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
TINY = tiny_nets(bert_layers=2)
SHORT = ["--warmup-steps", "2", "--steps", "3", "--repeats", "1"]


@pytest.fixture(scope="module")
def caffe2_env() -> str:
    """The environment, installed from its pinned set (cached: a no-op when current)."""
    return pinned_env("caffe2")


def run_in_env(python: str, code: str) -> dict:
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("OUT="))[4:])


#: the in-interpreter checks that share one Caffe2 interpreter (each test's code, below), run in
#: this order, each in a namespace of its own and a fresh workspace
SNIPPETS: dict[str, str] = {}

@pytest.fixture(scope="module")
def in_env(caffe2_env) -> dict[str, str]:
    """What each of SNIPPETS printed, all run in one Caffe2 interpreter (one start-up and
    import instead of one per check), each in a fresh workspace."""
    return run_snippets(caffe2_env, SNIPPETS, timeout=TIMEOUT,
                        setup="from caffe2.python import workspace",
                        before_each="workspace.ResetWorkspace()")


def snippet_out(in_env: dict[str, str], name: str) -> dict:
    out = snippet_output(in_env, name)
    return json.loads(next(x for x in out.splitlines() if x.startswith("OUT="))[4:])


def measure(tmp_path, *args: str, env: dict[str, str] | None = None
            ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`dlperf run` through dlperf's main in this process: its worker is a fresh process."""
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", "caffe2", *args, "--db", str(tmp_path / "r.db"),
                       "--json", str(out), env=env, timeout=MAIN_TIMEOUT)
    return proc, json.loads(out.read_text())


def test_environment_is_the_pinned_wheel(caffe2_env):
    st = envs.status("caffe2")
    assert st.state == "installed", st
    assert st.python and st.python.startswith("3.7.")
    assert st.version == "1.8.1+cu102"  # the torch wheel that carries caffe2
    pinned = envs.registry.get("caffe2").pinned()
    assert pinned["torch"] == "1.8.1"
    assert int(pinned["protobuf"].split(".")[0]) < 4  # caffe2's generated protos need 3.x


SNIPPETS["full_size"] = """
import json
import numpy as np
from caffe2.python import model_helper, workspace
from dlperf.backends.caffe2 import resnet
full = model_helper.ModelHelper(name="full")
resnet.add_forward(full, {"image_size": 224, "num_classes": 1000}, train=True)
shapes = resnet.param_shapes(full)
zeroed = [op.output[0] for op in full.param_init_net.Proto().op
          if resnet.LAST_BN_SCALE.search(op.output[0])
          and [a.f for a in op.arg if a.name == "value"] == [0.0]]
small = model_helper.ModelHelper(name="small")
resnet.add_forward(small, {"image_size": 32, "num_classes": 10}, train=False)
workspace.RunNetOnce(small.param_init_net)
small_params = resnet.count_params(small)  # before the cut net's init reuses its blob names
from caffe2.python.models import resnet as c2_resnet
table = dict(c2_resnet.RESNEXT_BLOCK_CONFIG)
cut = model_helper.ModelHelper(name="cut")
resnet.add_forward(cut, {"image_size": 32, "num_classes": 10, "max_blocks": 1}, train=True)
workspace.RunNetOnce(cut.param_init_net)
print("OUT=" + json.dumps({
    "cut": resnet.count_params(cut), "cut_zeroed": resnet.zero_last_bn_scales(cut),
    "cut_blocks": sorted(set(p.split("_")[1] for p in resnet.param_shapes(cut)
                             if p.startswith("comp_"))),
    "table_kept": c2_resnet.RESNEXT_BLOCK_CONFIG == table and 14 not in table,
    "full": sum(int(np.prod(s)) for s in shapes.values()), "tensors": len(shapes),
    "params": len(full.GetParams()), "zeroed": len(zeroed),
    "small": small_params,
    "biases": sorted(p for p in shapes if p.endswith("_b") and "spatbn" not in p)}))
"""


def test_full_size_resnet50_is_the_catalogue_network(in_env):
    """Built (not run) at the default knobs: every parameter's shape from its filler in the init
    net; 16 bottlenecks whose last BatchNorm starts at scale 0; then, at a small image, the init
    net run and the parameters counted from the workspace blobs; and, cut to a bottleneck a stage
    (``max_blocks=1``: create_resnext given a 14-layer block configuration for the call), the
    same at the small image."""
    got = snippet_out(in_env, "full_size")
    assert got["full"] == models.get("resnet50").params() == 25_557_032
    assert got["tensors"] == got["params"] == 161  # 53 convs, 53 BN scale+shift pairs, fc w+b
    assert got["zeroed"] == 16  # one per bottleneck, as the other backends initialise
    assert got["biases"] == ["last_out_L1000_b"]  # no convolution has a bias
    assert got["small"] == models.get("resnet50").params({"num_classes": 10})
    assert got["cut"] == models.get("resnet50").params({"num_classes": 10, "max_blocks": 1})
    assert got["cut"] == 8_036_426
    assert got["cut_zeroed"] == 4 and got["cut_blocks"] == ["0", "1", "2", "3"]
    assert got["table_kept"]  # Caffe2's table of depths as it was, before and after


SNIPPETS["optimizer"] = """
import json
import numpy as np
from caffe2.python import brew, model_helper, workspace
from dlperf.backends.caffe2 import resnet
rng = np.random.RandomState(0)
x = rng.standard_normal((4, 3)).astype(np.float32)
y = rng.standard_normal((4, 2)).astype(np.float32)
m = model_helper.ModelHelper(name="fc")
out = brew.fc(m, "x", "out", 3, 2)
dist = m.net.SquaredL2Distance([out, "y"], "dist")
loss = m.net.AveragedLoss(dist, "loss")
m.AddGradientOperators([loss])
resnet.add_optimizer(m)
workspace.FeedBlob("x", x); workspace.FeedBlob("y", y)
workspace.RunNetOnce(m.param_init_net)
w, b = workspace.FetchBlob("out_w").astype(np.float64), workspace.FetchBlob("out_b").astype(np.float64)
mw, mb = np.zeros_like(w), np.zeros_like(b)
workspace.CreateNet(m.net)
err = 0.0
for _ in range(3):
    workspace.RunNet(m.net.Proto().name)
    r = x @ w.T + b - y                       # d/dout of mean(0.5 |out - y|^2) = r / 4
    gw, gb = r.T @ x / 4 + 1e-4 * w, r.sum(0) / 4 + 1e-4 * b
    mw, mb = 0.9 * mw + 0.1 * gw, 0.9 * mb + 0.1 * gb
    w, b = w - mw, b - mb
    err = max(err, float(np.abs(workspace.FetchBlob("out_w") - w).max()),
              float(np.abs(workspace.FetchBlob("out_b") - b).max()))
print("OUT=" + json.dumps({"err": err, "moved": float(np.abs(mw).max())}))
"""


def test_optimizer_is_momentum_sgd_with_weight_decay_on_every_parameter(in_env):
    """The backend's optimizer on a one-FC net, three steps, against the recipe written out in
    numpy: g += 1e-4 w (weights and bias alike); m = 0.9 m + 0.1 g; w -= m."""
    got = snippet_out(in_env, "optimizer")
    assert got["moved"] > 1e-3
    assert got["err"] < 1e-5, got


def test_ideep_training_step_is_the_cpu_engines(caffe2_env):
    """Both engines, same seed and batch, three steps: every parameter and loss agree. Caffe2
    1.8.1's IDEEP net as built updates conv1 with its gradient's blocked buffer read as OIHW
    (0.51 off after one step); the filter pre-conversion every ideep training run gets fixes it."""
    code = """
import json, os
import numpy as np
from caffe2.python import workspace
from dlperf.backends.caffe2 import backend
w = backend.build(dict(model="resnet50", knobs={"image_size": 32, "num_classes": 10},
                       task="train", batch_size=4, precision="fp32", device="cpu", seed=0,
                       options="engine=%s"))
losses = [w.loss_value(w.step()) for _ in range(3)]
names = [str(p) for p in w.param_names]
def sample(blob):  # ~512 evenly strided elements: enough to see a permuted layout
    flat = np.asarray(blob).ravel()
    return flat[::max(1, flat.size // 512)].tolist()
print("OUT=" + json.dumps({"losses": losses, "engine": w.info["engine"],
                           "params": {n.split("/", 1)[-1]: sample(workspace.FetchBlob(n))
                                      for n in names}}))
"""
    cpu, ideep = (run_in_env(caffe2_env, code % engine) for engine in ("cpu", "ideep"))
    assert (cpu["engine"], ideep["engine"]) == ("cpu", "ideep")
    assert set(cpu["params"]) == set(ideep["params"]) and len(cpu["params"]) == 161
    worst = max(max(abs(a - b) for a, b in zip(cpu["params"][n], ideep["params"][n]))
                for n in cpu["params"])
    assert worst < 1e-3, worst
    for a, b in zip(cpu["losses"], ideep["losses"]):
        assert math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3), (cpu["losses"], ideep["losses"])


@covers("caffe2", "resnet50", "train", "fp32")
def test_tiny_training_case_runs_ok(caffe2_env, tmp_path):
    proc, result = measure(tmp_path, *TINY["resnet50"], *SHORT)
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    assert result["model"]["params"] == models.get("resnet50").params({"image_size": 32})
    assert math.isfinite(result["loss"]["first"][0]) and math.isfinite(result["loss"]["last"][0])
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir("caffe2")) in json.dumps(worker)  # ran in Caffe2's environment
    info = worker["framework"]
    assert info["caffe2_version"] == "1.8.1+cu102"
    assert info["engine"] == "ideep" and info["mkldnn_built"] is True  # the default engine
    assert info["layout"] == "NCHW" and info["compile"] is False
    assert info["optimizer"].startswith("SGD(lr=0.1, momentum=0.9")
    assert "weight decay 1e-4 on all parameters" in info["optimizer"]
    assert info["omp_num_threads"] >= 1 and info["net_ops"]["built"] == info["net_ops"]["run"]


@covers("caffe2", "resnet50", "infer", "fp32")
def test_tiny_inference_compiled_has_ordered_percentiles(caffe2_env, tmp_path):
    """Inference in test mode with Caffe2's MKL-DNN graph transform: BN folded into the
    convolutions (fewer operators run than were built), latency percentiles in order."""
    proc, result = measure(tmp_path, *TINY["resnet50"], "--task", "infer", "--compile",
                           "--warmup-steps", "2", "--steps", "6", "--repeats", "1")
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    info = result["env"]["worker"]["framework"]
    assert info["task"] == "infer" and info["optimizer"] is None and info["compile"] is True
    assert info["compile_mode"].startswith("optimizeForMKLDNN")
    assert info["net_ops"]["run"] < info["net_ops"]["built"]  # fused
    latency = result["latency_ms"]
    assert latency["n"] >= 2
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"]


UNSUPPORTED = [
    (TINY["resnet50"] + ["--precision", "amp-bf16"], {},  # run for real: the whole reason
     "precision amp-bf16: Caffe2 has no bfloat16 kernels or mixed precision; the caffe2 backend "
     "trains and infers in fp32 only"),
    (TINY["resnet50"] + ["--task", "infer", "--precision", "int8"], {}, "Int8 operators"),
    (TINY["resnet50"] + ["--task", "infer", "--compile", "--option", "engine=cpu"], {},
     "needs engine ideep"),
    (TINY["resnet50"] + ["--compile"], {}, "train with compile off"),
]


# int8 and compiled training take amp-bf16's path (the worker's SUPPORT.check refuses them,
# declared: compiled training through task_modes): their reasons are checked on the case their
# flags build (the test after); the other two run for real, the last refused past the
# declaration (the engine option, in the build)
UNSUPPORTED_REAL = [UNSUPPORTED[0], UNSUPPORTED[2]]
UNSUPPORTED_DECLARED = [UNSUPPORTED[0], UNSUPPORTED[1], UNSUPPORTED[3]]


@pytest.mark.parametrize("args,env,phrase", UNSUPPORTED_REAL,
                         ids=["amp-bf16", "compile-cpu-engine"])
def test_unsupported_combination_reports_its_reason(caffe2_env, args, env, phrase, tmp_path):
    proc, result = measure(tmp_path, *args, "--device", "cpu", "--warmup-steps", "1",
                           "--steps", "2", "--repeats", "3", env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert result["status"] == "unsupported"
    assert phrase in result["error"]
    assert result["repeats_done"] == 1  # an unsupported case is not retried


@pytest.mark.parallel
@pytest.mark.parametrize("args,env,phrase", UNSUPPORTED_DECLARED,
                         ids=["amp-bf16", "int8", "compile-train"])
def test_unsupported_combination_is_declared_with_its_reason(args, env, phrase):
    """What the worker checks first (its SUPPORT.check, before Caffe2 is imported), on the case
    `dlperf run` builds from these flags: refused, for the declared reason."""
    why = declared_refusal("--framework", "caffe2", *args, "--device", "cpu")
    assert why is not None and phrase in why


@pytest.mark.parallel
def test_a_model_caffe2_does_not_build_is_one_line_exit_2_nothing_stored(tmp_path):
    # refused at validation, before any worker: through dlperf's main in this process (the
    # not-installed refusal below is the real process; test_fuzz_cli checks both answer alike)
    proc = dlperf_main("run", "--framework", "caffe2", *TINY["bert-base"], "--db",
                  str(tmp_path / "r.db"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--model: the caffe2 backend does not build model 'bert-base'" in lines[0]
    assert "Caffe2 ships no transformer" in lines[0] and "--model resnet50" in lines[0]
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parallel
@pytest.mark.parametrize("option,phrase", [
    ("engine=mkl", "options: engine='mkl' is not allowed for caffe2; allowed: ideep, cpu"),
    ("threads=4", "options: 'threads' is not a caffe2 option; its options: engine"),
    ("engine", "options: 'engine' is not NAME=VALUE"),
])
def test_unknown_option_is_one_line_exit_2_nothing_stored(option, phrase, tmp_path):
    proc = dlperf_main("run", "--framework", "caffe2", *TINY["resnet50"], "--option", option,
                  "--db", str(tmp_path / "r.db"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0], proc.stderr
    assert not (tmp_path / "r.db").exists()


def test_the_engine_option_is_part_of_the_case(caffe2_env, tmp_path):
    proc, result = measure(tmp_path, *TINY["resnet50"], *SHORT, "--option", "engine=cpu")
    assert proc.returncode == 0 and result["status"] == "ok", result["error"]
    assert result["case"]["options"] == "engine=cpu"
    info = result["env"]["worker"]["framework"]
    assert info["engine"] == "cpu" and info["engine_set_by"] == "the case's option engine"
    default = Case(framework="caffe2", model="resnet50", batch_size=2,
                   knobs={"image_size": 32})
    assert Case.from_dict(result["case"]).key() != default.key()  # engines never share a key


@pytest.mark.parallel
def test_not_installed_is_one_line_exit_2_nothing_stored(tmp_path):
    empty = {"DLPERF_ENVS": str(tmp_path / "no-envs")}
    proc = dlperf("run", "--framework", "caffe2", *TINY["resnet50"], "--repeats", "1",
                  "--db", str(tmp_path / "r.db"), env=empty, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "dlperf run: error: framework caffe2 is not installed: run `dlperf envs install caffe2`"]
    assert not (tmp_path / "r.db").exists()  # nothing started, nothing stored


@pytest.mark.parallel
def test_an_unknown_flag_is_one_line_exit_2_nothing_stored(tmp_path):
    """The engine is an option (--option engine=...), not a flag of its own: a flag for it is
    refused like any unknown argument, before anything runs."""
    proc = dlperf_main("run", "--framework", "caffe2", *TINY["resnet50"], "--engine", "ideep",
                  "--db", str(tmp_path / "r.db"), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlperf: error: unrecognized arguments: --engine ideep"]
    assert not (tmp_path / "r.db").exists()


# the last snippet: it replaces workspace.GetDeviceProperties for the rest of the process
SNIPPETS["gpu"] = """
import json
from caffe2.python import workspace
from dlperf.backends.caffe2 import backend
from dlperf.worker.workload import UnsupportedError
answers = {0: {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "totalGlobalMem": 8e10},
           1: {"name": "Tesla T4", "major": 7, "minor": 5, "totalGlobalMem": 1.6e10}}
workspace.GetDeviceProperties = lambda gpu: answers[gpu]
out = {}
try:
    backend.check_gpu(0)
except UnsupportedError as error:
    out["h100"] = str(error)
out["t4"] = backend.check_gpu(1)
print("OUT=" + json.dumps(out))
"""


def test_gpu_newer_than_the_cuda_10_2_build_is_refused_naming_its_capability(in_env):
    """The refusal itself, with Caffe2's device query answered as an H100 and a T4 would answer
    it (no GPU here): 9.0 refused before anything is built, naming the capability; 7.5 taken."""
    got = snippet_out(in_env, "gpu")
    assert got["h100"].startswith("device cuda: NVIDIA H100 80GB HBM3 has compute capability 9.0;")
    assert "CUDA 10.2 build" in got["h100"] and "up to 7.5" in got["h100"]
    assert got["t4"]["compute_capability"] == "7.5" and got["t4"]["gpu_name"] == "Tesla T4"
