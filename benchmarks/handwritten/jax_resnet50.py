"""A hand-written JAX/Flax training loop for ResNet-50 v1.5: the reference dlperf is checked against.

What a JAX user writes: one jax.jit-compiled step, the training state donated on an accelerator
only (as dlperf's backend: on XLA's CPU backend donation made the step slower, docs/fidelity.md),
data made once on the device, a timed loop closed by block_until_ready. Same network as the
backend (the project's Flax module), same SGD settings.

    python jax_resnet50.py BATCH IMAGE_SIZE WARMUP STEPS PRECISION COMPILE [--min-seconds S]
    (COMPILE must be 1)

Prints {"throughput": samples/s} on its last line.
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import optax

from dlperf.backends.jax.resnet import ResNet50

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
assert compiled, "JAX always compiles its step"
dtype = {"fp32": jnp.float32, "amp-bf16": jnp.bfloat16}[precision]

model = ResNet50(num_classes=1000, dtype=dtype)
key = jax.random.PRNGKey(0)
variables = model.init(key, jnp.zeros((1, size, size, 3)), train=False)
tx = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(0.1, momentum=0.9))
params, stats = variables["params"], variables["batch_stats"]
opt_state = tx.init(params)
x = jax.random.normal(jax.random.PRNGKey(1), (batch, size, size, 3))
y = jax.random.randint(jax.random.PRNGKey(2), (batch,), 0, 1000)


def train_step(params, stats, opt_state, x, y):
    def loss_fn(p):
        logits, new = model.apply({"params": p, "batch_stats": stats}, x, train=True,
                                  mutable=["batch_stats"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y)
        return loss.mean(), new["batch_stats"]

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), stats, opt_state, loss


train_step = jax.jit(train_step,
                     donate_argnums=(0, 1, 2) if jax.default_backend() != "cpu" else ())

for _ in range(warmup):
    params, stats, opt_state, loss = train_step(params, stats, opt_state, x, y)
jax.block_until_ready(params)
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        params, stats, opt_state, loss = train_step(params, stats, opt_state, x, y)
    jax.block_until_ready((params, loss))
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert bool(jnp.isfinite(loss))
print(json.dumps({"throughput": batch * done / elapsed}))
