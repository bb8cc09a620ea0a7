"""TensorFlow 1.15 backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only, valid Python 3.7): read without TensorFlow.
"""

from dlperf.backends.contract import Backend
from dlperf.worker.support import Packing, Support

NO_BF16 = ("precision amp-bf16: TensorFlow 1.15 has no bfloat16 mixed precision (its graph "
           "rewrite is fp16-only; the bf16 rewrite arrived in TF 2.x); use fp32 or the "
           "tensorflow backend")
ONLY_MIXED = "the tensorflow1 backend trains and infers in fp32 or amp-fp16 (GPU) only"

SUPPORT = Support(
    framework="tensorflow1",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": ("fp32",), "infer": ("fp32",)},
        "cuda": {"train": ("fp32", "amp-fp16"), "infer": ("fp32", "amp-fp16")},
    },
    modes={False: "Session graph", True: "XLA auto-clustering (global_jit_level ON_1)"},
    # the collective all-reduce strategy (MultiWorkerMirroredStrategy) from TF_CONFIG in graph
    # mode over the processes dlperf.launchers.spawn starts, RING collectives on CPUs; GPUs:
    # MirroredStrategy over a node's GPUs, the collective strategy with NCCL across nodes
    distributed=("cpu", "cuda"),
    # --launcher horovod: horovodrun starts one process per device, each a Session graph whose
    # optimizer is hvd.DistributedOptimizer (:mod:`.horovod`), in the tensorflow1+horovod env
    launchers=("native", "horovod"),
    # CollectiveAllReduce groups consecutive gradients by all_reduce_merge_scope (32) under one
    # name scope, whose CollectiveReduce ops the strategy's ScopedAllocator rewrite merges
    # (on GPUs one node runs MirroredStrategy, NCCL in one pack, and several MWMS: not declared)
    packing={"cpu": Packing("TF 1.15 CollectiveAllReduce's all_reduce_merge_scope default: a "
                            "CollectiveReduce per 32 gradients, merged by ScopedAllocator",
                            tensors=32)},
    reasons={
        "cpu/amp-fp16": "precision amp-fp16: TensorFlow 1.15's mixed precision graph rewrite "
                        "only converts GPU ops; this run is on the CPU",
        "amp-bf16": NO_BF16,
        "tf32": "precision tf32: TensorFlow 1.15 predates TF32 (CUDA 11, Ampere); use fp32",
        "bf16": ONLY_MIXED, "fp16": ONLY_MIXED, "int8": ONLY_MIXED,
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.tensorflow1.backend:resolve_device",
    build="dlperf.backends.tensorflow1.backend:build",
    build_info="dlperf.backends.tensorflow1.buildinfo:build_info",
    gather_results="dlperf.backends.tensorflow1.horovod:gather_results",
    profiler="dlperf.backends.tensorflow1.profiling:SessionProfiler",
    launcher="dlperf.launchers.tensorflow1:TF1ConfigLauncher",
)
