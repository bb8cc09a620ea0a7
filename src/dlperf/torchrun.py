"""Multi-process and multi-node torch cases, launched by PyTorch's own launcher.

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

import math
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from dlperf import envs
from dlperf.errors import UsageError
from dlperf.launch import Launch, thread_env, threads_per_process, worker_argv
from dlperf.spec import Case

DEFAULT_PORT = 29500  # torchrun's own default
DEFAULT_RDZV_TIMEOUT_S = 300.0
# Before its next repeat a non-master node waits this long, so it never reaches node 0's store of
# the repeat that just ended (torchrun's agents leave together, but their processes exit apart).
NEXT_REPEAT_GRACE_S = 2.0
IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}")


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node case meet; ignored for a single node."""

    node_rank: int = 0
    master_addr: str | None = None
    master_port: int = DEFAULT_PORT
    timeout_s: float = DEFAULT_RDZV_TIMEOUT_S
    # the network interface the collectives use (GLOO_/NCCL_SOCKET_IFNAME); None: their choice
    socket_ifname: str | None = None

    def check(self, nnodes: int) -> None:
        """UsageError naming the flag when these settings cannot describe ``nnodes`` nodes."""
        if not 0 <= self.node_rank < nnodes:
            raise UsageError(f"--node-rank: {self.node_rank} must be between 0 and "
                             f"{nnodes - 1} (--nnodes {nnodes})")
        if not 1 <= self.master_port <= 65535:
            raise UsageError(f"--master-port: {self.master_port} must be between 1 and 65535")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= 86400):
            raise UsageError(f"--rdzv-timeout: {self.timeout_s!r} must be seconds in (0, 86400]")
        if self.socket_ifname is not None and not IFNAME.fullmatch(self.socket_ifname):
            raise UsageError(f"--socket-ifname: {self.socket_ifname!r} is not a network interface "
                             f"name (letters, digits, '.', '-', '_', '@'; at most 15)")
        if nnodes > 1 and not self.master_addr:
            raise UsageError("--master-addr: needed with --nnodes > 1 (the address of node 0, "
                             "which every node must reach), or run under Slurm")

    @property
    def endpoint(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


class Torchrun:
    """The launcher (runner.Launcher) for torch cases with devices x nnodes > 1."""

    def __init__(self, rendezvous: Rendezvous | None = None, python: str | None = None) -> None:
        self.rendezvous = rendezvous or Rendezvous()
        self.python = python
        self.launches = 0

    def is_master(self, case: Case) -> bool:
        """Whether this node holds global rank 0, and so the whole job's figures."""
        return case.nnodes == 1 or self.rendezvous.node_rank == 0

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        rdzv = self.rendezvous
        rdzv.check(case.nnodes)
        python = self.python or envs.interpreter(case.framework)
        argv = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(case.devices),
                "--nnodes", str(case.nnodes), "--max-restarts", "0"]
        facts = {"launcher": "torchrun", "processes": case.devices * case.nnodes,
                 "env_variant": envs.variant_of(case.framework),
                 "processes_per_node": case.devices, "nnodes": case.nnodes}
        if case.nnodes == 1:
            argv.append("--standalone")
            facts["rendezvous"] = "standalone"
        else:
            if rdzv.node_rank > 0 and self.launches > 0:
                time.sleep(NEXT_REPEAT_GRACE_S)
            argv += ["--rdzv-backend", "static", "--node-rank", str(rdzv.node_rank),
                     "--master-addr", str(rdzv.master_addr),
                     "--master-port", str(rdzv.master_port),
                     "--rdzv-conf", f"timeout={max(1, round(rdzv.timeout_s))}",
                     "--rdzv-id", f"dlperf-{case.key()}-{self.launches}"]
            facts.update(rendezvous="static", master=rdzv.endpoint, node_rank=rdzv.node_rank,
                         rdzv_timeout_s=rdzv.timeout_s)
        self.launches += 1
        # the worker module and its arguments, as torchrun's ``-m`` entry point
        argv += ["-m", *worker_argv(python, case_file, out_dir)[2:]]
        threads = threads_per_process(case)
        facts["threads_per_process"] = threads
        env = thread_env(threads)
        if rdzv.socket_ifname:
            env.update(GLOO_SOCKET_IFNAME=rdzv.socket_ifname, NCCL_SOCKET_IFNAME=rdzv.socket_ifname)
            facts["socket_ifname"] = rdzv.socket_ifname
        return Launch(argv, env=env,
                      ranks=case.devices * case.nnodes if self.is_master(case) else case.devices,
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
        return "timeout", (f"rendezvous timed out after {rdzv.timeout_s:g} s (--rdzv-timeout): "
                           f"{joined} of {total} nodes joined at {rdzv.endpoint}; start the same "
                           f"`dlperf run` on the other nodes with their --node-rank")
    found = _CONNECT.search(log)
    if found:
        _, host, port = found.groups()
        return "timeout", (f"rendezvous timed out after {rdzv.timeout_s:g} s "
                           f"(--rdzv-timeout): node 0 never answered at {host}:{port}; start "
                           f"`dlperf run ... --node-rank 0` there, and check --master-addr/port")
    if _IN_USE.search(log):
        return "crash", (f"port {rdzv.master_port} is already in use on the master node; choose "
                         f"another --master-port")
    found = _ROOT.search(log)
    if found:
        rank, code = int(found.group(1)), int(found.group(2))
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            if code == -signal.SIGKILL:
                return "oom", (f"rank {rank}: killed by {name}, most likely by the kernel's "
                               f"out-of-memory killer")
            return "crash", f"rank {rank}: died from {name}"
    return None  # an exit code: the rank's own result file, if any, says more
