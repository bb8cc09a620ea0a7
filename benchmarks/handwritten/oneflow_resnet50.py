"""A hand-written OneFlow training loop for ResNet-50 v1.5: the reference dlperf is checked
against.

What a OneFlow user writes for speed on a CPU: OMP_NUM_THREADS set to the cores before the import
(OneFlow's own default is the cores minus 2), data made once, and either the eager loop of the
OneFlow tutorials (forward, loss.backward(), optimizer.step(), optimizer.zero_grad()) or, with
COMPILE=1, the ``nn.Graph`` OneFlow recommends for speed, holding forward, backward and the SGD
update in one graph. Same network as the backend (the project's oneflow.nn module), same SGD
settings; timed from one loss read to the next (``.numpy()`` waits for OneFlow's queue).

    python oneflow_resnet50.py BATCH IMAGE_SIZE WARMUP STEPS PRECISION COMPILE [--min-seconds S]

Prints {"throughput": samples/s} on its last line.
"""

import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
os.environ.setdefault("GLOG_minloglevel", "2")

import oneflow as flow  # noqa: E402
import oneflow.nn.functional as F  # noqa: E402

from dlperf.backends.oneflow.resnet import ResNet50  # noqa: E402

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
assert precision == "fp32", "oneflow 0.9.0 has no mixed precision on a CPU (autocast is disabled)"

flow.manual_seed(0)
model = ResNet50(1000)
model.train()
opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = flow.randn(batch, 3, size, size)
y = flow.randint(0, 1000, (batch,))


class TrainGraph(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, images, labels):
        loss = F.cross_entropy(self.model(images), labels)
        loss.backward()
        return loss


def eager_step(images, labels):
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


step = TrainGraph() if compiled else eager_step
loss = None
for _ in range(warmup):
    loss = step(x, y)
if loss is not None:
    loss.numpy()  # the warm-up has finished
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        loss = step(x, y)
    value = float(loss.numpy())
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert value == value and abs(value) != float("inf")
print(json.dumps({"throughput": batch * done / elapsed}))
