"""JAX's data-parallel step averages each gradient once: the step that `dlperf run --devices N`
compiles for JAX (``workload.make_train_step`` and Wide & Deep's own, under
``distributed.data_parallel``) run on two CPU devices of one process, against the same step on
one device.

Until 2026-12-02 the step all-reduced every gradient twice (``shard_map`` sums the gradient of a
replicated parameter itself, and the step's ``lax.pmean`` of the gradients summed that sum
again) and trained on N times the average gradient; the emulated hosts' byte counters showed JAX
sending twice what DDP sends. Both are checked here: the updated state equals the average
gradient's, and the compiled step all-reduces each gradient element once.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import pinned_env
from dlperf import envs

# Inside the JAX environment, two host devices in one process (no jax.distributed: the mesh,
# the shardings and the step are the backend's own). The shared step on a linear model with
# plain SGD, whose update is linear in the gradient: each device its own half of the batch,
# against one device on the whole batch. Wide & Deep (dropout off, LazyAdam): both devices the
# same half, against one device on that half; its moments would show a doubled gradient.
SCRIPT = r"""
import json, os, re, sys
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np, optax
from dlperf.backends.jax import backend, distributed, wide_deep
from dlperf.backends.jax.workload import make_train_step

assert jax.device_count() == 2, jax.devices()
mesh = distributed.mesh()
leaves = lambda tree: [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]
out = {}


def gap(a, b):
    # the largest difference between two trees of the same layout
    return max(float(np.max(np.abs(x - y))) for x, y in zip(leaves(a), leaves(b)))


def reduced_elements(compiled):
    # every element the compiled step all-reduces, from each all-reduce's result shape(s)
    total = 0
    for line in compiled.as_text().splitlines():
        if " all-reduce(" in line or " all-reduce-start(" in line:
            shapes = line.split("=", 1)[1].split(" all-reduce")[0]
            for dims in re.findall(r"[a-z0-9]+\[([0-9,]*)\]", shapes):
                total += int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return total


def loss_fn(params, stats, batch, rng):
    pred = batch["x"] @ params["w"] + params["b"]
    return jnp.mean((pred - batch["y"]) ** 2), {"mean_x": jnp.mean(batch["x"], axis=0)}


tx = optax.sgd(0.1)
params = {"w": jnp.asarray([[0.5], [-1.0], [2.0]]), "b": jnp.asarray([0.25])}
state = {"params": params, "stats": {"mean_x": jnp.zeros(3)}, "opt": tx.init(params),
         "rng": jax.random.PRNGKey(0)}
rows = np.random.default_rng(0)
batch = {"x": rows.standard_normal((8, 3)).astype(np.float32),
         "y": rows.standard_normal((8, 1)).astype(np.float32)}
one, _ = jax.jit(make_train_step(loss_fn, tx, False))(state, batch)
step = distributed.data_parallel(make_train_step(loss_fn, tx, False, distributed.AXIS), mesh,
                                 True, False)
args = (distributed.replicated(state, mesh), distributed.sharded(batch, mesh))
two, losses = step(*args)
out["shared"] = {
    "params": gap(one["params"], two["params"]),
    "stats": gap(one["stats"], two["stats"]),
    "losses": np.asarray(losses).tolist(),
    "reduced": reduced_elements(step.lower(*args).compile()),
    "gradient_elements": 4, "stats_elements": 3,
}

wide_deep.DROPOUT = 0.0  # each device's masks are its own: off, the two halves are the same
knobs = {"vocab_size": 50, "hidden_units": 2, "hidden_size": 8, "deep_embedding_size": 4}
parts = backend.BUILDERS["wide-deep"](knobs, 4, jnp.float32, jax.random.PRNGKey(1), 1)
params = parts.variables["params"]
state = {"params": params, "stats": {}, "opt": parts.tx.init(params), "rng": jax.random.PRNGKey(2)}
half = jax.tree_util.tree_map(np.asarray, parts.batch)
one, _ = jax.jit(parts.make_step(False, None))(state, half)
step = distributed.data_parallel(parts.make_step(False, distributed.AXIS), mesh, True, False)
both = jax.tree_util.tree_map(lambda x: np.concatenate([x, x]), half)
two, _ = step(distributed.replicated(state, mesh), distributed.sharded(both, mesh))
out["wide_deep"] = {"params": gap(one["params"], two["params"]),
                    "opt": gap(one["opt"], two["opt"]), "moved": gap(one["params"], params)}
print("OUT=" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def stepped() -> dict:
    proc = subprocess.run([pinned_env("jax"), "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("OUT="))
    return json.loads(line[4:])


def test_two_devices_step_on_the_average_gradient(stepped):
    """Each device its half of the batch: the same parameters (SGD) and BatchNorm-like running
    statistics as one device on the whole batch; each device reports its own loss."""
    shared = stepped["shared"]
    assert shared["params"] < 1e-6 and shared["stats"] < 1e-6, shared
    assert len(shared["losses"]) == 2 and shared["losses"][0] != shared["losses"][1]


def test_each_gradient_is_all_reduced_once(stepped):
    """The compiled two-device step all-reduces the gradients and the statistics once: 4 + 3
    elements (twice the gradients' 4 when the step summed them again)."""
    shared = stepped["shared"]
    assert shared["reduced"] == shared["gradient_elements"] + shared["stats_elements"], shared


def test_wide_deep_on_two_devices_steps_as_one(stepped):
    """Wide & Deep's own row-sparse step, both devices the same samples: the tower and the
    looked-up rows, and LazyAdam's moments (which a doubled gradient would double), as on one
    device."""
    wide = stepped["wide_deep"]
    assert wide["moved"] > 1e-4, wide  # the step trained
    assert wide["opt"] < 1e-6, wide
    assert wide["params"] < 1e-6, wide
