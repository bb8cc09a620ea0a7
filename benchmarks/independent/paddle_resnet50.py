"""ResNet-50 v1.5 training in PaddlePaddle (dygraph), with Paddle's own model.

Uses ``paddle.vision.models.resnet50`` (``python/paddle/vision/models/resnet.py``: BottleneckBlock
with the stride on the 3x3 convolution, i.e. v1.5; Conv2D(bias_attr=False), BatchNorm2D, Linear
to 1000 classes; Paddle's default initialisers), which has exactly the torchvision parameter count,
trained the way the Paddle docs' "Model training" guide and PaddleClas write it:
paddle.nn.CrossEntropyLoss, paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9,
weight_decay=paddle.regularizer.L2Decay(1e-4)), loss.backward(), opt.step(), opt.clear_grad().
Layout: NCHW (Paddle's default), fp32, dynamic graph (Paddle's default mode).
Threads: Paddle's defaults, which read OMP_NUM_THREADS (the fidelity runner passes the same
thread variables to this script and to dlperf). Sync: ``float(loss)`` (copies the loss to the
host). Imports no dlperf.
"""
import argparse
import json
import math
import time

import paddle


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--min-seconds", type=float, default=0.0)
    # the framework's compiled mode: paddle.jit.to_static(model) (default off)
    p.add_argument("--compile", dest="compile", action="store_true", default=False)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()

    model = paddle.vision.models.resnet50(num_classes=1000)
    params = sum(int(p.numel()) for p in model.parameters() if not p.stop_gradient)
    assert params == 25557032, params
    model.train()
    if args.compile:  # Paddle's dynamic-to-static, as its docs apply it to a Layer
        model = paddle.jit.to_static(model)
    loss_fn = paddle.nn.CrossEntropyLoss()
    opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9,
                                    parameters=model.parameters(),
                                    weight_decay=paddle.regularizer.L2Decay(1e-4))
    images = paddle.randn([args.batch_size, 3, args.image_size, args.image_size], "float32")
    labels = paddle.randint(0, 1000, [args.batch_size, 1], "int64")

    def step():
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    for _ in range(args.warmup):
        float(step())
    start, done, chunk = time.perf_counter(), 0, args.steps
    while True:
        for _ in range(chunk):
            loss = step()
        float(loss)
        done += chunk
        window = time.perf_counter() - start
        if window >= args.min_seconds:
            break
        chunk = max(1, math.ceil((args.min_seconds - window) * done / window))
    print(json.dumps({"framework": "paddle", "samples_per_s": done * args.batch_size / window,
                      "window_s": window, "steps": done, "params": params,
                      "image_size": args.image_size, "batch_size": args.batch_size,
                      "compile": args.compile}))


if __name__ == "__main__":
    main()
