"""ResNet-50 v1.5 as Gluon HybridBlocks, written out so the architecture is visible.

Gluon's model zoo ``resnet50_v1`` is v1 (the stride sits on the first 1x1 of a downsampling
bottleneck), so the network is built here: v1.5 strides on the 3x3 convolution. The layer shapes
follow :func:`dlperf.models.resnet50_convs` and every layer is given its input size, so the
parameters exist (and can be counted) before the first forward. Layout NCHW: MXNet 1.9.1's CPU
convolutions refuse NHWC (see ``backend.LAYOUT``). ReLU is ``F.Activation(act_type="relu")``,
the operator MXNet's CPU build runs through oneDNN, as GluonCV writes it: ``F.relu`` is MXNet's
own, slower element-wise kernel (docs/fidelity.md, "What was found").
"""

from typing import Any, List, Optional

from mxnet import init
from mxnet.gluon import HybridBlock, nn

from dlperf.models import RESNET_EXPANSION, resnet_stages

BN_MOMENTUM = 0.9  # MXNet keeps 0.9 of the old running value: PyTorch's momentum 0.1
BN_EPS = 1e-5
# Kaiming normal with fan_out (std sqrt(2 / (out * kh * kw))), as torchvision and the PyTorch
# backend: MSRAPrelu with slope 0 is Xavier(gaussian, magnitude 2) over the chosen fan.
CONV_INIT = init.MSRAPrelu(factor_type="out", slope=0.0)


def _conv(c_in, c_out, kernel, stride):
    # type: (int, int, int, int) -> nn.Conv2D
    return nn.Conv2D(c_out, kernel, strides=stride, padding=kernel // 2, use_bias=False,
                     in_channels=c_in, weight_initializer=CONV_INIT)


def _bn(channels, zero=False):
    # type: (int, bool) -> nn.BatchNorm
    return nn.BatchNorm(axis=1, momentum=BN_MOMENTUM, epsilon=BN_EPS, in_channels=channels,
                        gamma_initializer="zeros" if zero else "ones")


class Bottleneck(HybridBlock):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    def __init__(self, c_in, width, stride, **kwargs):
        # type: (int, int, int, **Any) -> None
        super(Bottleneck, self).__init__(**kwargs)
        c_out = width * RESNET_EXPANSION
        with self.name_scope():
            self.conv1 = _conv(c_in, width, 1, 1)
            self.bn1 = _bn(width)
            self.conv2 = _conv(width, width, 3, stride)
            self.bn2 = _bn(width)
            self.conv3 = _conv(width, c_out, 1, 1)
            # the last BN of each block starts at zero: every block begins as the identity
            self.bn3 = _bn(c_out, zero=True)
            self.downsample = None  # type: Any
            if stride != 1 or c_in != c_out:
                self.downsample = nn.HybridSequential(prefix="down_")
                with self.downsample.name_scope():
                    self.downsample.add(_conv(c_in, c_out, 1, stride), _bn(c_out))

    def hybrid_forward(self, F, x):
        # type: (Any, Any) -> Any
        identity = x if self.downsample is None else self.downsample(x)
        out = F.Activation(self.bn1(self.conv1(x)), act_type="relu")
        out = F.Activation(self.bn2(self.conv2(out)), act_type="relu")
        out = self.bn3(self.conv3(out))
        return F.Activation(out + identity, act_type="relu")


class ResNet50(HybridBlock):
    """ResNet-50 v1.5 with a ``num_classes`` classifier, each stage cut to ``max_blocks``
    bottlenecks where given (the catalogue's knob)."""

    def __init__(self, num_classes=1000, max_blocks=None, **kwargs):
        # type: (int, Optional[int], **Any) -> None
        super(ResNet50, self).__init__(**kwargs)
        with self.name_scope():
            self.conv1 = _conv(3, 64, 7, 2)
            self.bn1 = _bn(64)
            self.maxpool = nn.MaxPool2D(pool_size=3, strides=2, padding=1)
            stages = []  # type: List[nn.HybridSequential]
            c_in = 64
            for index, (width, blocks) in enumerate(resnet_stages(50, max_blocks)):
                first_stride = 1 if index == 0 else 2
                stage = nn.HybridSequential(prefix="layer%d_" % (index + 1))
                with stage.name_scope():
                    for block in range(blocks):
                        stage.add(Bottleneck(c_in, width, first_stride if block == 0 else 1))
                        c_in = width * RESNET_EXPANSION
                stages.append(stage)
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.GlobalAvgPool2D()
            # PyTorch's nn.Linear default: uniform in +-1/sqrt(fan_in) for weight and bias
            bound = 1.0 / float(c_in) ** 0.5
            self.fc = nn.Dense(num_classes, in_units=c_in,
                               weight_initializer=init.Uniform(bound),
                               bias_initializer=init.Uniform(bound))

    def hybrid_forward(self, F, x):
        # type: (Any, Any) -> Any
        x = self.maxpool(F.Activation(self.bn1(self.conv1(x)), act_type="relu"))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x))  # Dense flattens (B, C, 1, 1) to (B, C)
