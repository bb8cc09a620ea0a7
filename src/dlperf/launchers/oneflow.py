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
from pathlib import Path

from dlperf.launchers import exits
from dlperf.launchers.launch import (START_OTHERS, Launch, MultiLauncher, Rendezvous, node_0_silent,
                                     rendezvous_timeout, worker_argv)
from dlperf.spec import Case

# the launcher's end when a rank died from a signal (CalledProcessError "... died with
# <Signals.SIGKILL: 9>."); SIGALRM is the backend's rendezvous deadline (workload.py)
_SIGNAL = re.compile(r"died with <Signals\.(SIG[A-Z0-9]+): (\d+)>")
# glog's fatal line, which OneFlow prints before it aborts: "F20261123 12:40:11.755896 10106
# ctrl_client.cpp:54] Check failed: ..."
_FATAL = re.compile(r"^F\d{8} [\d:.]+ +\d+ (\S+\] .*)$", re.M)
# what OneFlow repeats while rank 0's control server does not answer, and what the backend
# says once while it waits for that server before the import (workload.py's MASTER_SILENT)
_NO_MASTER = re.compile(r"LoadServer \S+ Failed at \d+ times|rank 0's control server at \S+ "
                        r"does not answer yet")


class OneFlowLaunch(MultiLauncher):
    """The launcher for oneflow cases with devices x nnodes > 1."""

    name = "oneflow.distributed.launch"
    uses_socket_ifname = False  # OneFlow's own CPU collectives

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        start = self.begin(case)
        addr, port = self.master(case)
        rdzv = self.rendezvous
        argv = [start.python, "-m", "oneflow.distributed.launch", "--nproc_per_node",
                str(case.devices), "--nnodes", str(case.nnodes), "--node_rank",
                str(rdzv.node_rank), "--master_addr", addr, "--master_port", str(port),
                # -m: the worker module and its arguments, run by the launcher's interpreter
                "-m", *worker_argv(start.python, case_file, out_dir)[2:]]
        env = {**self.worker_env(start), "DLPERF_RDZV_TIMEOUT_S": f"{rdzv.timeout_s:g}"}
        facts = self.facts(case, start, master=f"{addr}:{port}",
                           rendezvous="OneFlow control server of rank 0")
        return Launch(argv, env=env, ranks=self.ranks_here(case),
                      explain=lambda log: explain(log, case, rdzv, f"{addr}:{port}"),
                      facts=facts)


def explain(log: str, case: Case, rdzv: Rendezvous, master: str) -> tuple[str, str] | None:
    """(status, message) for what the launcher's and OneFlow's lines say went wrong, or None."""
    found = _SIGNAL.search(log)
    if found is None:
        return None  # an exit code: the rank's own result file, if any, says more
    number = int(found.group(2))
    if number == signal.SIGALRM:  # the backend's rendezvous deadline
        if rdzv.node_rank > 0 and _NO_MASTER.search(log):
            return rendezvous_timeout(rdzv, node_0_silent(master))
        return rendezvous_timeout(rdzv, f"the {case.nnodes} nodes never all joined at {master}; "
                                        f"{START_OTHERS}")
    status, message = exits.killed("a rank on this node (oneflow.distributed.launch does not "
                                   "say which):", number)
    fatal = _FATAL.search(log)  # OneFlow's own last words (glog's CHECK failure)
    if status == "crash" and fatal:
        message += f": {fatal.group(1)[:300]}"
    return status, message
