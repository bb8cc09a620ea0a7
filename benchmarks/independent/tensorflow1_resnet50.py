"""ResNet-50 v1.5 training in TensorFlow 1.15 (graph + Session), the official TF1 models' way.

Follows ``tensorflow/models: official/r1/resnet/resnet_model.py`` (tf.layers.conv2d with
fixed_padding, use_bias=False, tf.variance_scaling_initializer(); batch_normalization with
momentum 0.997 and epsilon 1e-5; ``_bottleneck_block_v1`` with the stride on the 3x3 convolution,
which that file notes is the v1.5 variant) and ``official/r1/resnet/resnet_run_loop.py``'s
resnet_model_fn (tf.losses.sparse_softmax_cross_entropy, weight decay 1e-4 * sum of tf.nn.l2_loss
over the trainable variables other than batch_normalization's, tf.train.MomentumOptimizer(0.1,
0.9), the train op under the UPDATE_OPS control dependency) in a plain tf.Session loop.
Layout: channels_last (NHWC), which resnet_model.py picks when no GPU is built in; fp32.
Threads: TensorFlow's default ConfigProto (the fidelity runner passes the same thread variables,
e.g. OMP_NUM_THREADS, to this script and to dlperf). Sync: every ``sess.run`` returns the loss as
a numpy value. Imports no dlperf.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import tensorflow as tf

DATA_FORMAT = "channels_last"


def batch_norm(x, training):
    return tf.layers.batch_normalization(x, axis=3, momentum=0.997, epsilon=1e-5, center=True,
                                         scale=True, training=training, fused=True)


def fixed_padding(x, kernel_size):
    pad = kernel_size - 1
    beg = pad // 2
    return tf.pad(x, [[0, 0], [beg, pad - beg], [beg, pad - beg], [0, 0]])


def conv2d_fixed_padding(x, filters, kernel_size, strides):
    if strides > 1:
        x = fixed_padding(x, kernel_size)
    return tf.layers.conv2d(x, filters, kernel_size, strides,
                            padding=("SAME" if strides == 1 else "VALID"), use_bias=False,
                            kernel_initializer=tf.variance_scaling_initializer(),
                            data_format=DATA_FORMAT)


def bottleneck_block_v1(x, filters, training, projection, strides):
    shortcut = x
    if projection:
        shortcut = batch_norm(conv2d_fixed_padding(x, 4 * filters, 1, strides), training)
    x = tf.nn.relu(batch_norm(conv2d_fixed_padding(x, filters, 1, 1), training))
    x = tf.nn.relu(batch_norm(conv2d_fixed_padding(x, filters, 3, strides), training))
    x = batch_norm(conv2d_fixed_padding(x, 4 * filters, 1, 1), training)
    return tf.nn.relu(x + shortcut)


def resnet50(inputs, training, num_classes=1000):
    x = conv2d_fixed_padding(inputs, 64, 7, 2)
    x = tf.nn.relu(batch_norm(x, training))
    x = tf.layers.max_pooling2d(x, 3, 2, padding="SAME", data_format=DATA_FORMAT)
    for i, (blocks, strides) in enumerate([(3, 1), (4, 2), (6, 2), (3, 2)]):
        filters = 64 * 2 ** i
        x = bottleneck_block_v1(x, filters, training, True, strides)
        for _ in range(1, blocks):
            x = bottleneck_block_v1(x, filters, training, False, 1)
    x = tf.reduce_mean(x, [1, 2], keepdims=True)
    x = tf.squeeze(x, [1, 2])
    return tf.layers.dense(x, num_classes)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: XLA auto-clustering (global_jit_level ON_1) (default off)
    p.add_argument("--compile", dest="compile", action="store_true", default=False)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()

    rng = np.random.RandomState(0)
    images = tf.constant(rng.standard_normal(
        (args.batch_size, args.image_size, args.image_size, 3)).astype(np.float32))
    labels = tf.constant(rng.randint(0, 1000, args.batch_size).astype(np.int32))
    logits = resnet50(images, training=True)
    params = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
    assert params == 25557032, params
    cross_entropy = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    l2_loss = 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in tf.trainable_variables()
                               if "batch_normalization" not in v.name])
    loss = cross_entropy + l2_loss
    optimizer = tf.train.MomentumOptimizer(learning_rate=0.1, momentum=0.9)
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train_op = optimizer.minimize(loss, tf.train.get_or_create_global_step())

    config = tf.ConfigProto()
    if args.compile:  # XLA's auto-clustering, as TF 1.x's XLA guide turns it on
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
        # the guide's CPU switch: without it TF 1.15 clusters nothing on a CPU (it ran at the
        # graph's speed), read when the session's first graph is optimised
        os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "")
                                      + " --tf_xla_cpu_global_jit").strip()
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(args.warmup):
            sess.run([train_op, loss])
        start, done, chunk = time.perf_counter(), 0, args.steps
        while True:
            for _ in range(chunk):
                sess.run([train_op, loss])
            done += chunk
            window = time.perf_counter() - start
            if window >= args.min_seconds:
                break
            chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "tensorflow1", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
