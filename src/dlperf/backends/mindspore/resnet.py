"""ResNet-50 v1.5 as a MindSpore ``nn.Cell``, written out so the architecture is visible.

v1.5: a downsampling bottleneck strides on its 3x3 convolution, not the first 1x1. The layer
shapes follow :func:`dlperf.models.resnet50_convs`, so the parameter count matches the catalogue.
NCHW throughout: MindSpore's CPU ``Conv2d`` refuses ``data_format="NHWC"`` ("the NHWC format
only support in GPU target").

The stem's max pool pads one pixel on every side, as every other backend does; in PYNATIVE_MODE as
an explicit zero pad before a ``valid`` pool (:class:`_PaddedMaxPool`), faster there than
``MaxPool2d(pad_mode="pad")`` (docs/fidelity.md, "What was found"); GRAPH_MODE keeps the
one op (:func:`_stem_pool`). After the ReLU every value
is >= 0, so a zero border gives the same maxima as an infinite one.
"""

from typing import Any, List, Optional

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import HeNormal, Uniform

from dlperf.models import RESNET_EXPANSION, resnet_stages

BN_MOMENTUM = 0.9  # MindSpore keeps 0.9 of the old running value: PyTorch's momentum 0.1
BN_EPS = 1e-5


def _conv(c_in, c_out, kernel, stride):
    # type: (int, int, int, int) -> nn.Conv2d
    # Kaiming normal with fan_out (out * kh * kw), as torchvision and the PyTorch backend
    return nn.Conv2d(c_in, c_out, kernel, stride=stride, pad_mode="pad", padding=kernel // 2,
                     has_bias=False,
                     weight_init=HeNormal(mode="fan_out", nonlinearity="relu"))


def _bn(channels, zero=False):
    # type: (int, bool) -> nn.BatchNorm2d
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM,
                          gamma_init="zeros" if zero else "ones")


class _PaddedMaxPool(nn.Cell):
    """3x3 max pool, stride 2, one pixel of padding on each side (PyTorch's ``padding=1``), for
    non-negative inputs: a zero pad, then an unpadded pool."""

    def __init__(self):
        # type: () -> None
        super(_PaddedMaxPool, self).__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="valid")

    def construct(self, x):
        # type: (ms.Tensor) -> ms.Tensor
        return self.pool(ops.pad(x, (1, 1, 1, 1)))


def _stem_pool():
    # type: () -> nn.Cell
    """The stem's pool for the execution mode in force (set before any Cell is built).

    PYNATIVE_MODE: the zero pad and an unpadded pool (:class:`_PaddedMaxPool`, the faster op by
    op). GRAPH_MODE: ``MaxPool2d(pad_mode="pad")``, one op, because the compiled pad-then-pool
    step hangs in MindSpore 2.10 on a CPU (docs/fidelity.md, "Compiled modes", mindspore)."""
    if ms.get_context("mode") == ms.PYNATIVE_MODE:
        return _PaddedMaxPool()  # after the ReLU: inputs >= 0
    return nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="pad", padding=1)


class Bottleneck(nn.Cell):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    def __init__(self, c_in, width, stride):
        # type: (int, int, int) -> None
        super(Bottleneck, self).__init__()
        c_out = width * RESNET_EXPANSION
        self.conv1 = _conv(c_in, width, 1, 1)
        self.bn1 = _bn(width)
        self.conv2 = _conv(width, width, 3, stride)
        self.bn2 = _bn(width)
        self.conv3 = _conv(width, c_out, 1, 1)
        # the last BN of each block starts at zero: every block begins as the identity
        self.bn3 = _bn(c_out, zero=True)
        self.relu = nn.ReLU()
        self.has_downsample = stride != 1 or c_in != c_out
        self.downsample = (nn.SequentialCell([_conv(c_in, c_out, 1, stride), _bn(c_out)])
                           if self.has_downsample else None)  # type: Any

    def construct(self, x):
        # type: (ms.Tensor) -> ms.Tensor
        identity = x
        if self.has_downsample:
            identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Cell):
    """ResNet-50 v1.5 with a ``num_classes`` classifier, each stage cut to ``max_blocks``
    bottlenecks where given (the catalogue's knob)."""

    def __init__(self, num_classes=1000, max_blocks=None):
        # type: (int, Optional[int]) -> None
        super(ResNet50, self).__init__()
        self.conv1 = _conv(3, 64, 7, 2)
        self.bn1 = _bn(64)
        self.relu = nn.ReLU()
        self.maxpool = _stem_pool()
        stages = []  # type: List[nn.Cell]
        c_in = 64
        for index, (width, blocks) in enumerate(resnet_stages(50, max_blocks)):
            first_stride = 1 if index == 0 else 2
            layers = []  # type: List[nn.Cell]
            for block in range(blocks):
                layers.append(Bottleneck(c_in, width, first_stride if block == 0 else 1))
                c_in = width * RESNET_EXPANSION
            stages.append(nn.SequentialCell(layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        # PyTorch's nn.Linear default: uniform in +-1/sqrt(fan_in) for weight and bias
        bound = 1.0 / float(c_in) ** 0.5
        self.fc = nn.Dense(c_in, num_classes, weight_init=Uniform(bound),
                           bias_init=Uniform(bound))

    def construct(self, x):
        # type: (ms.Tensor) -> ms.Tensor
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(ops.mean(x, (2, 3)))  # global average pool over H, W
