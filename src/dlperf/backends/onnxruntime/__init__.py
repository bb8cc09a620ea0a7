"""ONNX Runtime backend (inference of the torch backend's exported models): what it runs
(``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without onnxruntime.
"""

from dlperf.backends.contract import Backend
from dlperf.worker.support import Support

ONE_PRECISION = ("onnxruntime runs a whole graph in one precision: use fp32, fp16, bf16 or "
                 "int8 (amp-* is PyTorch autocast)")

SUPPORT = Support(
    framework="onnxruntime",
    models=("resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet", "googlenet",
            "bert-base"),
    tasks=("infer",),
    precisions={
        # bf16: the CPU execution provider has no bfloat16 Conv/MatMul kernels (1.31)
        "cpu": {"infer": ("fp32", "fp16", "int8")},
        "cuda": {"infer": ("fp32", "fp16", "bf16", "int8")},
    },
    modes={False: "InferenceSession (graph optimisations always on)"},
    reasons={
        "train": "onnxruntime is an inference engine; task 'train' is not supported",
        "compile=on": "onnxruntime has no separate compile step (its graph optimisations are "
                      "always on); run without --compile",
        "amp-bf16": "precision amp-bf16 is PyTorch autocast; " + ONE_PRECISION,
        "amp-fp16": "precision amp-fp16 is PyTorch autocast; " + ONE_PRECISION,
        "cpu/bf16": "precision bf16: onnxruntime's CPUExecutionProvider has no bfloat16 "
                    "Conv/MatMul kernels; use fp16 or int8 on a CPU, bf16 on cuda",
        "tf32": "precision tf32 is a CUDA matmul mode of PyTorch, not an onnxruntime precision",
        "distributed/cpu": "the onnxruntime backend runs one process on one device",
        "distributed/cuda": "the onnxruntime backend runs one process on one device",
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.onnxruntime.backend:resolve_device",
    build="dlperf.backends.onnxruntime.backend:build",
    build_info="dlperf.backends.onnxruntime.buildinfo:build_info",
    profiler="dlperf.backends.onnxruntime.profiling:OrtProfiler",
)
