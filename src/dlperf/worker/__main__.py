"""``python -m dlperf.worker --case CASE.json --out-dir DIR``: measure one repeat on this rank.

The result goes to ``DIR/rank<RANK>.json`` (written atomically), never to stdout, because
frameworks print freely. A failure is a result too: the file then holds its status and message.

In a job of several ranks each rank writes its own file, and then, if it succeeded, the backend's
``gather_results(result)`` (when it has one) collects every rank's result at global rank 0, which
writes the files of the ranks on other nodes too: the node holding rank 0 sees the whole job.
A rank that failed skips the gather and exits; the launcher then stops the others.

A backend package (``dlperf.backends.<framework>``) is light to import and exposes its contract,
``BACKEND`` (a :class:`dlperf.backends.contract.Backend`: the ``SUPPORT`` declaration,
``resolve_device``, ``build``, ``build_info``, ``gather_results``, ``process_place``, the
profiler and the launcher, each documented there); the framework itself is imported by
``resolve_device``/``build``, inside the worker only.
"""

import argparse
import importlib
import json
import os
import platform
import resource
import socket
import sys
import traceback
from typing import Any, Dict, Optional, Tuple

from dlperf.worker import identity, limits, placement, stacks
from dlperf.worker.leave import leave
from dlperf.worker.lifeline import tie_to_harness
from dlperf.worker.loop import NonFiniteLoss, measure
from dlperf.worker.workload import UnsupportedError

OOM_MARKERS = ("out of memory", "outofmemory", "resourceexhausted", "resource exhausted",
               "failed to allocate", "cannot allocate memory", "not enough memory")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_PROC_BIND", "XLA_FLAGS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                    "CUDA_VISIBLE_DEVICES")
TRACE_NAME = "trace.json.gz"  # rank 0's profiled steps, beside its rank file


def classify(error):
    # type: (BaseException) -> str
    """Map an exception to a failure class of the result contract."""
    if isinstance(error, UnsupportedError):
        return "unsupported"
    if isinstance(error, MemoryError):
        return "oom"
    text = "{} {}".format(type(error).__name__, error).lower()
    if any(marker in text for marker in OOM_MARKERS):
        return "oom"
    return "crash"


def peak_host_bytes():
    # type: () -> int
    """Peak resident set of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def process_env():
    # type: () -> Dict[str, Any]
    """Facts about this worker's interpreter that the harness cannot see from outside."""
    env = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "thread_variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }  # type: Dict[str, Any]
    try:
        import numpy
        env["numpy"] = numpy.__version__
    except ImportError:
        env["numpy"] = None
    return env


TRACEBACK_HEAD = "Traceback (most recent call last):"


def one_line(error):
    # type: (BaseException) -> str
    """The error's type and the line of its message that says what went wrong: the first, or,
    where the message is itself a traceback (MXNet's ``MXNetError`` puts its C++ frames first),
    the last."""
    text = [line for line in str(error).strip().splitlines() if line.strip()]
    line = text[0] if text else ""
    if line.strip() == TRACEBACK_HEAD and len(text) > 1:
        line = text[-1].strip()
    return "{}: {}".format(type(error).__name__, line)[:500]


def place(backend):
    # type: (Any) -> Tuple[int, int, int]
    """(rank, world size, local rank) of this process: the backend package's ``process_place``
    where it has one (:mod:`dlperf.worker.placement` for ``backend`` None or without)."""
    contract = getattr(backend, "BACKEND", None)
    return placement.place(contract.process_place if contract is not None else None)


def page_cache(case):
    # type: (Dict[str, Any]) -> Any
    """With a dataset directory: drop the page cache (``cold_cache``) or look at how much of the
    dataset it holds. Local rank 0 acts for its node; the others return None. Before any rank
    reads a file: the others only start once the job's first collective (DDP's broadcast of the
    weights, in build) has seen local rank 0 arrive."""
    from dlperf.data import imagefolder
    from dlperf.worker import pagecache

    if (placement.local_rank() or 0) != 0:
        return None
    _, samples = imagefolder.list_samples(case["data"])
    paths = [path for path, _ in samples]
    return pagecache.make_cold(paths) if case.get("cold_cache") else pagecache.observe(paths)


def run(case, out_dir=None):
    # type: (Dict[str, Any], Optional[str]) -> Dict[str, Any]
    """Measure ``case`` on this rank; with ``case["profile_steps"]``, rank 0 profiles after the
    window and writes its trace to ``out_dir`` (:data:`TRACE_NAME`)."""
    # this rank's place first, from its launcher's variables (the backend's own names once it is
    # imported): a rank that fails from here on still writes its own rank<N>.json and leaves as
    # a rank of a job, never as a lone process's rank 0
    rank, world_size, local_rank = place(None)
    result = {"rank": rank, "world_size": world_size, "local_rank": local_rank,
              "host": socket.gethostname(), "status": "ok", "error": None}  # type: Dict[str, Any]
    backend = None  # type: Any
    try:
        backend = importlib.import_module("dlperf.backends." + case["framework"])  # light
        result["rank"], result["world_size"], result["local_rank"] = place(backend)
        result["memory_limit_bytes"] = limits.apply()  # dlperf capacity --memory-limit
        result["placement"] = placement.apply(case)  # before any framework sizes its pools
        # where this rank runs, recorded even when the case is then refused: results show it
        result["device"] = backend.BACKEND.resolve_device(case.get("device", "auto"))
        if case.get("device") == "cpu":  # asked for: the backend's why matters under auto only
            result["device"]["reason"] = "--device cpu"
        # The backend's own declaration decides, before anything is built (see worker.support).
        backend.SUPPORT.check(case, result["device"]["kind"])
        if case.get("data", "synthetic") != "synthetic":
            # after the framework's libraries are loaded, before anything reads the dataset
            result["page_cache"] = page_cache(case)
        trace = os.path.join(out_dir, TRACE_NAME) if out_dir else None
        result.update(measure(backend.BACKEND.build, case, trace,
                              profiling=result["rank"] == 0))
    except NonFiniteLoss as error:
        result.update(status="crash", error=str(error))
    except Exception as error:  # a failure is a result: classify it and keep the message
        result.update(status=classify(error), error=one_line(error))
        traceback.print_exc()
    result["peak_host_bytes"] = peak_host_bytes()
    result["env"] = process_env()
    if backend is not None:  # after the window: the framework is loaded by now
        result["env"]["identity"] = identity.describe(backend.BACKEND.build_info)
    return result


def write_atomic(path, payload):
    # type: (str, Dict[str, Any]) -> None
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(payload, handle)
    os.replace(tmp, path)


def repeat(argv=None):
    # type: (Any) -> Tuple[int, int]
    """Measure the case file's repeat on this rank and write its result: (exit code, world
    size)."""
    parser = argparse.ArgumentParser(prog="python -m dlperf.worker")
    parser.add_argument("--case", required=True, help="case JSON file")
    parser.add_argument("--out-dir", required=True, help="directory for rank<N>.json")
    args = parser.parse_args(argv)
    tie_to_harness()  # a killed harness takes this rank with it, under any launcher
    stacks.arm(args.out_dir)  # a repeat past its timeout says where this rank was
    with open(args.case) as handle:
        case = json.load(handle)
    if "collectives" in case:  # `dlperf collectives`: the same launchers, another driver
        return collectives_repeat(case, args.out_dir)
    result = run(case, args.out_dir)
    write_atomic(rank_file(args.out_dir, result["rank"]), result)
    if result["status"] != "ok":
        code = 1
    elif result["world_size"] > 1:
        code = gather(case, result, args.out_dir)
    else:
        code = 0
    return code, result["world_size"]


def collectives_repeat(case, out_dir):
    # type: (Dict[str, Any], str) -> Tuple[int, int]
    """The collectives' driver (:mod:`dlperf.worker.collectives`) on this rank, its result
    written as a training rank's is: rank 0's holds the whole job's times, so nothing is
    gathered."""
    from dlperf.worker import collectives

    result = collectives.run(case, place, lambda error: (classify(error), one_line(error)))
    result["env"] = process_env()
    write_atomic(rank_file(out_dir, result["rank"]), result)
    return (0 if result["status"] == "ok" else 1), result["world_size"]


def rank_file(out_dir, rank):
    # type: (str, int) -> str
    return os.path.join(out_dir, "rank{}.json".format(rank))


def gather(case, result, out_dir):
    # type: (Dict[str, Any], Dict[str, Any], str) -> int
    """Hand this rank's result to global rank 0; there, write the ranks this node lacks."""
    backend = importlib.import_module("dlperf.backends." + case["framework"])
    gather_results = backend.BACKEND.gather_results
    if gather_results is None:
        return 0
    try:
        everyone = gather_results(result)
    except Exception:  # a peer died during the gather: the launcher reports it
        traceback.print_exc()
        return 1
    for other in everyone or []:
        path = rank_file(out_dir, other["rank"])
        if not os.path.exists(path):  # a rank on another node
            write_atomic(path, other)
    return 0


if __name__ == "__main__":
    exit_code, world_size = repeat()
    if world_size == 1:
        leave(exit_code)  # the result is written: skip the interpreter's teardown
    sys.exit(exit_code)
