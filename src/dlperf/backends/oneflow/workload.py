"""Device, threads, the nn.Graph wrappers and the Workload shared by every OneFlow model.

The model files only describe networks; everything that changes *how* they run (CPU threads,
eager or ``nn.Graph``, gradient clipping, synchronisation) lives here so every model is measured
under the same rules.

Import order matters: :func:`prepare_process` must run before ``import oneflow``, because
OneFlow sizes its CPU device's thread pool (and its bundled OpenBLAS) from ``OMP_NUM_THREADS``
once, when the runtime starts at import.
"""

import math
import os
import signal
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from dlperf.backends.common import check_device_name, gather_json
from dlperf.worker.cpus import default_omp_threads
from dlperf.worker import fpenv
from dlperf.worker import placement as cpu_placement

THREADS_SET_BY_DLPERF = "DLPERF_ONEFLOW_THREADS_SET"


def prepare_process():
    # type: () -> None
    """Give OneFlow's CPU kernels every available core unless the user said otherwise.

    OneFlow 0.9.0 reads ``OMP_NUM_THREADS`` at start-up for its CPU device's threads; without
    it, it takes the logical cores per process minus 2 (zero on a 2-core host), which would make
    CPU results lean on fewer cores than the other frameworks use. A value the user set is
    respected and recorded.
    """
    os.environ.setdefault("GLOG_minloglevel", "2")
    default_omp_threads(THREADS_SET_BY_DLPERF)


def rendezvous_deadline():
    # type: () -> bool
    """Under oneflow.distributed.launch with several ranks, ``import oneflow`` is the
    rendezvous: it blocks in C++ (holding the GIL, so no Python thread can watch it) until every
    rank has reached rank 0's control server at MASTER_ADDR:MASTER_PORT, with no deadline of its
    own (rank 0 waits silently forever, the others retry every 10 s; :func:`wait_for_master`
    spares them the first). So the kernel keeps the deadline: ``alarm(DLPERF_RDZV_TIMEOUT_S)``
    (--rdzv-timeout, from dlperf's launcher) with SIGALRM's default action, which ends the
    process unless the import returned first; the launcher reports the rank "died with SIGALRM",
    which dlperf's explain reads as a timeout."""
    seconds = os.environ.get("DLPERF_RDZV_TIMEOUT_S")
    if int(os.environ.get("WORLD_SIZE", "1")) < 2 or not seconds:
        return False
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(math.ceil(float(seconds)))))
    return True


#: how often a rank other than 0 knocks at rank 0's control server before importing OneFlow
MASTER_POLL_S = 0.05
#: after this long it says, once, that rank 0 does not answer (the launcher's explain reads it)
MASTER_SILENT_S = 5.0
MASTER_SILENT = "rank 0's control server at %s:%d does not answer yet; waiting"
#: past this, OneFlow's own client tries (and gives up after its 60 retries 10 s apart): the
#: bound where no --rdzv-timeout alarm is armed (the worker started by hand)
MASTER_WAIT_MAX_S = 600.0


def wait_for_master():
    # type: () -> None
    """A rank other than 0 waits until rank 0's control server (MASTER_ADDR:MASTER_PORT)
    accepts a connection, then imports OneFlow. OneFlow's own client, finding nothing there,
    sleeps 10 s before it tries again (rpc_client.cpp's LoadServer), so a rank whose import
    got ahead of rank 0's lost 10 s, about every other launch of 2 ranks on one host. The
    deadline is the import's: :func:`rendezvous_deadline`'s alarm, armed before this."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2 or int(os.environ.get("RANK", "0")) == 0:
        return
    host, port = os.environ.get("MASTER_ADDR"), int(os.environ.get("MASTER_PORT") or 0)
    if not host or not port:
        return
    start = time.monotonic()
    said = False
    while time.monotonic() - start < MASTER_WAIT_MAX_S:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if not said and time.monotonic() - start >= MASTER_SILENT_S:
                sys.stderr.write(MASTER_SILENT % (host, port) + "\n")
                sys.stderr.flush()
                said = True
            time.sleep(MASTER_POLL_S)


prepare_process()
# OneFlow's own CPU kernels compute subnormals at full cost; before its threads exist (see fpenv)
DENORMALS = fpenv.flush_denormals()
_deadline = rendezvous_deadline()
wait_for_master()

import numpy  # noqa: E402
import oneflow as flow  # noqa: E402  (after prepare_process, on purpose)
import oneflow.sysconfig  # noqa: E402  (not imported by the package itself)

if _deadline:
    signal.alarm(0)  # every rank joined

from dlperf.worker.support import CPU_ONLY, resolved_device  # noqa: E402
from dlperf.worker.workload import (  # noqa: E402
    UnsupportedError, Workload, cpu_name, median_seconds)


# ------------------------------------------------------------------------------------------------
# data parallelism: oneflow.distributed.launch starts the ranks (RANK, WORLD_SIZE, MASTER_*),
# OneFlow joins them at import; eager steps go through flow.nn.parallel.DistributedDataParallel,
# nn.Graph steps through global tensors (parameters broadcast, the batch split along dim 0)
# ------------------------------------------------------------------------------------------------


def world_size():
    # type: () -> int
    return int(flow.env.get_world_size())


def rank():
    # type: () -> int
    return int(flow.env.get_rank())


def distributed():
    # type: () -> bool
    return world_size() > 1


def placement():
    # type: () -> Any
    """Every rank's CPU: where a data-parallel nn.Graph's global tensors live."""
    return flow.placement("cpu", ranks=list(range(world_size())))


def to_global_batch(inputs):
    # type: (Sequence[flow.Tensor]) -> List[flow.Tensor]
    """Each rank's local batch as its shard of one global batch split along dim 0."""
    return [x.to_global(placement=placement(), sbp=flow.sbp.split(0)) for x in inputs]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0, None on the others; one process gets its own back.

    JSON bytes (:func:`dlperf.backends.common.gather_json`) in int64 and uint8 tensors through
    flow.comm.all_gather, never pickles."""
    if not distributed():
        return [payload]

    def all_gather(vector):
        # type: (Any) -> Any
        mine = flow.tensor(vector)  # int64 sizes, then uint8 bytes, as numpy gives them
        rows = [flow.zeros(vector.size, dtype=mine.dtype) for _ in range(world_size())]
        flow.comm.all_gather(rows, mine)
        return numpy.stack([row.numpy() for row in rows])

    return gather_json(payload, all_gather, rank() == 0)


def select_device(requested):
    # type: (str) -> str
    """Resolve ``auto``/``cpu``/``cuda``: the backend measures OneFlow's CPU path (``auto`` is
    the CPU); an explicit ``cuda`` is refused with the reason."""
    check_device_name(requested)
    if requested == "cuda":
        if not flow.cuda.is_available():
            raise UnsupportedError(
                "device cuda requested but oneflow %s sees no usable CUDA device (no NVIDIA "
                "driver, or one older than CUDA 11.7 needs); the oneflow backend runs on cpu "
                "only" % flow.__version__)
        return "cuda"  # refused by SUPPORT with its reason (the build has no Hopper kernels)
    return "cpu"


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`); ``auto`` is the
    CPU, and why."""
    kind = select_device(requested)
    if kind == "cuda":
        return resolved_device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return resolved_device("cpu", reason=CPU_ONLY % ("oneflow", "OneFlow"))


def count_params(model):
    # type: (Any) -> int
    """Unique trainable parameters; ``parameters()`` yields a tied tensor once."""
    total = 0
    for p in model.parameters():
        if p.requires_grad:
            total += int(p.numel())
    return total


class TrainGraph(flow.nn.Graph):
    """Forward, loss, backward and the optimizer update as ONE static graph: ``build`` calls
    ``loss.backward()`` and the optimizer is added with ``add_optimizer``, so OneFlow compiles
    the whole step (gradient clipping included, from the optimizer's param group)."""

    def __init__(self, objective, optimizer):
        # type: (flow.nn.Module, Any) -> None
        super(TrainGraph, self).__init__()
        self.objective = objective
        self.add_optimizer(optimizer)

    def build(self, *inputs):
        # type: (*flow.Tensor) -> flow.Tensor
        loss = self.objective(*inputs)
        loss.backward()
        return loss


class InferGraph(flow.nn.Graph):
    """The forward pass (eval mode) and its scalar summary as one static graph."""

    def __init__(self, objective):
        # type: (flow.nn.Module) -> None
        super(InferGraph, self).__init__()
        self.objective = objective

    def build(self, *inputs):
        # type: (*flow.Tensor) -> flow.Tensor
        return self.objective(*inputs)


def eager_train_step(objective, optimizer, clip):
    # type: (flow.nn.Module, Any, bool) -> Callable[..., flow.Tensor]
    """The eager loop of the OneFlow tutorials: forward, backward, (clip,) step, zero_grad."""

    def step(*inputs):
        # type: (*flow.Tensor) -> flow.Tensor
        loss = objective(*inputs)
        loss.backward()
        if clip:
            optimizer.clip_grad()  # the global-norm clip the param group declares
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step


def eager_infer_step(objective):
    # type: (flow.nn.Module) -> Callable[..., flow.Tensor]
    def step(*inputs):
        # type: (*flow.Tensor) -> flow.Tensor
        with flow.no_grad():
            return objective(*inputs)

    return step


class OneFlowWorkload(Workload):
    """A step function (eager closure or nn.Graph) and one synthetic batch on the device."""

    def __init__(self, run, inputs, device, samples_per_step, params, info, model=None):
        # type: (Callable[..., flow.Tensor], Sequence[flow.Tensor], str, int, int, Dict[str, Any], Any) -> None
        self.run = run
        self.inputs = tuple(inputs)
        self.device = device
        # the network whose parameters a test of the data-parallel step reads and loads around
        # one step (tests/dp_step.py); the timed loop never does
        self.model = model
        super(OneFlowWorkload, self).__init__(samples_per_step, params, info)

    def step(self):
        # type: () -> Any
        return self.run(*self.inputs)

    def sync(self):
        # type: () -> None
        """Wait for OneFlow's virtual machine: eager ops and graph runs are queued to it and
        return before they finish; ``eager.Sync`` is what ``flow.cuda.synchronize`` and
        ``nn.Graph`` itself call to wait for all of it."""
        flow._oneflow_internal.eager.Sync()

    def barrier(self):
        # type: () -> None
        """Every rank waits for the others (the timing loop brackets the window with this)."""
        if distributed():
            flow.comm.barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value``: one flow.comm.all_reduce (sum, in place) of a float32 vector
        zero but for this rank's own entry, on this rank's device."""
        if not distributed():
            return [value]
        votes = numpy.zeros(world_size(), numpy.float32)
        votes[rank()] = value
        tensor = flow.tensor(votes, dtype=flow.float32, device=self.device)
        flow.comm.all_reduce(tensor)
        return [int(round(float(v))) for v in tensor.numpy()]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One flow.comm.all_reduce of a float32 buffer as large as the gradients."""
        if not distributed():
            return None
        buffer = flow.zeros(self.params, dtype=flow.float32, device=self.device)
        return median_seconds(lambda: flow.comm.all_reduce(buffer), self.sync)

    def loss_value(self, handle):
        # type: (Any) -> float
        if handle.is_global:  # a data-parallel nn.Graph's loss: the same on every rank
            handle = handle.to_global(sbp=flow.sbp.broadcast).to_local()
        return float(handle.float().numpy())

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        return None

    def profiler(self):
        # type: () -> Any
        """Never one: OneFlow 0.9.0's profiler gives per-operator totals only, and aborts the
        process on a CUDA build without a driver (:mod:`dlperf.backends.oneflow.profiling`)."""
        from dlperf.backends.oneflow.profiling import unavailable

        raise unavailable(isinstance(self.run, flow.nn.Graph))


def runtime_info(device):
    # type: (str) -> Dict[str, Any]
    """Facts about this OneFlow and device that change performance and belong with a result."""
    return {
        "oneflow_version": flow.__version__,
        "oneflow_commit": getattr(flow, "__git_commit__", None),
        "device": device,
        "device_name": cpu_name(),
        "omp_num_threads": int(os.environ["OMP_NUM_THREADS"]),
        "omp_threads_set_by": cpu_placement.threads_set_by(
            "dlperf (all available CPUs; OneFlow's own default is the logical cores minus 2)"
            if os.environ.get(THREADS_SET_BY_DLPERF) else "the user (OMP_NUM_THREADS)"),
        "built_with_cuda": int(oneflow.sysconfig.get_cuda_version())
        if oneflow.sysconfig.with_cuda() else None,
        "world_size": world_size(),
        "rank": rank(),
        "denormals": DENORMALS or "not flushed (no x86-64 glibc MXCSR to set)",
    }
