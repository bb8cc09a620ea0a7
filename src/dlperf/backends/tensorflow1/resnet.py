"""ResNet-50 v1.5 as a TensorFlow 1.x graph, NHWC, in the style of NVIDIA's TF1 ResNet scripts:
explicit variables, ``tf.nn.conv2d``, fused batch norm whose moving-average updates go to the
UPDATE_OPS collection; each stage cut to the ``max_blocks`` knob's blocks where the case asks.

v1.5: the stride of a downsampling bottleneck sits on its 3x3 convolution (see
:func:`dlperf.models.resnet50_convs`); strided convolutions pad ``kernel // 2`` explicitly, like
PyTorch. The last BN of each block starts at gamma = 0, as in the other backends.
Valid Python 3.7.
"""

import tensorflow as tf

from dlperf.models import RESNET50_STAGES, RESNET_EXPANSION

tf1 = tf.compat.v1

BN_MOMENTUM = 0.9  # PyTorch's momentum 0.1 in TensorFlow's convention
BN_EPSILON = 1e-5


def conv(x, filters, kernel, stride, name):
    c_in = int(x.shape[-1])
    init = tf1.variance_scaling_initializer(2.0, mode="fan_out", distribution="untruncated_normal")
    with tf1.variable_scope(name):
        w = tf1.get_variable("kernel", [kernel, kernel, c_in, filters], initializer=init)
    w = tf.cast(w, x.dtype)
    if stride > 1:
        p = kernel // 2
        x = tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]])
        return tf.nn.conv2d(x, w, strides=[1, stride, stride, 1], padding="VALID")
    return tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")


def batch_norm(x, training, name, zero_gamma=False):
    return tf1.layers.batch_normalization(
        x, axis=-1, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, fused=True, training=training,
        gamma_initializer=tf1.zeros_initializer() if zero_gamma else tf1.ones_initializer(),
        name=name)


def bottleneck(x, width, stride, training, name):
    c_in = int(x.shape[-1])
    c_out = width * RESNET_EXPANSION
    with tf1.variable_scope(name):
        shortcut = x
        if stride != 1 or c_in != c_out:
            shortcut = batch_norm(conv(x, c_out, 1, stride, "downsample"), training,
                                  "downsample_bn")
        out = tf.nn.relu(batch_norm(conv(x, width, 1, 1, "conv1"), training, "bn1"))
        out = tf.nn.relu(batch_norm(conv(out, width, 3, stride, "conv2"), training, "bn2"))
        out = batch_norm(conv(out, c_out, 1, 1, "conv3"), training, "bn3", zero_gamma=True)
        return tf.nn.relu(out + shortcut)


def resnet50(images, num_classes, training, stages=RESNET50_STAGES):
    """NHWC images -> float32 logits. ``stages``: (bottleneck width, blocks) per stage,
    :func:`dlperf.models.resnet50_stages` of the knobs (all of ResNet-50's by default)."""
    with tf1.variable_scope("resnet50_v1_5"):
        x = conv(images, 64, 7, 2, "conv1")
        x = tf.nn.relu(batch_norm(x, training, "bn1"))
        x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
        x = tf.nn.max_pool2d(x, ksize=3, strides=2, padding="VALID")
        for index, (width, blocks) in enumerate(stages):
            for block in range(blocks):
                stride = 2 if (block == 0 and index > 0) else 1
                x = bottleneck(x, width, stride, training, "layer%d_%d" % (index + 1, block))
        x = tf.reduce_mean(x, axis=[1, 2])
        logits = tf1.layers.dense(x, num_classes, name="fc")
        return tf.cast(logits, tf.float32)
