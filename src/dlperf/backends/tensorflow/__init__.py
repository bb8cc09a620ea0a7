"""TensorFlow 2 backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without TensorFlow.
"""

from dlperf.backends.contract import Backend
from dlperf.worker.support import Option, Packing, Support

KERAS_PRECISIONS = ("fp32", "amp-bf16", "amp-fp16")  # Keras mixed-precision policies
NOT_KERAS = ("bf16/fp16 without float32 master weights and int8 are not Keras mixed-precision "
             "policies; the tensorflow backend offers fp32, tf32 (GPU), amp-bf16, amp-fp16")

XLA_CPU_COLLECTIVES = (
    "--compile (XLA) with several CPU processes: TensorFlow cannot compile the gradient "
    "all-reduce for CPU devices (\"Collectives are not yet implemented for CPU devices when "
    "compiling with XLA\"; the RING collective is not compilable at all), so data-parallel "
    "XLA runs on GPUs (NCCL) only; run the CPU processes without --compile")

SUPPORT = Support(
    framework="tensorflow",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": KERAS_PRECISIONS, "infer": KERAS_PRECISIONS},
        "cuda": {"train": KERAS_PRECISIONS + ("tf32",), "infer": KERAS_PRECISIONS + ("tf32",)},
    },
    # compile off is still a graph: the step is a tf.function, never op-by-op eager
    modes={False: "tf.function graph", True: "XLA (tf.function jit_compile=True)"},
    # tf.distribute: MultiWorkerMirroredStrategy from TF_CONFIG over the processes dlperf.launchers.spawn
    # starts (collective ops, RING on CPUs); GPUs: MirroredStrategy over a node's GPUs, and
    # MultiWorkerMirroredStrategy with NCCL across nodes
    distributed=("cpu", "cuda"),
    data_pipeline="tf.data (parallel map, AUTOTUNE prefetch)",
    # read by TensorFlow when it is imported, so the launcher sets it (harness side)
    options={"onednn": Option(("on", "off"), (
        "TensorFlow's oneDNN optimizations on the CPU (TF_ENABLE_ONEDNN_OPTS, read once when "
        "TensorFlow is imported; TensorFlow's default is on on x86 Linux): on rewrites the "
        "graph's convolutions, matmuls, batch norms and their fused activations into oneDNN "
        "kernels; off keeps TensorFlow's own Eigen kernels, which can win at small shapes or "
        "few threads, where oneDNN's layout conversions cost more than its kernels save "
        "(recorded as onednn_enabled, TensorFlow's own answer)"),
        variables={"on": {"TF_ENABLE_ONEDNN_OPTS": "1"}, "off": {"TF_ENABLE_ONEDNN_OPTS": "0"}})},
    # the strategy's CommunicationOptions leave bytes_per_pack 0: cross_device_utils.group_by_size
    # puts every gradient in one pack, all-reduced as one concatenated tensor inside tf.function
    packing={kind: Packing("tf.distribute's CommunicationOptions bytes_per_pack default 0: one "
                           "pack of every gradient, concatenated", whole=True)
             for kind in ("cpu", "cuda")},
    reasons={
        # not a key SUPPORT.check reads: the backend raises it when the combination arrives
        "distributed/cpu/compile=on": XLA_CPU_COLLECTIVES,
        "cpu/tf32": "precision tf32 needs a GPU (TensorFloat-32 is an Ampere+ tensor core "
                    "mode); this run is on the CPU",
        "bf16": NOT_KERAS, "fp16": NOT_KERAS, "int8": NOT_KERAS,
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.tensorflow.workload:resolve_device",
    build="dlperf.backends.tensorflow.backend:build",
    build_info="dlperf.backends.tensorflow.buildinfo:build_info",
    gather_results="dlperf.backends.tensorflow.distribute:gather_results",
    profiler="dlperf.backends.tensorflow.profiling:TFProfiler",
    launcher="dlperf.launchers.tensorflow:TFConfigLauncher",
)
