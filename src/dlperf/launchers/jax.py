"""Multi-process and multi-node JAX cases (harness side): JAX documents per-process
configuration (``jax.distributed.initialize``), not a launcher, so :mod:`dlperf.launchers.spawn` starts
each node's ranks (one per device) and the backend (:mod:`.distributed`) turns their
``DLPERF_*`` variables into the call: process 0 hosts JAX's coordination service at
``--master-addr:--master-port`` (one node: 127.0.0.1 on a free port), the others connect within
``--rdzv-timeout``. JAX aborts a process whose peers never join; :func:`explain` reads its fatal
line from the log.
"""

from __future__ import annotations

import re

from dlperf.launchers import spawn
from dlperf.launchers.launch import (LOST_PEER, START_OTHERS, Launch, Rendezvous, SpawnLauncher,
                                     node_0_silent, rendezvous_timeout)
from dlperf.spec import Case

# JAX's own fatal line when the coordination service never saw every process register
_NOT_JOINED = re.compile(r"DEADLINE_EXCEEDED.*?(?:RegisterTask|Barrier timed out)", re.S)
_REACHED = re.compile(r"# of tasks that reached the barrier: (\d+)/(\d+)")
# JAX's gloo on CPUs when a peer never posted its address for the collectives' context within
# 30 s (the backend forms it as the processes join, so a peer that died there): "Gloo context
# initialization failed: DEADLINE_EXCEEDED"
PEER_SYMPTOMS = (*LOST_PEER, "gloo context initialization failed")


class JaxDistributed(SpawnLauncher):
    """The launcher for jax cases with devices x nnodes > 1."""

    name = "dlperf.launchers.spawn (jax.distributed)"

    def __call__(self, case: Case, case_file, out_dir) -> Launch:
        spec = super().__call__(case, case_file, out_dir)
        rdzv = self.rendezvous
        spec.explain = lambda log: explain(log, case, rdzv, spec.facts["master"])
        spec.peer_symptoms = PEER_SYMPTOMS
        spec.facts["rendezvous"] = "jax.distributed coordination service"
        return spec


def explain(log: str, case: Case, rdzv: Rendezvous, master: str) -> tuple[str, str] | None:
    """(status, message) for a job that never formed, else what dlperf.launchers.spawn saw, else None."""
    if _NOT_JOINED.search(log):
        if case.nnodes > 1 and rdzv.node_rank > 0:
            return rendezvous_timeout(rdzv, node_0_silent(master))
        reached = _REACHED.search(log)
        counted = (f"{reached.group(1)} of {reached.group(2)} processes joined" if reached
                   else f"the {case.nnodes} nodes never all joined")
        return rendezvous_timeout(rdzv, f"{counted} at {master} (JAX: DEADLINE_EXCEEDED); "
                                        f"{START_OTHERS}")
    return spawn.explain(log)
