"""ResNet-50 v1.5 training in plain PyTorch, written the way torchvision writes it.

Follows torchvision's ``torchvision/models/resnet.py`` (Bottleneck with the stride on the 3x3
convolution, i.e. v1.5; kaiming_normal_(mode="fan_out") for convolutions, BN weight 1 / bias 0,
the default nn.Linear init) and the ImageNet recipe of ``pytorch/examples/imagenet/main.py``
(nn.CrossEntropyLoss, torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)). torchvision
itself is not installable beside this torch, so the model is written out here.
Layout: NCHW, fp32 (PyTorch's default). Threads: PyTorch's defaults (it reads OMP_NUM_THREADS;
the fidelity runner passes the same thread variables to this script and to dlperf).
Sync: ``loss.item()`` (copies the loss to the host, waits for the step). Imports no dlperf.
"""
import argparse
import json
import math
import time

import torch
from torch import nn


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(inplanes, planes), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * Bottleneck.expansion, stride),
                nn.BatchNorm2d(planes * Bottleneck.expansion))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: torch.compile(model) (default off)
    p.add_argument("--compile", dest="compile", action="store_true", default=False)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()

    model = ResNet()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert params == 25557032, params
    model.train()
    if args.compile:  # the PyTorch 2 tutorials' way: compile the module, train it as before
        model = torch.compile(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))

    def step():
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step().item()
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            loss = step()
        loss.item()
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "torch", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
