"""Multi-process and multi-node Paddle cases, launched by Paddle's own launcher (harness side).

Each repeat runs ``python -m paddle.distributed.launch ... PYTHON -m dlperf.worker ...`` on every
node (Paddle runs a training "script" that does not end in ``.py`` as a command): it starts
``--nproc_per_node`` ranks with PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM / PADDLE_MASTER ... and
each rank's output in ``--log_dir`` (``workerlog.N``, inside the repeat's directory), and stops
the others when one fails. The worker joins them with ``init_parallel_env`` and trains through
``paddle.DataParallel``: gloo on CPUs (``PADDLE_DISTRI_BACKEND=gloo``, which Paddle's launcher
also picks by itself where it finds no GPU), NCCL on GPUs (one per rank, ``FLAGS_selected_gpus``).

- one node: no master; Paddle picks free ports for the ranks' store.
- several nodes: ``--master ADDRESS:PORT`` is Paddle's HTTP key-value master, which the node whose
  address it names serves (node 0 is told that address with ``--host``, so Paddle recognises it
  as its own; the guard resolves a host name to the address on the node, as Paddle compares
  addresses); ``--rank`` places each node, ``--job_id`` keeps two repeats apart.

Paddle's launcher has no rendezvous deadline (its master waits for missing nodes forever) and
starts each rank in a session of its own, so the command runs under :mod:`dlperf.launchers.launchguard`:
``--rdzv-timeout`` seconds for the first ``workerlog`` (written once every node joined), and no
process left behind. The workers gather every rank's figures to global rank 0 (on node 0), so
node 0's run stores the case.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from dlperf.launchers import exits, launchguard
from dlperf.launchers.launch import (LOST_PEER, START_OTHERS, Launch, MultiLauncher, Rendezvous,
                                     node_0_silent, rendezvous_timeout, worker_argv)
from dlperf.spec import Case

LOG_DIR = "paddle-log"  # inside the repeat's directory: workerlog.N, one per local rank
# Paddle's gloo when the rank at the other end of a pair went away:
# "[.../gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 0 pair_rank = 1"
PEER_SYMPTOMS = (*LOST_PEER, "pair_rank = ")


class PaddleLaunch(MultiLauncher):
    """The launcher for paddle cases with devices x nnodes > 1."""

    name = "paddle.distributed.launch"

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        start = self.begin(case)
        rdzv = self.rendezvous
        log_dir = out_dir / LOG_DIR
        job = f"dlperf-{case.key()[:16]}-{start.number}"
        argv = [start.python, "-m", "paddle.distributed.launch", "--nnodes", str(case.nnodes),
                "--nproc_per_node", str(case.devices), "--log_dir", str(log_dir),
                "--job_id", job, "--max_restart", "0"]
        guard = [sys.executable, "-m", "dlperf.launchers.launchguard"]
        details: dict[str, Any] = {"log_dir": LOG_DIR}
        if case.nnodes > 1:
            argv += ["--master", rdzv.endpoint, "--rank", str(rdzv.node_rank)]
            if rdzv.node_rank == 0:
                argv += ["--host", str(rdzv.master_addr)]  # so node 0 serves its master
            # Paddle compares addresses: the guard turns the name into one on the node itself
            guard += ["--resolve", str(rdzv.master_addr), "--rdzv-timeout", f"{rdzv.timeout_s:g}",
                      "--joined", str(log_dir / "workerlog.*"), "--nnodes", str(case.nnodes),
                      "--members-url", f"http://{rdzv.endpoint}/{job}/info"]
            details.update(rendezvous="paddle HTTP master", master=rdzv.endpoint, job_id=job)
        # PYTHON -m dlperf.worker ...: a "training script" Paddle runs as it is
        argv += worker_argv(start.python, case_file, out_dir)
        env = self.worker_env(start)
        if case.device == "cpu":
            env["PADDLE_DISTRI_BACKEND"] = "gloo"  # even where Paddle would pick a GPU and NCCL
        return Launch([*guard, "--", *argv], env=env, ranks=self.ranks_here(case),
                      explain=lambda log: explain(log, case, rdzv), peer_symptoms=PEER_SYMPTOMS,
                      facts=self.facts(case, start, **details))


# ------------------------------------------------------------------------------------------------
# reading the launcher's log when the ranks could not say what went wrong
# ------------------------------------------------------------------------------------------------

# Paddle's own lines: a failed rank ("Container rank <local> status failed cmd [...] code <exit>
# log ..."), and the warning its launcher repeats while the master does not answer
_FAILED = re.compile(r"Container rank (\d+) status \S+ cmd .*? code (-?\d+) log")
_NO_MASTER = "master not ready"


def explain(log: str, case: Case, rdzv: Rendezvous) -> tuple[str, str] | None:
    """(status, message) for what the guard's and Paddle's lines say went wrong, or None."""
    late = launchguard.timed_out(log)
    if late is not None:
        joined, nnodes = late
        if _NO_MASTER in log and rdzv.node_rank > 0:
            return rendezvous_timeout(rdzv, node_0_silent(rdzv.endpoint))
        counted = (f"{joined} of {nnodes} nodes joined" if joined is not None
                   else f"the {case.nnodes} nodes never all joined")
        return rendezvous_timeout(rdzv, f"{counted} at {rdzv.endpoint}; {START_OTHERS}")
    found = _FAILED.search(log)
    if found:
        rank = rdzv.node_rank * case.devices + int(found.group(1))
        code = int(found.group(2))
        if code < 0:
            return exits.killed(f"rank {rank}:", -code)
    return None  # an exit code: the rank's own result file, if any, says more
