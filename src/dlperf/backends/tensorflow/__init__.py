"""TensorFlow 2 backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without TensorFlow.
"""

from typing import Any, Dict

from dlperf.worker.support import Support

KERAS_PRECISIONS = ("fp32", "amp-bf16", "amp-fp16")  # Keras mixed-precision policies
NOT_KERAS = ("bf16/fp16 without float32 master weights and int8 are not Keras mixed-precision "
             "policies; the tensorflow backend offers fp32, tf32 (GPU), amp-bf16, amp-fp16")

SUPPORT = Support(
    framework="tensorflow",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": KERAS_PRECISIONS, "infer": KERAS_PRECISIONS},
        "cuda": {"train": KERAS_PRECISIONS + ("tf32",), "infer": KERAS_PRECISIONS + ("tf32",)},
    },
    # compile off is still a graph: the step is a tf.function, never op-by-op eager
    modes={False: "tf.function graph", True: "XLA (tf.function jit_compile=True)"},
    reasons={
        "cpu/tf32": "precision tf32 needs a GPU (TensorFloat-32 is an Ampere+ tensor core "
                    "mode); this run is on the CPU",
        "bf16": NOT_KERAS, "fp16": NOT_KERAS, "int8": NOT_KERAS,
    },
)


def resolve_device(requested):
    # type: (str) -> str
    from dlperf.backends.tensorflow.workload import select_device
    return "cuda" if select_device(requested).startswith("/GPU") else "cpu"


def build(case):
    # type: (Dict[str, Any]) -> Any
    from dlperf.backends.tensorflow.backend import build as build_workload
    return build_workload(case)
