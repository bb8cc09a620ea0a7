"""MindSpore backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without MindSpore.
"""

from typing import Any, Dict

from dlperf.worker.support import Support

# MindSpore 2.10's own words when a bfloat16 kernel is asked of its CPU backend, reproduced with
# both models in both modes (TypeError at kernel selection)
CPU_AMP_BF16 = ("mindspore.amp (level auto, bfloat16) cannot run on MindSpore 2.10's CPU "
                "backend: it has no bfloat16 CPU kernels for the convolutions and matrix "
                "products; ResNet-50 fails with \"Select CPU operator[Conv2D] fail! Unsupported "
                "data type!\" and BERT with \"Select CPU operator[MatMul] fail! Unsupported data "
                "type!\"")
CPU_BF16 = ("the whole network cast to bfloat16 (mindspore.amp level O3) cannot run on MindSpore "
            "2.10's CPU backend: ResNet-50 fails with \"Select CPU operator[Conv2D] fail! "
            "Unsupported data type!\" in PYNATIVE_MODE and with \"For primitive[BatchNorm], the "
            "input argument[input_x] must be a type of {Tensor[Float16], Tensor[Float32]}, but "
            "got Tensor[BFloat16].\" in GRAPH_MODE, BERT with \"Select CPU operator[Gather] "
            "fail! Unsupported data type!\" (its embedding lookup)")
NO_GPU = ("the mindspore backend runs MindSpore's CPU backend only: the pinned mindspore 2.10.0 "
          "wheel's GPU plugin needs CUDA 11 system libraries (libcudart.so.11.0, libcudnn.so.8) "
          "that the environment does not install, and it has not been verified on a GPU")

SUPPORT = Support(
    framework="mindspore",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": ("fp32", "amp-fp16"), "infer": ("fp32", "amp-fp16", "fp16")},
    },
    modes={False: "PYNATIVE_MODE", True: "GRAPH_MODE"},
    reasons={
        "cuda": "device cuda: " + NO_GPU,
        "cpu/amp-bf16": "precision amp-bf16: " + CPU_AMP_BF16,
        "cpu/bf16": "precision bf16: " + CPU_BF16,
        "cpu/tf32": "precision tf32 needs a CUDA device (TensorFloat-32 tensor cores); this run "
                    "is on cpu",
        "cpu/train/bf16": "precision bf16 is an inference precision in the mindspore backend (the "
                          "whole network cast, amp level O3), and on a CPU it cannot run at all: "
                          + CPU_BF16,
        "train/fp16": "precision fp16 is an inference precision in the mindspore backend (the "
                      "whole network cast, amp level O3); for training use amp-fp16",
        "int8": "precision int8: the mindspore backend offers no int8; MindSpore's quantization "
                "lives in the separate MindSpore Golden Stick package (mindspore-gs), which the "
                "pinned environment does not include",
    },
)


def resolve_device(requested):
    # type: (str) -> str
    from dlperf.backends.mindspore.workload import select_device
    return select_device(requested)


def build(case):
    # type: (Dict[str, Any]) -> Any
    from dlperf.backends.mindspore.backend import build as build_workload
    return build_workload(case)
