"""ResNet-50 v1.5 training in JAX (Flax linen + Optax), the way Flax's ImageNet example does it.

Follows ``google/flax: examples/imagenet/models.py`` (ResNet / BottleneckResNetBlock: nn.Conv
with use_bias=False and its default lecun_normal init, the stride on the 3x3 convolution (v1.5),
nn.BatchNorm(momentum=0.9, epsilon=1e-5) with the block's last scale zero-initialised, the 7x7
stem, max_pool 3x3/2 SAME, mean pooling, nn.Dense) and ``examples/imagenet/train.py`` (a
TrainState carrying batch_stats, a jitted train_step with mutable=['batch_stats'],
optax.softmax_cross_entropy on one-hot labels, weight decay as 1e-4 * 0.5 * the sum of squares of
the parameters with ndim > 1 added to the loss, optax.sgd(0.1, momentum=0.9)). The example uses
nesterov=True; this loop uses plain momentum, the recipe every loop here shares.
Layout: NHWC (Flax's default), fp32. Threads: XLA's defaults (the fidelity runner passes the same
thread variables, e.g. OMP_NUM_THREADS, to this script and to dlperf).
Sync: ``jax.block_until_ready`` on the step's loss. Imports no dlperf.
"""
import argparse
import functools
import json
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax.training import train_state


class BottleneckResNetBlock(nn.Module):
    filters: int
    conv: Any
    norm: Any
    strides: tuple = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = nn.relu(self.norm()(self.conv(self.filters, (1, 1))(x)))
        y = nn.relu(self.norm()(self.conv(self.filters, (3, 3), self.strides)(y)))
        y = self.conv(self.filters * 4, (1, 1))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters * 4, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return nn.relu(residual + y)


class ResNet50(nn.Module):
    num_classes: int = 1000
    stage_sizes: tuple = (3, 4, 6, 3)

    @nn.compact
    def __call__(self, x, train=True):
        conv = functools.partial(nn.Conv, use_bias=False)
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                                 epsilon=1e-5)
        x = conv(64, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)
        x = nn.relu(norm(name="bn_init")(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, blocks in enumerate(self.stage_sizes):
            for j in range(blocks):
                strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                x = BottleneckResNetBlock(64 * 2 ** i, conv=conv, norm=norm, strides=strides)(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes)(x)


class TrainState(train_state.TrainState):
    batch_stats: Any


@jax.jit
def train_step(state, images, labels):
    def loss_fn(params):
        logits, new_model_state = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats}, images, mutable=["batch_stats"])
        one_hot = jax.nn.one_hot(labels, 1000)
        loss = optax.softmax_cross_entropy(logits=logits, labels=one_hot).mean()
        weight_l2 = sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(params) if x.ndim > 1)
        return loss + 1e-4 * 0.5 * weight_l2, new_model_state

    (loss, new_model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads, batch_stats=new_model_state["batch_stats"])
    return state, loss


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: jax.jit, always (default on)
    p.add_argument("--compile", dest="compile", action="store_true", default=True)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()
    if not args.compile:
        p.error("--no-compile: the Flax example's train step is always jax.jit-compiled")

    model = ResNet50()
    key_init, key_x, key_y = jax.random.split(jax.random.PRNGKey(0), 3)
    shape = (args.batch_size, args.image_size, args.image_size, 3)
    variables = jax.jit(functools.partial(model.init, train=False))(
        key_init, jnp.ones(shape, jnp.float32))
    params = sum(x.size for x in jax.tree_util.tree_leaves(variables["params"]))
    assert params == 25557032, params
    state = TrainState.create(apply_fn=model.apply, params=variables["params"],
                              tx=optax.sgd(learning_rate=0.1, momentum=0.9),
                              batch_stats=variables["batch_stats"])
    images = jax.random.normal(key_x, shape, jnp.float32)
    labels = jax.random.randint(key_y, (args.batch_size,), 0, 1000)

    for _ in range(args.warmup):
        state, loss = train_step(state, images, labels)
    jax.block_until_ready(loss)
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            state, loss = train_step(state, images, labels)
        jax.block_until_ready(loss)
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "jax", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": int(params),
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
