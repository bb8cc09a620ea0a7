"""ResNet-50 v1.5 in ``oneflow.nn``, written out so the architecture is visible.

The torch backend's network layer for layer (OneFlow's module API mirrors PyTorch's): v1.5 puts a
downsampling bottleneck's stride on its 3x3 convolution, the layer shapes follow
:func:`dlperf.models.resnet_convs` (so the parameter count matches the catalogue), convolutions
are Kaiming-normal and the last BatchNorm of every block starts at zero. NCHW, OneFlow's layout.
"""

from typing import List, Optional

import oneflow as flow
from oneflow import nn

from dlperf.models import RESNET_EXPANSION, resnet_stages


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    def __init__(self, c_in, width, stride):
        # type: (int, int, int) -> None
        super(Bottleneck, self).__init__()
        c_out = width * RESNET_EXPANSION
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None  # type: Optional[nn.Module]
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        # type: (flow.Tensor) -> flow.Tensor
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 v1.5 with a ``num_classes`` classifier, each stage cut to ``max_blocks``
    bottlenecks where given (the catalogue's knob)."""

    def __init__(self, num_classes=1000, max_blocks=None):
        # type: (int, Optional[int]) -> None
        super(ResNet50, self).__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []  # type: List[nn.Module]
        c_in = 64
        for index, (width, blocks) in enumerate(resnet_stages(50, max_blocks)):
            first_stride = 1 if index == 0 else 2
            layers = []  # type: List[nn.Module]
            for block in range(blocks):
                layers.append(Bottleneck(c_in, width, first_stride if block == 0 else 1))
                c_in = width * RESNET_EXPANSION
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)
        self._init_weights()

    def _init_weights(self):
        # type: () -> None
        """Kaiming-normal convs; the last BN of each block starts at zero so every residual
        block begins as the identity (Goyal et al.), which keeps lr 0.1 stable from step one."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn3.weight)

    def forward(self, x):
        # type: (flow.Tensor) -> flow.Tensor
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(flow.flatten(self.avgpool(x), 1))
