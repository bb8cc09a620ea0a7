"""OneFlow 0.9.0: its environment, the registry's env: data, its models and real tiny runs.

The environment comes from the pinned set the project ships (`make test` installs it first
through `make envs`; the fixture's install is then a no-op, or does the install itself when run
alone). Everything else runs the real `dlperf` command and real workers in that environment.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from dlperf import envs, models
from dlperf.launchers import launch
from dlperf.backends.oneflow import SUPPORT
from dlperf.envs import manage
from conftest import CUT_RESNET50_FLAGS, dlperf_main, pinned_env, tiny_nets
from declared import covers
from refusal import declared_refusal
from measured import check_measured

TIMEOUT = 900
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
VERSION = "0.9.0"
# what the wheel links without shipping (readelf -d oneflow/_oneflow_internal*.so)
LINKED_FROM_WHEELS = {"libcublas.so.11", "libcublasLt.so.11", "libcudnn_cnn_infer.so.8",
                      "libcudnn_cnn_train.so.8", "libcudnn_ops_infer.so.8",
                      "libcudnn_ops_train.so.8"}


def run_dlperf(*args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """`dlperf ARGS` through dlperf's main in this process, ``env`` added to the environment:
    its workers stay fresh processes."""
    return dlperf_main(*args, timeout=MAIN_TIMEOUT, env=env)


@pytest.fixture(scope="module")
def oneflow_env() -> str:
    """The environment, installed from its pinned set (cached: no-op if current); its Python."""
    return pinned_env("oneflow")


def test_environment_matches_pinned_set(oneflow_env):
    st = envs.status("oneflow")
    assert st.state == "installed", st
    assert st.version == VERSION
    assert st.python and st.python.startswith("3.10.")  # the only oneflow 0.9.0 wheel is cp310
    pins = envs.registry.get("oneflow").requirement_lines()
    assert pins and all("==" in line for line in pins)  # every package pinned exactly
    pinned = envs.registry.get("oneflow").pinned()
    assert pinned["oneflow"] == VERSION
    assert tuple(int(x) for x in pinned["numpy"].split(".")[:2]) < (1, 24)
    assert {"nvidia-cublas-cu11", "nvidia-cudnn-cu11"} <= set(pinned)
    # exactly the lock (and pip, where the venv was made with it before the installer ran
    # from outside)
    frozen = subprocess.run([manage.uv(), "pip", "freeze", "--python", oneflow_env],
                            capture_output=True, text=True, timeout=TIMEOUT,
                            check=True).stdout.split()
    frozen_pins = dict(x.lower().split("==", 1) for x in frozen if not x.startswith("pip=="))
    assert {name.replace("_", "-"): version for name, version in frozen_pins.items()} == pinned
    assert envs.install("oneflow", say=lambda line: None).action == "up to date"


def test_registry_env_expands_to_the_environments_library_directories(oneflow_env, in_oneflow):
    """env: is data: LD_LIBRARY_PATH names the env's own nvidia/*/lib directories, which hold
    every CUDA library the wheel links without shipping, in front of any value already set."""
    fw = envs.registry.get("oneflow")
    assert [name for name, _ in fw.env] == ["LD_LIBRARY_PATH"]
    site = manage.site_packages(oneflow_env)
    assert site == envs.env_dir("oneflow") / "lib" / "python3.10" / "site-packages"
    value = fw.environment(site, {})["LD_LIBRARY_PATH"]
    dirs = [Path(d) for d in value.split(os.pathsep)]
    assert dirs and all(d.is_dir() and d.is_relative_to(site) for d in dirs), dirs
    shipped = {p.name for d in dirs for p in d.iterdir()}
    assert LINKED_FROM_WHEELS <= shipped, LINKED_FROM_WHEELS - shipped
    assert fw.environment(site, {"LD_LIBRARY_PATH": "/opt/x"})["LD_LIBRARY_PATH"] == \
        value + os.pathsep + "/opt/x"
    # the worker's variables are exactly these, and oneflow loads cuBLAS/cuDNN from there
    variables = envs.worker_variables("oneflow", oneflow_env)
    assert variables["LD_LIBRARY_PATH"].split(os.pathsep)[:len(dirs)] == [str(d) for d in dirs]
    proc = in_oneflow["bare"]  # a worker's environment (variables), OneFlow imported
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(next(x for x in proc.stdout.splitlines()
                             if x.startswith("LIBS=")).split("=", 1)[1])
    assert {Path(p).name for p in loaded} >= LINKED_FROM_WHEELS
    assert all(Path(p).resolve().parent in {d.resolve() for d in dirs} for p in loaded), loaded


COUNT = """
import json
from dlperf import models
from dlperf.backends.oneflow import bert, resnet
from dlperf.backends.oneflow.workload import count_params
knobs = {k: v for k, v in models.resolve_knobs("bert-base").items()
         if k not in ("seq_len", "clip_grad_norm")}
print("PARAMS=" + json.dumps({"resnet50": count_params(resnet.ResNet50(1000)),
                              "resnet50 max_blocks=1": count_params(resnet.ResNet50(1000, 1)),
                              "bert-base": count_params(bert.BertForPreTraining(**knobs))}))
"""


def test_both_models_have_the_catalogue_parameter_count(in_oneflow):
    """Built inside OneFlow's own interpreter (the flushed one of :func:`in_oneflow`), default
    (full-size) knobs, and ResNet-50 cut to one block per stage (``max_blocks=1``); no
    training."""
    proc = in_oneflow["flushed"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PARAMS="))
    built = json.loads(line.split("=", 1)[1])
    assert built == {"resnet50": models.get("resnet50").params(),
                     "resnet50 max_blocks=1": models.get("resnet50").params({"max_blocks": 1}),
                     "bert-base": models.get("bert-base").params()}
    assert built == {"resnet50": 25_557_032, "resnet50 max_blocks=1": 10_064_936,
                     "bert-base": 110_106_428}


SUBNORMAL = """
import sys
if sys.argv[1] == "flushed":
    from dlperf.backends.oneflow import workload  # what every OneFlow worker imports first
import oneflow as flow
# computed on OneFlow's own CPU threads: 1e-40 is float32-subnormal
print("PRODUCT=%r" % float((flow.tensor([1e-38], dtype=flow.float32) * 0.01).numpy()[0]))
"""


# what the loaded libraries are, in the interpreter without the backend (bare)
LIBS = """
import json
maps = open('/proc/self/maps').read().split()
print('LIBS=' + json.dumps(sorted({p for p in maps if '/nvidia/' in p})))
"""


@pytest.fixture(scope="module")
def in_oneflow(oneflow_env) -> dict[str, subprocess.CompletedProcess[str]]:
    """Two OneFlow interpreters in a worker's environment, for the checks that need OneFlow's
    own process: ``bare`` (OneFlow alone: its subnormal product, then the CUDA libraries it
    loaded) and ``flushed`` (the backend first, as every worker: the product, then the
    parameter counts). One process each instead of one per check; the two cannot be one, as
    the backend's FTZ/DAZ must be set before OneFlow starts its threads."""
    return {mode: subprocess.run(
        [oneflow_env, "-c", SUBNORMAL + (LIBS if mode == "bare" else COUNT), mode],
        capture_output=True, text=True, timeout=TIMEOUT,
        env=envs.worker_env(envs.worker_variables("oneflow", oneflow_env)))
        for mode in ("bare", "flushed")}


@pytest.mark.parametrize("mode", ["flushed", "bare"])
def test_oneflow_threads_flush_subnormals_to_zero(in_oneflow, mode):
    """OneFlow's kernels compute subnormals at full cost (ResNet-50 steps went 13x slower once
    the memorised batch made its gradients subnormal); the backend sets FTZ/DAZ before OneFlow
    starts its threads, and those threads inherit it. Without the backend, the product stays."""
    proc = in_oneflow[mode]
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PRODUCT="))
    product = float(line.split("=", 1)[1])
    assert product == (0.0 if mode == "flushed" else pytest.approx(1e-40, rel=1e-2))


TINY = tiny_nets(bert_layers=2)
WINDOW = ["--warmup-steps", "2", "--steps", "2", "--repeats", "1"]
# the memorised-batch check's window: the sweep's shape for 40 steps (below)
LONG = ["--warmup-steps", "2", "--steps", "40", "--repeats", "1"]
# the whole network's training run, for the memorised-batch check's 40 steps (LONG) as well: one
# real run for both (under `make test` the worker has one CPU either way)
PLAIN = ("resnet50", ["--no-compile"], "1")
CASES = [
    # (model, extra flags, OMP_NUM_THREADS in the harness's environment or None)
    PLAIN,
    # nn.Graph on the cut network (conftest's CUT_RESNET50), every operator of the whole one
    ("resnet50", ["--compile", *CUT_RESNET50_FLAGS], None),
    ("bert-base", ["--no-compile"], None),
    ("bert-base", ["--compile"], None),
    ("resnet50", ["--compile", "--task", "infer", *CUT_RESNET50_FLAGS], None),
]


def _run_case(model, extra, threads, window, tmp_path):
    out = tmp_path / "result.json"
    with pytest.MonkeyPatch.context() as patch:  # no pool size but the case's own
        for name in launch.POOL_SIZE_VARIABLES:
            patch.delenv(name, raising=False)
        proc = run_dlperf("run", "--framework", "oneflow", *TINY[model], *extra, *window,
                          "--db", str(tmp_path / "r.db"), "--json", str(out),
                          env=None if threads is None else {"OMP_NUM_THREADS": threads})
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def case_runs(oneflow_env, tmp_path_factory):
    """Each (model, flags, threads, window) measured once by a real `dlperf run`, read by every
    test that checks it: the graph-mode ResNet-50 of CASES is also the one the eager-versus-graph
    test compares with an eager run of the same cut network."""
    done = {}

    def run(model, extra, threads, window=WINDOW):
        key = (model, tuple(extra), threads, tuple(window))
        if key not in done:
            done[key] = _run_case(model, extra, threads, window,
                                  tmp_path_factory.mktemp("case"))
        return done[key]
    return run


@covers("oneflow", ("resnet50", "bert-base"), "train", "fp32")
@covers("oneflow", "resnet50", "infer", "fp32")
@pytest.mark.parametrize("model,extra,threads", CASES,
                         ids=["-".join([m] + [e.strip("-") for e in x]) for m, x, _ in CASES])
def test_tiny_case_runs_ok(oneflow_env, case_runs, model, extra, threads):
    proc, result = case_runs(model, extra, threads,
                             LONG if (model, extra, threads) == PLAIN else WINDOW)
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    assert math.isfinite(result["loss"]["first"][0]) and math.isfinite(result["loss"]["last"][0])
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir("oneflow")) in json.dumps(worker)  # ran in OneFlow's env
    assert result["launch"]["framework_env"] == envs.worker_variables("oneflow", oneflow_env)
    info = worker["framework"]
    compiled = "--compile" in extra
    train = "infer" not in extra
    assert info["oneflow_version"] == VERSION and info["compile"] is compiled
    assert info["compile_mode"] == ("eager" if not compiled else SUPPORT.mode(True) if train
                                    else "nn.Graph (forward)")
    assert info["task"] == ("train" if train else "infer")
    assert info["optimizer"] == (None if not train else
                                 "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)"
                                 if model == "resnet50" else
                                 "AdamW(lr=1e-4, weight_decay=0.01), global-norm clip 1")
    if not train:
        assert info["loss"] is None
    elif model == "bert-base":
        assert info["loss"] == "MLM + NSP cross-entropy in float32"
    else:
        assert info["loss"].startswith("cross-entropy in float64 (OneFlow 0.9.0's CPU")
    assert info["denormals"].startswith("flushed to zero (MXCSR FTZ and DAZ set by dlperf")
    if threads is not None:  # the user's OMP_NUM_THREADS is what OneFlow's CPU device uses
        assert info["omp_num_threads"] == int(threads)
        assert info["omp_threads_set_by"] == "the user (OMP_NUM_THREADS)"
    else:
        assert info["omp_num_threads"] == launch.usable_cores()
        assert info["omp_threads_set_by"].startswith("dlperf (all available CPUs")


def test_resnet_keeps_training_once_the_synthetic_batch_is_memorised(oneflow_env, case_runs):
    """The sweep's shape (batch 2, image 32) for 40 steps: in float32, OneFlow 0.9.0's CPU
    cross-entropy went negative at step 4 and NaN at step 26, so the frameworks table had no
    OneFlow ResNet-50; the backend computes that loss in float64 on a CPU (the plain training
    run of test_tiny_case_runs_ok)."""
    proc, result = case_runs(*PLAIN, LONG)
    assert proc.returncode == 0 and result["status"] == "ok", result["error"]
    assert 0.0 <= result["loss"]["last"][0] < result["loss"]["first"][0]
    assert result["env"]["worker"]["framework"]["loss"].startswith("cross-entropy in float64")


def test_eager_and_graph_train_the_same_network(case_runs):
    """Same seed, same data, no dropout in ResNet: the nn.Graph step computes what eager does
    (on the cut network: the graph side is test_tiny_case_runs_ok's run)."""
    losses = []
    for flag in ("--no-compile", "--compile"):
        proc, result = case_runs("resnet50", [flag, *CUT_RESNET50_FLAGS], None)
        assert result["status"] == "ok", result["error"]
        losses.append(result["loss"]["first"][0])
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_envs_check_runs_with_the_registry_env(oneflow_env):
    proc = run_dlperf("envs", "check", "oneflow")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"import ok, version {VERSION}" in proc.stdout


UNSUPPORTED = [
    # (flags, the start of the reason a user reads: all of it for the first, run for real);
    # each is OneFlow's own behaviour on this CPU
    (["--precision", "amp-bf16"],
     "precision amp-bf16: oneflow 0.9.0 has no mixed precision on a CPU: "
     "oneflow.autocast(device_type='cpu') warns 'CPU autocast is not supported currently. "
     "Disabling autocast.' and ops stay float32, and nn.Graph's config.enable_amp inserts no "
     "casts on a CPU (the compiled graph stays float32), so a low-precision label would measure "
     "fp32"),
    (["--precision", "amp-fp16", "--compile"],
     "precision amp-fp16: oneflow 0.9.0 has no mixed precision on a CPU: "),
    (["--precision", "tf32"],
     "precision tf32 needs a CUDA device (TensorFloat-32 tensor cores); this run is on cpu"),
    (["--task", "infer", "--precision", "bf16"],
     "precision bf16: oneflow 0.9.0 has no bfloat16 convolution or matmul kernels on a CPU: "),
    (["--task", "infer", "--precision", "fp16"],
     "precision fp16: oneflow 0.9.0 has no float16 convolution or matmul kernels on a CPU: "),
    (["--task", "infer", "--precision", "int8"],
     "precision int8: oneflow 0.9.0 only simulates quantization "),
    (["--precision", "int8"], "precision int8: int8 training does not exist in OneFlow"),
]


# run for real: one refused precision (the device refusal is the test after); the others take
# the same path and differ only in the declared reason, checked on the case their flags build
UNSUPPORTED_REAL = UNSUPPORTED[:1]


@pytest.mark.parametrize("extra,reason", UNSUPPORTED_REAL,
                         ids=[" ".join(e) for e, _ in UNSUPPORTED_REAL])
def test_unsupported_combination_reports_its_reason(oneflow_env, extra, reason, tmp_path):
    out = tmp_path / "result.json"
    proc = run_dlperf("run", "--framework", "oneflow", *TINY["resnet50"], *extra,
                      "--device", "cpu", "--warmup-steps", "1", "--steps", "2", "--repeats", "3",
                      "--db", str(tmp_path / "r.db"), "--json", str(out))
    result = json.loads(out.read_text())
    assert proc.returncode == 1
    assert result["status"] == "unsupported"
    assert result["error"].endswith(": " + reason), result["error"]
    assert result["repeats_done"] == 1  # an unsupported case is not retried


@pytest.mark.parallel
@pytest.mark.parametrize("extra,reason", UNSUPPORTED, ids=[" ".join(e) for e, _ in UNSUPPORTED])
def test_unsupported_combination_is_declared_with_its_reason(extra, reason):
    """What the worker checks first (its SUPPORT.check, before OneFlow is imported), on the
    case `dlperf run` builds from these flags: refused, for the declared reason."""
    why = declared_refusal("--framework", "oneflow", *TINY["resnet50"], *extra,
                           "--device", "cpu")
    assert why is not None and why.startswith(reason), why


def test_cuda_is_refused_with_a_reason(oneflow_env, tmp_path):
    """No GPU here: an explicit cuda says why; the registry refuses a cuda build, with why."""
    out = tmp_path / "result.json"
    proc = run_dlperf("run", "--framework", "oneflow", *TINY["resnet50"], "--device", "cuda",
                      *WINDOW, "--db", str(tmp_path / "r.db"), "--json", str(out))
    result = json.loads(out.read_text())
    assert proc.returncode == 1 and result["status"] == "unsupported"
    assert "runs on cpu only" in result["error"]
    assert "sm_86" in envs.registry.get("oneflow", "cuda").refused
