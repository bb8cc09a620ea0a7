"""OneFlow 0.9.0 backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without OneFlow.

Why only fp32 is declared on a CPU: with oneflow 0.9.0 from PyPI (its CUDA 11.7 wheel, which
also runs on a CPU), ``oneflow.autocast(device_type="cpu", dtype=...)`` warns "CPU
autocast is not supported currently. Disabling autocast." and a matmul under it stays float32;
in an ``nn.Graph``, ``config.enable_amp(True, dtype=...)`` compiles a graph without a single
cast op on a CPU (every op float32); a bfloat16 or float16 Conv2d or Linear has no CPU kernel
("Cannot find the kernel matching Current OperatorConf", DataType kBFloat16 / kFloat16).
So on a CPU only fp32 runs, in eager and in ``nn.Graph``.
"""

from dlperf.backends.common import CPU_TF32
from dlperf.backends.contract import Backend
from dlperf.worker.support import Packing, Support

CPU_AMP = ("oneflow 0.9.0 has no mixed precision on a CPU: oneflow.autocast(device_type='cpu') "
           "warns 'CPU autocast is not supported currently. Disabling autocast.' and ops stay "
           "float32, and nn.Graph's config.enable_amp inserts no casts on a CPU (the compiled "
           "graph stays float32), so a low-precision label would measure fp32")


def _no_kernel(dtype):
    # type: (str) -> str
    return ("oneflow 0.9.0 has no %s convolution or matmul kernels on a CPU: a model cast to "
            "%s fails with 'Cannot find the kernel matching Current OperatorConf' (conv2d, "
            "DeviceType_Name: kCPU, DataType_Name of in_0: k%s)"
            % (dtype, dtype, "BFloat16" if dtype == "bfloat16" else "Float16"))


NO_GPU = ("oneflow 0.9.0's only PyPI wheel is a CUDA 11.7 build whose GPU kernels are compiled "
          "for sm_60 to sm_86 only (no sm_90 code, no PTX), so it cannot run on Hopper GPUs, "
          "and it has not been verified on any GPU here; the oneflow backend runs on cpu only")

SUPPORT = Support(
    framework="oneflow",
    models=("resnet50", "bert-base"),
    precisions={"cpu": {"train": ("fp32",), "infer": ("fp32",)}},
    modes={False: "eager",
           True: "nn.Graph (forward, backward and optimizer in one graph)"},
    # oneflow.distributed.launch; eager: flow.nn.parallel.DistributedDataParallel, nn.Graph:
    # global tensors (parameters broadcast, batch split); OneFlow's own CPU collectives
    distributed=("cpu",),
    # eager DDP fills a bucket of every 10 parameters (in reverse order) and all-reduces each
    # bucket once all its gradients are there; nn.Graph's gradient boxing is not read yet
    packing={"cpu/compile=off": Packing("flow.nn.parallel.DistributedDataParallel's bucket_size "
                                        "default 10 parameters: a local_all_reduce per bucket",
                                        tensors=10)},
    reasons={
        "cuda": NO_GPU,
        "cpu/tf32": CPU_TF32,
        "cpu/amp-bf16": "precision amp-bf16: " + CPU_AMP,
        "cpu/amp-fp16": "precision amp-fp16: " + CPU_AMP,
        "cpu/bf16": "precision bf16: " + _no_kernel("bfloat16"),
        "cpu/fp16": "precision fp16: " + _no_kernel("float16"),
        "train/int8": "precision int8: int8 training does not exist in OneFlow",
        "int8": "precision int8: oneflow 0.9.0 only simulates quantization "
                "(flow.nn.Quantization / FakeQuantization return float32 tensors, for "
                "quantization-aware training) and has no int8 convolution on a CPU: an int8 "
                "conv2d fails with 'Cannot find the kernel matching Current OperatorConf' "
                "(DataType_Name of in_0: kInt8)",
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.oneflow.workload:resolve_device",
    build="dlperf.backends.oneflow.backend:build",
    build_info="dlperf.backends.oneflow.buildinfo:build_info",
    gather_results="dlperf.backends.oneflow.workload:gather_results",
    profiler="dlperf.backends.oneflow.profiling:unavailable",
    launcher="dlperf.launchers.oneflow:OneFlowLaunch",
)
