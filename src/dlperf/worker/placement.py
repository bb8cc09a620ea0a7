"""Which CPUs a rank runs on and how many threads every framework's pools get, from one field.

Before the framework is imported the worker pins itself (``sched_setaffinity``) to its share of
the CPUs it was given: all of them for one process per node, else a disjoint contiguous slice per
local rank, so two ranks never fight over a core and every framework sees the same CPUs. A case
that sets ``threads`` gets that many CPUs, the first of its share: a process is then the same
device whether it runs alone or beside others, which a scaling series compares. (Without it, one
process with one thread took a second core where its framework dispatches from Python beside its
kernels, and two processes a core each had none: on a 2-core Zen 4, ResNet-50 at batch 8 on one
process read 1.44x faster for JAX and 1.65x for MindSpore with both cores than pinned to one,
torch 0.98x.) The
thread count (the case's ``threads``, else ``OMP_NUM_THREADS`` as the harness or the user set
it, else the slice's size) then goes into every variable a
framework sizes a pool from at start-up: OpenMP / MKL / OpenBLAS (torch, paddle, mxnet, oneflow,
oneDNN), TensorFlow's intra-/inter-op pools, and XLA's CPU client (JAX) through the affinity
mask, which it sizes its pool by. Backends record what their framework reports it uses
(``info``); this module records what was asked.

Standard library only, valid Python 3.7.
"""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

# where each launcher puts (rank, world size, local rank): torchrun and dlperf.launchers.spawn,
# horovodrun's Gloo, Open MPI's mpirun (horovodrun --mpi)
PLACE_VARIABLES = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                   ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"))
# what a launcher may call a process's rank within its node: torchrun's, the launchers' own
# names, then Horovod's and Open MPI's (those of PLACE_VARIABLES), then MPI's and Slurm's
_TORCHRUN, _HOROVOD, _OPEN_MPI = (local for _, _, local in PLACE_VARIABLES)
LOCAL_RANK_VARIABLES = (_TORCHRUN, "DLPERF_LOCAL_RANK", "PADDLE_LOCAL_RANK",
                        "DEVICE_ID",  # msrun's name for a worker's local rank (MindSpore)
                        _HOROVOD, _OPEN_MPI, "MPI_LOCALRANKID", "SLURM_LOCALID")
THREADS_SET_BY = "DLPERF_THREADS_SET_BY"  # who chose the count: for backends to record
THREAD_POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                         "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def place(process_place=None):
    # type: (Optional[Callable[[], Tuple[int, int, int]]]) -> Tuple[int, int, int]
    """(rank, world size, local rank) of this process: ``process_place()`` (a backend's own
    reading, where its launcher names them differently), else the first set of
    :data:`PLACE_VARIABLES` that is there (one process: 0, 1, 0)."""
    if process_place is not None:
        return process_place()
    for rank, size, local in PLACE_VARIABLES:
        if rank in os.environ:
            return (int(os.environ[rank]), int(os.environ.get(size, "1")),
                    int(os.environ.get(local, "0")))
    return 0, 1, 0


def local_rank():
    # type: () -> Optional[int]
    """This process's rank within its node from the first of :data:`LOCAL_RANK_VARIABLES` that
    is set (before the backend is known); None where none is."""
    for name in LOCAL_RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def share(cpus, ranks, rank):
    # type: (List[int], int, int) -> List[int]
    """Rank ``rank``'s contiguous slice of ``cpus`` split ``ranks`` ways (one CPU each, wrapping
    round, when there are more ranks than CPUs)."""
    if ranks <= 1:
        return list(cpus)
    size = len(cpus) // ranks
    if size == 0:
        return [cpus[rank % len(cpus)]]
    return list(cpus[rank * size:(rank + 1) * size])


def apply(case):
    # type: (Dict[str, Any]) -> Dict[str, Any]
    """Pin this process and size the thread pools; what was done, for the result."""
    if not hasattr(os, "sched_setaffinity"):
        return {"pinned": False, "reason": "no sched_setaffinity on this platform"}
    given = sorted(os.sched_getaffinity(0))
    ranks = int(case.get("devices") or 1)
    rank = local_rank() if ranks > 1 else 0
    out = {"cpus_given": len(given)}  # type: Dict[str, Any]
    if rank is None:
        out.update(pinned=False, reason="local rank unknown: none of " +
                   ", ".join(LOCAL_RANK_VARIABLES) + " is set")
        mine = given
    else:
        mine = share(given, ranks, rank)
        asked = int(case.get("threads") or 0)
        if 0 < asked < len(mine):
            mine = mine[:asked]  # the case's threads are its CPUs, alone or beside others
        os.sched_setaffinity(0, mine)
        out.update(pinned=True, cpus=mine)
    threads, source = thread_count(case, ranks, len(mine))
    for name in THREAD_POOL_VARIABLES:
        os.environ[name] = str(threads)
    os.environ[THREADS_SET_BY] = source
    out.update(threads=threads, threads_set_by=source)
    return out


def thread_count(case, ranks, cpus):
    # type: (Dict[str, Any], int, int) -> Tuple[int, str]
    """The case's threads; else OMP_NUM_THREADS as the worker got it (the harness's share of a
    node among several processes, or the user's own); else every CPU this process runs on."""
    if case.get("threads"):
        return int(case["threads"]), "--threads-per-process"
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        if ranks > 1:
            return int(given), "dlperf (the node's CPUs shared among its %d processes)" % ranks
        return int(given), "the user (OMP_NUM_THREADS)"
    return cpus, "dlperf (all available CPUs of this process)"


def threads_set_by(default):
    # type: (str) -> str
    """What :func:`apply` recorded as the thread count's source (``default`` outside a worker)."""
    return os.environ.get(THREADS_SET_BY) or default
