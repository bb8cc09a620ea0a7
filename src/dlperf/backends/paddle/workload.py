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
from typing import Any, Callable, Dict, List, Optional

from dlperf.backends.common import check_device_name, element_count, gather_json
from dlperf.worker.cpus import default_omp_threads
from dlperf.worker import placement as cpu_placement

# precision -> (auto_cast level, dtype); O1 = per-op casts with fp32 weights, O2 = low-precision
# weights with fp32 master copies (paddle.amp.decorate)
AMP = {
    "amp-bf16": ("O1", "bfloat16"),
    "amp-fp16": ("O1", "float16"),
    "bf16": ("O2", "bfloat16"),
    "fp16": ("O2", "float16"),
}  # type: Dict[str, Any]
THREADS_SET_BY_DLPERF = "DLPERF_PADDLE_THREADS_SET"


def prepare_process():
    # type: () -> None
    """Quiet Paddle's C++ logging and give its CPU kernels every available core.

    Paddle forces ``OMP_NUM_THREADS=1`` at import unless it is set (it expects one process per
    core for data parallelism), which would make every CPU result single-threaded while the
    other frameworks use all cores. A value the user set is respected and recorded.
    """
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("GLOG_v", "0")
    default_omp_threads(THREADS_SET_BY_DLPERF)
    warnings.filterwarnings("ignore", message="No ccache found")
    # printed once per BatchNorm / tensor while to_static traces; nothing to act on
    warnings.filterwarnings("ignore", message="When training, we now always track")
    warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface")


prepare_process()

import numpy  # noqa: E402
import paddle  # noqa: E402  (after prepare_process, on purpose)

from dlperf.worker.support import CPU_BUILD, resolved_device  # noqa: E402
from dlperf.worker.workload import (  # noqa: E402
    UnsupportedError, Workload, cpu_name, median_seconds)


# ------------------------------------------------------------------------------------------------
# data parallelism: paddle.distributed.launch starts the ranks (PADDLE_TRAINER_ID, ...), the
# worker joins them with init_parallel_env (gloo on a CPU, NCCL on GPUs) and wraps the
# forward-and-loss Layer in paddle.DataParallel
# ------------------------------------------------------------------------------------------------


def launched_ranks():
    # type: () -> int
    """How many ranks paddle.distributed.launch started for this job (1 outside it)."""
    return int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))


def init_distributed():
    # type: () -> None
    """Join the job paddle.distributed.launch described; a no-op for one process. The backend
    is the launcher's: PADDLE_DISTRI_BACKEND=gloo on CPUs (dlperf sets it for --device cpu),
    else NCCL on the GPU in FLAGS_selected_gpus."""
    import paddle.distributed as dist

    if launched_ranks() > 1 and not dist.is_initialized():
        dist.init_parallel_env()


def distributed():
    # type: () -> bool
    import paddle.distributed as dist

    return dist.is_initialized() and dist.get_world_size() > 1


def world_size():
    # type: () -> int
    """Paddle's own count of ranks (1 before init_parallel_env or without a launcher)."""
    import paddle.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def rank():
    # type: () -> int
    import paddle.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def comm_backend():
    # type: () -> Optional[str]
    import paddle.distributed as dist

    return str(dist.get_backend()).lower() if distributed() else None


def wrap_data_parallel(layer):
    # type: (Any) -> Any
    """paddle.DataParallel around the forward-and-loss Layer (a to_static one included: its
    gradients are all-reduced in buckets during backward); the Layer itself for one process.
    DataParallel broadcasts rank 0's parameters at construction, so every rank starts alike."""
    if not distributed():
        return layer
    return paddle.DataParallel(layer)


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0, None on the others; one process gets its own back.

    The results travel as JSON bytes (:func:`dlperf.backends.common.gather_json`) in uint8
    tensors through paddle.distributed.all_gather (gloo and NCCL both have it), never as
    pickles: all_gather_object would unpickle bytes that came over the network."""
    import paddle.distributed as dist

    if not distributed():
        return [payload]

    def all_gather(vector):
        # type: (Any) -> Any
        rows = []  # type: List[Any]
        dist.all_gather(rows, paddle.to_tensor(vector))
        return numpy.stack([row.numpy() for row in rows])

    everyone = gather_json(payload, all_gather, dist.get_rank() == 0)
    dist.destroy_process_group()
    return everyone


def barrier():
    # type: () -> None
    """Every rank waits for the others (the timing loop brackets the window with this)."""
    if distributed():
        paddle.distributed.barrier()


def gather_ints(value):
    # type: (int) -> List[int]
    """Every rank's ``value``: one paddle.distributed.all_reduce (sum) of a float32 vector zero
    but for this rank's own entry, on the current device; one process gets ``[value]``."""
    if not distributed():
        return [value]
    votes = numpy.zeros(world_size(), numpy.float32)
    votes[rank()] = value
    tensor = paddle.to_tensor(votes)
    paddle.distributed.all_reduce(tensor)
    return [int(round(float(v))) for v in tensor.numpy()]


def select_device(requested):
    # type: (str) -> str
    """Resolve ``auto``/``cpu``/``cuda`` and make it Paddle's current device; returns its name."""
    check_device_name(requested)
    has_cuda = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if requested == "cuda" and not has_cuda:
        raise UnsupportedError(
            "device cuda requested but paddle %s sees no CUDA device (CPU build or no GPU)"
            % paddle.__version__)
    if requested == "cpu" or not has_cuda:
        paddle.device.set_device("cpu")
        return "cpu"
    # under paddle.distributed.launch each rank's GPU is FLAGS_selected_gpus (ParallelEnv)
    name = "gpu:%d" % paddle.distributed.ParallelEnv().device_id
    paddle.device.set_device(name)
    return name


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name, or why the CPU."""
    name = select_device(requested)
    if name.startswith("gpu"):
        index = int(name.partition(":")[2] or 0)
        return resolved_device("cuda", index, paddle.device.cuda.get_device_name(index))
    if not paddle.is_compiled_with_cuda():
        return resolved_device("cpu", reason=CPU_BUILD % ("paddle", "paddle"))
    return resolved_device("cpu", reason="paddle %s (a CUDA build) sees no CUDA device (driver, "
                                         "CUDA_VISIBLE_DEVICES)" % paddle.__version__)


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


MODE_COMPILED = "paddle.jit.to_static (SOT)"  # SUPPORT.modes' label of --compile


def compile_model(layer):
    # type: (Any) -> Any
    """``paddle.jit.to_static`` on the whole forward-and-loss Layer, in its default mode as
    Paddle's docs apply it: SOT (bytecode capture into static subgraphs, ``full_graph=False``);
    the AST transcription (``full_graph=True``) is slower on a CPU (docs/fidelity.md, "Compiled
    modes", paddle).
    CINN where Paddle was built with it, as ``to_static`` would choose by default; the plain PIR
    executor otherwise."""
    backend = "CINN" if paddle.is_compiled_with_cinn() else None
    return paddle.jit.to_static(layer, backend=backend), {
        "compile_mode": MODE_COMPILED,
        "compile_backend": backend or "PIR executor (no CINN in this build)",
    }


class GpuPeak(object):
    """The device-memory peak of a workload on ``self.device`` (Paddle's place string): its
    allocator's, reset after the warm-up so that autotuning scratch does not count. Shared by
    the training workload and the pipeline-only one."""

    device = ""  # type: str

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if self.device.startswith("gpu"):
            return int(paddle.device.cuda.max_memory_allocated())
        return None

    def reset_device_peak(self):
        # type: () -> bool
        if not self.device.startswith("gpu"):
            return False
        paddle.device.cuda.reset_max_memory_allocated()
        return True


class PaddleWorkload(GpuPeak, Workload):
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
        super(PaddleWorkload, self).__init__(samples_per_step, params, info)

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
        # the gradients zeroed in place, Paddle's default as its tutorials write it: freed, every
        # step would allocate them anew (docs/fidelity.md, "What was found")
        self.optimizer.clear_grad()
        return loss

    def sync(self):
        # type: () -> None
        """Wait for the device's queue. Paddle's CPU kernels (dygraph and the static executor
        alike) finish before the call that launched them returns, so there is nothing to wait
        for on a CPU, and ``paddle.device.synchronize`` refuses a CPU place."""
        if not self.device.startswith("cpu"):
            paddle.device.synchronize()

    def barrier(self):
        # type: () -> None
        barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        return gather_ints(value)

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One paddle.distributed.all_reduce of a float32 buffer as large as the gradients."""
        if not distributed():
            return None
        buffer = paddle.zeros([self.params], dtype="float32")
        return median_seconds(lambda: paddle.distributed.all_reduce(buffer), self.sync)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.astype("float32").item())

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.paddle.profiling import PaddleProfiler

        return PaddleProfiler(self.device)


def count_params(model):
    # type: (Any) -> int
    """Unique trainable parameters; ``parameters()`` yields a tied tensor once."""
    total = 0
    for p in model.parameters():
        if not p.stop_gradient:
            total += element_count(p.shape)
    return total




def runtime_info(device):
    # type: (str) -> Dict[str, Any]
    """Facts about this Paddle and device that change performance and belong with a result."""
    info = {
        "paddle_version": paddle.__version__,
        "paddle_commit": getattr(paddle.version, "commit", None),
        "device": device,
        "omp_num_threads": int(os.environ.get("OMP_NUM_THREADS", "1")),
        "omp_threads_set_by": cpu_placement.threads_set_by(
            "dlperf (all available CPUs; Paddle's own default is 1)"
            if os.environ.get(THREADS_SET_BY_DLPERF) else "the user (OMP_NUM_THREADS)"),
        "onednn": bool(paddle.get_flags(["FLAGS_use_mkldnn"])["FLAGS_use_mkldnn"]),
        "cinn": paddle.is_compiled_with_cinn(),
        "world_size": world_size(),
        "rank": rank(),
        "data_parallel": "paddle.DataParallel over %s" % comm_backend() if distributed()
        else None,
    }  # type: Dict[str, Any]
    if device.startswith("gpu"):
        info["device_name"] = paddle.device.cuda.get_device_name()
        info["cuda_version"] = paddle.version.cuda()
        info["cudnn_version"] = paddle.version.cudnn()
    else:
        info["device_name"] = cpu_name()
    return info
