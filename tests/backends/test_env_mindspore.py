"""MindSpore: its environment, its models, real tiny runs in both modes, and its refusals.

The environment comes from the pinned set the project ships (`make test` installs it first
through `make envs`; the fixture's install is then a no-op, or does the install itself when run
alone). Everything else runs the real `dlperf` command and real workers in that environment, or
MindSpore itself in its interpreter, so every declared refusal is checked against what MindSpore
really says.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from dlperf import envs, models
from dlperf.backends.mindspore import SUPPORT
from conftest import (CUT_RESNET50, CUT_RESNET50_FLAGS, dlperf_main, pinned_env, tiny_bert_knobs,
                      tiny_nets)
from declared import covers
from refusal import declared_refusal
from measured import check_measured

TIMEOUT = 1200
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
VERSION = "2.10.0"

TINY = tiny_nets(bert_layers=1)
TINY_KNOBS = {
    # one step of the backend's own build, for the kernels a refused precision gets: the cut
    # ResNet-50 (conftest's CUT_RESNET50) has every operator of the whole one
    "resnet50": {"image_size": 32, **CUT_RESNET50},
    "bert-base": tiny_bert_knobs(1),
}
SHORT = ["--warmup-steps", "1", "--steps", "2", "--repeats", "1"]
# past the tenth call of the compiled step, where a pad-then-pool stem hung GRAPH_MODE for good
# (docs/fidelity.md); --timeout turns a hang into a failed result instead of a stuck test
PAST_TEN = ["--warmup-steps", "2", "--steps", "10", "--repeats", "1", "--timeout", "300"]


@pytest.fixture(scope="module")
def mindspore_env() -> str:
    """The environment, installed from its pinned set (cached: a no-op when current)."""
    pinned_env("mindspore")
    return "mindspore"


def run_dlperf(tmp_path: Path, *args: str, env: dict[str, str] | None = None
               ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`dlperf run` from ``tmp_path`` as the working directory, through dlperf's main in this
    process (its workers stay fresh processes, started from ``tmp_path``); returns the
    process's answer and the result."""
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", "mindspore", *args, "--db", str(tmp_path / "r.db"),
                       "--json", str(out), cwd=tmp_path, env=env, timeout=MAIN_TIMEOUT)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_environment_matches_pinned_set(mindspore_env):
    st = envs.status(mindspore_env)
    assert st.state == "installed", st
    assert st.version == VERSION
    assert st.python and st.python.startswith("3.11.")
    pins = envs.registry.get(mindspore_env).requirement_lines()
    assert pins and all("==" in line for line in pins)  # every package pinned exactly
    pinned = envs.registry.get(mindspore_env).pinned()
    assert pinned["mindspore"] == VERSION
    # the wheel's C++ extension was built against NumPy 1.x
    assert pinned["numpy"].startswith("1.")
    assert envs.install(mindspore_env, say=lambda line: None).action == "up to date"
    # no CUDA build is offered, and the registry says why
    assert "CUDA 11" in (envs.registry.get("mindspore", "cuda").refused or "")


def test_both_models_have_the_catalogue_parameter_count(truths):
    """Built inside MindSpore's own interpreter, default (full-size) knobs, and ResNet-50 cut
    to one block per stage (``max_blocks=1``): the first thing the interpreter of
    :func:`truths` does, before any case sets a mode. Every Cell and Parameter is built
    with its shape; only the initial values are not drawn (``TRUTH``'s ``no_init_parameters``),
    which a count never reads."""
    built = truths["params"]
    assert built == {"resnet50": models.get("resnet50").params(),
                     "resnet50 max_blocks=1": models.get("resnet50").params({"max_blocks": 1}),
                     "bert-base": models.get("bert-base").params()}
    assert built == {"resnet50": 25_557_032, "resnet50 max_blocks=1": 10_064_936,
                     "bert-base": 110_106_428}


CASES = [
    ("resnet50", []),  # the whole network's training run
    # GRAPH_MODE on the cut network (conftest's CUT_RESNET50): it has the pad-then-pool stem
    ("resnet50", ["--compile", *CUT_RESNET50_FLAGS]),
    ("bert-base", []),
    ("bert-base", ["--compile"]),
]


@covers("mindspore", ("resnet50", "bert-base"), "train", "fp32")
@pytest.mark.parametrize("model,extra", CASES,
                         ids=[f"{m}-{'-'.join(e) or 'pynative'}" for m, e in CASES])
def test_tiny_training_case_runs_ok(mindspore_env, model, extra, tmp_path):
    steps = PAST_TEN if extra and model == "resnet50" else SHORT
    proc, result = run_dlperf(tmp_path, *TINY[model], *extra, *steps)
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    assert math.isfinite(result["loss"]["first"][0]) and math.isfinite(result["loss"]["last"][0])
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir(mindspore_env)) in json.dumps(worker)  # ran in MindSpore's env
    info = worker["framework"]
    compiled = "--compile" in extra
    assert info["compile"] is compiled
    assert info["compile_mode"] == ("GRAPH_MODE" if compiled else "PYNATIVE_MODE")
    assert info["compile_mode"] == SUPPORT.mode(compiled)
    assert info["mindspore_version"] == VERSION and info["device"] == "cpu"
    assert info["cpu_op_threads"] >= 1 and info["cpu_op_threads_set_by"]
    assert info["precision"] == "fp32" and info["amp_level"] is None
    # MindSpore writes rewritten networks and failed-graph dumps into the working directory
    # unless told otherwise: the worker leaves the user's directory as it found it
    assert {p.name for p in tmp_path.iterdir()} <= {"r.db", "r.db-shm", "r.db-wal", "result.json"}


@covers("mindspore", "bert-base", "infer", "fp32")
def test_inference_honours_the_threads_the_harness_sets(mindspore_env, tmp_path):
    """--threads-per-process sets OMP_NUM_THREADS for the worker; the backend hands it to
    MindSpore's own CPU thread setting and records it."""
    proc, result = run_dlperf(tmp_path, *TINY["bert-base"], "--task", "infer", "--compile",
                              "--threads-per-process", "1", *SHORT)
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    info = result["env"]["worker"]["framework"]
    assert info["task"] == "infer" and info["optimizer"] is None
    assert info["compile_mode"] == "GRAPH_MODE"
    assert info["cpu_op_threads"] == 1
    assert info["cpu_op_threads_set_by"] == "OMP_NUM_THREADS"
    assert result["latency_ms"]["n"] >= 2


REFUSED = [
    # (model, flags, a phrase of the declared reason; the two run for real: all of it)
    ("resnet50", ["--precision", "amp-bf16"],
     "precision amp-bf16: mindspore.amp (level auto, bfloat16) cannot run on MindSpore 2.10's "
     "CPU backend, which has no bfloat16 kernels for the convolutions and matrix products: "
     "ResNet-50 fails with \"Select CPU operator[Conv2D] fail! Unsupported data type! The "
     "supported data types are input[Float32 Float32], output[Float32]\" and BERT with "
     "\"Select CPU operator[MatMul] fail! Unsupported data type!\""),
    ("bert-base", ["--precision", "amp-bf16", "--compile"], "Select CPU operator[MatMul] fail!"),
    ("bert-base", ["--task", "infer", "--precision", "bf16"], "Select CPU operator[Gather] fail!"),
    ("resnet50", ["--precision", "amp-fp16", "--compile"], "insert_cast_cpu"),
    ("bert-base", ["--task", "infer", "--precision", "fp16"], "no float16 kernels"),
    ("resnet50", ["--task", "infer", "--precision", "int8"], "Golden Stick"),
    ("resnet50", ["--precision", "tf32"], "needs a CUDA device"),
    ("resnet50", ["--device", "cuda"],
     "device cuda: the mindspore backend runs MindSpore's CPU backend only: the pinned mindspore "
     "2.10.0 wheel's GPU plugin needs CUDA 11 system libraries (libcudart.so.11.0, "
     "libcudnn.so.8) that the environment does not install, and it has not been verified on a "
     "GPU"),
]
# run for real: a precision the declaration refuses on the CPU, and a device it does not run on
# (the worker's two refusal branches); the others go the same way and differ only in the
# declared reason, checked below on the case the same flags build
REFUSED_REAL = [REFUSED[0], REFUSED[-1]]


@pytest.mark.parametrize("model,extra,phrase", REFUSED_REAL,
                         ids=[f"{m}-{'-'.join(e)}" for m, e, p in REFUSED_REAL])
def test_refused_combination_reports_unsupported(mindspore_env, model, extra, phrase, tmp_path):
    proc, result = run_dlperf(tmp_path, *TINY[model], *extra, "--warmup-steps", "1",
                              "--steps", "2", "--repeats", "3")
    assert proc.returncode == 1
    assert result["status"] == "unsupported"
    assert result["error"].endswith(": " + phrase), result["error"]  # the whole reason
    assert result["repeats_done"] == 1  # an unsupported case is not retried


@pytest.mark.parallel
@pytest.mark.parametrize("model,extra,phrase", REFUSED,
                         ids=[f"{m}-{'-'.join(e)}" for m, e, p in REFUSED])
def test_refused_combination_is_declared_with_its_reason(model, extra, phrase):
    """What the worker checks first (its SUPPORT.check, before MindSpore is imported), on the
    case `dlperf run` builds from these flags: refused, for the declared reason."""
    device = "cuda" if "cuda" in extra else "cpu"
    why = declared_refusal("--framework", "mindspore", *TINY[model], *extra, device=device)
    assert why is not None and phrase in why


TRUTH = """
import json, os, sys, traceback
cases, logs = json.loads(sys.argv[1]), sys.argv[2]
out = {}
if sys.argv[3] == "count":  # the catalogue's parameter counts, before any case sets a mode
    from dlperf.backends.mindspore import bert, resnet
    from dlperf.backends.mindspore.workload import count_params
    # each Parameter with its shape, its values not drawn (BERT-Base's 110 M: 3 CPU-s); MindSpore
    # marks no_init_parameters to go after 2.9.0: a pin without it fails here, by name
    from mindspore.nn.utils import no_init_parameters
    with no_init_parameters():
        out["params"] = {"resnet50": count_params(resnet.ResNet50(1000)),
                         "resnet50 max_blocks=1": count_params(resnet.ResNet50(1000, 1)),
                         "bert-base": count_params(bert.BertForPreTraining())}
from dlperf.backends.mindspore import backend
set_threads, threads = backend.set_threads, []
def set_threads_once():  # MindSpore sizes its CPU pool once a process: the first case's stays
    if not threads:
        threads.append(set_threads())
    return threads[0]
backend.set_threads = set_threads_once
for index, case in enumerate(cases):
    # MindSpore's C++ log (file descriptor 2) of this case alone, in a file of its own
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.path.join(logs, "%d.log" % index), "w") as log:
        os.dup2(log.fileno(), 2)
        try:
            workload = backend.build(case)
            outcome = "VALUE=%r" % workload.loss_value(workload.step())
        except TypeError as error:
            outcome = "ERROR=" + " ".join(str(error).split())
        except Exception:
            outcome = "RAISED=" + traceback.format_exc()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    out[index] = outcome
print("OUT=" + json.dumps(out))
"""

Truth = tuple[str, str, str, bool]  # (model, task, precision, compiled)


def run_in_env(truths: list[Truth], logs: Path, env: dict[str, str] | None = None,
               count: bool = False) -> dict:
    """One step of the backend's own build per case, past the declaration, all in one
    MindSpore interpreter (one start-up and import for all of them): each case's outcome
    (``VALUE=`` the loss, ``ERROR=`` MindSpore's TypeError) and its C++ log, keyed by case;
    with ``count``, first the catalogue's parameter counts (``"params"``)."""
    cases = [{"model": model, "task": task, "precision": precision, "compile": compiled,
              "batch_size": 2, "knobs": TINY_KNOBS[model], "device": "cpu", "seed": 0}
             for model, task, precision, compiled in truths]
    proc = subprocess.run([envs.interpreter("mindspore"), "-c", TRUTH, json.dumps(cases),
                           str(logs), "count" if count else "cases"],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=envs.worker_env(env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("OUT="))[4:])
    found = {truth: (out[str(index)], (logs / f"{index}.log").read_text())
             for index, truth in enumerate(truths)}
    if count:
        found["params"] = out["params"]
    return found


BF16 = [
    # bfloat16 has no CPU kernels: MindSpore's own error must be the one the reason quotes
    ("resnet50", "train", "amp-bf16", False, "Select CPU operator[Conv2D] fail! Unsupported data "
                                             "type! The supported data types are input[Float32 "
                                             "Float32], output[Float32]"),
    ("bert-base", "train", "amp-bf16", True, "Select CPU operator[MatMul] fail! Unsupported data "
                                             "type!"),
    ("resnet50", "infer", "bf16", False, "Select CPU operator[Conv2D] fail! Unsupported data "
                                         "type!"),
    ("resnet50", "infer", "bf16", True, "For primitive[BatchNorm], the input argument[input_x] "
                                        "must be a type of {Tensor[Float16], Tensor[Float32]}, "
                                        "but got Tensor[BFloat16]."),
    ("bert-base", "infer", "bf16", False, "Select CPU operator[Gather] fail! Unsupported data "
                                          "type!"),
]


FP16 = [("resnet50", "train", "amp-fp16"), ("bert-base", "train", "amp-fp16"),
        ("resnet50", "infer", "fp16"), ("bert-base", "infer", "fp16")]


# MindSpore's C++ log at errors (GLOG_v=3, as the worker keeps it) but for its DEVICE module at
# INFO, whose kernel selection (kernel_select_cpu.cc) writes every "kernel attr info" line that
# GLOG_v=1 writes: the same 2090 lines for FP16's four cases, in 0.8 MB of log instead of 7.4 MB
KERNEL_SELECTION_LOG = {"GLOG_v": "3", "MS_SUBMODULE_LOG_v": "{DEVICE:1}"}


@pytest.fixture(scope="module")
def truths(mindspore_env, tmp_path_factory) -> dict:
    """The parameter counts, then each of FP16 one compiled step, then each of BF16 one step
    (the ones that fail, last), all in one MindSpore interpreter (one start-up and import, 1.1 to
    1.5 CPU-s, for both sets), its kernel selection logged (KERNEL_SELECTION_LOG) to each case's
    own log."""
    return run_in_env([(*case, True) for case in FP16] + [case[:4] for case in BF16],
                      tmp_path_factory.mktemp("truths"), env=KERNEL_SELECTION_LOG, count=True)



@pytest.mark.parametrize("model,task,precision,compiled,error", BF16,
                         ids=[f"{m}-{t}-{p}-{'graph' if c else 'pynative'}"
                              for m, t, p, c, e in BF16])
def test_declared_bf16_refusal_is_mindspores_own_error(truths, model, task, precision,
                                                      compiled, error):
    assert SUPPORT.refusal({"model": model, "task": task, "precision": precision}, "cpu")
    assert error in SUPPORT.reason("cpu/" + precision)
    result, log = truths[(model, task, precision, compiled)]
    assert result.startswith("ERROR=") and error in result, (result, log[-3000:])


HEAVY_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", "BatchMatMul")
KERNEL = re.compile(r"/(\w+)-op\d+ kernel attr info: input\[([^\]]*)\] output\[([^\]]*)\]")


@pytest.mark.parametrize("model,task,precision", FP16)
def test_declared_fp16_refusal_is_what_mindspore_does(truths, model, task, precision):
    """float16 runs on the CPU, but MindSpore's kernel selection (logged at INFO,
    KERNEL_SELECTION_LOG) picks the Float32 kernels of every convolution and matrix product and
    casts to and from float16 around them: fp32 arithmetic under an fp16 label, which the
    declaration refuses."""
    assert "insert_cast_cpu" in SUPPORT.reason("cpu/" + precision)
    result, log = truths[(model, task, precision, True)]
    assert result.startswith("VALUE="), (result, log[-3000:])
    kernels = KERNEL.findall(log.replace(" DefaultFormat", ""))
    heavy = [inputs for op, inputs, _ in kernels if op in HEAVY_OPS]
    assert heavy and all(inputs.startswith("Tensor Float32") for inputs in heavy), heavy[:5]
    casts = {(inputs, outputs) for op, inputs, outputs in kernels if op == "Cast"}
    assert ("Tensor Float32,", "Tensor Float16,") in casts  # amp did cast to float16...
    assert ("Tensor Float16,", "Tensor Float32,") in casts  # ...and the CPU cast it back
