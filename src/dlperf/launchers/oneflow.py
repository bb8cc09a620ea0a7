"""Multi-process and multi-node OneFlow cases, launched by OneFlow's own launcher (harness side).

Each repeat runs ``python -m oneflow.distributed.launch --nproc_per_node D --nnodes N --node_rank
R --master_addr A --master_port P -m dlperf.worker ...`` on every node, in the oneflow
environment: it starts D ranks with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
(torchrun's names, which the worker reads), and when one fails it stops its whole process group
(it is the group's leader: the runner starts it in a session of its own). The ranks meet at rank
0's control server at A:P when they import OneFlow (one node: 127.0.0.1 on a free port), and
train through ``flow.nn.parallel.DistributedDataParallel`` (eager) or global tensors (``nn.Graph``,
``--compile``) over OneFlow's own CPU collectives.

That import has no deadline of its own, so the launcher passes ``DLPERF_RDZV_TIMEOUT_S``
(--rdzv-timeout) and the backend arms ``alarm()`` around it: a rank still waiting then dies from
SIGALRM, which the launcher reports and :func:`explain` turns into a ``timeout``.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from dlperf import envs
from dlperf.launchers.launch import (NEXT_REPEAT_GRACE_S, Launch, MultiLauncher, Rendezvous, free_port,
                           thread_env, threads_per_process, worker_argv)
from dlperf.spec import Case

# the launcher's end when a rank died from a signal (CalledProcessError "... died with
# <Signals.SIGKILL: 9>."); SIGALRM is the backend's rendezvous deadline (workload.py)
_SIGNAL = re.compile(r"died with <Signals\.(SIG[A-Z0-9]+): (\d+)>")
# glog's fatal line, which OneFlow prints before it aborts: "F20261123 12:40:11.755896 10106
# ctrl_client.cpp:54] Check failed: ..."
_FATAL = re.compile(r"^F\d{8} [\d:.]+ +\d+ (\S+\] .*)$", re.M)
# what OneFlow repeats while rank 0's control server does not answer
_NO_MASTER = re.compile(r"LoadServer \S+ Failed at \d+ times")


class OneFlowLaunch(MultiLauncher):
    """The launcher for oneflow cases with devices x nnodes > 1."""

    name = "oneflow.distributed.launch"

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        rdzv = self.rendezvous
        rdzv.check(case.nnodes)
        python = self.python or envs.interpreter(case.framework)
        if case.nnodes == 1:
            addr, port = "127.0.0.1", free_port()
        else:
            addr, port = str(rdzv.master_addr), rdzv.master_port
            if rdzv.node_rank > 0 and self.launches > 0:
                time.sleep(NEXT_REPEAT_GRACE_S)
        self.launches += 1
        argv = [python, "-m", "oneflow.distributed.launch", "--nproc_per_node", str(case.devices),
                "--nnodes", str(case.nnodes), "--node_rank", str(rdzv.node_rank),
                "--master_addr", addr, "--master_port", str(port),
                # -m: the worker module and its arguments, run by the launcher's interpreter
                "-m", *worker_argv(python, case_file, out_dir)[2:]]
        threads = threads_per_process(case)
        declared = envs.worker_variables(case.framework, python)
        env = {**declared, **thread_env(threads), "DLPERF_RDZV_TIMEOUT_S": f"{rdzv.timeout_s:g}"}
        facts: dict[str, Any] = {
            "launcher": self.name, "processes": case.devices * case.nnodes,
            "processes_per_node": case.devices, "nnodes": case.nnodes,
            "threads_per_process": threads, "env_variant": envs.variant_of(case.framework),
            "master": f"{addr}:{port}", "rendezvous": "OneFlow control server of rank 0"}
        if case.nnodes > 1:
            facts.update(node_rank=rdzv.node_rank, rdzv_timeout_s=rdzv.timeout_s)
        if declared:
            facts["framework_env"] = declared
        return Launch(argv, env=env, ranks=self.ranks_here(case),
                      explain=lambda log: explain(log, case, rdzv, f"{addr}:{port}"),
                      facts=facts)


def explain(log: str, case: Case, rdzv: Rendezvous, master: str) -> tuple[str, str] | None:
    """(status, message) for what the launcher's and OneFlow's lines say went wrong, or None."""
    found = _SIGNAL.search(log)
    if found is None:
        return None  # an exit code: the rank's own result file, if any, says more
    name, number = found.group(1), int(found.group(2))
    if number == signal.SIGALRM:  # the backend's rendezvous deadline
        head = f"rendezvous timed out after {rdzv.timeout_s:g} s (--rdzv-timeout): "
        if rdzv.node_rank > 0 and _NO_MASTER.search(log):
            return "timeout", (head + f"node 0 never answered at {master}; start `dlperf run "
                               f"... --node-rank 0` there, and check --master-addr/port")
        return "timeout", (head + f"the {case.nnodes} nodes never all joined at {master}; start "
                           f"the same `dlperf run` on the other nodes with their --node-rank")
    where = "a rank on this node (oneflow.distributed.launch does not say which)"
    if number == signal.SIGKILL:
        return "oom", f"{where}: killed by {name}, most likely by the kernel's out-of-memory killer"
    fatal = _FATAL.search(log)  # OneFlow's own last words (glog's CHECK failure)
    return "crash", f"{where}: died from {name}" + (f": {fatal.group(1)[:300]}" if fatal else "")


Launcher = OneFlowLaunch  # what dlperf.launchers.launch.launcher_for looks up
