"""A hand-written MindSpore training loop for ResNet-50 v1.5: the reference dlperf's mindspore
backend is checked against.

What a MindSpore user writes, from MindSpore's own tutorials: ``set_context(mode=GRAPH_MODE)``
when compiling (PYNATIVE_MODE otherwise), the loss attached with ``nn.WithLossCell`` and the step
as ``nn.TrainOneStepCell`` (forward, gradients and ``nn.Momentum`` update in one Cell, which
GRAPH_MODE compiles whole), the CPU kernel threads set with
``device_context.cpu.op_tuning.threads_num``, one synthetic batch made once. Same network as the
backend (the project's nn.Cell module), same Momentum settings; dlperf's own step is written
differently (``value_and_grad`` under ``mindspore.jit``), so this is an independent check.

    python mindspore_resnet50.py BATCH IMAGE_SIZE WARMUP STEPS PRECISION COMPILE [--min-seconds S]

PRECISION is fp32: MindSpore 2.10's CPU backend has no bfloat16 kernels and runs float16
convolutions as float32 kernels between casts. Prints {"throughput": samples/s} on its last line.
"""

import json
import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindspore import nn  # noqa: E402

from dlperf.backends.mindspore.resnet import ResNet50  # noqa: E402

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
assert precision == "fp32", "MindSpore's CPU backend has no bf16 kernels and no fp16 ones"

ms.set_context(mode=ms.GRAPH_MODE if compiled else ms.PYNATIVE_MODE)
ms.set_device("CPU")
threads = os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
ms.device_context.cpu.op_tuning.threads_num(int(threads))
ms.set_seed(0)

net = ResNet50(1000)
opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9, weight_decay=1e-4)
# the loss dlperf's backend uses (the model zoo's: one fused kernel; docs/fidelity.md)
train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
    sparse=True, reduction="mean")), opt)
train.set_train()
rng = np.random.RandomState(0)
x = ms.Tensor(rng.standard_normal((batch, 3, size, size)).astype(np.float32))
y = ms.Tensor(rng.randint(0, 1000, size=(batch,)).astype(np.int32))

loss = None
for _ in range(warmup):
    loss = train(x, y)
if loss is not None:
    loss.asnumpy()  # wait for the warm-up steps
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        loss = train(x, y)
    value = float(loss.asnumpy())  # waits for the last step; also checks the result
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert value == value and abs(value) != float("inf")
print(json.dumps({"throughput": batch * done / elapsed}))
