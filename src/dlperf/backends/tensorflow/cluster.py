"""TF_CONFIG for TensorFlow's multi-worker strategies (TF 2's MultiWorkerMirroredStrategy, TF
1.15's CollectiveAllReduceStrategy), from the variables dlperf.launchers.spawn gives each rank, and how a
rank reports a cluster that never formed.

TF_CONFIG names every worker's ``host:port`` (the gRPC server it starts) in rank order, and this
rank's index. Hosts: one node, ``DLPERF_MASTER_ADDR`` (127.0.0.1); several, the nodes' addresses
(``DLPERF_NODE_ADDRS``, from ``--node-addrs`` or Slurm's node list) with ``DLPERF_LOCAL_WORLD_SIZE``
ranks each. Ports: the ones the launcher reserved (``DLPERF_RANK_PORTS``, one node), else
``--master-port`` + rank, so two "nodes" on one host never collide.

A rank whose cluster never formed within ``--rdzv-timeout`` prints one line starting with
:data:`MARKER` (TensorFlow's own words after it) and leaves without a result file, as a torchrun
rank never starts: the launcher's ``explain`` turns the line into status ``timeout``.

Standard library only, valid Python 3.7 (TF 1.15's backend imports it too).
"""

import json
import os
import sys
import threading
from typing import Any, Dict, List, Tuple

from dlperf.worker.workload import UnsupportedError

MARKER = "dlperf.rendezvous: timed out:"
# what a TF 1.15 worker says when its cluster formed but its first step's all-reduce never
# completed (a peer stalled before it): the launcher tells this apart from a cluster never formed
FIRST_STEP_STALLED = "the first step's all-reduce did not complete: a worker never reached it"
RENDEZVOUS_EXIT = 75  # EX_TEMPFAIL: the job never formed; no result was written


def job():
    # type: () -> Tuple[int, int]
    """(rank, world size) of this process, as dlperf.launchers.spawn set them; (0, 1) for one process."""
    return (int(os.environ.get("DLPERF_RANK", "0")),
            int(os.environ.get("DLPERF_WORLD_SIZE", "1")))


def rdzv_timeout_s():
    # type: () -> float
    return float(os.environ.get("DLPERF_RDZV_TIMEOUT_S", "300"))


def workers():
    # type: () -> List[str]
    """Every worker's ``host:port`` in rank order."""
    rank, world = job()
    nnodes = int(os.environ.get("DLPERF_NNODES", "1"))
    per_node = int(os.environ.get("DLPERF_LOCAL_WORLD_SIZE", str(world)))
    if nnodes == 1:
        hosts = [os.environ.get("DLPERF_MASTER_ADDR", "127.0.0.1")] * world
    else:
        nodes = [a for a in os.environ.get("DLPERF_NODE_ADDRS", "").split(",") if a]
        if len(nodes) != nnodes:
            raise UnsupportedError(
                "TensorFlow's TF_CONFIG names every worker's address, and the addresses of the "
                "%d nodes are not known here: pass --node-addrs with every node's address in "
                "node-rank order, or run under Slurm" % nnodes)
        hosts = [nodes[r // per_node] for r in range(world)]
    reserved = [p for p in os.environ.get("DLPERF_RANK_PORTS", "").split(",") if p]
    if len(reserved) == world:
        ports = [int(p) for p in reserved]
    else:
        base = int(os.environ["DLPERF_MASTER_PORT"])
        ports = [base + r for r in range(world)]
    return ["%s:%d" % (host, port) for host, port in zip(hosts, ports)]


def tf_config():
    # type: () -> Dict[str, Any]
    rank, _ = job()
    return {"cluster": {"worker": workers()}, "task": {"type": "worker", "index": rank}}


def set_tf_config():
    # type: () -> Dict[str, Any]
    """Put TF_CONFIG in this process's environment (read by the strategy's cluster resolver)."""
    config = tf_config()
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def give_up(seconds, what):
    # type: (float, str) -> None
    """The cluster did not form in time: say so in one line (the framework's first line, and
    how many workers reached its barrier when it says) and leave without a result."""
    lines = [line.strip() for line in str(what).strip().splitlines() if line.strip()] or [""]
    kept = lines[:1] + [line for line in lines[1:] if "reached the barrier" in line]
    sys.stdout.flush()
    sys.stderr.write("%s after %g s: %s\n" % (MARKER, seconds, " ".join(kept)))
    sys.stderr.flush()
    os._exit(RENDEZVOUS_EXIT)


class Deadline(object):
    """For a framework whose first collective has no timeout of its own (TF 1.15): unless
    :meth:`met` is called within ``seconds``, :func:`give_up` ends the process."""

    def __init__(self, seconds, what):
        # type: (float, str) -> None
        self._timer = threading.Timer(seconds, give_up, args=(seconds, what))
        self._timer.daemon = True
        self._timer.start()

    def met(self):
        # type: () -> None
        self._timer.cancel()

