"""Device, threads, precision and the Workload shared by every MXNet model.

The model files only describe networks; everything that changes *how* they run (AMP, OpenMP
threads, hybridize) lives here so every model is measured under the same rules.

Threads: MXNet sizes its OpenMP pool when ``libmxnet.so`` loads. With ``OMP_NUM_THREADS`` set it
uses that count (and dlperf also sets it through ``MXSetNumOMPThreads``, as the harness does for
several processes); unset, MXNet's own default applies (``omp_get_num_procs()``, halved on x86 for
hyper-threading), which dlperf leaves alone and records.
"""

import ctypes
import json
import math
import os
import signal
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence

import mxnet as mx
import numpy
from mxnet import autograd
from mxnet.contrib import amp
from mxnet.contrib.amp.amp import bfloat16  # numpy's view of MXNet's bfloat16
from mxnet.gluon.utils import clip_global_norm

from dlperf.backends.common import check_device_name, element_count, gather_json, summed_rows
from dlperf.worker.support import CPU_ONLY, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

# MXNet's engine settings and their documented defaults (read by libmxnet at load)
ENGINE_VARIABLES = {
    "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice",
    "MXNET_CPU_WORKER_NTHREADS": "1",
    "MXNET_CPU_PRIORITY_NTHREADS": "4",
    "MXNET_OMP_MAX_THREADS": None,
    "MXNET_EXEC_BULK_EXEC_TRAIN": "1",
    "MXNET_EXEC_BULK_EXEC_INFERENCE": "1",
    "MXNET_MKLDNN_ENABLED": "1",
}
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # CPU instructions with native bf16 arithmetic


# ------------------------------------------------------------------------------------------------
# data parallelism: MXNet's parameter-server kvstore. dlperf's launcher does what MXNet's
# tools/launch.py --launcher local does: a ps-lite scheduler (node 0) and a server per node
# (``python -c "import mxnet"`` with DMLC_ROLE=scheduler / server), and the workers with
# DMLC_ROLE=worker; each worker joins with mx.kv.create("dist_sync"), and Gluon's Trainer sums
# the gradients over the workers through it (update_on_kvstore=False: the optimizer runs on
# every worker, on the mean gradient, as with torch's DDP)
# ------------------------------------------------------------------------------------------------

_kvstore = []  # type: List[Any]
# dlperf's own kvstore keys: integers (a kvstore refuses to mix key types, and the Trainer's are
# its parameters' indices), far above any parameter index
PROBE_KEY, SIZES_KEY, RESULTS_KEY, VOTE_KEY = (1 << 30, (1 << 30) + 1, (1 << 30) + 2,
                                              (1 << 30) + 3)


def launched():
    # type: () -> bool
    return os.environ.get("DMLC_ROLE") == "worker" and int(os.environ.get("DMLC_NUM_WORKER",
                                                                            "1")) > 1


def join():
    # type: () -> Optional[Any]
    """The dist_sync kvstore of this job (created once), or None for one process.

    Creating it is the rendezvous: ps-lite registers this worker with the scheduler and blocks
    until every node has, with no deadline of its own. The kernel keeps dlperf's
    (``alarm(DLPERF_RDZV_TIMEOUT_S)``, SIGALRM's default action ends the process), which the
    launcher's explain reads as a timeout."""
    if not launched():
        return None
    if not _kvstore:
        seconds = os.environ.get("DLPERF_RDZV_TIMEOUT_S")
        if seconds:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(max(1, int(math.ceil(float(seconds)))))
        _kvstore.append(mx.kv.create("dist_sync"))
        signal.alarm(0)
    return _kvstore[0]


def world_size():
    # type: () -> int
    """The kvstore's count of workers (1 for one process)."""
    return int(_kvstore[0].num_workers) if _kvstore else 1


def rank():
    # type: () -> int
    """The kvstore's number for this worker (ps-lite's order, not necessarily the launcher's)."""
    return int(_kvstore[0].rank) if _kvstore else 0


def launch_rank():
    # type: () -> int
    """This worker's rank as dlperf's launcher placed it (node by node): the result's rank."""
    return int(os.environ.get("RANK", "0"))


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every worker's result at the launcher's rank 0 (node 0), None on the others; one process
    gets its own back.

    JSON bytes (:func:`dlperf.backends.common.gather_json`) through the kvstore, whose only
    collective is a sum: each worker writes its bytes (as float32 values, exact for 0..255) into
    its own row of a zero matrix, and a dist_sync pushpull sums the rows of all workers, so
    every worker receives them all."""
    kv = _kvstore[0] if _kvstore else None
    if kv is None:
        return [payload]
    keys = iter((SIZES_KEY, RESULTS_KEY))
    all_gather = summed_rows(lambda rows: _summed(kv, next(keys), rows), rank(), world_size())
    return gather_json(payload, all_gather, launch_rank() == 0, "float32", "float32")


def _summed(kv, key, array):
    # type: (Any, int, Any) -> Any
    """The sum of ``array`` over every worker, by one dist_sync pushpull under ``key``."""
    value = mx.nd.array(array, dtype="float32")
    kv.init(key, mx.nd.zeros(array.shape, dtype="float32"))
    kv.pushpull(key, value, out=value)
    return value.asnumpy()


def broadcast_weights(trainer):
    # type: (Any) -> None
    """Rank 0's weights to every worker through the trainer's kvstore, before the first step.

    Gluon's Trainer does it lazily, inside the first ``step``: its broadcast's pull of a weight
    and the gradient's push of the same key were then both queued on MXNet's engine, and the
    push could reach the servers first. The ``dist_sync`` server then answered the pull with the
    summed gradient, and that worker took it for the weight: its weights differed from its
    peer's after one step in 4 of 61 two-worker starts here (MXNet 1.9.1, two at a time), and
    in none of 50 since.
    Broadcasting at build time, with the engine drained on both sides, leaves nothing queued
    beside the pulls, and the first forward already runs on rank 0's weights, as every rank's
    does under Horovod and torch's DDP. (Parameters whose shape Gluon infers at the first
    forward would still go lazily; dlperf's models give every shape.)"""
    mx.nd.waitall()  # the initializers that ``initialize`` queued
    trainer._init_kvstore()  # Gluon's own steps, run now instead of in the first step
    trainer._init_params()
    mx.nd.waitall()


def _omp_max_threads():
    # type: () -> Optional[int]
    """The OpenMP runtime's thread count as libmxnet's own runtime reports it."""
    try:
        return int(mx.base._LIB.omp_get_max_threads())
    except AttributeError:
        return None


def configure_threads():
    # type: () -> Dict[str, Any]
    """Apply OMP_NUM_THREADS when given; otherwise keep MXNet's default. Returns the facts."""
    given = os.environ.get("OMP_NUM_THREADS")
    if given:
        mx.base.check_call(mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(int(given))))
        source = "OMP_NUM_THREADS, applied with MXSetNumOMPThreads"
    else:
        source = ("MXNet's default (OMP_NUM_THREADS unset): omp_get_num_procs(), halved on x86 "
                  "for hyper-threading")
    engine = {k: os.environ.get(k, default) for k, default in ENGINE_VARIABLES.items()}
    return {
        "omp_num_threads": _omp_max_threads(),
        "omp_threads_set_by": source,
        "omp_num_procs": int(mx.base._LIB.omp_get_num_procs())
        if hasattr(mx.base._LIB, "omp_get_num_procs") else None,
        "engine": engine,
    }


def select_context(requested):
    # type: (str) -> Any
    """Resolve ``auto``/``cpu``/``cuda`` to an MXNet context."""
    check_device_name(requested)
    gpus = mx.context.num_gpus()
    if requested == "cuda" and not gpus:
        raise UnsupportedError(
            "device cuda requested but mxnet %s sees no CUDA device (the mxnet environment is "
            "the CPU build from PyPI)" % mx.__version__)
    if requested == "cpu" or not gpus:
        return mx.cpu()
    return mx.gpu(int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_context` puts this process (:func:`resolved_device`): the GPU's index
    (MXNet has no call for its name: the harness takes it from the host's GPUs), or why the CPU."""
    ctx = select_context(requested)
    if ctx.device_type == "gpu":
        return resolved_device("cuda", ctx.device_id)
    return resolved_device("cpu", reason=CPU_ONLY % ("mxnet", "MXNet"))


def dtype_name(dtype):
    # type: (Any) -> str
    """numpy dtype -> name; MXNet's bfloat16 is a numpy struct dtype ``[('bfloat16', '<u2')]``."""
    return "bfloat16" if dtype == bfloat16 else getattr(dtype, "__name__", str(dtype))


def bf16_probe(ctx):
    # type: (Any) -> Optional[str]
    """Why amp-bf16 cannot run on ``ctx``, or None when it can. ``amp.init`` must have run. One
    amp-wrapped Convolution, the smallest op amp casts to bf16: MXNet 1.9's oneDNN has bf16
    kernels only on CPUs with AVX-512 (natively with avx512_bf16/AMX, emulated on avx512_core),
    and elsewhere fails to create the primitive — for every model, since FullyConnected uses the
    same kernels. The tests call this to learn what the CPU they run on can do."""
    data = mx.nd.ones((1, 4, 4, 4), ctx=ctx)
    weight = mx.nd.ones((4, 4, 3, 3), ctx=ctx)
    try:
        out = mx.nd.Convolution(data, weight, kernel=(3, 3), num_filter=4, no_bias=True)
        out.wait_to_read()
    except mx.base.MXNetError as exc:
        cap = os.environ.get("DNNL_MAX_CPU_ISA")
        return ("mxnet %s has no bf16 kernel on %s (its bf16 kernel probe, one amp-cast "
                "Convolution, failed; CPU bf16 instructions: %s%s): %s"
                % (mx.__version__, ctx, ", ".join(cpu_bf16_flags()) or "none",
                   "; oneDNN capped at DNNL_MAX_CPU_ISA=%s" % cap if cap else "",
                   str(exc).strip()[-300:]))
    if out.dtype != bfloat16:
        return ("mxnet.contrib.amp left its bf16 kernel probe (one Convolution) on %s in %s"
                % (ctx, dtype_name(out.dtype)))
    return None


def cpu_bf16_flags():
    # type: () -> List[str]
    """The CPU's native bf16 instruction flags (from /proc/cpuinfo), for the record."""
    flags = set()  # type: set
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return sorted(flags.intersection(BF16_FLAGS))


class Precision(object):
    """What a precision name means in MXNet: ``mxnet.contrib.amp`` initialised for bfloat16
    before the model is built (Convolution and FullyConnected cast to bf16, fp32 weights and
    gradients, no loss scaling: bf16 has fp32's range). Checked by running one amp-wrapped
    Convolution and refused when its output is not bf16."""

    def __init__(self, name, ctx):
        # type: (str, Any) -> None
        self.name = name  # which precisions run where: SUPPORT in __init__
        self.dtype = "bfloat16" if name == "amp-bf16" else None  # type: Optional[str]
        if self.dtype is not None:
            amp.init(target_dtype=self.dtype)
            self._probe(ctx)

    def _probe(self, ctx):
        # type: (Any) -> None
        reason = bf16_probe(ctx)
        if reason is not None:
            raise UnsupportedError("precision %s: %s" % (self.name, reason))

    def info(self):
        # type: () -> Dict[str, Any]
        return {
            "precision": self.name,
            "amp": "mxnet.contrib.amp.init(target_dtype=%r)" % self.dtype if self.dtype else None,
            "amp_dtype": self.dtype,
            "amp_lp16_ops": amp.list_lp16_ops(bfloat16) if self.dtype else None,
            "grad_scaler": False,
            "cpu_bf16_instructions": cpu_bf16_flags(),
        }


def op_dtypes(block, inputs):
    # type: (Any, Sequence[Any]) -> Dict[str, Dict[str, int]]
    """Trace ``block`` symbolically and count its operators by output dtype: with AMP on, which
    operators really compute in bf16 (``{"bfloat16": {"Convolution": 53, ...}, ...}``)."""
    names = ["in%d" % i for i in range(len(inputs))]
    out = block(*[mx.sym.var(n) for n in names])
    if isinstance(out, (list, tuple)):
        out = mx.sym.Group(list(out))
    internals = out.get_internals()
    used = set(internals.list_arguments())  # inference leaves the labels unused
    _, types, _ = internals.infer_type(
        **{n: x.dtype for n, x in zip(names, inputs) if n in used})
    by_output = dict(zip(internals.list_outputs(), types))
    counts = defaultdict(lambda: defaultdict(int))  # type: Dict[str, Dict[str, int]]
    for node in json.loads(internals.tojson())["nodes"]:
        if node["op"] in ("null", "amp_cast", "amp_multicast"):
            continue
        dtype = by_output.get(node["name"] + "_output", by_output.get(node["name"] + "_output0"))
        if dtype is not None:
            counts[dtype_name(dtype)][node["op"]] += 1
    return {k: dict(sorted(v.items())) for k, v in counts.items()}


class MXNetWorkload(Workload):
    """A forward-and-loss HybridBlock, its Gluon Trainer, and one synthetic batch on the device.

    ``step()`` records the forward under autograd, runs backward and the trainer's update,
    which divides the summed gradient by ``loss_samples`` (the per-sample losses the objective
    returns; 1 when it returns a mean) and the workers; with a gradient clip the
    update is split into allreduce, ``clip_global_norm`` and update, as Gluon's own recipe has
    it. Inference runs the block outside ``autograd.record`` (eval mode). MXNet is
    asynchronous: ``step`` only queues work on the engine; ``sync`` waits for all of it.
    """

    def __init__(self, objective, inputs, trainer, clip, samples_per_step, params, info,
                 loss_samples=1):
        # type: (Callable[..., Any], Sequence[Any], Any, Optional[float], int, int, Dict[str, Any], int) -> None
        self.objective = objective
        self.inputs = list(inputs)
        self.trainer = trainer
        # several workers: the kvstore sums the gradients of every worker's loss, so the update
        # divides by the workers too (the mean gradient, as torch's DDP) and a clip bounds the
        # norm of that mean (the norm of the sum is ``scale`` times larger)
        self.scale = world_size() * loss_samples
        self.clip = clip * self.scale if clip else clip
        self.grads = []  # type: List[Any]
        if trainer is not None and clip:
            self.grads = [p.grad() for p in trainer._params if p.grad_req != "null"]
        super(MXNetWorkload, self).__init__(samples_per_step, params, info)
        self._vote_key_ready = False
        # ``objective.hybridize``'s keyword arguments where the case is compiled (set by
        # ``build``), None when it runs imperatively: the profiler re-hybridizes with them
        self.hybridized = None  # type: Optional[Dict[str, Any]]

    def step(self):
        # type: () -> Any
        if self.trainer is None:
            return self.objective(*self.inputs)
        with autograd.record():
            loss = self.objective(*self.inputs)
        loss.backward()
        if self.clip:
            self.trainer.allreduce_grads()
            # check_isfinite=False keeps the norm on the engine (no host sync per step)
            clip_global_norm(self.grads, self.clip, check_isfinite=False)
            self.trainer.update(self.scale)
        else:
            self.trainer.step(self.scale)
        return loss

    def sync(self):
        # type: () -> None
        mx.nd.waitall()

    def forward_backward(self):
        # type: () -> None
        """The step's forward (and backward, when training) without the update, waited for:
        builds a freshly hybridized graph's segments and static memory outside any timed or
        profiled span. It runs no collective (the Trainer's update does those, on every rank
        alike) and leaves the weights as they are (the next backward overwrites the
        gradients)."""
        if self.trainer is None:
            self.objective(*self.inputs)
        else:
            with autograd.record():
                loss = self.objective(*self.inputs)
            loss.backward()
        mx.nd.waitall()

    def barrier(self):
        # type: () -> None
        """Every worker waits for the others (ps-lite's barrier of the kvstore's workers)."""
        if _kvstore:
            mx.nd.waitall()
            _kvstore[0]._barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every worker's ``value`` in the kvstore's worker order: one dist_sync pushpull (the
        servers sum every worker's push) of a float32 vector zero but for this worker's own
        entry, under a key of its own initialised at the first vote."""
        if not _kvstore:
            return [value]
        kv = _kvstore[0]
        if not self._vote_key_ready:
            kv.init(VOTE_KEY, mx.nd.zeros(world_size(), dtype="float32"))
            self._vote_key_ready = True
        votes = numpy.zeros(world_size(), dtype=numpy.float32)
        votes[rank()] = value
        summed = mx.nd.array(votes, dtype="float32")
        kv.pushpull(VOTE_KEY, summed, out=summed)
        return [int(round(float(v))) for v in summed.asnumpy()]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One dist_sync pushpull (push to the servers, pull the sum) of a float32 buffer as
        large as the gradients: what the Trainer does with them every step."""
        if not _kvstore:
            return None
        kv = _kvstore[0]
        buffer = mx.nd.zeros(self.params, dtype="float32")
        kv.init(PROBE_KEY, buffer)
        return median_seconds(lambda: kv.pushpull(PROBE_KEY, buffer, out=buffer), self.sync)

    def loss_value(self, handle):
        # type: (Any) -> float
        """The batch's mean loss, also when the step returned the per-sample losses."""
        return float(handle.mean().asscalar())

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        return None

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.mxnet.profiling import MXNetProfiler

        return MXNetProfiler(self.inputs[0].context if self.inputs else mx.cpu(), self)


def count_params(block):
    # type: (Any) -> int
    """Trainable parameters (grad_req not "null": BatchNorm's running statistics are not)."""
    total = 0
    for p in block.collect_params().values():
        if p.grad_req != "null":
            total += element_count(p.shape)
    return total


def runtime_info(ctx, threads):
    # type: (Any, Dict[str, Any]) -> Dict[str, Any]
    """Facts about this MXNet and device that change performance and belong with a result;
    ``threads`` is what :func:`configure_threads` applied."""
    features = mx.runtime.Features()
    info = {
        "mxnet_version": mx.__version__,
        "mxnet_features": sorted(k for k, f in features.items() if f.enabled),
        "onednn": features.is_enabled("MKLDNN"),
        "device": str(ctx),
        "world_size": world_size(),
        "rank": rank(),
        "data_parallel": ("kvstore dist_sync (ps-lite: %d server(s)), gluon.Trainer "
                          "update_on_kvstore=False" % int(os.environ.get("DMLC_NUM_SERVER", "0"))
                          if _kvstore else None),
    }  # type: Dict[str, Any]
    info.update(threads)
    info["device_name"] = cpu_name() if ctx.device_type == "cpu" else "gpu:%d" % ctx.device_id
    return info
