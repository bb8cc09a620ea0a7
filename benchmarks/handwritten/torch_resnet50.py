"""A hand-written PyTorch training loop for ResNet-50 v1.5: the reference dlperf is checked
against.

What a PyTorch user writes on a CPU: NCHW (PyTorch's default and dlperf's on a CPU; see
docs/fidelity.md for channels_last), autocast when asked, SGD momentum,
synthetic data made once, torch.compile when asked, subnormals flushed (as dlperf's torch backend
does on CPU). Same network module as the backend.

    python torch_resnet50.py BATCH IMAGE_SIZE WARMUP STEPS PRECISION COMPILE [--min-seconds S]

Prints {"throughput": samples/s} on its last line.
"""
import json, sys, time
import torch
import torch.nn.functional as F
from dlperf.backends.torch.resnet import ResNet50

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps, precision, compiled = sys.argv[1:7]
batch, size, warmup, steps = int(batch), int(size), int(warmup), int(steps)
torch.manual_seed(0)
torch.set_flush_denormal(True)  # as dlperf's torch backend does on CPU (see its build())
model = ResNet50(1000).train()
if compiled == "1":
    model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, 1000, (batch,))
dtype = {"amp-bf16": torch.bfloat16}.get(precision)

def step():
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)  # after the forward, as dlperf's step (docs/fidelity.md)
    loss.backward()
    opt.step()
    return loss

for _ in range(warmup):
    step()
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        loss = step()
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert torch.isfinite(loss)
print(json.dumps({"throughput": batch * done / elapsed}))
