"""ResNet-50 v1.5 training in TensorFlow 2 / Keras 3, written the way the TF Model Garden writes it.

Follows the Model Garden's Keras functional ResNet-50
(``tensorflow/models: official/legacy/image_classification/resnet/resnet_model.py``:
identity_block / conv_block with use_bias=False convolutions, the stride on the 3x3 convolution
(v1.5), he_normal kernels, L2(1e-4) kernel regularizers, BatchNormalization(momentum=0.9,
epsilon=1e-5)) and the custom training loop of the TF2 guide "Writing a training loop from
scratch" (tf.GradientTape inside a @tf.function step, SparseCategoricalCrossentropy(from_logits)
plus model.losses, keras.optimizers.SGD(0.1, momentum=0.9)): weight decay is the L2 regularizer
in the loss, as the Model Garden sets it.
Layout: NHWC (channels_last, TensorFlow's default and the only layout its CPU convolutions take).
Threads: TensorFlow's defaults (the fidelity runner passes the same thread variables, e.g.
OMP_NUM_THREADS, to this script and to dlperf). Sync: ``loss.numpy()``. Imports no dlperf.
"""
import argparse
import json
import math
import time

import tensorflow as tf
import keras
from keras import layers

L2 = 1e-4
BN = dict(axis=3, momentum=0.9, epsilon=1e-5)


def conv(filters, kernel, strides=1, name=None):
    return layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                         kernel_initializer="he_normal",
                         kernel_regularizer=keras.regularizers.L2(L2), name=name)


def identity_block(x, filters, stage, block):
    f1, f2, f3 = filters
    name = "res%d%s_branch" % (stage, block)
    y = layers.Activation("relu")(layers.BatchNormalization(**BN)(conv(f1, 1, name=name + "2a")(x)))
    y = layers.Activation("relu")(layers.BatchNormalization(**BN)(conv(f2, 3, name=name + "2b")(y)))
    y = layers.BatchNormalization(**BN)(conv(f3, 1, name=name + "2c")(y))
    return layers.Activation("relu")(layers.add([y, x]))


def conv_block(x, filters, stage, block, strides=2):
    f1, f2, f3 = filters
    name = "res%d%s_branch" % (stage, block)
    y = layers.Activation("relu")(layers.BatchNormalization(**BN)(conv(f1, 1, name=name + "2a")(x)))
    y = layers.Activation("relu")(layers.BatchNormalization(**BN)(
        conv(f2, 3, strides, name=name + "2b")(y)))
    y = layers.BatchNormalization(**BN)(conv(f3, 1, name=name + "2c")(y))
    shortcut = layers.BatchNormalization(**BN)(conv(f3, 1, strides, name=name + "1")(x))
    return layers.Activation("relu")(layers.add([y, shortcut]))


def resnet50(image_size, num_classes=1000):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.ZeroPadding2D(3)(inputs)
    x = layers.Conv2D(64, 7, strides=2, padding="valid", use_bias=False,
                      kernel_initializer="he_normal",
                      kernel_regularizer=keras.regularizers.L2(L2), name="conv1")(x)
    x = layers.Activation("relu")(layers.BatchNormalization(**BN)(x))
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for stage, (filters, blocks, strides) in enumerate(
            [((64, 64, 256), 3, 1), ((128, 128, 512), 4, 2),
             ((256, 256, 1024), 6, 2), ((512, 512, 2048), 3, 2)], start=2):
        x = conv_block(x, filters, stage, "a", strides)
        for b in "bcdef"[:blocks - 1]:
            x = identity_block(x, filters, stage, b)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                     kernel_regularizer=keras.regularizers.L2(L2),
                     bias_regularizer=keras.regularizers.L2(L2), name="fc1000")(x)
    return keras.Model(inputs, x, name="resnet50")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: @tf.function(jit_compile=True): XLA (default off)
    p.add_argument("--compile", dest="compile", action="store_true", default=False)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()

    model = resnet50(args.image_size)
    params = sum(int(tf.size(w)) for w in model.trainable_weights)
    assert params == 25557032, params
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    images = tf.random.normal((args.batch_size, args.image_size, args.image_size, 3))
    labels = tf.random.uniform((args.batch_size,), 0, 1000, dtype=tf.int32)

    @tf.function(jit_compile=args.compile)  # XLA when compiled
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        return loss

    for _ in range(args.warmup):
        train_step(images, labels).numpy()
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            loss = train_step(images, labels)
        loss.numpy()
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "tensorflow", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
