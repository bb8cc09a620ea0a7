"""Device, precision and the step wrapper shared by every TensorFlow 2.x model.

Precision goes through Keras mixed precision (``mixed_bfloat16`` / ``mixed_float16`` global
policies, variables stay float32, ``LossScaleOptimizer`` for fp16). ``fp32`` switches TF32 off on
GPUs (TensorFlow enables it by default on Ampere and later) so it really is IEEE fp32.
"""

import os
from typing import Any, Callable, Dict, Optional

import keras
import tensorflow as tf

from dlperf.backends.common import CollectiveRanks, check_device_name
from dlperf.worker.support import CPU_BUILD, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

POLICIES = {"fp32": "float32", "tf32": "float32", "amp-bf16": "mixed_bfloat16",
            "amp-fp16": "mixed_float16"}


def select_device(requested):
    # type: (str) -> str
    """'/GPU:0' or '/CPU:0'. Must run before TensorFlow initialises its devices."""
    check_device_name(requested)
    _size_thread_pools()
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cuda" and not gpus:
        raise UnsupportedError("device cuda requested but tensorflow %s sees no GPU (this is "
                               "the tensorflow-cpu build or no GPU is present)" % tf.__version__)
    if requested == "cpu" and gpus:
        tf.config.set_visible_devices([], "GPU")
        gpus = []
    if gpus:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        return "/GPU:0"
    return "/CPU:0"


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name, or why the CPU."""
    if select_device(requested).startswith("/GPU"):
        gpu = tf.config.list_physical_devices("GPU")[0]
        details = tf.config.experimental.get_device_details(gpu)
        return resolved_device("cuda", 0, details.get("device_name"))
    if not tf.test.is_built_with_cuda():
        return resolved_device("cpu", reason=CPU_BUILD % ("tensorflow", "tensorflow"))
    return resolved_device("cpu", reason="tensorflow %s (a CUDA build) sees no GPU (driver, "
                                         "CUDA_VISIBLE_DEVICES)" % tf.__version__)


def _size_thread_pools():
    # type: () -> None
    """TensorFlow's intra-/inter-op pools from the worker's per-process thread count (the
    variables dlperf.worker.placement sets), through TensorFlow's own API so that it reports
    them back; before its runtime starts."""
    for variable, setter in (("TF_NUM_INTRAOP_THREADS",
                              tf.config.threading.set_intra_op_parallelism_threads),
                             ("TF_NUM_INTEROP_THREADS",
                              tf.config.threading.set_inter_op_parallelism_threads)):
        value = os.environ.get(variable, "").strip()
        if value.isdigit() and int(value) > 0:
            try:
                setter(int(value))
            except RuntimeError:  # the runtime already started (a second build in a process)
                pass


def set_precision(name, device):
    # type: (str, str) -> Dict[str, Any]
    """Set the global Keras dtype policy (before any layer is built); return facts to record."""
    gpu = device.startswith("/GPU")  # which precisions run where: SUPPORT in __init__
    if gpu:
        tf.config.experimental.enable_tensor_float_32_execution(name == "tf32")
    keras.mixed_precision.set_global_policy(POLICIES[name])
    return {"precision": name, "keras_policy": POLICIES[name],
            "loss_scale": "dynamic" if name == "amp-fp16" else None,
            "tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()) if gpu
            else None}


def count_params(variables):
    # type: (Any) -> int
    """Unique trainable parameters (a tied variable counts once)."""
    seen = {}  # type: Dict[int, int]
    for v in variables:
        seen[id(v)] = int(v.shape.num_elements() if hasattr(v.shape, "num_elements")
                          else _prod(v.shape))
    return sum(seen.values())


def _prod(shape):
    # type: (Any) -> int
    out = 1
    for d in shape:
        out *= int(d)
    return out


def unique(variables):
    # type: (Any) -> list
    out, seen = [], set()
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out




def onednn_enabled():
    # type: () -> Optional[bool]
    """Whether this TensorFlow runs oneDNN's kernels, as TensorFlow decides it (its build and
    TF_ENABLE_ONEDNN_OPTS, read once); None where the private query is missing."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def runtime_info(device):
    # type: (str) -> Dict[str, Any]
    build = tf.sysconfig.get_build_info()
    info = {
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "device": device,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or "default",
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads() or "default",
        "num_threads": tf.config.threading.get_intra_op_parallelism_threads() or None,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 Linux)"),
        "onednn_enabled": onednn_enabled(),
        "cuda_build": bool(build.get("is_cuda_build", False)),
    }  # type: Dict[str, Any]
    if device.startswith("/GPU"):
        details = tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[0])
        info["device_name"] = details.get("device_name")
        info["compute_capability"] = details.get("compute_capability")
        info["cuda_version"] = build.get("cuda_version")
        info["cudnn_version"] = build.get("cudnn_version")
    else:
        info["device_name"] = cpu_name()
    return info


class TFWorkload(CollectiveRanks, Workload):
    """A traced ``tf.function`` step over data already on the device.

    TensorFlow returns from a function call once its ops are enqueued; ``.numpy()`` on the loss
    waits for them, so ``sync`` fetches the last loss (and on a GPU also waits for every device
    stream, where the API exists).
    """

    def __init__(self, step_fn, device, samples_per_step, params, info, collectives=None,
                 trainable=()):
        # type: (Callable[[], Any], str, int, int, Dict[str, Any], Any, Any) -> None
        self._step_fn = step_fn
        self._collectives = collectives  # distribute.Collectives with several replicas
        # the model's trainable variables, in build order: what a test of the data-parallel
        # step reads and loads around one step (tests/dp_step.py); the timed loop never does
        self.trainable = tuple(trainable)
        self._last = None  # type: Any
        self.device = device
        self.gpu = device.startswith("/GPU")
        super(TFWorkload, self).__init__(samples_per_step, params, info)

    def step(self):
        # type: () -> Any
        self._last = self._step_fn()
        return self._last

    def sync(self):
        # type: () -> None
        if self._last is not None:
            self._last.numpy()
        if self.gpu:
            sync_devices = getattr(tf.test.experimental, "sync_devices", None)
            if sync_devices is not None:
                sync_devices()

    def allreduce_probe(self):
        # type: () -> Optional[float]
        if self._collectives is None:
            return None
        return self._collectives.allreduce_seconds(self.params, median_seconds)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.numpy())

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.tensorflow.profiling import TFProfiler

        return TFProfiler(self.gpu)

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        """The highest peak among this process's GPUs (several with MirroredStrategy)."""
        if not self.gpu:
            return None
        return max(int(tf.config.experimental.get_memory_info("GPU:%d" % i)["peak"])
                   for i in range(len(tf.config.get_visible_devices("GPU"))))

    def reset_device_peak(self):
        # type: () -> bool
        if not self.gpu:
            return False
        for i in range(len(tf.config.get_visible_devices("GPU"))):
            tf.config.experimental.reset_memory_stats("GPU:%d" % i)
        return True
