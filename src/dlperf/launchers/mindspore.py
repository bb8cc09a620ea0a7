"""Multi-process and multi-node MindSpore cases, launched by MindSpore's own ``msrun`` (harness
side).

Each repeat runs msrun (``python -m mindspore.parallel.cluster.run``, what the ``msrun`` command
runs) ``--worker_num W --local_worker_num D --master_addr A --master_port P --node_rank R
--log_dir DIR --join True --cluster_time_out T python -m dlperf.worker ...`` on every node, from
the mindspore environment. msrun starts, on node 0, a scheduler process (the
same command with MS_ROLE=MS_SCHED, whose ``init()`` serves the cluster at A:P) and on every node
D workers (MS_ROLE=MS_WORKER, RANK_ID, RANK_SIZE, DEVICE_ID), each logging to
``DIR/worker_N.log`` (inside the repeat's directory, and copied to the console by ``--join``);
when one fails it kills the others. The workers join with ``mindspore.communication.init()``
(MCCL, MindSpore's own collectives, on a CPU) and train in ``ParallelMode.DATA_PARALLEL`` with
``gradients_mean`` through ``nn.DistributedGradReducer``.

msrun names the interpreter ``python`` (found on PATH), so the environment's ``bin`` goes first
on PATH. ``--cluster_time_out`` is --rdzv-timeout: MindSpore's own deadline for the cluster to
form. msrun starts its workers in sessions of their own, so the command runs under
:mod:`dlperf.launchers.launchguard`, which leaves no process behind.

msrun starts the scheduler on every node whose own address ``--master_addr`` is, so two "nodes"
on one machine both try to serve A:P: the second scheduler cannot bind it and that node's msrun
fails although its workers joined node 0's cluster and finished. Multi-node MindSpore runs need
separate hosts.

MindSpore's scheduler drops a worker whose heartbeat it has not heard for ``MS_NODE_TIMEOUT``
seconds (30 by default), and a worker leaves when the scheduler has not answered for
``MS_HEARTBEAT_RETRY_TIMEOUT`` (20). On a busy CPU host, two workers and the scheduler compiling
at once can starve a heartbeat thread for longer than that, and the case fails although nothing
died; msrun already kills every worker when one exits, so the launcher raises both deadlines to
the rendezvous timeout (a value the user has set in the environment is kept).
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

from dlperf.launchers import exits
from dlperf.launchers.launch import (START_OTHERS, Launch, MultiLauncher, Rendezvous,
                                     rendezvous_timeout, worker_argv)
from dlperf.spec import Case

MSRUN = "mindspore.parallel.cluster.run"  # the module behind the msrun command
LOG_DIR = "msrun-log"  # inside the repeat's directory: scheduler.log, worker_N.log

# the backend's line when MindSpore's init() gave up (workload.RDZV_FAILED), with its own words
_FAILED = re.compile(r"dlperf\.mindspore: the cluster did not form: ([^\n]*)")
# MindSpore's scheduler, when a worker's heartbeat stopped: "... worker 1 is the first one timed out"
_LOST = re.compile(r"worker (\d+) is the first one timed out")
# msrun's own lines when a process it started ended badly ("Worker process 812 exit with
# exception. Error code: 1.", "Scheduler process 790 exit with exception."), before its
# "RuntimeError: Distributed job exited with exception"
_EXITED = re.compile(r"(Worker|Scheduler) process (\d+) exit with exception\.(?: Error code: (-?\d+))?")


def heartbeat_env(timeout_s: int) -> dict[str, str]:
    """MS_NODE_TIMEOUT and MS_HEARTBEAT_RETRY_TIMEOUT (below it, as MindSpore asks) for a
    cluster whose rendezvous may take timeout_s; values already in the environment win."""
    node = int(os.environ.get("MS_NODE_TIMEOUT") or max(60, timeout_s))
    retry = int(os.environ.get("MS_HEARTBEAT_RETRY_TIMEOUT") or max(20, node * 2 // 3))
    return {"MS_NODE_TIMEOUT": str(node), "MS_HEARTBEAT_RETRY_TIMEOUT": str(retry)}


class Msrun(MultiLauncher):
    """The launcher for mindspore cases with devices x nnodes > 1."""

    name = "msrun"
    uses_socket_ifname = False  # MCCL, MindSpore's own collectives

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        start = self.begin(case)
        addr, port = self.master(case)
        rdzv = self.rendezvous
        python = start.python
        timeout = max(1, math.ceil(rdzv.timeout_s))
        log_dir = out_dir / LOG_DIR
        argv = [sys.executable, "-m", "dlperf.launchers.launchguard", "--",
                # msrun, as its console script runs it (the script's shebang may name the
                # directory the environment was built in rather than where it lives now)
                python, "-m", MSRUN, "--worker_num", str(case.devices * case.nnodes),
                "--local_worker_num", str(case.devices), "--master_addr", addr,
                "--master_port", str(port), "--node_rank", str(rdzv.node_rank),
                "--log_dir", str(log_dir), "--join", "True",
                "--cluster_time_out", str(timeout),
                # msrun runs "python ARGS" as it is (any other first word: "python SCRIPT")
                "python", *worker_argv(python, case_file, out_dir)[1:]]
        heartbeat = heartbeat_env(timeout)
        node_timeout = int(heartbeat["MS_NODE_TIMEOUT"])
        env = {**self.worker_env(start), **heartbeat,
               "PATH": str(Path(python).parent) + os.pathsep + os.environ.get("PATH", "")}
        facts = self.facts(case, start, master=f"{addr}:{port}",
                           rendezvous="msrun scheduler (node 0)", log_dir=LOG_DIR,
                           cluster_time_out_s=timeout, node_timeout_s=node_timeout)
        return Launch(argv, env=env, ranks=self.ranks_here(case),
                      explain=lambda log: explain(log, case, rdzv, f"{addr}:{port}",
                                                  node_timeout),
                      facts=facts)


def explain(log: str, case: Case, rdzv: Rendezvous, master: str,
            node_timeout_s: int) -> tuple[str, str] | None:
    """(status, message) when MindSpore said its cluster never formed or lost a worker, or
    msrun said which of its processes failed; otherwise None."""
    found = _FAILED.search(log)
    if found is None:
        return exited(log)
    said = f" (MindSpore: {found.group(1).strip()[:300]})"
    lost = _LOST.search(found.group(1))
    if lost is not None:
        return "timeout", (f"MindSpore's scheduler heard no heartbeat from worker {lost.group(1)} "
                           f"for MS_NODE_TIMEOUT={node_timeout_s} s: that rank stalled or died "
                           f"(its log: {LOG_DIR}/worker_{lost.group(1)}.log){said}")
    return rendezvous_timeout(rdzv, f"the {case.nnodes} nodes never all joined at {master}{said}; "
                                    f"{START_OTHERS}")


def exited(log: str) -> tuple[str, str] | None:
    """(status, message) naming the processes msrun saw end badly, each with its exit code or
    signal (the scheduler's errors, which msrun prints after them, end the stored tail)."""
    said = []
    for role, pid, code in dict.fromkeys(_EXITED.findall(log)):
        what = f"msrun's {role.lower()} process {pid}"
        if code and int(code) < 0:
            said.append(exits.killed(what, -int(code))[1])
        elif code:
            said.append(f"{what} exited with code {code}")
        else:
            said.append(f"{what} exited with an error (its errors: {LOG_DIR}/scheduler.log)")
    return ("crash", "; ".join(said)) if said else None
