"""``python tests/gpu/event_window.py``: the worker loop's timed window (worker/loop.py
``timed_window``: host clock between two device synchronisations) against CUDA events recorded
on the stream around the same window. Prints one JSON line: window_s, event_s, window_steps.
Runs where torch has CUDA (the torch cuda variant)."""

import json
import time

import torch

from dlperf import models
from dlperf.backends.torch.backend import build
from dlperf.worker.loop import timed_window


def main():
    # type: () -> None
    case = {"framework": "torch", "model": "resnet50", "task": "train", "batch_size": 32,
            "precision": "fp32", "compile": False, "device": "cuda", "seed": 0,
            "knobs": models.resolve_knobs("resnet50", {}), "devices": 1, "nnodes": 1,
            "warmup_steps": 5, "steps": 20}
    workload = build(case)
    for _ in range(5):
        workload.step()
    workload.sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    window = timed_window(workload, 20, 1.0, False, time.perf_counter)
    end.record()
    torch.cuda.synchronize()
    print(json.dumps({"window_s": window["window_s"], "window_steps": window["window_steps"],
                      "event_s": start.elapsed_time(end) / 1000.0}))


if __name__ == "__main__":
    main()
