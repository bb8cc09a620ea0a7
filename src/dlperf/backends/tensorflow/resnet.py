"""ResNet-50 v1.5 as a Keras functional model, NHWC (TensorFlow's native, channels-last layout),
each stage cut to the ``max_blocks`` knob's blocks where the case asks.

Keras' own ``keras.applications.ResNet50`` is v1 (stride on the first 1x1 of a downsampling
block); this is v1.5: the stride sits on the 3x3 convolution, as in
:func:`dlperf.models.resnet50_convs`, so the parameter count equals the catalogue's.

Strided convolutions pad explicitly (``kernel // 2`` on every side, as PyTorch and the TF
official models' ``fixed_padding`` do) so the computed sizes are the catalogue's; stride-1 ones
use ``same``. No convolution has a bias; every BatchNorm has gamma and beta. The last BN of each
block starts at gamma = 0 (every block begins as the identity), as in the PyTorch backend.
"""

from typing import Tuple

import keras
from keras import layers

from dlperf.models import RESNET50_STAGES, RESNET_EXPANSION

BN_MOMENTUM = 0.9  # PyTorch's momentum 0.1 in Keras' convention
BN_EPSILON = 1e-5
CONV_INIT = keras.initializers.VarianceScaling(2.0, mode="fan_out",
                                               distribution="untruncated_normal")


def conv(x, filters, kernel, stride, name):
    if stride > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=name + "_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    return layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                         kernel_initializer=CONV_INIT, name=name)(x)


def batch_norm(x, name, zero_gamma=False):
    return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                     gamma_initializer="zeros" if zero_gamma else "ones",
                                     name=name)(x)


def bottleneck(x, width, stride, name):
    c_in = x.shape[-1]
    c_out = width * RESNET_EXPANSION
    shortcut = x
    if stride != 1 or c_in != c_out:
        shortcut = batch_norm(conv(x, c_out, 1, stride, name + "_downsample"),
                              name + "_downsample_bn")
    out = layers.ReLU()(batch_norm(conv(x, width, 1, 1, name + "_conv1"), name + "_bn1"))
    out = layers.ReLU()(batch_norm(conv(out, width, 3, stride, name + "_conv2"), name + "_bn2"))
    out = batch_norm(conv(out, c_out, 1, 1, name + "_conv3"), name + "_bn3", zero_gamma=True)
    return layers.ReLU()(layers.Add()([out, shortcut]))


def resnet50(image_size, num_classes, stages=RESNET50_STAGES):
    # type: (int, int, Tuple[Tuple[int, int], ...]) -> keras.Model
    """The model maps NHWC float images to float32 logits (float32 even under mixed precision,
    so the loss is computed in full precision). ``stages``: (bottleneck width, blocks) per stage,
    :func:`dlperf.models.resnet50_stages` of the knobs (all of ResNet-50's by default)."""
    images = keras.Input(shape=(image_size, image_size, 3), name="images")
    x = conv(images, 64, 7, 2, "conv1")
    x = layers.ReLU()(batch_norm(x, "bn1"))
    x = layers.ZeroPadding2D(1, name="pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool")(x)
    for index, (width, blocks) in enumerate(stages):
        for block in range(blocks):
            stride = 2 if (block == 0 and index > 0) else 1
            x = bottleneck(x, width, stride, "layer%d_%d" % (index + 1, block))
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    logits = layers.Dense(num_classes, name="fc")(x)
    logits = layers.Activation("linear", dtype="float32", name="logits_fp32")(logits)
    return keras.Model(images, logits, name="resnet50_v1_5")
