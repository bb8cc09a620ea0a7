"""MindSpore backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without MindSpore.
"""

import os
from typing import Tuple

from dlperf.backends.common import CPU_TF32
from dlperf.backends.contract import Backend
from dlperf.worker.support import Support, Wire

# What MindSpore 2.10's CPU backend does with the low precisions, reproduced with both models in
# both modes (tests/backends/test_env_mindspore.py forces each past this declaration and checks it).
# bfloat16: no CPU kernel at all, a TypeError at kernel selection.
CPU_AMP_BF16 = ("mindspore.amp (level auto, bfloat16) cannot run on MindSpore 2.10's CPU "
                "backend, which has no bfloat16 kernels for the convolutions and matrix "
                "products: ResNet-50 fails with \"Select CPU operator[Conv2D] fail! Unsupported "
                "data type! The supported data types are input[Float32 Float32], "
                "output[Float32]\" and BERT with \"Select CPU operator[MatMul] fail! "
                "Unsupported data type!\"")
CPU_BF16 = ("the whole network cast to bfloat16 (mindspore.amp level O3) cannot run on MindSpore "
            "2.10's CPU backend: ResNet-50 fails with \"Select CPU operator[Conv2D] fail! "
            "Unsupported data type!\" in PYNATIVE_MODE and with \"For primitive[BatchNorm], the "
            "input argument[input_x] must be a type of {Tensor[Float16], Tensor[Float32]}, but "
            "got Tensor[BFloat16].\" in GRAPH_MODE, BERT with \"Select CPU operator[Gather] "
            "fail! Unsupported data type!\" (its embedding lookup)")
# float16: it runs, but not in float16: the CPU registers Conv2D (and its backprops), MatMul and
# BatchMatMul for Float32 only, and kernel selection quietly picks those and casts around them.
CPU_FP16 = ("MindSpore 2.10's CPU backend has no float16 kernels for Conv2D (nor its backprops), "
            "MatMul or BatchMatMul (\"The supported data types are input[Float32 Float32], "
            "output[Float32]\" for Conv2D); given float16 inputs its kernel selection picks the "
            "Float32 kernels (logged as \"kernel attr info: input[Tensor Float32,Tensor "
            "Float32,...]\") and inserts Float16->Float32->Float16 casts around them "
            "(insert_cast_cpu), so a float16 label would measure float32 arithmetic plus casts")
NO_GPU = ("the mindspore backend runs MindSpore's CPU backend only: the pinned mindspore 2.10.0 "
          "wheel's GPU plugin needs CUDA 11 system libraries (libcudart.so.11.0, libcudnn.so.8) "
          "that the environment does not install, and it has not been verified on a GPU")

SUPPORT = Support(
    framework="mindspore",
    models=("resnet50", "bert-base"),
    precisions={"cpu": {"train": ("fp32",), "infer": ("fp32",)}},
    modes={False: "PYNATIVE_MODE", True: "GRAPH_MODE"},
    # msrun + mindspore.communication.init() (MCCL, MindSpore's own CPU collectives),
    # ParallelMode.DATA_PARALLEL with gradients_mean, nn.DistributedGradReducer
    distributed=("cpu",),
    # measured on 2 emulated hosts (2026-12-02, Zen 4): 1.91-1.99x a ring's bytes a training step
    # (the median per case, benchmarks/data/link-rates-frameworks-zen4-2026-12-02) and 761-780 MiB a host where a
    # ring sends 378 (`dlperf collectives --emulate-hosts 2`); MCCL's all-reduce is a ring
    # (ps/core collective_ops_impl.cc: reduce-scatter then all-gather), so the second copy is
    # below it, in its transport (not read further), and is taken as the same at every N
    wire={"cpu": Wire(2.0, "MCCL's ring all-reduce over its ps::core transport, measured at "
                           "2 hosts: 1.91-1.99x a ring's bytes a step")},
    reasons={
        "cuda": "device cuda: " + NO_GPU,
        "cpu/amp-bf16": "precision amp-bf16: " + CPU_AMP_BF16,
        "cpu/bf16": "precision bf16: " + CPU_BF16,
        "cpu/amp-fp16": "precision amp-fp16 (mindspore.amp level auto, float16): " + CPU_FP16,
        "cpu/fp16": "precision fp16 (the whole network cast, mindspore.amp level O3): " + CPU_FP16,
        "cpu/tf32": CPU_TF32,
        "int8": "precision int8: the mindspore backend offers no int8; MindSpore's quantization "
                "lives in the separate MindSpore Golden Stick package (mindspore-gs), which the "
                "pinned environment does not include",
    },
)


def process_place():
    # type: () -> Tuple[int, int, int]
    """(rank, world size, local rank) as msrun names them for its workers (RANK_ID, RANK_SIZE,
    DEVICE_ID); one process outside msrun."""
    if os.environ.get("MS_ROLE") != "MS_WORKER":
        return 0, 1, 0
    return (int(os.environ.get("RANK_ID", "0")), int(os.environ.get("RANK_SIZE", "1")),
            int(os.environ.get("DEVICE_ID", "0")))


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.mindspore.workload:resolve_device",
    build="dlperf.backends.mindspore.backend:build",
    build_info="dlperf.backends.mindspore.buildinfo:build_info",
    gather_results="dlperf.backends.mindspore.workload:gather_results",
    profiler="dlperf.backends.mindspore.profiling:MindSporeProfiler",
    process_place=process_place,
    launcher="dlperf.launchers.mindspore:Msrun",
)
