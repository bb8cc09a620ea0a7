"""How a repeat's worker processes are started.

A launcher turns a case into the command line that runs ``python -m dlperf.worker`` once per
rank. The runner owns the process (timeouts, Ctrl-C, failure classes); the launcher only says what
to run and with which environment, so a multi-process launcher drops in beside the local one.

A :data:`Launcher` is anything that gives a repeat's :class:`Launch`. One process: :func:`local`.
Several processes or nodes: the framework's own :class:`MultiLauncher`, one module per framework
in this package, picked by :func:`dlperf.launchers.registry.launcher_for`. A backend that
declares ``distributed`` devices in its ``SUPPORT`` must have one; the others refuse
multi-process cases.
"""

from __future__ import annotations

import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import envs
from dlperf.envs import selection

# CPUs this process may run on (an affinity mask or cpuset counts, not the whole machine): the
# worker side's count, so a launcher divides the cores the same way a backend counts them
from dlperf.worker.cpus import available_cpus as usable_cores
from dlperf.errors import UsageError
from dlperf.host import allocators
from dlperf.spec import Case, support
from dlperf.worker.support import parse_options


#: what a rank says when the connection to another rank broke under it: the OS's words and gloo's
#: (the CPU collectives most frameworks here use). A consequence, never the cause to show.
LOST_PEER = ("connection closed by peer", "connection reset by peer", "broken pipe")


@dataclass
class Launch:
    """A command to run for one repeat, and the variables it adds to the environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1  # rank result files this launch writes on this node
    # reads the launcher's whole log when no rank wrote a failure: (status, message) or None
    explain: Callable[[str], tuple[str, str] | None] | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # how it was launched, kept in the result
    # lower-case words in a rank's error that mean only "another rank went away first", so the
    # result shows another rank's own error (runner.collect): LOST_PEER, plus a framework's own
    peer_symptoms: tuple[str, ...] = LOST_PEER
    # what the launch saw while the repeat ran, asked once it ended (the bytes emulated hosts'
    # links carried): added to the repeat's launch facts
    observed: Callable[[], dict[str, Any]] | None = None


# Starts a repeat: (case, case file, output directory) -> the command and its environment.
Launcher = Callable[[Case, Path, Path], Launch]

# what sizes the OpenMP / MKL thread pools (and so torch's intra-op threads)
POOL_SIZE_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def threads_per_process(case: Case) -> int | None:
    """The case's explicit threads; else, with several processes on a node, the node's cores
    divided among them (at least one each); else None: the framework's own default."""
    if case.threads is not None:
        return case.threads
    if case.devices > 1:
        return max(1, usable_cores() // case.devices)
    return None


def thread_env(threads: int | None) -> dict[str, str]:
    """The variables that size OpenMP / MKL pools (and so torch's intra-op threads)."""
    return {} if threads is None else {name: str(threads) for name in POOL_SIZE_VARIABLES}


@dataclass(frozen=True)
class CaseSettings:
    """What a case's own settings add to its workers' environment, and the launch facts that
    say so (kept in the result)."""

    env: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def case_settings(case: Case, declared: Mapping[str, str]) -> CaseSettings:
    """The variables the case's options declare (its backend's ``SUPPORT.options``: settings
    a framework reads from its environment when it is imported), and its allocator's library in
    front of ``LD_PRELOAD`` (the registry's ``declared`` value, else ours, kept behind it):
    UsageError (one line) when that allocator is not installed here."""
    env = support(case.framework).option_variables(parse_options(case.options))
    facts: dict[str, Any] = {"option_variables": dict(env)} if env else {}
    if case.allocator:
        path = allocators.library(case.allocator)
        current = declared.get("LD_PRELOAD", os.environ.get("LD_PRELOAD"))
        env["LD_PRELOAD"] = allocators.preload(path, current)
        facts["allocator"] = {"name": case.allocator, "library": path}
    return CaseSettings(env, facts)


def worker_argv(python: str, case_file: Path, out_dir: Path) -> list[str]:
    return [python, "-m", "dlperf.worker", "--case", str(case_file), "--out-dir", str(out_dir)]


def local(case: Case, case_file: Path, out_dir: Path, python: str | None = None) -> Launch:
    """One worker process on this machine, run by the framework's environment's interpreter
    (dlperf's own for torch); UsageError if that environment is not installed."""
    threads = threads_per_process(case)
    python = python or selection.case_python(case.framework, case.env)
    # the registry's env:, expanded (and, in a brought environment, no bytecode writing)
    declared = selection.case_variables(case.framework, case.env, python)
    settings = case_settings(case, declared)
    facts = {"launcher": "local", "processes": 1, "threads_per_process": threads,
             "env_variant": envs.variant_of(case.framework), **settings.facts}
    if declared:
        facts["framework_env"] = declared
    return Launch(worker_argv(python, case_file, out_dir),
                  env={**declared, **thread_env(threads), **settings.env}, facts=facts)


# ------------------------------------------------------------------------------------------------
# several processes and nodes
# ------------------------------------------------------------------------------------------------

DEFAULT_PORT = 29500  # torchrun's default, used for every framework's rendezvous
DEFAULT_RDZV_TIMEOUT_S = 300.0
# Before its next repeat a non-master node waits this long, so it never reaches node 0's
# rendezvous of the repeat that just ended (the nodes' processes exit apart).
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
    # every node's address in node-rank order, for frameworks whose configuration names each
    # worker (TensorFlow's TF_CONFIG); empty: not known (--node-addrs, or Slurm's node list)
    node_addrs: tuple[str, ...] = ()
    # a directory every node shares, for frameworks whose processes meet through files
    # (Caffe2's file store handler); None: not given (--rdzv-dir)
    store_dir: str | None = None

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
        if self.node_addrs and len(self.node_addrs) != nnodes:
            raise UsageError(f"--node-addrs: {len(self.node_addrs)} addresses given for "
                             f"--nnodes {nnodes}; name every node once, in node-rank order")
        if nnodes > 1 and not self.master_addr:
            raise UsageError("--master-addr: needed with --nnodes > 1 (the address of node 0, "
                             "which every node must reach), or run under Slurm")

    @property
    def endpoint(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


@dataclass(frozen=True)
class RepeatStart:
    """What every multi-process launcher works out first for a repeat (:meth:`MultiLauncher.begin`)."""

    python: str  # the framework environment's interpreter
    number: int  # repeats this launcher started before this one (a fresh rendezvous id each)
    threads: int | None  # per worker process (None: the framework's own default)
    declared: dict[str, str]  # the registry's env: for the framework, expanded
    # the case's allocator and its options' variables (:func:`case_settings`)
    settings: CaseSettings = field(default_factory=CaseSettings)


class MultiLauncher:
    """A framework's launcher for cases of devices x nnodes > 1 processes (a :data:`Launcher`).

    Called once per repeat on every node with the same case; it returns the one command that
    starts this node's ``case.devices`` ranks (the framework's own launcher, or the framework's
    documented per-process variables). ``Launch.ranks`` is the number of rank files this node
    will hold: the whole job on node 0 (the backend's ``gather_results`` brings the other nodes'
    figures there), its own ranks elsewhere. Subclasses implement ``__call__``, starting with
    :meth:`begin` and describing the launch with :meth:`worker_env` and :meth:`facts`.
    """

    name = "multi-process"
    # whether the framework's collectives are gloo/NCCL, which --socket-ifname steers
    uses_socket_ifname = True

    def __init__(self, rendezvous: Rendezvous | None = None, python: str | None = None) -> None:
        self.rendezvous = rendezvous or Rendezvous()
        self.python = python
        self.launches = 0  # repeats launched so far (a fresh rendezvous id per repeat)

    def begin(self, case: Case) -> RepeatStart:
        """Check the rendezvous against the case and count the repeat. A node other than node 0
        first waits NEXT_REPEAT_GRACE_S before its second and later repeats."""
        rdzv = self.rendezvous
        rdzv.check(case.nnodes)
        python = self.python or selection.case_python(case.framework, case.env)
        if case.nnodes > 1 and rdzv.node_rank > 0 and self.launches > 0:
            time.sleep(NEXT_REPEAT_GRACE_S)
        declared = selection.case_variables(case.framework, case.env, python)
        settings = case_settings(case, declared)
        number = self.launches
        self.launches += 1
        return RepeatStart(python, number, threads_per_process(case), declared, settings)

    def master(self, case: Case) -> tuple[str, int]:
        """Where rank 0 listens: one node, 127.0.0.1 on a free port (nothing listens beyond
        loopback); several, the rendezvous's address and port."""
        if case.nnodes == 1:
            return "127.0.0.1", free_port()
        return str(self.rendezvous.master_addr), self.rendezvous.master_port

    def worker_env(self, start: RepeatStart) -> dict[str, str]:
        """The framework's declared variables, the thread pools' sizes, the case's allocator and
        options (:func:`case_settings`) and, where the collectives take one, the network
        interface."""
        env = {**start.declared, **thread_env(start.threads), **start.settings.env}
        ifname = self.rendezvous.socket_ifname
        if ifname and self.uses_socket_ifname:
            env.update(GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
        return env

    def facts(self, case: Case, start: RepeatStart, **details: Any) -> dict[str, Any]:
        """How the repeat was launched, kept in the result: the processes, threads and
        environment, the launcher's own ``details``, and the rendezvous's settings."""
        rdzv = self.rendezvous
        facts: dict[str, Any] = {
            "launcher": self.name, "processes": case.devices * case.nnodes,
            "processes_per_node": case.devices, "nnodes": case.nnodes,
            "threads_per_process": start.threads, "env_variant": envs.variant_of(case.framework),
            **start.settings.facts, **details}
        if case.nnodes > 1:
            facts.update(node_rank=rdzv.node_rank, rdzv_timeout_s=rdzv.timeout_s)
        if start.declared:
            facts["framework_env"] = start.declared
        if rdzv.socket_ifname and self.uses_socket_ifname:
            facts["socket_ifname"] = rdzv.socket_ifname
        return facts

    def is_master(self, case: Case) -> bool:
        """Whether this node holds global rank 0, and so the whole job's figures."""
        return case.nnodes == 1 or self.rendezvous.node_rank == 0

    def check(self, case: Case) -> None:
        """UsageError (one line naming the flag) when this launcher cannot start ``case`` at all,
        raised when it is picked (:func:`~dlperf.launchers.registry.launcher_for`), before any
        repeat runs or anything is stored; nothing to check by default."""
        return None

    def ranks_here(self, case: Case) -> int:
        """Rank files this node ends up with (see the class docstring)."""
        return case.devices * case.nnodes if self.is_master(case) else case.devices

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------
# what a launcher's log reader says when the nodes never met
# ------------------------------------------------------------------------------------------------

START_OTHERS = "start the same `dlperf run` on the other nodes with their --node-rank"


def rendezvous_timeout(rdzv: Rendezvous, what: str) -> tuple[str, str]:
    """(``timeout``, message) for a job whose nodes did not all meet within --rdzv-timeout;
    ``what`` says who was missing and what to do."""
    return "timeout", f"rendezvous timed out after {rdzv.timeout_s:g} s (--rdzv-timeout): {what}"


def node_0_silent(master: str) -> str:
    """What a node other than node 0 says when node 0 never answered at ``master``."""
    return (f"node 0 never answered at {master}; start `dlperf run ... --node-rank 0` there, "
            f"and check --master-addr/port")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the kernel's pick), for a one-node job's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class SpawnLauncher(MultiLauncher):
    """For frameworks that configure data parallelism from per-process variables rather than a
    launcher of their own: ``python -m dlperf.launchers.spawn`` starts this node's ranks, each with
    ``DLPERF_RANK``, ``DLPERF_WORLD_SIZE``, ``DLPERF_MASTER_ADDR``/``PORT``... (see
    :mod:`dlperf.launchers.spawn`), and the backend turns those into its framework's configuration.

    One node: the master is 127.0.0.1 on a free port (nothing listens beyond loopback). Several
    nodes: the rendezvous's address and port; ``DLPERF_RDZV_TIMEOUT_S`` tells the backend how long
    its framework may wait for the others. Subclasses set ``name`` and may add ``extra_env``.
    """

    name = "dlperf.launchers.spawn"

    def extra_env(self, case: Case) -> dict[str, str]:
        """Variables this framework needs beyond the rank variables (none by default)."""
        return {}

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        from dlperf.launchers import spawn
        start = self.begin(case)
        addr, port = self.master(case)
        rdzv = self.rendezvous
        env = {**self.worker_env(start), **self.extra_env(case),
               "DLPERF_RDZV_TIMEOUT_S": f"{rdzv.timeout_s:g}"}
        argv = [sys.executable, "-m", "dlperf.launchers.spawn", "--nproc", str(case.devices),
                "--nnodes", str(case.nnodes), "--node-rank", str(rdzv.node_rank),
                "--master-addr", addr, "--master-port", str(port), "--",
                *worker_argv(start.python, case_file, out_dir)]
        return Launch(argv, env=env, ranks=self.ranks_here(case), explain=spawn.explain,
                      facts=self.facts(case, start, master=f"{addr}:{port}"))
