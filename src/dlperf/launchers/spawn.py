"""``python -m dlperf.launchers.spawn --nproc N [--node-rank R --nnodes M --master-addr A --master-port P]
-- WORKER ...``: start this node's ranks of a data-parallel job, for frameworks that document
per-process variables instead of shipping a launcher (TF_CONFIG for TensorFlow's multi-worker
strategies, ``jax.distributed.initialize``, MXNet's ``DMLC_*`` roles).

It does what torchrun's agent does and nothing more: every rank gets torchrun's ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` (which the worker reads), ``DLPERF_RANK``,
``DLPERF_LOCAL_RANK``, ``DLPERF_WORLD_SIZE``, ``DLPERF_LOCAL_WORLD_SIZE``, ``DLPERF_NODE_RANK``,
``DLPERF_NNODES``, ``DLPERF_MASTER_ADDR`` and ``DLPERF_MASTER_PORT``, from which the backend
builds its framework's own configuration; when one rank fails the others are stopped (they would
otherwise wait for it in a collective until the case's timeout), and the exit status is the first
failure's. Each rank's end is printed as one line (``dlperf.launchers.spawn: rank 1 ...``) that
:func:`explain` reads when a rank could not write its own result (killed by a signal).

Standard library only, valid Python 3.7.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from dlperf.launchers import exits

PREFIX = "dlperf.launchers.spawn:"
POLL_S = 0.05
# after the first failure the others get this long to notice and write their own result, then
# SIGTERM, then SIGKILL: a rank stuck in a collective never notices by itself
GRACE_S = 3.0
KILL_AFTER_S = 5.0


def rank_env(rank, local_rank, world, local_world, node_rank, nnodes, addr, port):
    # type: (int, int, int, int, int, int, str, int) -> Dict[str, str]
    """The variables one rank is started with (torchrun's names too, which the worker reads)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(local_world), "DLPERF_RANK": str(rank), "DLPERF_LOCAL_RANK": str(local_rank),
            "DLPERF_WORLD_SIZE": str(world), "DLPERF_LOCAL_WORLD_SIZE": str(local_world),
            "DLPERF_NODE_RANK": str(node_rank), "DLPERF_NNODES": str(nnodes),
            "DLPERF_MASTER_ADDR": addr, "DLPERF_MASTER_PORT": str(port)}


def describe(code):
    # type: (int) -> str
    if code < 0:
        return "died from {} (exitcode {})".format(exits.signal_name(-code), code)
    return "exited with code {}".format(code)


def stop(procs, sig):
    # type: (List[subprocess.Popen], int) -> None
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except OSError:
                pass


def supervise(procs, first_rank=0, labels=None, grace_s=GRACE_S, prefix=PREFIX):
    # type: (List[subprocess.Popen], int, Optional[List[str]], float, str) -> int
    """Wait for every process; stop the rest after the first failure (``grace_s`` to notice
    by themselves, then SIGTERM, then SIGKILL). Each end is one line, ``PREFIX LABEL ended
    how`` (labels: ``rank N`` from ``first_rank``, or the caller's). The first failure's
    status."""
    labels = labels or ["rank {}".format(first_rank + local) for local in range(len(procs))]
    first_failure = None  # type: Optional[Tuple[str, int]]
    failed_at = None  # type: Optional[float]
    reported = set()  # type: set
    while True:
        for local, proc in enumerate(procs):
            code = proc.poll()
            if code is None or local in reported:
                continue
            reported.add(local)
            print("{} {} {}".format(prefix, labels[local], describe(code)), flush=True)
            if code != 0 and first_failure is None:
                first_failure, failed_at = (labels[local], code), time.monotonic()
        if len(reported) == len(procs):
            break
        if failed_at is not None:
            waited = time.monotonic() - failed_at
            if waited > grace_s + KILL_AFTER_S:
                stop(procs, signal.SIGKILL)
            elif waited > grace_s:
                stop(procs, signal.SIGTERM)
        time.sleep(POLL_S)
    if first_failure is None:
        return 0
    label, code = first_failure
    print("{} first failure: {} {}".format(prefix, label, describe(code)), flush=True)
    return 128 - code if code < 0 else code


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    parser = argparse.ArgumentParser(prog="python -m dlperf.launchers.spawn")
    parser.add_argument("--nproc", type=int, required=True, help="ranks on this node")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.nproc < 1 or not 0 <= args.node_rank < args.nnodes:
        parser.error("need --nproc >= 1, 0 <= --node-rank < --nnodes and a command after --")
    world = args.nproc * args.nnodes
    first = args.node_rank * args.nproc
    procs = []  # type: List[subprocess.Popen]

    def forward(signum, _frame):
        # type: (int, object) -> None
        stop(procs, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    for local in range(args.nproc):
        env = dict(os.environ)
        env.update(rank_env(first + local, local, world, args.nproc, args.node_rank,
                            args.nnodes, args.master_addr, args.master_port))
        procs.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    return supervise(procs, first)


_DIED = re.compile(re.escape(PREFIX) + r" first failure: rank (\d+) died from (\S+) \(exitcode "
                   r"(-?\d+)\)")


def explain(log):
    # type: (str) -> Optional[Tuple[str, str]]
    """(status, message) when a rank was killed by a signal (it wrote no result), else None."""
    found = _DIED.search(log)
    if found is None:
        return None
    rank, code = int(found.group(1)), int(found.group(3))
    return exits.killed("rank {}:".format(rank), -code)


if __name__ == "__main__":
    sys.exit(main())
