"""AlexNet (torchvision's single-tower variant) in plain PyTorch.

Module and parameter names are torchvision's, so its state dicts load; the layer shapes follow
:data:`dlperf.models.ALEXNET_CONVS` and :func:`dlperf.models.alexnet_linears`, so the parameter
count matches the catalogue. The adaptive 6x6 average pool keeps the classifier independent of
the image size; the smallest image the convolutions and pools take is 63 pixels.
"""

from typing import List

import torch
from torch import nn

from dlperf.models import (ALEXNET_CONVS, ALEXNET_HIDDEN, ALEXNET_POOL, ALEXNET_POOL_AFTER,
                           alexnet_linears)


class AlexNet(nn.Module):
    def __init__(self, num_classes=1000, dropout=0.5, width=ALEXNET_HIDDEN):
        # type: (int, float, int) -> None
        super(AlexNet, self).__init__()
        layers = []  # type: List[nn.Module]
        c_in = 3
        for i, (c_out, kernel, stride, padding) in enumerate(ALEXNET_CONVS):
            layers += [nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding),
                       nn.ReLU(inplace=True)]
            if i in ALEXNET_POOL_AFTER:
                layers.append(nn.MaxPool2d(3, stride=2))
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(ALEXNET_POOL)
        fc1, fc2, fc3 = alexnet_linears(num_classes, width)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(fc1.n_in, fc1.n_out), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(fc2.n_in, fc2.n_out), nn.ReLU(inplace=True),
            nn.Linear(fc3.n_in, fc3.n_out),
        )

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
