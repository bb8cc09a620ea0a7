"""Multi-process and multi-node TensorFlow 2 cases (harness side).

TensorFlow documents per-process configuration for its multi-worker strategies (TF_CONFIG),
not a launcher, so :mod:`dlperf.launchers.spawn` starts each node's workers and the backend
(:mod:`.cluster`, :mod:`.distribute`) writes TF_CONFIG from their ``DLPERF_*`` variables.

- CPUs: one worker process per device (``--devices``), each listening on its own port: one node,
  ports this launcher reserves on 127.0.0.1 (``DLPERF_RANK_PORTS``); several nodes,
  ``--master-port`` + rank on every node's address (``--node-addrs`` or Slurm's node list, as
  ``DLPERF_NODE_ADDRS``), which TF_CONFIG must list.
- GPUs: one process per node holding the node's ``--devices`` GPUs (MirroredStrategy on one
  node, MultiWorkerMirroredStrategy across nodes), so each node runs one worker.

A worker whose cluster never formed prints :data:`cluster.MARKER` with TensorFlow's own words and
writes no result; :func:`explain` turns that into status ``timeout``, as it does a TF 1.15
worker's first step that a peer never reached (:data:`cluster.FIRST_STEP_STALLED`).
"""

from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path

from dlperf import envs
from dlperf.backends.tensorflow.cluster import FIRST_STEP_STALLED, MARKER
from dlperf.launchers import spawn
from dlperf.launchers.launch import (START_OTHERS, Launch, Rendezvous, SpawnLauncher, node_0_silent,
                                     rendezvous_timeout)
from dlperf.spec import Case

_TIMED_OUT = re.compile(re.escape(MARKER) + r" after \S+ s: (.*)")
_REACHED = re.compile(r"reached the barrier: (\d+)/(\d+)")


def gpu_case(case: Case) -> bool:
    """Whether the workers will run on GPUs: asked for, or ``auto`` with the GPU build."""
    if case.device in ("cuda", "cpu"):
        return case.device == "cuda"
    return envs.variant_of(case.framework) == "cuda"


def reserve_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (held together while the kernel picks)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class TFConfigLauncher(SpawnLauncher):
    """The launcher for tensorflow cases with devices x nnodes > 1."""

    name = "dlperf.launchers.spawn (TF_CONFIG)"
    strategies = ("tf.distribute.MultiWorkerMirroredStrategy", "tf.distribute.MirroredStrategy")

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        gpu = gpu_case(case)
        per_node = dataclasses.replace(case, devices=1) if gpu else case  # one process a node
        spec = super().__call__(per_node, case_file, out_dir)
        rdzv = self.rendezvous
        master = spec.facts["master"]
        multi_worker, mirrored = self.strategies
        spec.facts.update(replicas_per_process=case.devices if gpu else 1,
                          strategy=mirrored if gpu and case.nnodes == 1 else multi_worker)
        if "DLPERF_RANK_PORTS" in spec.env:
            spec.facts["workers"] = [f"127.0.0.1:{port}"
                                     for port in spec.env["DLPERF_RANK_PORTS"].split(",")]
        elif case.nnodes > 1 and rdzv.node_addrs:
            spec.facts["node_addrs"] = list(rdzv.node_addrs)
        spec.explain = lambda log: explain(log, case, rdzv, master)
        return spec

    def extra_env(self, case: Case) -> dict[str, str]:
        if case.nnodes == 1:
            return {"DLPERF_RANK_PORTS": ",".join(map(str, reserve_ports(case.devices)))}
        if self.rendezvous.node_addrs:
            return {"DLPERF_NODE_ADDRS": ",".join(self.rendezvous.node_addrs)}
        return {}  # the workers refuse the case, saying how to name the nodes


def explain(log: str, case: Case, rdzv: Rendezvous, master: str) -> tuple[str, str] | None:
    """(status, message) for a cluster that never formed, else what dlperf.launchers.spawn saw."""
    found = _TIMED_OUT.search(log)
    if found is None:
        return spawn.explain(log)
    reached = _REACHED.search(found.group(1))
    words = found.group(1).strip().split(". ")[0]  # TensorFlow's first sentence
    if words.startswith(FIRST_STEP_STALLED):  # TF 1.15: the cluster formed, then a peer stalled
        return rendezvous_timeout(rdzv, f"the workers met at {master}, but {words}")
    if reached is None and case.nnodes > 1 and rdzv.node_rank > 0:
        return rendezvous_timeout(rdzv, f"worker 0 on {node_0_silent(master)} and --node-addrs "
                                        f"(TensorFlow: {words[:200]})")
    counted = (f"{reached.group(1)} of {reached.group(2)} workers joined" if reached
               else f"the {case.nnodes} nodes never all joined")
    return rendezvous_timeout(rdzv, f"{counted} at {master}; {START_OTHERS} (TensorFlow: "
                                    f"{words[:200]})")
