"""GPT in the JAX backend: the catalogue's parameter count at GPT-2 small, the same network as
the torch backend's (same weights -> same logits and loss), and a tiny `dlperf run` to ``ok``
with the achieved FLOP/s and MFU the harness computes from the catalogue.

The JAX environment comes from the pinned set, as in test_env_jax_paddle.py (`make test` installs
it first through `make envs`; the fixture's install is then a no-op).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import pinned_env
from dlperf import envs
from dlperf import models
from dlperf.backends.torch.gpt import GPT, next_token_loss
from declared import covers

TINY = {"layers": 2, "hidden": 64, "heads": 2, "vocab_size": 1000, "seq_len": 16}

# Inside the JAX environment: the full-size variable tree from jax.eval_shape (nothing
# allocated), then a tiny GPT initialised as the backend does, its weights, logits and loss.
SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from dlperf import models
from dlperf.backends.jax import gpt
from dlperf.backends.jax.workload import count_params, host_init

def network(knobs):
    return gpt.GPT(**{k: knobs[k] for k in ("vocab_size", "hidden", "layers", "heads",
                                            "max_positions")})

full = models.resolve_knobs("gpt")
shapes = jax.eval_shape(
    lambda k: network(full).init(k, jnp.zeros((1, full["seq_len"]), jnp.int32)),
    jax.random.PRNGKey(0))
print("PARAMS=%d" % count_params(shapes["params"]))

tiny = models.resolve_knobs("gpt", json.loads(sys.argv[1]))
model = network(tiny)
params = host_init(lambda k: model.init(k, jnp.zeros((1, tiny["seq_len"]), jnp.int32)),
                   gpt.init_rule, 0)["params"]
tokens = np.random.default_rng(1).integers(0, tiny["vocab_size"], (3, tiny["seq_len"] + 1))
logits = model.apply({"params": params}, jnp.asarray(tokens[:, :-1]))
loss = gpt.next_token_loss(logits, jnp.asarray(tokens[:, 1:]))
flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
np.savez(sys.argv[2], tokens=tokens, logits=np.asarray(logits), loss=np.asarray(loss), **flat)
"""


@pytest.fixture(scope="module")
def jax_env() -> str:
    """The JAX environment, installed from its pinned set (cached: no-op if current)."""
    return pinned_env("jax")


@pytest.fixture(scope="module")
def built(jax_env: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("gpt_jax") / "tiny.npz"
    proc = subprocess.run([jax_env, "-c", SCRIPT, json.dumps(TINY), str(out)],
                          capture_output=True, text=True, timeout=600, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PARAMS="))
    return int(line.split("=", 1)[1]), out


def test_full_size_parameter_count_equals_the_catalogue(built):
    assert built[0] == models.get("gpt").params() == 124_439_808


def torch_state(arrays: dict[str, np.ndarray], layers: int) -> dict[str, torch.Tensor]:
    """The Flax tree under the torch module's names (Dense kernels are (in, out): transposed)."""
    dense = {"attn/qkv": "attn.qkv", "attn/out": "attn.out", "fc": "mlp.0", "proj": "mlp.2"}
    state = {"tokens.weight": arrays["tokens/embedding"],
             "positions.weight": arrays["positions/embedding"],
             "head.weight": arrays["tokens/embedding"],
             "ln_f.weight": arrays["ln_f/scale"], "ln_f.bias": arrays["ln_f/bias"]}
    for i in range(layers):
        for flax_name, torch_name in dense.items():
            state[f"blocks.{i}.{torch_name}.weight"] = arrays[f"block{i}/{flax_name}/kernel"].T
            state[f"blocks.{i}.{torch_name}.bias"] = arrays[f"block{i}/{flax_name}/bias"]
        for ln in ("ln_1", "ln_2"):
            state[f"blocks.{i}.{ln}.weight"] = arrays[f"block{i}/{ln}/scale"]
            state[f"blocks.{i}.{ln}.bias"] = arrays[f"block{i}/{ln}/bias"]
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


def test_same_weights_give_torchs_logits_and_loss(built):
    """Architecture parity with the torch backend: every weight maps one to one (the head tied),
    and causal attention, tanh GELU, LayerNorm eps and the loss agree to float32 rounding."""
    arrays = dict(np.load(built[1]))
    k = models.resolve_knobs("gpt", TINY)
    model = GPT(k["vocab_size"], k["hidden"], k["layers"], k["heads"], k["max_positions"])
    flax_leaves = {n: a for n, a in arrays.items() if n not in ("tokens", "logits", "loss")}
    assert sum(a.size for a in flax_leaves.values()) == models.get("gpt").params(k) == 229_632
    model.load_state_dict(torch_state(flax_leaves, k["layers"]), strict=True)
    tokens = torch.from_numpy(arrays["tokens"])
    with torch.no_grad():
        logits = model(tokens[:, :-1].contiguous())
        loss = next_token_loss(logits, tokens[:, 1:].contiguous())
    np.testing.assert_allclose(logits.numpy(), arrays["logits"], atol=1e-5, rtol=1e-4)
    assert math.isclose(loss.item(), float(arrays["loss"]), rel_tol=1e-5)
    assert abs(loss.item() - math.log(k["vocab_size"])) < 0.1  # 0.02-std init: near uniform


@covers("jax", "gpt", "train", "amp-bf16")
def test_a_tiny_jax_gpt_trains_and_reports_its_achieved_flops(jax_env, tmp_path):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "dlperf.cli", "run", "--framework", "jax", "--model", "gpt",
            "--precision", "amp-bf16", "--batch-size", "2", "--seq-len", "16",
            "--warmup-steps", "2", "--steps", "3", "--repeats", "1",
            "--db", str(tmp_path / "r.db"), "--json", str(out)]
    knobs = dict(TINY, layers=1)
    for name in ("layers", "hidden", "heads", "vocab_size"):
        args += ["--knob", "%s=%d" % (name, knobs[name])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, DLPERF_LOCK_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["status"] == "ok", result["error"]
    k = models.resolve_knobs("gpt", knobs)
    assert result["model"]["params"] == result["model"]["catalogue_params"] == \
        models.get("gpt").params(k)
    info = result["env"]["worker"]["framework"]
    assert (info["compute_dtype"], info["param_dtype"]) == ("bfloat16", "float32")
    assert info["optimizer"] == "AdamW(lr=1e-4, weight_decay=0.01), global-norm clip 1"
    # Megatron-LM's count without recomputation, per sample: 72 s l h^2 (1 + s/6h + V/12lh)
    s, l, h, v = 16, 1, 64, 1000
    megatron = models.megatron_flops_per_iteration(1, s, l, h, v)
    flops = result["flops"]
    assert math.isclose(flops["per_sample"], megatron) and megatron == 11_059_200
    assert flops["achieved_per_s"] > 0
    assert math.isclose(flops["achieved_per_s"],
                        flops["per_sample"] * result["throughput"]["median"], rel_tol=1e-9)
    assert flops["mfu"] and flops["mfu"] > 0  # `dlperf run` probes the peak once if unknown
    assert "TFLOP/s" in proc.stdout and "MFU" in proc.stdout
