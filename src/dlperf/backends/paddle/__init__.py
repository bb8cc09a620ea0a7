"""PaddlePaddle backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without Paddle.
"""

import os
from typing import Tuple

from dlperf.backends.contract import Backend
from dlperf.worker.support import Packing, Support

CPU_AMP = ("paddle.amp.auto_cast has no effect on CPU in paddle 3.3.1 (it only casts on "
           "CUDA/XPU/custom devices; ops stay float32), so a low-precision label would measure "
           "fp32")
GPU = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16")

SUPPORT = Support(
    framework="paddle",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": ("fp32",), "infer": ("fp32",)},
        "cuda": {"train": GPU, "infer": GPU},
    },
    modes={False: "dygraph", True: "paddle.jit.to_static (SOT)"},
    # paddle.distributed.launch + paddle.DataParallel: gloo on CPUs, NCCL on GPUs
    distributed=("cpu", "cuda"),
    data_pipeline="paddle.io.DataLoader (worker processes, shared memory, batches prefetched)",
    packing={kind: Packing("paddle.DataParallel's comm_buffer_size default 25 MiB; its "
                           "last_comm_buffer_size 1 MiB", bucket_bytes=25 << 20)
             for kind in ("cpu", "cuda")},
    reasons={
        "cpu/tf32": "precision tf32 needs a CUDA device; this run is on cpu",
        "cpu/amp-bf16": "precision amp-bf16: " + CPU_AMP,
        "cpu/amp-fp16": "precision amp-fp16: " + CPU_AMP,
        "cpu/bf16": "precision bf16: " + CPU_AMP,
        "cpu/fp16": "precision fp16: " + CPU_AMP,
        "int8": "int8 training is not offered by paddle.amp",
    },
)


def process_place():
    # type: () -> Tuple[int, int, int]
    """(rank, world size, local rank) as paddle.distributed.launch names them."""
    return (int(os.environ.get("PADDLE_TRAINER_ID", "0")),
            int(os.environ.get("PADDLE_TRAINERS_NUM", "1")),
            int(os.environ.get("PADDLE_LOCAL_RANK", "0")))


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.paddle.workload:resolve_device",
    build="dlperf.backends.paddle.backend:build",
    build_info="dlperf.backends.paddle.buildinfo:build_info",
    gather_results="dlperf.backends.paddle.workload:gather_results",
    profiler="dlperf.backends.paddle.profiling:PaddleProfiler",
    process_place=process_place,
    launcher="dlperf.launchers.paddle:PaddleLaunch",
)
