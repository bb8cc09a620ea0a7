"""VGG-16 and VGG-19 (configurations D and E, no batch norm) in plain PyTorch.

Module and parameter names are torchvision's (``features.N``, ``classifier.N``), so its state
dicts load; the layer shapes follow :func:`dlperf.models.vgg_convs` and
:func:`dlperf.models.vgg_linears`, so the parameter count matches the catalogue. An adaptive
average pool to 7x7 sits in front of the classifier, as in torchvision, so any image of at least
32 pixels works with the same classifier.
"""

from typing import List

import torch
from torch import nn

from dlperf.models import VGG_CONFIGS, VGG_HIDDEN, VGG_POOL, vgg_linears


class VGG(nn.Module):
    def __init__(self, depth=16, num_classes=1000, dropout=0.5, width=VGG_HIDDEN):
        # type: (int, int, float, int) -> None
        super(VGG, self).__init__()
        layers = []  # type: List[nn.Module]
        c_in = 3
        for item in VGG_CONFIGS[depth]:
            if item == "M":
                layers.append(nn.MaxPool2d(2, stride=2))
            else:
                layers += [nn.Conv2d(c_in, item, 3, padding=1), nn.ReLU(inplace=True)]
                c_in = item
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(VGG_POOL)
        fc1, fc2, fc3 = vgg_linears(num_classes, width)
        self.classifier = nn.Sequential(
            nn.Linear(fc1.n_in, fc1.n_out), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(fc2.n_in, fc2.n_out), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(fc3.n_in, fc3.n_out),
        )
        self._init_weights()

    def _init_weights(self):
        # type: () -> None
        """torchvision's: Kaiming-normal convolutions, N(0, 0.01) linears, zero biases."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
