"""PyTorch backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without torch's start-up.
"""

from dlperf.backends.contract import Backend
from dlperf.worker.support import Option, Packing, Support

VISION = ("resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet", "googlenet")
LOW_PRECISION_INFERENCE = ("bf16", "fp16", "int8")  # whole-model casts and quantization

SUPPORT = Support(
    framework="torch",
    models=VISION + ("bert-base", "gpt", "wide-deep", "face-resnet50"),
    precisions={
        "cpu": {"train": ("fp32", "amp-bf16", "amp-fp16"),
                "infer": ("fp32", "amp-bf16", "amp-fp16") + LOW_PRECISION_INFERENCE},
        "cuda": {"train": ("fp32", "tf32", "amp-bf16", "amp-fp16"),
                 # no int8: the backend's int8 is FX static quantization on x86 CPU kernels
                 "infer": ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16")},
    },
    modes={False: "eager", True: "torch.compile"},
    distributed=("cpu", "cuda"),  # DDP through torchrun: gloo on CPUs, NCCL on GPUs
    # --launcher horovod: horovodrun starts the ranks, hvd.DistributedOptimizer averages their
    # gradients (:mod:`.horovod`), in the torch+horovod environment
    launchers=("native", "horovod"),
    data_pipeline="torch.utils.data.DataLoader",
    loaders={"dali": "NVIDIA DALI: fn.readers.file, fn.decoders.image (mixed on a GPU, cpu "
                     "otherwise), random_resized_crop, crop_mirror_normalize, "
                     "DALIGenericIterator"},
    options={"memory_format": Option(("channels_last", "contiguous"), (
        "the layout of a convolutional network's weights and images: channels_last (NHWC in "
        "memory; the default on a GPU) or contiguous (NCHW, PyTorch's own default and the "
        "torchvision reference recipe's; the default on a CPU); which is faster depends on "
        "the device, the threads and the shapes (docs/fidelity.md)"),
        models=VISION + ("face-resnet50",))},
    packing={kind: Packing("torch.nn.parallel.DistributedDataParallel's bucket_cap_mb "
                           "default 25 MiB; its first bucket 1 MiB", bucket_bytes=25 << 20)
             for kind in ("cpu", "cuda")},
    reasons={
        "cpu/tf32": "precision tf32 needs a CUDA device; this run is on cpu",
        "train/bf16": "precision bf16 is an inference precision in the torch backend (the whole "
                      "model cast); for training use amp-bf16",
        "train/fp16": "precision fp16 is an inference precision in the torch backend (the whole "
                      "model cast); for training use amp-fp16",
        "cuda/int8": "precision int8 on cuda: the torch backend's int8 is FX graph-mode static "
                     "quantization, whose quantized kernels (fbgemm, oneDNN) run on x86 CPUs "
                     "only; for int8 on a GPU use --framework onnxruntime (CUDA or TensorRT "
                     "execution provider)",
        "train/int8": "precision int8 is an inference precision in the torch backend "
                      "(post-training quantization); there is no int8 training",
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.torch.workload:resolve_device",
    build="dlperf.backends.torch.backend:build",
    build_info="dlperf.backends.torch.buildinfo:build_info",
    gather_results="dlperf.backends.torch.horovod:gather_results",
    profiler="dlperf.backends.torch.profiling:TorchProfiler",
    launcher="dlperf.launchers.torch:Torchrun",
)
