"""ResNet-50 v1.5 in Flax linen, channels-last (NHWC, XLA's native layout on CPU and GPU), each
stage cut to the ``max_blocks`` knob's blocks where the case asks (``ResNet50.stages``).

v1.5: a downsampling bottleneck strides on its 3x3 convolution, not the first 1x1. Padding is
written out (``kernel // 2`` on every side, as in :func:`dlperf.models.resnet50_convs` and the
PyTorch backend) rather than Flax's ``SAME``, which pads a stride-2 convolution asymmetrically.
``dtype`` is the compute dtype; parameters and batch statistics always stay float32.
"""

from typing import Any, Sequence, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from dlperf.models import RESNET50_STAGES, RESNET_EXPANSION

# Kaiming-normal, fan_out, as torchvision and the PyTorch backend initialise convolutions.
KAIMING_FAN_OUT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
# PyTorch's nn.Linear default: uniform in +-1/sqrt(fan_in)
FC_UNIFORM = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
BN_MOMENTUM = 0.9  # Flax keeps 0.9 of the old running value: PyTorch's momentum 0.1
BN_EPS = 1e-5


def _pad(kernel):
    # type: (int) -> Any
    return ((kernel // 2, kernel // 2), (kernel // 2, kernel // 2))


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    width: int
    stride: int
    project: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train):
        # type: (Any, bool) -> Any
        conv = lambda c, k, s, name: nn.Conv(  # noqa: E731
            c, (k, k), strides=(s, s), padding=_pad(k), use_bias=False, dtype=self.dtype,
            kernel_init=KAIMING_FAN_OUT, name=name)
        norm = lambda name, zero=False: nn.BatchNorm(  # noqa: E731
            use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS,
            dtype=self.dtype, name=name,
            scale_init=nn.initializers.zeros if zero else nn.initializers.ones)
        c_out = self.width * RESNET_EXPANSION
        identity = x
        if self.project:
            identity = conv(c_out, 1, self.stride, "downsample_conv")(x)
            identity = norm("downsample_bn")(identity)
        out = nn.relu(norm("bn1")(conv(self.width, 1, 1, "conv1")(x)))
        out = nn.relu(norm("bn2")(conv(self.width, 3, self.stride, "conv2")(out)))
        # the last BN of each block starts at zero: every block begins as the identity
        out = norm("bn3", zero=True)(conv(c_out, 1, 1, "conv3")(out))
        return nn.relu(out + identity)


class ResNet50(nn.Module):
    num_classes: int = 1000
    dtype: Any = jnp.float32
    #: (bottleneck width, blocks) per stage: :func:`dlperf.models.resnet50_stages` of the knobs
    stages: Tuple[Tuple[int, int], ...] = RESNET50_STAGES

    @nn.compact
    def __call__(self, x, train):
        # type: (Any, bool) -> Any
        """``x`` is NHWC; returns logits in the compute dtype."""
        x = nn.Conv(64, (7, 7), strides=(2, 2), padding=_pad(7), use_bias=False,
                    dtype=self.dtype, kernel_init=KAIMING_FAN_OUT, name="conv1")(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS,
                         dtype=self.dtype, name="bn1")(x)
        x = nn.max_pool(nn.relu(x), (3, 3), strides=(2, 2), padding=_pad(3))
        c_in = 64
        for index, (width, blocks) in enumerate(self.stages):
            for block in range(blocks):
                stride = 2 if (block == 0 and index > 0) else 1
                c_out = width * RESNET_EXPANSION
                x = Bottleneck(width, stride, project=(stride != 1 or c_in != c_out),
                               dtype=self.dtype, name="layer%d_%d" % (index + 1, block))(x, train)
                c_in = c_out
        x = jnp.mean(x, axis=(1, 2))  # global average pool
        return nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=FC_UNIFORM,
                        name="fc")(x)


def init_rule(names, shape, rng):
    # type: (Sequence[str], Sequence[int], np.random.Generator) -> np.ndarray
    """The initialisers declared above, drawn with numpy on the host (see ``host_init``)."""
    leaf = names[-1]
    if leaf == "kernel" and len(shape) == 4:  # (kh, kw, in, out): Kaiming normal, fan_out
        std = np.sqrt(2.0 / (shape[0] * shape[1] * shape[3]))
    elif leaf == "kernel":  # the classifier (in, out): uniform in +-1/sqrt(fan_in)
        limit = np.sqrt(1.0 / shape[0])
        return rng.uniform(-limit, limit, shape).astype(np.float32)
    elif leaf == "scale":
        return np.full(shape, 0.0 if names[-2] == "bn3" else 1.0, np.float32)
    elif leaf in ("bias", "mean"):
        return np.zeros(shape, np.float32)
    elif leaf == "var":
        return np.ones(shape, np.float32)
    else:
        raise KeyError("no initialiser for %s" % "/".join(names))
    return (rng.standard_normal(shape, np.float32) * std).astype(np.float32)
