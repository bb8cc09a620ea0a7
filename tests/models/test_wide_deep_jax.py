"""Wide & Deep in the JAX backend: the catalogue's parameter count, SparseAdam's row update
(checked against torch.optim.SparseAdam itself), a training step that touches only the rows the
batch looked up, tiny `dlperf run`s (train and infer) to ``ok``, and a `dlperf capacity` over
``vocab_size`` under a memory limit that ends at an out-of-memory probe.

The JAX environment comes from the pinned set, as in test_gpt_jax.py (`make test` installs it
first through `make envs`; the fixture's install is then a no-op).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import dlperf_main, pinned_env
from dlperf import envs
from dlperf import models
from declared import covers

TINY = {"vocab_size": 1000, "hidden_units": 2, "hidden_size": 32, "deep_embedding_size": 8}

# Inside the JAX environment: the full-size tree from jax.eval_shape (nothing allocated); two
# SparseAdam steps on a tiny table from per-occurrence gradients with repeated ids; one training
# step of the backend's own workload, its tables and moments before and after.
SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from dlperf import models
from dlperf.backends.jax import backend, wide_deep
from dlperf.backends.jax.workload import count_params

full = models.resolve_knobs("wide-deep")
net = wide_deep.WideAndDeep(full["vocab_size"], full["deep_embedding_size"],
                            full["hidden_units"], full["hidden_size"])
shapes = jax.eval_shape(lambda k: net.init(k, jnp.zeros((1, 13)), jnp.zeros((1, 2), jnp.int32),
                                           jnp.zeros((1, 26), jnp.int32)), jax.random.PRNGKey(0))
print("PARAMS=%d" % count_params(shapes["params"]))

rng = np.random.default_rng(0)
vocab, width = 10, 3
table = rng.uniform(-0.05, 0.05, (vocab, width)).astype(np.float32)
ids = [np.array([2, 7, 2, 5, 2, 7]), np.array([7, 0, 0, 9, 7, 7])]
grads = [rng.standard_normal((6, width)).astype(np.float32) for _ in ids]
t, m, v = jnp.asarray(table), jnp.zeros_like(table), jnp.zeros_like(table)
out = {"table": table}
update = jax.jit(lambda t, m, v, i, g, step: wide_deep.sparse_adam_rows(
    t, m, v, *wide_deep.coalesce(i, g, vocab), step))
for step, (i, g) in enumerate(zip(ids, grads), start=1):
    t, m, v = update(t, m, v, jnp.asarray(i), jnp.asarray(g), jnp.asarray(step))
    out.update({"ids%d" % step: i, "grads%d" % step: g, "table%d" % step: np.asarray(t),
                "m%d" % step: np.asarray(m), "v%d" % step: np.asarray(v)})

case = {"model": "wide-deep", "task": "train", "batch_size": 4, "precision": "fp32",
        "device": "cpu", "knobs": json.loads(sys.argv[1])}
work = backend.build(case)
copy = lambda tree: jax.tree_util.tree_map(lambda x: np.array(x, copy=True), tree)
before = copy(work.state["params"])
work.step()
work.sync()
after, opt = copy(work.state["params"]), copy(work.state["opt"])
print("STEP=%d" % int(opt["step"]))
for name in ("wide", "deep"):
    out["%s_ids" % name] = np.asarray(work.batch["%s_ids" % name])
    out["%s_before" % name] = before[name]["embedding"]
    out["%s_after" % name] = after[name]["embedding"]
    out["%s_m" % name] = opt[name]["m"]
    out["%s_v" % name] = opt[name]["v"]
out["mlp_changed"] = np.array([not np.array_equal(a, b) for a, b in zip(
    jax.tree_util.tree_leaves(before["mlp"]), jax.tree_util.tree_leaves(after["mlp"]))])
np.savez(sys.argv[2], **out)
"""


@pytest.fixture(scope="module")
def jax_env() -> str:
    """The JAX environment, installed from its pinned set (cached: no-op if current)."""
    return pinned_env("jax")


@pytest.fixture(scope="module")
def inside(jax_env: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("wide_deep_jax") / "out.npz"
    proc = subprocess.run([jax_env, "-c", SCRIPT, json.dumps(TINY), str(out)],
                          capture_output=True, text=True, timeout=600, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, dict(np.load(out))


def test_full_size_parameter_count_equals_the_catalogue(inside):
    line = next(x for x in inside[0].splitlines() if x.startswith("PARAMS="))
    assert int(line.split("=", 1)[1]) == models.get("wide-deep").params() == 61_138_945


def test_row_update_is_torchs_sparse_adam(inside):
    """The same rows, gradients (uncoalesced, ids repeated) and two steps through
    torch.optim.SparseAdam give the same table and moments; untouched rows keep theirs."""
    arrays = inside[1]
    weight = torch.nn.Parameter(torch.from_numpy(arrays["table"].copy()))
    optimizer = torch.optim.SparseAdam([weight], lr=1e-3)
    for step in (1, 2):
        ids = torch.from_numpy(arrays["ids%d" % step])
        weight.grad = torch.sparse_coo_tensor(ids[None, :], torch.from_numpy(
            arrays["grads%d" % step]), weight.shape, check_invariants=True)
        optimizer.step()
        state = optimizer.state[weight]
        np.testing.assert_allclose(arrays["table%d" % step], weight.detach().numpy(),
                                   rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(arrays["m%d" % step], state["exp_avg"].numpy(), atol=1e-7)
        np.testing.assert_allclose(arrays["v%d" % step], state["exp_avg_sq"].numpy(),
                                   rtol=1e-6, atol=1e-10)
    touched = sorted(set(arrays["ids1"]) | set(arrays["ids2"]))
    assert touched == [0, 2, 5, 7, 9]
    untouched = [r for r in range(10) if r not in touched]
    np.testing.assert_array_equal(arrays["table2"][untouched], arrays["table"][untouched])
    assert not arrays["m2"][untouched].any() and not arrays["v2"][untouched].any()
    # row 2 was looked up only at step 1: at step 2 its moments were not decayed (lazy Adam)
    np.testing.assert_array_equal(arrays["m2"][2], arrays["m1"][2])
    assert not np.array_equal(arrays["table1"][2], arrays["table"][2])


def test_a_training_step_changes_only_the_looked_up_rows(inside):
    arrays = inside[1]
    assert "STEP=1" in inside[0]
    for name in ("wide", "deep"):
        looked_up = sorted(set(arrays["%s_ids" % name].ravel().tolist()))
        changed = np.flatnonzero((arrays["%s_after" % name] != arrays["%s_before" % name])
                                 .any(axis=1)).tolist()
        with_moments = np.flatnonzero(arrays["%s_v" % name].any(axis=1)).tolist()
        assert changed == looked_up == with_moments, name
        assert 0 < len(looked_up) < TINY["vocab_size"]
    assert arrays["mlp_changed"].all()  # dense Adam on every MLP parameter


def dlperf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlperf.cli", *args,
                           "--db", str(tmp_path / "r.db")], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, DLPERF_LOCK_DIR=str(tmp_path)))


def knob_args(knobs: dict) -> list[str]:
    return [a for name, value in knobs.items() for a in ("--knob", "%s=%d" % (name, value))]


@covers("jax", "wide-deep", ("train", "infer"), "fp32")
@pytest.mark.parametrize("task", ["train", "infer"])
def test_a_tiny_jax_wide_deep_runs_with_the_catalogues_count(jax_env, tmp_path, task):
    out = tmp_path / "r.json"
    proc = dlperf(tmp_path, "run", "--framework", "jax", "--model", "wide-deep", "--task", task,
                  "--batch-size", "16", "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
                  "--json", str(out), *knob_args(TINY))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["status"] == "ok", result["error"]
    assert result["model"]["params"] == result["model"]["catalogue_params"] == \
        models.get("wide-deep").params(models.resolve_knobs("wide-deep", TINY)) == 17_193
    assert result["memory"]["peak_host_bytes"] > 0
    info = result["env"]["worker"]["framework"]
    assert info["optimizer"] == ("Adam(lr=1e-3), lazy (SparseAdam) on the embeddings"
                                 if task == "train" else None)


def test_capacity_over_the_vocabulary_ends_at_an_out_of_memory_probe(jax_env, tmp_path):
    """2M, 4M rows fit in 1 GiB (each row: table, m and v of 9 floats), 8M does not; the
    bisection's 6M also fails: whether XLA raises RESOURCE_EXHAUSTED, aborts on a C++
    std::bad_alloc or segfaults on an allocation it did not check, the probe is out of memory,
    never a crash."""
    out = tmp_path / "c.json"
    # through dlperf's main in this process: every probe is still a fresh JAX worker under the
    # limit, and the harness's own interpreter (~1 s of CPU) checks nothing test_fuzz_cli does not
    proc = dlperf_main("capacity", "--framework", "jax", "--model", "wide-deep",
                       "--param", "vocab_size", "--from", "2M", "--resolution", "2000000",
                       "--batch-size", "16", "--memory-limit", "1GiB", "--json", str(out),
                       *knob_args({k: v for k, v in TINY.items() if k != "vocab_size"}),
                       "--db", str(tmp_path / "r.db"), timeout=600,
                       env={"DLPERF_LOCK_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    answer = json.loads(out.read_text())
    probes = [(p["value"], p["status"]) for p in answer["probes"]]
    assert probes[:3] == [(2_000_000, "ok"), (4_000_000, "ok"), (8_000_000, "oom")], probes
    assert {status for _, status in probes} <= {"ok", "oom"}, answer["probes"]
    assert answer["smallest_failing"] - answer["largest"] <= 2_000_000
    assert "largest vocab_size that fits: %d" % answer["largest"] in proc.stdout
