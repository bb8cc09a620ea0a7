"""Fidelity check: dlperf's median throughput / a bare hand-written PyTorch loop's.

Both sides train the same ResNet-50 v1.5 with the same settings (SGD momentum, channels_last,
autocast when asked, synthetic data made once), time the same way (warm-up, then a window), and
run in fresh processes, interleaved A/B/A/B so that any drift of the machine hits both equally.
A ratio within 0.97-1.03 means the harness adds nothing and inflates nothing.

    python benchmarks/fidelity_torch.py --precision amp-bf16 --pairs 3 --steps 40
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BARE_LOOP = r"""
import json, sys, time
import torch
import torch.nn.functional as F
from dlperf.backends.torch.resnet import ResNet50

batch, size, warmup, steps, precision, compiled = sys.argv[1:7]
batch, size, warmup, steps = int(batch), int(size), int(warmup), int(steps)
torch.manual_seed(0)
torch.set_flush_denormal(True)  # as dlperf's torch backend does on CPU (see its build())
model = ResNet50(1000).to(memory_format=torch.channels_last).train()
if compiled == "1":
    model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,))
dtype = {"amp-bf16": torch.bfloat16}.get(precision)

def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

for _ in range(warmup):
    step()
start = time.perf_counter()
for _ in range(steps):
    loss = step()
elapsed = time.perf_counter() - start
assert torch.isfinite(loss)
print(json.dumps({"throughput": batch * steps / elapsed}))
"""


def bare(args: argparse.Namespace) -> float:
    src = Path(__file__).resolve().parent.parent / "src"
    proc = subprocess.run(
        [sys.executable, "-c", BARE_LOOP, str(args.batch_size), str(args.image_size),
         str(args.warmup_steps), str(args.steps), args.precision, "1" if args.compile else "0"],
        capture_output=True, text=True, check=True, env={"PYTHONPATH": str(src),
                                                        "PATH": "/usr/bin:/bin"})
    return json.loads(proc.stdout.strip().splitlines()[-1])["throughput"]


def harness(args: argparse.Namespace, db: Path, out: Path) -> float:
    subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model",
         "resnet50", "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
         "--precision", args.precision, "--warmup-steps", str(args.warmup_steps), "--steps",
         str(args.steps), "--repeats", "1", "--db", str(db), "--json", str(out)]
        + (["--compile"] if args.compile else []), capture_output=True, text=True, check=True)
    return json.loads(out.read_text())["throughput"]["median"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="amp-bf16", choices=("fp32", "amp-bf16"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, out = Path(tmp) / "fidelity.db", Path(tmp) / "r.json"
        bare_runs, dlperf_runs = [], []
        for pair in range(args.pairs):
            bare_runs.append(bare(args))
            dlperf_runs.append(harness(args, db, out))
            print(f"pair {pair + 1}: bare {bare_runs[-1]:.2f}  dlperf {dlperf_runs[-1]:.2f} "
                  "samples/s", flush=True)
    ratio = statistics.median(dlperf_runs) / statistics.median(bare_runs)
    print(json.dumps({"precision": args.precision, "bare": bare_runs, "dlperf": dlperf_runs,
                      "bare_median": statistics.median(bare_runs),
                      "dlperf_median": statistics.median(dlperf_runs), "ratio": ratio}))


if __name__ == "__main__":
    main()
