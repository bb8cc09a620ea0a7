"""ResNet-50 v1.5 training in MXNet 1.9 Gluon (hybridized), written the way GluonCV writes it.

Follows GluonCV's ``gluoncv/model_zoo/resnetv1b.py`` (resnet50_v1b: BottleneckV1b with the stride
on the 3x3 convolution, i.e. v1.5; use_bias=False convolutions; BatchNorm; a 1x1 conv + BN
downsample; 7x7 stem, max pool 3/2, GlobalAvgPool2D, Dense to 1000) and
``scripts/classification/imagenet/train_imagenet.py`` (net.initialize(mx.init.MSRAPrelu()),
net.hybridize(static_alloc=True, static_shape=True), gluon.loss.SoftmaxCrossEntropyLoss,
gluon.Trainer with momentum 0.9 and wd 1e-4, autograd.record / backward / trainer.step(batch)).
GluonCV's script uses 'nag'; this loop uses 'sgd' with momentum, the recipe every loop here shares.
Layout: NCHW (MXNet's default), fp32. Threads: MXNet's defaults, sized from OMP_NUM_THREADS when
the library loads (the fidelity runner passes the same thread variables to this script and to
dlperf). Sync: ``mx.nd.waitall()`` (MXNet's engine is asynchronous: ``loss.asnumpy()`` would wait
for the forward pass only, not for the backward pass and the update queued after it); the same
``waitall`` after initialisation lets the setup finish before the first step.
Imports no dlperf.
"""
import argparse
import json
import math
import time

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn


class BottleneckV1b(gluon.HybridBlock):
    expansion = 4

    def __init__(self, planes, strides=1, downsample=None, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1 = nn.Conv2D(planes, 1, use_bias=False)
            self.bn1 = nn.BatchNorm()
            self.conv2 = nn.Conv2D(planes, 3, strides=strides, padding=1, use_bias=False)
            self.bn2 = nn.BatchNorm()
            self.conv3 = nn.Conv2D(planes * 4, 1, use_bias=False)
            self.bn3 = nn.BatchNorm()
            self.downsample = downsample

    def hybrid_forward(self, F, x):
        residual = x
        out = F.Activation(self.bn1(self.conv1(x)), act_type="relu")
        out = F.Activation(self.bn2(self.conv2(out)), act_type="relu")
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        return F.Activation(out + residual, act_type="relu")


class ResNetV1b(gluon.HybridBlock):
    def __init__(self, layers=(3, 4, 6, 3), classes=1000, **kwargs):
        super().__init__(**kwargs)
        self.inplanes = 64
        with self.name_scope():
            self.conv1 = nn.Conv2D(64, 7, strides=2, padding=3, use_bias=False)
            self.bn1 = nn.BatchNorm()
            self.relu = nn.Activation("relu")
            self.maxpool = nn.MaxPool2D(pool_size=3, strides=2, padding=1)
            self.layer1 = self._make_layer(1, 64, layers[0])
            self.layer2 = self._make_layer(2, 128, layers[1], strides=2)
            self.layer3 = self._make_layer(3, 256, layers[2], strides=2)
            self.layer4 = self._make_layer(4, 512, layers[3], strides=2)
            self.avgpool = nn.GlobalAvgPool2D()
            self.flat = nn.Flatten()
            self.fc = nn.Dense(classes, in_units=512 * 4)

    def _make_layer(self, stage, planes, blocks, strides=1):
        downsample = None
        if strides != 1 or self.inplanes != planes * 4:
            downsample = nn.HybridSequential(prefix="down%d_" % stage)
            with downsample.name_scope():
                downsample.add(nn.Conv2D(planes * 4, 1, strides=strides, use_bias=False),
                               nn.BatchNorm())
        layers = nn.HybridSequential(prefix="layers%d_" % stage)
        with layers.name_scope():
            layers.add(BottleneckV1b(planes, strides, downsample))
            self.inplanes = planes * 4
            for _ in range(1, blocks):
                layers.add(BottleneckV1b(planes))
        return layers

    def hybrid_forward(self, F, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flat(self.avgpool(x)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: hybridize(static_alloc, static_shape) (default on)
    p.add_argument("--compile", dest="compile", action="store_true", default=True)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()

    ctx = mx.cpu()
    net = ResNetV1b()
    net.initialize(mx.init.MSRAPrelu(), ctx=ctx)
    if args.compile:  # GluonCV's training scripts hybridize; off: Gluon's imperative mode
        net.hybridize(static_alloc=True, static_shape=True)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    data = mx.nd.random.normal(shape=shape, ctx=ctx)
    label = mx.nd.random.randint(0, 1000, shape=(args.batch_size,), ctx=ctx).astype("float32")
    net(data)  # deferred initialisation: the shapes are known after one forward pass
    params = sum(int(p.data().size) for p in net.collect_params().values() if p.grad_req != "null")
    assert params == 25557032, params
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4})
    mx.nd.waitall()

    def step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(args.batch_size)
        return loss

    for _ in range(args.warmup):
        step()
    mx.nd.waitall()
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            step()
        mx.nd.waitall()
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "mxnet", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
