"""A hand-written PaddlePaddle training loop for ResNet-50 v1.5: the reference dlperf is checked
against.

What a Paddle user writes for speed on a CPU: OMP_NUM_THREADS set to the cores (Paddle defaults to
one thread), the dygraph loop of the Paddle tutorials (forward, loss.backward(), opt.step(),
opt.clear_grad()), optionally ``paddle.jit.to_static`` on the network, data made once. Same
network as the backend (the project's paddle.nn module), same Momentum settings.

    python paddle_resnet50.py BATCH IMAGE_SIZE WARMUP STEPS PRECISION COMPILE [NCHW|NHWC]
        [--min-seconds S]

Prints {"throughput": samples/s} on its last line.
"""

import json
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
os.environ.setdefault("GLOG_minloglevel", "2")
warnings.filterwarnings("ignore")

import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

from dlperf.backends.paddle.resnet import ResNet50  # noqa: E402

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
layout = sys.argv[7] if len(sys.argv) > 7 else "NCHW"
assert precision == "fp32", "paddle.amp has no effect on a CPU"

paddle.seed(0)
model = ResNet50(1000, data_format=layout)
model.train()
opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9, parameters=model.parameters(),
                                weight_decay=1e-4)
if compiled:
    model = paddle.jit.to_static(model, backend=None)
shape = [batch, 3, size, size] if layout == "NCHW" else [batch, size, size, 3]
x = paddle.randn(shape)
y = paddle.randint(0, 1000, [batch])


def step():
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    return loss


for _ in range(warmup):
    step()
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        loss = step()
    value = float(loss)  # CPU kernels are synchronous; this also checks the result
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert value == value and abs(value) != float("inf")
print(json.dumps({"throughput": batch * done / elapsed}))
