"""JAX and PaddlePaddle: their environments, their models and real tiny training runs.

The environments come from the pinned sets the project ships (`make test` installs them first
through `make envs`; the fixture's install is then a no-op, or does the install itself when run
alone). Everything else runs the real `dlperf` command and real workers in those environments.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from dlperf import envs, models
from conftest import dlperf_main, pinned_env, tiny_nets
from declared import covers
from refusal import declared_refusal
from measured import check_measured

TIMEOUT = 1200
# for a command run through dlperf_main: its alarm stands in for pytest-timeout's (600 s) meanwhile
MAIN_TIMEOUT = 600
VERSIONS = {"jax": "0.10.2", "paddle": "3.3.1"}


@pytest.fixture(scope="module", params=["jax", "paddle"])
def framework(request: pytest.FixtureRequest) -> str:
    """The framework's environment, installed from its pinned set (cached: no-op if current)."""
    name = request.param
    pinned_env(name)
    return name


def test_environment_matches_pinned_set(framework):
    st = envs.status(framework)
    assert st.state == "installed", st
    assert st.version == VERSIONS[framework]
    assert st.python and st.python.startswith(envs.registry.get(framework).python + ".")
    pins = envs.registry.get(framework).requirement_lines()
    assert pins and all("==" in line for line in pins)  # every package pinned exactly
    named = [line.split()[0] for line in pins]  # a hashed lock: "name==version --hash=..."
    assert f"{'jax' if framework == 'jax' else 'paddlepaddle'}=={VERSIONS[framework]}" in named
    assert envs.install(framework, say=lambda line: None).action == "up to date"


COUNT = {
    # jax: the variable tree from jax.eval_shape (what the backend initialises, leaf by leaf)
    "jax": """
import json, jax, jax.numpy as jnp
from dlperf import models
from dlperf.backends.jax import bert, resnet
from dlperf.backends.jax.workload import count_params
r = resnet.ResNet50(num_classes=1000)
b = bert.BertForPreTraining(**{k: v for k, v in models.resolve_knobs("bert-base").items()
                               if k not in ("seq_len", "clip_grad_norm")})
ids = jnp.zeros((1, 16), jnp.int32)
shapes = {
    "resnet50": jax.eval_shape(lambda k: r.init(k, jnp.zeros((1, 224, 224, 3)), train=False),
                               jax.random.PRNGKey(0)),
    "bert-base": jax.eval_shape(lambda k: b.init(k, ids, ids, train=False),
                                jax.random.PRNGKey(0)),
}
print("PARAMS=" + json.dumps({k: count_params(v["params"]) for k, v in shapes.items()}))
cut = resnet.ResNet50(num_classes=1000, stages=models.resnet50_stages(
    models.resolve_knobs("resnet50", {"max_blocks": 1})))
print("MAX_BLOCKS_1=%d" % count_params(jax.eval_shape(
    lambda k: cut.init(k, jnp.zeros((1, 224, 224, 3)), train=False),
    jax.random.PRNGKey(0))["params"]))
""",
    "paddle": """
import json
from dlperf.backends.paddle import bert, resnet
from dlperf.backends.paddle.workload import count_params
print("PARAMS=" + json.dumps({"resnet50": count_params(resnet.ResNet50(1000)),
                              "bert-base": count_params(bert.BertForPreTraining())}))
print("MAX_BLOCKS_1=%d" % count_params(resnet.ResNet50(1000, max_blocks=1)))
""",
}


def test_both_models_have_the_catalogue_parameter_count(framework):
    """Built inside the framework's own interpreter, default (full-size) knobs."""
    proc = subprocess.run([envs.interpreter(framework), "-c", COUNT[framework]],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PARAMS="))
    built = json.loads(line.split("=", 1)[1])
    assert built == {"resnet50": models.get("resnet50").params(),
                     "bert-base": models.get("bert-base").params()}
    assert built == {"resnet50": 25_557_032, "bert-base": 110_106_428}
    # and ResNet-50 cut to one block per stage, same interpreter
    cut = next(x for x in proc.stdout.splitlines() if x.startswith("MAX_BLOCKS_1="))
    assert int(cut.split("=", 1)[1]) == models.get("resnet50").params({"max_blocks": 1})


TINY = tiny_nets(bert_layers=1)
CASES = [
    ("jax", "resnet50", ["--compile"]),
    ("jax", "bert-base", ["--compile", "--precision", "amp-bf16"]),
    ("paddle", "resnet50", ["--compile"]),
    ("paddle", "bert-base", []),
]


@covers("jax", "resnet50", "train", "fp32")
@covers("jax", "bert-base", "train", "amp-bf16")
@covers("paddle", ("resnet50", "bert-base"), "train", "fp32")
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
    assert math.isfinite(result["loss"]["first"][0]) and math.isfinite(result["loss"]["last"][0])
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    check_measured(result)
    worker = result["env"]["worker"]
    assert str(envs.env_dir(framework)) in json.dumps(worker)  # ran in the framework's env
    info = worker["framework"]
    if framework == "jax":
        # the state is donated on an accelerator only: on the CPU it slowed ResNet-50's step
        assert info["compile"].startswith("jax.jit")
        assert info["buffer_donation"] is (result["device"] != "cpu")
        assert info["compute_dtype"] == ("bfloat16" if "amp-bf16" in extra else "float32")
    else:
        assert info["compile"] == ("--compile" in extra)
        assert info["omp_num_threads"] >= 1 and info["layout"] in ("NCHW", "NHWC",
                                                                     "batch-major (B, S, H)")


UNSUPPORTED = {
    # (flags, the reason a user reads, in full)
    # JAX has no uncompiled mode worth measuring: an explicit --no-compile is refused, not faked
    "jax": (["--precision", "fp32", "--no-compile"],
            "jax always compiles the whole train step with jax.jit (XLA); there is no eager mode "
            "to measure, so compile=false is not a separate case: run with --compile"),
    # paddle.amp.auto_cast only warns and stays fp32 on a CPU
    "paddle": (["--precision", "amp-bf16"],
               "precision amp-bf16: paddle.amp.auto_cast has no effect on CPU in paddle 3.3.1 (it "
               "only casts on CUDA/XPU/custom devices; ops stay float32), so a low-precision "
               "label would measure fp32"),
}


# one real refusal (jax's): paddle's takes the same path, its reason checked on its case by
# test_unsupported_combination_is_declared_with_its_reason
@pytest.mark.parametrize("framework", ["jax"], indirect=True)
def test_unsupported_combination_reports_unsupported(framework, tmp_path):
    extra, reason = UNSUPPORTED[framework]
    out = tmp_path / "result.json"
    proc = dlperf_main("run", "--framework", framework, *TINY["resnet50"], *extra,
                       "--device", "cpu", "--warmup-steps", "1", "--steps", "2", "--repeats",
                       "3", "--db", str(tmp_path / "r.db"), "--json", str(out),
                       timeout=MAIN_TIMEOUT)
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
    extra, reason = UNSUPPORTED[framework]
    why = declared_refusal("--framework", framework, *TINY["resnet50"], *extra,
                           "--device", "cpu")
    assert why == reason
