"""GoogLeNet (Inception v1) in plain PyTorch, torchvision's variant without the auxiliary heads.

Every convolution is followed by batch norm (eps 0.001) and ReLU, and the "5x5" branch of each
inception module uses a 3x3 kernel, as in torchvision (whose pretrained weights depend on it);
module and parameter names are torchvision's, so its state dicts load (``aux_logits=False``).
The layer shapes follow :func:`dlperf.models.googlenet_convs`, so the parameter count matches the
catalogue. The smallest image the pools take is 15 pixels.
"""

import torch
from torch import nn

from dlperf.models import (GOOGLENET_BRANCH3_KERNEL, GOOGLENET_FEATURES, GOOGLENET_INCEPTIONS,
                           GOOGLENET_POOLS_BEFORE)


class BasicConv2d(nn.Module):
    def __init__(self, c_in, c_out, kernel, stride=1, padding=0):
        # type: (int, int, int, int, int) -> None
        super(BasicConv2d, self).__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=0.001)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        return self.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    """Four parallel branches concatenated: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 ("5x5"); pool -> 1x1."""

    def __init__(self, c_in, b1, b2_reduce, b2, b3_reduce, b3, b4):
        # type: (int, int, int, int, int, int, int) -> None
        super(Inception, self).__init__()
        k3 = GOOGLENET_BRANCH3_KERNEL
        self.branch1 = BasicConv2d(c_in, b1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(c_in, b2_reduce, 1),
                                     BasicConv2d(b2_reduce, b2, 3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(c_in, b3_reduce, 1),
                                     BasicConv2d(b3_reduce, b3, k3, padding=k3 // 2))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(c_in, b4, 1))

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self, num_classes=1000, dropout=0.2):
        # type: (int, float) -> None
        super(GoogLeNet, self).__init__()
        self.conv1 = BasicConv2d(3, 64, 7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, 1)
        self.conv3 = BasicConv2d(64, 192, 3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        pool_names = {"inception4a": "maxpool3", "inception5a": "maxpool4"}
        for spec in GOOGLENET_INCEPTIONS:
            name = spec[0]
            if pool_names.get(name):
                kernel, stride = GOOGLENET_POOLS_BEFORE[name]
                setattr(self, pool_names[name], nn.MaxPool2d(kernel, stride=stride,
                                                             ceil_mode=True))
            setattr(self, name, Inception(*spec[1:]))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(GOOGLENET_FEATURES, num_classes)
        self._init_weights()

    def _init_weights(self):
        # type: () -> None
        """torchvision's: truncated N(0, 0.01) convolutions and classifier, unit batch norms."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.inception3b(self.inception3a(x))
        x = self.maxpool3(x)
        x = self.inception4a(x)
        x = self.inception4e(self.inception4d(self.inception4c(self.inception4b(x))))
        x = self.maxpool4(x)
        x = self.inception5b(self.inception5a(x))
        x = self.dropout(torch.flatten(self.avgpool(x), 1))
        return self.fc(x)
