"""TensorFlow 2.x and 1.x: their environments, their models and real tiny training runs.

The environments come from the pinned sets the project ships (`make test` installs them first
through `make envs`; the fixture's install is then a no-op, or does the install itself when run
alone). Everything else runs the real `dlperf` command and real workers in those environments.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf import envs, models
from conftest import dlperf, dlperf_main, pinned_env, tiny_nets
from declared import covers
from refusal import declared_refusal
from measured import check_measured

TIMEOUT = 1200
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
TF_VERSIONS = {"tensorflow": "2.21.", "tensorflow1": "1.15."}


@pytest.fixture(scope="module", params=["tensorflow", "tensorflow1"])
def framework(request: pytest.FixtureRequest) -> str:
    """The framework's environment, installed from its pinned set (cached: no-op if current)."""
    name = request.param
    pinned_env(name)
    return name


def test_environment_matches_pinned_set(framework):
    st = envs.status(framework)
    assert st.state == "installed", st
    assert st.version and st.version.startswith(TF_VERSIONS[framework])
    wanted = envs.registry.get(framework).python
    assert st.python and st.python.startswith(wanted + ".")
    # a second install is a no-op: this is what keeps `make test` fast
    again = envs.install(framework, say=lambda line: None)
    assert again.action == "up to date"


#: what the parameter-count test builds in one interpreter: (key, model, knobs over the defaults)
BUILT = (("resnet50", "resnet50", {}), ("resnet50 max_blocks=1", "resnet50", {"max_blocks": 1}),
         ("bert-base", "bert-base", {}))


def test_both_models_have_the_catalogue_parameter_count(framework):
    """Built inside the framework's own interpreter, default (full-size) knobs, and ResNet-50 cut
    to one block per stage (``max_blocks=1``)."""
    if framework == "tensorflow":
        code = """
import json, dlperf.backends.tensorflow.backend as B
from dlperf import models
from dlperf.backends.tensorflow.workload import count_params, unique
out = {}
for key, name, knobs in %r:
    parts = B.BUILDERS[name](models.resolve_knobs(name, knobs), 1 if name == "bert-base" else 2)
    out[key] = count_params(unique(parts.model.trainable_variables))
print("PARAMS=" + json.dumps(out))
"""
    else:
        code = """
import json, numpy as np, dlperf.backends.tensorflow1.backend as B
from dlperf import models
out = {}
for key, name, knobs in %r:
    with B.tf.Graph().as_default():
        make_data, make_model = B.BUILDERS[name]
        knobs = models.resolve_knobs(name, knobs)
        make_model(knobs, make_data(knobs, 2, 0, True, {}), True)
        out[key] = int(sum(np.prod(v.shape.as_list()) for v in B.tf1.trainable_variables()))
print("PARAMS=" + json.dumps(out))
"""
    proc = subprocess.run([envs.interpreter(framework), "-c", code % (BUILT,)], capture_output=True,
                          text=True, timeout=TIMEOUT, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PARAMS="))
    built = json.loads(line.split("=", 1)[1])
    assert built == {key: models.get(name).params(knobs) for key, name, knobs in BUILT}
    assert built == {"resnet50": 25_557_032, "resnet50 max_blocks=1": 10_064_936,
                     "bert-base": 110_106_428}


TINY = {
    "resnet50": ["--model", "resnet50", "--image-size", "32", "--num-classes", "10",
                 "--batch-size", "2"],
    # a 1-layer BERT, narrow (tests/conftest.py's tiny_nets: hidden 64, a small vocabulary):
    # every part (embeddings, attention, heads, tied decoder, AdamW + clipping) in a few
    # seconds (at BERT-Base's width, 768, the amp-bf16 XLA case took ~4 s longer on 2 cores)
    "bert-base": tiny_nets(bert_layers=1)["bert-base"],
}
CASES = [
    ("tensorflow", "resnet50", ["--precision", "fp32"]),
    ("tensorflow", "bert-base", ["--precision", "amp-bf16", "--compile"]),
    # tensorflow1's tiny ResNet runs through `envs check` below (same case, same runner)
    ("tensorflow1", "bert-base", ["--precision", "fp32"]),
]


@covers("tensorflow", "resnet50", "train", "fp32")
@covers("tensorflow", "bert-base", "train", "amp-bf16")
@covers("tensorflow1", "bert-base", "train", "fp32")
@pytest.mark.parametrize("framework,model,extra", CASES, indirect=["framework"],
                         ids=[f"{f}-{m}" for f, m, e in CASES])
def test_tiny_training_case_runs_ok(framework, model, extra, tmp_path):
    # through dlperf's main in this process: the worker is still a fresh process
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", framework, *TINY[model], *extra,
                       "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
                       "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=MAIN_TIMEOUT)
    result = json.loads(out.read_text())
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"],
                                                              result.get("stderr_tail"))
    loss = result["loss"]["last"][0]
    assert math.isfinite(loss) and math.isfinite(result["loss"]["first"][0])
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir(framework)) in json.dumps(worker)  # ran in the framework's env


UNSUPPORTED = {  # (precision, the reason a user reads, in full)
    "tensorflow": ("tf32", "precision tf32 needs a GPU (TensorFloat-32 is an Ampere+ tensor core "
                           "mode); this run is on the CPU"),
    "tensorflow1": ("amp-bf16", "precision amp-bf16: TensorFlow 1.15 has no bfloat16 mixed "
                                "precision (its graph rewrite is fp16-only; the bf16 rewrite "
                                "arrived in TF 2.x); use fp32 or the tensorflow backend"),
}


# one real refusal (tensorflow1's): tensorflow's takes the same path, its reason checked on its
# case by test_unsupported_combination_is_declared_with_its_reason
@pytest.mark.parametrize("framework", ["tensorflow1"], indirect=True)
def test_unsupported_combination_reports_unsupported(framework, tmp_path):
    precision, reason = UNSUPPORTED[framework]
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", framework, *TINY["resnet50"], "--precision",
                       precision, "--warmup-steps", "1", "--steps", "2", "--repeats", "3",
                       "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=MAIN_TIMEOUT)
    result = json.loads(out.read_text())
    assert proc.returncode == 1
    assert result["status"] == "unsupported"
    assert result["error"].endswith(": " + reason), result["error"]
    assert result["repeats_done"] == 1  # an unsupported case is not retried


@pytest.mark.parallel
@pytest.mark.parametrize("framework", sorted(UNSUPPORTED))
def test_unsupported_combination_is_declared_with_its_reason(framework):
    """What the worker checks first (its SUPPORT.check, before the framework is imported), on
    the case `dlperf run` builds from these flags: refused on the CPU, for the declared reason."""
    precision, reason = UNSUPPORTED[framework]
    why = declared_refusal("--framework", framework, *TINY["resnet50"], "--precision", precision)
    assert why == reason


def test_not_installed_framework_is_one_line_exit_2(framework, tmp_path):
    empty = {"DLPERF_ENVS": str(tmp_path / "no-envs")}
    for args in (["run", "--framework", framework, *TINY["resnet50"], "--repeats", "1",
                  "--db", str(tmp_path / "r.db")],
                 ["envs", "check", framework]):
        # refused before anything starts: tensorflow's `run` as a real process, the others
        # through dlperf's main in this process (test_fuzz_cli checks both answer alike)
        run = dlperf if (framework, args[0]) == ("tensorflow", "run") else dlperf_main
        proc = run(*args, env=empty, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"dlperf {args[0]}: error: framework {framework} is not installed: "
            f"run `dlperf envs install {framework}`"]
        assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "r.db").exists()  # nothing started, nothing stored


@pytest.fixture(scope="module")
def envs_listed() -> subprocess.CompletedProcess[str]:
    """One `dlperf envs list` (through dlperf's main in this process), read by both frameworks'
    checks (it lists every env), taken once both environments are there."""
    for name in TF_VERSIONS:
        pinned_env(name)
    return dlperf_main("envs", "list", env={"COLUMNS": "200"}, timeout=120)


def test_envs_list_shows_the_installed_environment(framework, envs_listed):
    proc = envs_listed
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if f" {framework} " in line)
    assert "installed" in row and TF_VERSIONS[framework] in row


# one end-to-end `envs check` is enough: tensorflow1's, the Python 3.7 environment
@covers("tensorflow1", "resnet50", "train", "fp32")  # `envs check`: a tiny training step
@pytest.mark.parametrize("framework", ["tensorflow1"], indirect=True)
def test_envs_check_runs_a_real_step(framework):
    # through dlperf's main in this process: the import check and the worker are processes
    proc = dlperf_main("envs", "check", framework, timeout=MAIN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "import ok, version 1.15" in proc.stdout
    assert "tiny training step ok" in proc.stdout


@pytest.mark.parallel
def test_envs_install_rejects_unknown_framework():
    proc = dlperf_main("envs", "install", "caffe", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlperf envs: error: unknown framework 'caffe'; allowed: "
        + ", ".join(envs.registry.names())]


@pytest.mark.parallel
def test_interpreter_of_torch_is_dlperfs_own(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path))
    assert envs.interpreter("torch") == sys.executable
    assert Path(envs.root()) == tmp_path
