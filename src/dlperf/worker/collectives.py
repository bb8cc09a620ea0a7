"""The timing driver of ``dlperf collectives``: each operation at each message size through a
framework's own collective path, timed the way nccl-tests times it.

The harness starts the ranks with the launcher ``dlperf run`` uses for the framework (torchrun,
dlperf's spawn, horovodrun, ...), each running ``python -m dlperf.worker`` on a case file that
holds a ``collectives`` block; the worker hands such a case to :func:`run`. The framework's
knowledge is in ``dlperf.backends.<framework>.collectives``: its :data:`CollectivePath`
declarations (which the harness reads without the framework: what each path runs on, which
launcher starts it, which operations it has) and ``join(path, case)``, which joins the job
from the variables the launcher set, as the backend's training path does, and returns a
communicator:

- ``rank``, ``size``: this rank and the job's ranks, as the framework numbers them;
- ``prepare(op, elements)``: float32 buffers for one operation whose whole message is
  ``elements`` (divisible by ``size`` for allgather and reducescatter), and a function that runs
  it once and returns when it has completed on this rank (a device synchronisation included);
- ``barrier()``; ``sum_rows(matrix)``: a float64 matrix summed over every rank (the framework's
  own all-reduce, in float32 where it has no float64), to combine the ranks' times;
- ``facts()``: what the result records (version, the path as the framework names it);
  ``close()``: leave the job.

Per operation and size: ``warmup`` untimed runs, then ``iters`` runs each after a barrier, each
timed on every rank; an iteration's time is the slowest rank's (nccl-tests takes the maximum over
ranks too). Each run's CPU time is taken too: the whole process's (``time.process_time``: every
thread, the framework's communication threads and the kernel's work for its sockets included),
the busiest rank's per iteration. Where a rank's compute shares its cores with the collective
(a CPU host), that CPU is work the step cannot overlap, whatever the link. Only rank 0's result
carries them, and it is complete: every rank holds the combined figures. Standard library and
numpy only; valid Python 3.7.
"""

import importlib
import socket
import time
from collections import namedtuple
from typing import Any, Callable, Dict, List, Tuple

from dlperf.worker import placement

#: One collective path of a framework: ``name`` (what ``--path`` says), the ``device`` kind it
#: runs on (``cpu``, ``cuda``), the ``launcher`` that starts its ranks (a case's ``launcher``:
#: ``native``, the framework's own, or ``horovod``), the operations it has, ``how``: what it
#: is, in the framework's words, and Horovod's ``controller`` (``gloo`` or ``mpi``).
CollectivePath = namedtuple("CollectivePath", "name device launcher ops how controller",
                            defaults=("gloo",))

#: what one operation's message of ``m`` bytes is on each rank (as nccl-tests sizes it): the
#: whole buffer for allreduce and broadcast; for allgather each rank sends ``m / n`` and receives
#: ``m``; for reducescatter each sends ``m`` and receives ``m / n``
SHARDED = ("allgather", "reducescatter")
#: ``pushpull``: a parameter server's all-reduce (MXNet's kvstore: every worker pushes ``m``
#: bytes, the servers sum them, every worker pulls the ``m``-byte sum)
OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "pushpull")
ELEMENT_BYTES = 4  # float32


def bus_factor(op, ranks):
    # type: (str, int) -> float
    """nccl-tests' bus bandwidth factor (its PERFORMANCE.md): busbw = algbw x factor, so that a
    figure near the link's speed means the operation used the links fully whatever the ranks:
    allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast 1. nccl-tests has no
    parameter server; a pushpull's is 1, so that its busbw is the bytes each worker sends (and
    receives) per second, which is what a ring all-reduce's busbw counts too."""
    if op == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if op in SHARDED:
        return float(ranks - 1) / ranks
    if op in ("broadcast", "pushpull"):
        return 1.0
    raise ValueError("no bus bandwidth factor for operation %r; known: %s"
                     % (op, ", ".join(OPS)))


def elements(op, nbytes, ranks):
    # type: (str, int, int) -> int
    """The float32 elements of an ``nbytes`` message of ``op`` on ``ranks`` ranks: whole
    elements, and for the sharded operations a whole number of them per rank (0 when ``nbytes``
    is too small for one each)."""
    count = nbytes // ELEMENT_BYTES
    return count - count % ranks if op in SHARDED else count


def combine(comm, times, rank, size):
    # type: (Any, List[float], int, int) -> List[float]
    """Each iteration's time as the slowest rank's: every rank's times summed into a matrix zero
    but for its own row, then the maximum down each column."""
    import numpy

    rows = numpy.zeros((size, len(times)), dtype=numpy.float64)
    rows[rank] = times
    return [float(t) for t in numpy.asarray(comm.sum_rows(rows)).reshape(size, -1).max(axis=0)]


def time_one(comm, op, count, iters, warmup):
    # type: (Any, str, int, int, int) -> Tuple[List[float], List[float]]
    """``warmup`` untimed runs, then ``iters`` timed ones, each after a barrier: this rank's
    seconds per run, and the CPU seconds its process spent in each."""
    once = comm.prepare(op, count)
    for _ in range(warmup):
        once()
    times = []  # type: List[float]
    cpu = []  # type: List[float]
    for _ in range(iters):
        comm.barrier()
        start_cpu = time.process_time()  # outside the wall clock's interval, as its end is
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return times, cpu


def measure(comm, spec):
    # type: (Any, Dict[str, Any]) -> List[Dict[str, Any]]
    """Every operation at every size: its bytes, elements, the slowest rank's seconds per
    iteration and the busiest rank's CPU seconds per iteration."""
    out = []  # type: List[Dict[str, Any]]
    for op in spec["ops"]:
        for nbytes in spec["sizes"]:
            count = elements(op, int(nbytes), comm.size)
            times, cpu = time_one(comm, op, count, int(spec["iters"]), int(spec["warmup"]))
            # two exchanges of the same shape (TF 1.15's sum_rows builds its graph for one)
            out.append({"op": op, "bytes": count * ELEMENT_BYTES, "elements": count,
                        "times_s": combine(comm, times, comm.rank, comm.size),
                        "cpu_s": combine(comm, cpu, comm.rank, comm.size)})
    return out


def run(case, place, failure):
    # type: (Dict[str, Any], Callable[[Any], Tuple[int, int, int]], Callable[[BaseException], Tuple[str, str]]) -> Dict[str, Any]
    """This rank's result for the case's ``collectives`` block: its place, the path's facts and,
    measured, every operation and size; a failure as (status, message) from ``failure``.
    ``place(None)`` reads the launcher's variables (the worker's own reader)."""
    spec = case["collectives"]
    rank, size, local = place(None)
    result = {"rank": rank, "world_size": size, "local_rank": local,
              "host": socket.gethostname(), "status": "ok",
              "error": None}  # type: Dict[str, Any]
    try:
        result["placement"] = placement.apply(case)  # before the framework sizes its pools
        module = importlib.import_module("dlperf.backends.%s.collectives" % case["framework"])
        comm = module.join(spec["path"], case)
        result.update(rank=comm.rank, world_size=comm.size, facts=comm.facts())
        result["ops"] = measure(comm, spec)
        comm.close()
    except Exception as error:  # a failure is a result: the harness shows it
        import traceback

        traceback.print_exc()
        result["status"], result["error"] = failure(error)
    return result
