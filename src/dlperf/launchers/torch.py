"""Multi-process and multi-node torch cases, launched by PyTorch's own launcher (harness side).

Each repeat runs ``python -m torch.distributed.run ... -m dlperf.worker`` on every node: torchrun
starts ``devices`` workers per node, sets RANK / WORLD_SIZE / MASTER_* for them, and stops the
others when one fails. dlperf adds no ssh and no rendezvous of its own:

- one node: ``--standalone`` (a c10d store on a free local port);
- several nodes: the ``static`` rendezvous: node 0 hosts a TCP store at ``master_addr:port``,
  every node names its ``--node-rank``, and the store waits ``timeout_s`` for the others.

The workers gather every rank's figures to global rank 0 (which lives on node 0), so node 0's run
sees the whole job and stores the case; the other nodes store nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from dlperf.launchers import exits
from dlperf.launchers.launch import (START_OTHERS, Launch, MultiLauncher, Rendezvous, node_0_silent,
                                     rendezvous_timeout, worker_argv)
from dlperf.spec import Case

#: torchrun's log folder (``--log-dir``: a folder per rank, and a rank's error.json where it
#: wrote one), inside the repeat's directory: deleted with it, a failed repeat's files kept by
#: the runner. Without it torchrun makes a ``torchelastic_*`` folder in the system's temporary
#: directory each run and never removes it.
LOG_DIR = "torchrun-log"


class Torchrun(MultiLauncher):
    """The launcher for torch cases with devices x nnodes > 1."""

    name = "torchrun"

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        start = self.begin(case)
        rdzv = self.rendezvous
        argv = [start.python, "-m", "torch.distributed.run", "--nproc-per-node",
                str(case.devices), "--nnodes", str(case.nnodes), "--max-restarts", "0",
                "--log-dir", str(out_dir / LOG_DIR)]
        if case.nnodes == 1:
            argv.append("--standalone")
            details = {"rendezvous": "standalone"}
        else:
            argv += ["--rdzv-backend", "static", "--node-rank", str(rdzv.node_rank),
                     "--master-addr", str(rdzv.master_addr),
                     "--master-port", str(rdzv.master_port),
                     "--rdzv-conf", f"timeout={max(1, round(rdzv.timeout_s))}",
                     "--rdzv-id", f"dlperf-{case.key()}-{start.number}"]
            details = {"rendezvous": "static", "master": rdzv.endpoint}
        facts = self.facts(case, start, log_dir=LOG_DIR, **details)
        # the worker module and its arguments, as torchrun's ``-m`` entry point
        argv += ["-m", *worker_argv(start.python, case_file, out_dir)[2:]]
        return Launch(argv, env=self.worker_env(start), ranks=self.ranks_here(case),
                      explain=lambda log: explain(log, rdzv), facts=facts)


# ------------------------------------------------------------------------------------------------
# reading torchrun's log when the ranks could not say what went wrong
# ------------------------------------------------------------------------------------------------

_CLIENTS = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients "
                      r"joined")
_CONNECT = re.compile(r"timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)")
_ROOT = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)\s*\(local_rank: "
                   r"\d+\).*?exitcode\s*:\s*(-?\d+)", re.S)
_IN_USE = re.compile(r"(address already in use|EADDRINUSE)", re.I)


def explain(log: str, rdzv: Rendezvous) -> tuple[str, str] | None:
    """(status, message) for what torchrun's log says went wrong, or None if it says nothing."""
    found = _CLIENTS.search(log)
    if found:
        _, joined, total = found.groups()
        return rendezvous_timeout(rdzv, f"{joined} of {total} nodes joined at {rdzv.endpoint}; "
                                        f"{START_OTHERS}")
    found = _CONNECT.search(log)
    if found:
        _, host, port = found.groups()
        return rendezvous_timeout(rdzv, node_0_silent(f"{host}:{port}"))
    if _IN_USE.search(log):
        return "crash", (f"port {rdzv.master_port} is already in use on the master node; choose "
                         f"another --master-port")
    found = _ROOT.search(log)
    if found:
        rank, code = int(found.group(1)), int(found.group(2))
        if code < 0:
            return exits.killed(f"rank {rank}:", -code)
    return None  # an exit code: the rank's own result file, if any, says more
