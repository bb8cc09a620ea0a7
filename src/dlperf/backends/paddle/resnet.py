"""ResNet-50 v1.5 in PaddlePaddle dygraph (paddle.nn), written out so the architecture is visible.

v1.5: a downsampling bottleneck strides on its 3x3 convolution, not the first 1x1. The layer
shapes follow :func:`dlperf.models.resnet50_convs`, so the parameter count matches the catalogue.
``data_format`` is ``"NCHW"`` or ``"NHWC"`` and applies to every layer.
"""

from typing import Any, List, Optional

import paddle
from paddle import nn

from dlperf.models import RESNET_EXPANSION, resnet_stages

BN_MOMENTUM = 0.9  # Paddle keeps 0.9 of the old running value: PyTorch's momentum 0.1
BN_EPS = 1e-5


def _conv(c_in, c_out, kernel, stride, data_format):
    # type: (int, int, int, int, str) -> nn.Conv2D
    # Kaiming normal with fan_out (out * kh * kw), as torchvision and the PyTorch backend;
    # Paddle's KaimingNormal takes the fan it divides by through ``fan_in``.
    fan_out = c_out * kernel * kernel
    init = nn.initializer.KaimingNormal(fan_in=fan_out, nonlinearity="relu")
    return nn.Conv2D(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias_attr=False,
                     weight_attr=paddle.ParamAttr(initializer=init), data_format=data_format)


def _bn(channels, data_format, zero=False):
    # type: (int, str, bool) -> nn.BatchNorm2D
    scale = nn.initializer.Constant(0.0 if zero else 1.0)
    return nn.BatchNorm2D(channels, momentum=BN_MOMENTUM, epsilon=BN_EPS,
                          weight_attr=paddle.ParamAttr(initializer=scale),
                          data_format=data_format)


class Bottleneck(nn.Layer):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    def __init__(self, c_in, width, stride, data_format):
        # type: (int, int, int, str) -> None
        super(Bottleneck, self).__init__()
        c_out = width * RESNET_EXPANSION
        self.conv1 = _conv(c_in, width, 1, 1, data_format)
        self.bn1 = _bn(width, data_format)
        self.conv2 = _conv(width, width, 3, stride, data_format)
        self.bn2 = _bn(width, data_format)
        self.conv3 = _conv(width, c_out, 1, 1, data_format)
        # the last BN of each block starts at zero: every block begins as the identity
        self.bn3 = _bn(c_out, data_format, zero=True)
        self.relu = nn.ReLU()
        self.downsample = None  # type: Any
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(_conv(c_in, c_out, 1, stride, data_format),
                                            _bn(c_out, data_format))

    def forward(self, x):
        # type: (paddle.Tensor) -> paddle.Tensor
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Layer):
    """ResNet-50 v1.5 with a ``num_classes`` classifier, each stage cut to ``max_blocks``
    bottlenecks where given (the catalogue's knob)."""

    def __init__(self, num_classes=1000, data_format="NCHW", max_blocks=None):
        # type: (int, str, Optional[int]) -> None
        super(ResNet50, self).__init__()
        self.conv1 = _conv(3, 64, 7, 2, data_format)
        self.bn1 = _bn(64, data_format)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2D(3, stride=2, padding=1, data_format=data_format)
        stages = []  # type: List[nn.Layer]
        c_in = 64
        for index, (width, blocks) in enumerate(resnet_stages(50, max_blocks)):
            first_stride = 1 if index == 0 else 2
            layers = []  # type: List[nn.Layer]
            for block in range(blocks):
                layers.append(Bottleneck(c_in, width, first_stride if block == 0 else 1,
                                         data_format))
                c_in = width * RESNET_EXPANSION
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2D(1, data_format=data_format)
        # PyTorch's nn.Linear default: uniform in +-1/sqrt(fan_in) for weight and bias
        bound = 1.0 / float(c_in) ** 0.5
        uniform = lambda: paddle.ParamAttr(  # noqa: E731
            initializer=nn.initializer.Uniform(-bound, bound))
        self.fc = nn.Linear(c_in, num_classes, weight_attr=uniform(), bias_attr=uniform())

    def forward(self, x):
        # type: (paddle.Tensor) -> paddle.Tensor
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(paddle.flatten(self.avgpool(x), 1))
