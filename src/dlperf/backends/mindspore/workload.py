"""Device, threads, execution mode, precision and the Workload shared by every MindSpore model.

The model files only describe networks; everything that changes *how* they run (PYNATIVE_MODE or
GRAPH_MODE with the step one compiled Cell, ``mindspore.amp`` levels, loss scaling, CPU
kernel threads) lives here so every model is measured under the same rules.

Import order matters: :func:`prepare_process` runs before ``import mindspore`` (MindSpore reads
its C++ log level, ``GLOG_v``, once at import).
"""

import os
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from dlperf.backends.common import check_device_name, element_count, gather_json
from dlperf.worker.cpus import available_cpus
from dlperf.backends.mindspore import NO_GPU
from dlperf.worker.support import CPU_ONLY, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

# precision -> (mindspore.amp.auto_mixed_precision level, dtype name). amp-*: level "auto", per
# operator like torch.autocast (Conv2D, MatMul, BatchMatMul, Dense... in the low dtype; Softmax,
# LayerNorm, BatchNorm, Exp, Log... kept in float32; float32 weights). Not O1: O1 rewrites the
# network's source through mindspore.rewrite, which writes the rewritten classes into
# ./rewritten_network of the working directory and, on BERT, fails with "NameError: name
# 'gelu_opt' is not defined" inside nn.GELU. bf16/fp16 (inference): O3, the whole network cast.
AMP = {
    "amp-bf16": ("auto", "bfloat16"),
    "amp-fp16": ("auto", "float16"),
    "bf16": ("O3", "bfloat16"),
    "fp16": ("O3", "float16"),
}  # type: Dict[str, Tuple[str, str]]
LOSS_SCALE = 2.0 ** 16  # dynamic loss scaling for fp16, as torch's GradScaler starts
LOSS_SCALE_WINDOW = 2000
# What compile off and on mean (labels of SUPPORT.modes, recorded in every result)
MODES = {False: "PYNATIVE_MODE", True: "GRAPH_MODE"}


def prepare_process():
    # type: () -> None
    """Keep MindSpore's C++ log to errors: at its default (warnings) it prints several lines per
    compiled graph and per kernel choice, which would bury a real failure in the worker's tail.
    A graph that fails to compile leaves ``rank_0/om/analyze_fail.ir`` under ``MS_OM_PATH``
    (default: the working directory, the user's): put it in the temporary directory instead."""
    os.environ.setdefault("GLOG_v", "3")
    os.environ.setdefault("MS_OM_PATH", os.path.join(tempfile.gettempdir(), "dlperf-mindspore"))


prepare_process()

import numpy  # noqa: E402
import mindspore as ms  # noqa: E402  (after prepare_process, on purpose)
from mindspore import amp, nn, ops  # noqa: E402


# ------------------------------------------------------------------------------------------------
# data parallelism: msrun starts a scheduler and the workers (MS_ROLE, RANK_ID, RANK_SIZE,
# MS_SCHED_HOST/PORT); mindspore.communication.init() joins them (MCCL, MindSpore's own
# collectives, on a CPU) and DATA_PARALLEL mode with gradients_mean makes DistributedGradReducer
# average the gradients over the ranks
# ------------------------------------------------------------------------------------------------


def launched():
    # type: () -> bool
    """Whether msrun started this process as one worker of several."""
    return os.environ.get("MS_ROLE") == "MS_WORKER" and int(os.environ.get("RANK_SIZE", "1")) > 1


RDZV_FAILED = "dlperf.mindspore: the cluster did not form:"  # read by launch.explain


def _leave_unformed(error):
    # type: (BaseException) -> None
    """The cluster never formed: one line for the launcher's explain, then exit 1 at once.
    os._exit skips MindSpore's teardown, whose heartbeat thread (started when this process
    registered with a scheduler that has since given up) keeps retrying the gone scheduler for
    MS_HEARTBEAT_RETRY_TIMEOUT s (40 at --rdzv-timeout 60 and below) before the process can end:
    the node would report its timeout that much after --rdzv-timeout."""
    sys.stdout.write("%s %s\n" % (RDZV_FAILED, str(error).strip().splitlines()[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def serve_if_scheduler():
    # type: () -> None
    """msrun runs the same command as its scheduler (MS_ROLE=MS_SCHED), whose init() serves the
    cluster until the workers leave; it is no rank and must never write a result, so it leaves
    here whatever init() does."""
    if os.environ.get("MS_ROLE") != "MS_SCHED":
        return
    from mindspore.communication import init
    try:
        init()
    except Exception as error:  # the cluster never formed: msrun reports it
        _leave_unformed(error)
    sys.exit(0)


def init_distributed():
    # type: () -> bool
    """Join the workers msrun started; False for one process. A cluster that never formed
    (MindSpore gives up after msrun's --cluster_time_out) ends the process with one line for the
    launcher's explain, not a crash result: it is the rendezvous that failed, not this rank."""
    if not launched():
        return False
    from mindspore.communication import init
    try:
        init()
    except RuntimeError as error:
        _leave_unformed(error)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    return True


_joined = [False]


def distributed():
    # type: () -> bool
    return _joined[0]


def world_size():
    # type: () -> int
    if not distributed():
        return 1
    from mindspore.communication import get_group_size
    return int(get_group_size())


def rank():
    # type: () -> int
    if not distributed():
        return 0
    from mindspore.communication import get_rank
    return int(get_rank())


def join():
    # type: () -> None
    _joined[0] = init_distributed()


def comm_description():
    # type: () -> Optional[str]
    if not distributed():
        return None
    from mindspore.communication import GlobalComm
    return ("ParallelMode.DATA_PARALLEL (gradients_mean) + nn.DistributedGradReducer over %s"
            % GlobalComm.BACKEND)


def grad_reducer(parameters):
    # type: (Any) -> Optional[Any]
    """nn.DistributedGradReducer over the optimizer's parameters (mean, from the context), or
    None for one process."""
    return nn.DistributedGradReducer(parameters) if distributed() else None


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0, None on the others; one process gets its own back.

    JSON bytes (:func:`dlperf.backends.common.gather_json`) through ops.AllGather, never
    pickles. MindSpore's CPU AllGather has no uint8 kernel (Float32, Float16 and Int32 only), so
    each byte travels as an int32."""
    if not distributed():
        return [payload]
    world = world_size()
    gather = ops.AllGather()

    def all_gather(vector):
        # type: (Any) -> Any
        return gather(ms.Tensor(vector)).asnumpy().reshape(world, -1)

    return gather_json(payload, all_gather, rank() == 0, "int32", "int32")


def select_device(requested):
    # type: (str) -> str
    """Make the CPU MindSpore's device (``mindspore.set_device``); refuse ``cuda``."""
    check_device_name(requested)
    if requested == "cuda":
        raise UnsupportedError("device cuda: " + NO_GPU)
    ms.set_device("CPU")
    return "cpu"


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the CPU, and why."""
    return resolved_device(select_device(requested), reason=CPU_ONLY % ("mindspore", "MindSpore"))


def set_threads():
    # type: () -> Dict[str, Any]
    """Size MindSpore's CPU kernel thread pool (``device_context.cpu.op_tuning.threads_num``).

    ``OMP_NUM_THREADS`` wins when set (the harness sets it to share a node's cores between worker
    processes); otherwise every CPU this process may run on. MindSpore's own default is
    min(30, the machine's hardware threads), blind to an affinity mask, and it caps the pool at
    the hardware threads (runtime ComputeThreadNums), so the number asked for is recorded beside
    the machine's thread count. Call once, before the first kernel runs (MindSpore refuses a
    second call).
    """
    default = ms.get_context("runtime_num_threads")
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        threads, source = int(value), "OMP_NUM_THREADS"
    else:
        threads, source = available_cpus(), "dlperf: the CPUs available to the process"
    ms.device_context.cpu.op_tuning.threads_num(threads)
    return {
        "cpu_op_threads": threads,
        "cpu_op_threads_set_by": source,
        "cpu_op_threads_api": "mindspore.device_context.cpu.op_tuning.threads_num",
        "runtime_num_threads_default": default,
        "inter_op_parallel_num": ms.get_context("inter_op_parallel_num"),
        "hardware_threads": os.cpu_count(),
        "available_cpus": available_cpus(),
    }


def set_mode(compiled):
    # type: (bool) -> Dict[str, Any]
    """GRAPH_MODE for ``--compile`` (the step Cell is compiled as one graph on its first call),
    PYNATIVE_MODE (op by op) otherwise; set before any Cell is built."""
    ms.set_context(mode=ms.GRAPH_MODE if compiled else ms.PYNATIVE_MODE)
    info = {"compile": compiled, "compile_mode": MODES[compiled]}  # type: Dict[str, Any]
    if compiled:
        info["graph"] = "the step Cell (training: forward, value_and_grad, update), one graph"
    return info


class Precision(object):
    """What a precision name means in MindSpore: an ``amp.auto_mixed_precision`` level and dtype,
    and dynamic loss scaling for fp16 training. Which precisions run where is declared in SUPPORT:
    on a CPU only fp32, since MindSpore 2.10's CPU backend has no bfloat16 kernels and runs its
    float16 convolutions and matrix products as Float32 kernels between casts (the tests force
    these precisions through here to show both)."""

    def __init__(self, name, train):
        # type: (str, bool) -> None
        self.name = name
        self.level, dtype_name = AMP.get(name, (None, None))
        self.dtype = getattr(ms, dtype_name) if dtype_name else None
        self.scaler = None  # type: Optional[Any]
        if train and dtype_name == "float16":
            self.scaler = amp.DynamicLossScaler(scale_value=LOSS_SCALE, scale_factor=2,
                                                scale_window=LOSS_SCALE_WINDOW)

    def apply(self, network):
        # type: (Any) -> Any
        """The network as it runs in this precision ("auto" casts per operator at run time; O3
        casts it whole)."""
        if self.level is None:
            return network
        return amp.auto_mixed_precision(network, self.level, self.dtype)

    def info(self):
        # type: () -> Dict[str, Any]
        return {
            "precision": self.name,
            "amp_api": "mindspore.amp.auto_mixed_precision" if self.level else None,
            "amp_level": self.level,
            "amp_dtype": str(self.dtype) if self.dtype is not None else None,
            "loss_scaler": ("DynamicLossScaler(scale_value=2**16, window=%d)" % LOSS_SCALE_WINDOW
                            if self.scaler is not None else None),
        }


class _ScaledLoss(nn.Cell):
    """The objective's loss as (what is differentiated, the loss): scaled first under a loss
    scaler (fp16), the loss itself otherwise."""

    def __init__(self, objective, scaler):
        # type: (Any, Optional[Any]) -> None
        super(_ScaledLoss, self).__init__(auto_prefix=False)
        self.objective = objective
        self.scaler = scaler

    def construct(self, *inputs):
        loss = self.objective(*inputs)
        if self.scaler is not None:
            return self.scaler.scale(loss), loss
        return loss, loss


class TrainStep(nn.Cell):
    """Forward + loss, gradients (``mindspore.value_and_grad``), optional global-norm clipping
    and the optimizer update, as one Cell: GRAPH_MODE compiles it whole on its first call,
    PYNATIVE_MODE runs it op by op.

    A Cell, as ``nn.TrainOneStepCell`` is, not a function under ``mindspore.jit``: the same step
    as a jitted function closing over the Cells was far slower in GRAPH_MODE (docs/fidelity.md,
    "Compiled modes", mindspore).

    With a loss scaler (fp16), the loss is scaled before the gradient and the update is skipped
    on a step whose unscaled gradients are not finite, as MindSpore's mixed-precision guide does.
    """

    def __init__(self, objective, optimizer, clip, scaler):
        # type: (Any, Any, Optional[float], Optional[Any]) -> None
        super(TrainStep, self).__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.clip = clip
        self.scaler = scaler
        self.reducer = grad_reducer(optimizer.parameters)  # ranks: the gradients' mean
        self.grad_fn = ms.value_and_grad(_ScaledLoss(objective, scaler), None,
                                         optimizer.parameters, has_aux=True)

    def construct(self, *inputs):
        (_, loss), grads = self.grad_fn(*inputs)
        if self.reducer is not None:
            grads = self.reducer(grads)
        if self.scaler is not None:
            grads = self.scaler.unscale(grads)
            finite = amp.all_finite(grads)
            if finite:
                if self.clip:
                    grads = ms.ops.clip_by_global_norm(grads, self.clip)
                loss = ms.ops.depend(loss, self.optimizer(grads))
            self.scaler.adjust(finite)
        else:
            if self.clip:
                grads = ms.ops.clip_by_global_norm(grads, self.clip)
            loss = ms.ops.depend(loss, self.optimizer(grads))
        return loss


def synchronize(handle):
    # type: (Any) -> None
    """Wait for every kernel issued so far. ``mindspore.runtime.synchronize`` serves Ascend and
    GPU only (on a CPU it returns at once), so this drains the PyNative executor's queue as
    MindSpore's own ``Model`` does at a step end, then waits for the last output itself."""
    from mindspore.graph.api import _pynative_executor
    _pynative_executor.sync()
    if handle is not None:
        handle.asnumpy()


class MindSporeWorkload(Workload):
    """A step function (training: forward, loss, gradients and update; inference: forward and a
    scalar summary) over one synthetic batch already held as MindSpore tensors."""

    def __init__(self, step_fn, inputs, samples_per_step, params, info, network=None):
        # type: (Callable[..., Any], Tuple[Any, ...], int, int, Dict[str, Any], Any) -> None
        self._step_fn = step_fn
        self._inputs = inputs
        # the network whose parameters a test of the data-parallel step reads and loads around
        # one step (tests/dp_step.py); the timed loop never does
        self.network = network
        self._last = None  # type: Any
        super(MindSporeWorkload, self).__init__(samples_per_step, params, info)

    def step(self):
        # type: () -> Any
        self._last = self._step_fn(*self._inputs)
        return self._last

    def sync(self):
        # type: () -> None
        synchronize(self._last)

    def barrier(self):
        # type: () -> None
        """Every rank waits for the others: an AllReduce of one number, whose result no rank
        has before every rank has sent its part."""
        if distributed():
            ops.AllReduce()(ms.Tensor(numpy.ones(1, numpy.float32))).asnumpy()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value``: one ops.AllReduce (sum) of a float32 vector zero but for
        this rank's own entry."""
        if not distributed():
            return [value]
        votes = numpy.zeros(world_size(), numpy.float32)
        votes[rank()] = value
        summed = ops.AllReduce()(ms.Tensor(votes)).asnumpy()
        return [int(round(float(v))) for v in summed]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One ops.AllReduce (MCCL on a CPU) of a float32 buffer as large as the gradients."""
        if not distributed():
            return None
        buffer = ms.Tensor(numpy.zeros(self.params, numpy.float32))
        reduce = ops.AllReduce()
        out = []  # type: List[Any]
        return median_seconds(lambda: out.append(reduce(buffer)),
                              lambda: synchronize(out.pop() if out else None))

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.astype(ms.float32).asnumpy())

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.mindspore.profiling import MindSporeProfiler

        return MindSporeProfiler()


def count_params(network):
    # type: (Any) -> int
    """Unique trainable parameters; a tied matrix is one Parameter and counts once."""
    total, seen = 0, set()
    for p in network.trainable_params():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += element_count(p.shape)
    return total


def runtime_info(device):
    # type: (str) -> Dict[str, Any]
    """Facts about this MindSpore and device that change performance and belong with a result."""
    return {
        "mindspore_version": ms.__version__,
        "device": device,
        "device_target": ms.get_context("device_target"),
        "device_name": cpu_name(),
        # MindSpore's default O0 (performance first) keeps more memory than O1 (memory reuse):
        # BERT-Base training at batch 8, seq 128 peaked at 15 GiB of host memory here
        "memory_optimize_level": "O%s" % ms.get_context("memory_optimize_level"),
        "world_size": world_size(),
        "rank": rank(),
        "data_parallel": comm_description(),
    }
