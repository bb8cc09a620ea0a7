"""ResNet-50 v1.5 training in MindSpore (PyNative, its default mode), the model zoo's way.

Follows the MindSpore model zoo's ``models/official/cv/ResNet/src/resnet.py`` (ResidualBlock with
the stride on the 3x3 convolution, i.e. v1.5; has_bias=False convolutions with kaiming-normal
fan_out weights; BatchNorm2d(eps=1e-5, momentum=0.9), the block's last BN with gamma 0; 7x7 stem
with pad_mode="pad", MaxPool2d(3, 2, pad_mode="same"), a mean over H and W, Dense to 1000) and the
training-loop form of the MindSpore tutorial "Model training" / the zoo's ``train.py`` cells:
nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.Momentum(lr 0.1, momentum 0.9,
weight_decay 1e-4), nn.WithLossCell + nn.TrainOneStepCell called once per step. (The zoo's
train.py exempts BN and bias parameters from weight decay; this loop decays all, the recipe every
loop here shares.) Mode: PYNATIVE_MODE, MindSpore's default, left as it is.
Layout: NCHW (MindSpore's default), fp32. Threads: MindSpore's defaults (the fidelity runner
passes the same thread variables, e.g. OMP_NUM_THREADS, to this script and to dlperf).
Sync: ``loss.asnumpy()``: TrainOneStepCell returns the loss made dependent on the optimizer
update (F.depend), so it waits for the whole step. Imports no dlperf.
"""
import argparse
import json
import math
import time

import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import HeNormal, HeUniform


def conv(cin, cout, kernel, stride=1):
    return nn.Conv2d(cin, cout, kernel, stride=stride, pad_mode="pad", padding=kernel // 2,
                     has_bias=False, weight_init=HeNormal(mode="fan_out", nonlinearity="relu"))


def bn(channels, last=False):
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.9, gamma_init=0 if last else 1)


class ResidualBlock(nn.Cell):
    expansion = 4

    def __init__(self, in_channel, out_channel, stride=1):
        super().__init__()
        channel = out_channel // self.expansion
        self.conv1, self.bn1 = conv(in_channel, channel, 1), bn(channel)
        self.conv2, self.bn2 = conv(channel, channel, 3, stride), bn(channel)
        self.conv3, self.bn3 = conv(channel, out_channel, 1), bn(out_channel, last=True)
        self.relu = nn.ReLU()
        self.down_sample = stride != 1 or in_channel != out_channel
        if self.down_sample:
            self.down_sample_layer = nn.SequentialCell([conv(in_channel, out_channel, 1, stride),
                                                        bn(out_channel)])

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.down_sample:
            identity = self.down_sample_layer(identity)
        return self.relu(out + identity)


class ResNet50(nn.Cell):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, pad_mode="pad", padding=3, has_bias=False,
                               weight_init=HeNormal(mode="fan_out", nonlinearity="relu"))
        self.bn1, self.relu = bn(64), nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        cells, in_channel = [], 64
        for blocks, out_channel, stride in [(3, 256, 1), (4, 512, 2), (6, 1024, 2), (3, 2048, 2)]:
            cells.append(ResidualBlock(in_channel, out_channel, stride))
            cells += [ResidualBlock(out_channel, out_channel) for _ in range(1, blocks)]
            in_channel = out_channel
        self.layers = nn.SequentialCell(cells)
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = nn.Dense(2048, num_classes, weight_init=HeUniform(math.sqrt(5)),
                                  bias_init="zeros")

    def construct(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.mean(self.layers(x), (2, 3))
        return self.end_point(self.flatten(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: GRAPH_MODE (default off)
    p.add_argument("--compile", dest="compile", action="store_true", default=False)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()
    # PyNative (MindSpore's default) or, compiled, the whole train cell as one graph
    ms.set_context(mode=ms.GRAPH_MODE if args.compile else ms.PYNATIVE_MODE)

    net = ResNet50()
    params = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    assert params == 25557032, params
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9, weight_decay=1e-4)
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    train_net.set_train()
    rng = np.random.default_rng(0)
    images = ms.Tensor(rng.standard_normal(
        (args.batch_size, 3, args.image_size, args.image_size), dtype=np.float32))
    labels = ms.Tensor(rng.integers(0, 1000, args.batch_size).astype(np.int32))

    for _ in range(args.warmup):
        train_net(images, labels).asnumpy()
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            loss = train_net(images, labels)
        loss.asnumpy()
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "mindspore", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
