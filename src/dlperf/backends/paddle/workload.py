"""Device, threads, precision, compilation and the Workload shared by every Paddle model.

The model files only describe networks; everything that changes *how* they run (auto_cast O1/O2,
GradScaler, TF32 flags, ``paddle.jit.to_static``, CPU threads) lives here so every model is
measured under the same rules.

Import order matters: :func:`prepare_process` must run before ``import paddle`` (the package's
``__init__`` does that), because Paddle reads ``OMP_NUM_THREADS`` and its glog level once, at
import.
"""

import contextlib
import os
import warnings
from typing import Any, Callable, Dict, Optional

# precision -> (auto_cast level, dtype); O1 = per-op casts with fp32 weights, O2 = low-precision
# weights with fp32 master copies (paddle.amp.decorate)
AMP = {
    "amp-bf16": ("O1", "bfloat16"),
    "amp-fp16": ("O1", "float16"),
    "bf16": ("O2", "bfloat16"),
    "fp16": ("O2", "float16"),
}  # type: Dict[str, Any]
THREADS_SET_BY_DLPERF = "DLPERF_PADDLE_THREADS_SET"


def available_cpus():
    # type: () -> int
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def prepare_process():
    # type: () -> None
    """Quiet Paddle's C++ logging and give its CPU kernels every available core.

    Paddle forces ``OMP_NUM_THREADS=1`` at import unless it is set (it expects one process per
    core for data parallelism), which would make every CPU result single-threaded while the
    other frameworks use all cores. A value the user set is respected and recorded.
    """
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("GLOG_v", "0")
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(available_cpus())
        os.environ[THREADS_SET_BY_DLPERF] = "1"
    warnings.filterwarnings("ignore", message="No ccache found")
    # printed once per BatchNorm / tensor while to_static traces; nothing to act on
    warnings.filterwarnings("ignore", message="When training, we now always track")
    warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface")


prepare_process()

import paddle  # noqa: E402  (after prepare_process, on purpose)

from dlperf.worker.workload import UnsupportedError, Workload, cpu_name  # noqa: E402


def world_size():
    # type: () -> int
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank():
    # type: () -> int
    return int(os.environ.get("RANK", "0"))


def select_device(requested):
    # type: (str) -> str
    """Resolve ``auto``/``cpu``/``cuda`` and make it Paddle's current device; returns its name."""
    if requested not in ("auto", "cpu", "cuda"):
        raise UnsupportedError("unknown device %r; allowed: auto, cpu, cuda" % requested)
    has_cuda = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if requested == "cuda" and not has_cuda:
        raise UnsupportedError(
            "device cuda requested but paddle %s sees no CUDA device (CPU build or no GPU)"
            % paddle.__version__)
    if requested == "cpu" or not has_cuda:
        paddle.device.set_device("cpu")
        return "cpu"
    name = "gpu:%d" % int(os.environ.get("LOCAL_RANK", "0"))
    paddle.device.set_device(name)
    return name


class Precision(object):
    """What a precision name means in Paddle on a device: auto_cast level and dtype, scaler,
    TF32 flags. Refuses, at build time, a combination Paddle would silently run in fp32."""

    def __init__(self, name, device):
        # type: (str, str) -> None
        self.name = name  # which precisions run where: SUPPORT in __init__
        self.gpu = device.startswith("gpu")
        self.level, self.dtype = AMP.get(name, (None, None))
        if self.gpu:
            # cuBLAS/cuDNN may use TF32 for fp32; "fp32" must mean IEEE fp32.
            allow = name == "tf32"
            for flag in ("FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn"):
                try:
                    paddle.set_flags({flag: allow})
                except (ValueError, RuntimeError):
                    pass
        self.scaler = None  # type: Optional[Any]
        if self.dtype is not None:
            self._probe()
            if self.dtype == "float16":
                self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0 ** 15)

    def _probe(self):
        # type: () -> None
        """auto_cast only warns and stays fp32 where Paddle has no AMP (e.g. on CPU): check
        that a matmul really comes out in the asked dtype, or refuse the case."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                a = paddle.ones([4, 4])
                with paddle.amp.auto_cast(level="O1", dtype=self.dtype):
                    out = paddle.matmul(a, a)
                got = str(out.dtype).replace("paddle.", "")
            except (RuntimeError, ValueError) as exc:
                raise UnsupportedError("precision %s: paddle %s cannot auto_cast to %s here: %s"
                                       % (self.name, paddle.__version__, self.dtype, exc))
        if got != self.dtype:
            raise UnsupportedError(
                "precision %s: paddle.amp.auto_cast has no effect on %s in paddle %s "
                "(it only casts on CUDA/XPU/custom devices; ops stay %s)"
                % (self.name, paddle.device.get_device(), paddle.__version__, got))

    def decorate(self, model, optimizer):
        # type: (Any, Any) -> Any
        """O2: cast the weights to the low dtype, keeping fp32 master weights in the optimizer."""
        if self.level != "O2":
            return model, optimizer
        if optimizer is None:
            return paddle.amp.decorate(models=model, level="O2", dtype=self.dtype), None
        return paddle.amp.decorate(models=model, optimizers=optimizer, level="O2",
                                   dtype=self.dtype, master_weight=True)

    def autocast(self):
        # type: () -> Any
        if self.dtype is None:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(level=self.level, dtype=self.dtype)

    def info(self):
        # type: () -> Dict[str, Any]
        return {
            "precision": self.name,
            "amp_level": self.level,
            "amp_dtype": self.dtype,
            "grad_scaler": self.scaler is not None,
        }


def compile_model(layer):
    # type: (Any) -> Any
    """``paddle.jit.to_static`` on the whole forward-and-loss Layer (AST transcription into one
    static program; the backward runs as that program's gradient). CINN where Paddle was built
    with it, as ``to_static`` would choose by default; the plain PIR executor otherwise."""
    backend = "CINN" if paddle.is_compiled_with_cinn() else None
    return paddle.jit.to_static(layer, full_graph=True, backend=backend), {
        "compile_mode": "paddle.jit.to_static(full_graph=True)",
        "compile_backend": backend or "PIR executor (no CINN in this build)",
    }


class PaddleWorkload(Workload):
    """A forward-and-loss Layer, its optimizer, and one synthetic batch already on the device.

    ``forward_loss()`` runs the (possibly to_static) Layer on the stored batch and returns the
    loss (training) or a scalar summary of the output (inference); autocast, scaler, backward
    and the optimizer step are applied here identically for every model.
    """

    def __init__(self, forward_loss, optimizer, precision, device, samples_per_step, params,
                 info):
        # type: (Callable[[], Any], Any, Precision, str, int, int, Dict[str, Any]) -> None
        self.forward_loss = forward_loss
        self.optimizer = optimizer
        self.precision = precision
        self.device = device
        self.samples_per_step = samples_per_step
        self.params = params
        self.info = info

    def step(self):
        # type: () -> Any
        if self.optimizer is None:
            with paddle.no_grad(), self.precision.autocast():
                return self.forward_loss()
        with self.precision.autocast():
            loss = self.forward_loss()
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)  # unscales, then clips and steps in the optimizer
            scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.clear_grad(set_to_zero=False)
        return loss

    def sync(self):
        # type: () -> None
        """Wait for the device's queue. Paddle's CPU kernels (dygraph and the static executor
        alike) finish before the call that launched them returns, so there is nothing to wait
        for on a CPU, and ``paddle.device.synchronize`` refuses a CPU place."""
        if not self.device.startswith("cpu"):
            paddle.device.synchronize()

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.astype("float32").item())

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if self.device.startswith("gpu"):
            return int(paddle.device.cuda.max_memory_allocated())
        return None


def count_params(model):
    # type: (Any) -> int
    """Unique trainable parameters; ``parameters()`` yields a tied tensor once."""
    total = 0
    for p in model.parameters():
        if not p.stop_gradient:
            n = 1
            for d in p.shape:
                n *= int(d)
            total += n
    return total




def runtime_info(device):
    # type: (str) -> Dict[str, Any]
    """Facts about this Paddle and device that change performance and belong with a result."""
    info = {
        "paddle_version": paddle.__version__,
        "paddle_commit": getattr(paddle.version, "commit", None),
        "device": device,
        "omp_num_threads": int(os.environ.get("OMP_NUM_THREADS", "1")),
        "omp_threads_set_by": "dlperf (all available CPUs; Paddle's own default is 1)"
        if os.environ.get(THREADS_SET_BY_DLPERF) else "the user (OMP_NUM_THREADS)",
        "onednn": bool(paddle.get_flags(["FLAGS_use_mkldnn"])["FLAGS_use_mkldnn"]),
        "cinn": paddle.is_compiled_with_cinn(),
        "world_size": world_size(),
        "rank": rank(),
    }  # type: Dict[str, Any]
    if device.startswith("gpu"):
        info["device_name"] = paddle.device.cuda.get_device_name()
        info["cuda_version"] = paddle.version.cuda()
        info["cudnn_version"] = paddle.version.cudnn()
    else:
        info["device_name"] = cpu_name()
    return info
