"""Cases with ``--launcher horovod``: ``horovodrun`` starts the ranks and Horovod carries the
gradients (harness side).

Every repeat runs ``horovodrun -np N -H localhost:N --gloo`` (or ``--mpi``, Open MPI's mpirun
underneath) from the ``<framework>+horovod`` environment, whose interpreter is the framework's
own environment with Horovod built from its sdist into it (``dlperf envs install tensorflow1
--horovod``). Each rank is ``python -m dlperf.worker --case ... --out-dir ...``, exactly
as under the other launchers: it finds its rank in ``HOROVOD_RANK`` / ``HOROVOD_SIZE`` /
``HOROVOD_LOCAL_RANK`` (Gloo) or Open MPI's ``OMPI_COMM_WORLD_*`` (MPI), pins itself to its
slice of the node's CPUs, and the backend's Horovod path (``backends/<fw>/horovod.py``) runs
``hvd.init()``, ``hvd.DistributedOptimizer`` and the broadcast of the initial weights; the worker
loop times it as any other. Horovod on one process is a case of its own (``--devices 1
--launcher horovod``): the optimizer wrapper with nothing to exchange.

One node: Gloo's rendezvous server and every collective on loopback (``--network-interface lo``,
or ``--socket-ifname``), nothing listens beyond it. Several nodes (``--nnodes``, the same host
list the other launchers take: ``--master-addr``/``--master-port``, or Slurm's): horovodrun
would start the other hosts' ranks over ssh, which dlperf never does, so every node runs its own
ranks through :mod:`dlperf.launchers.horovod_gloo` (``dlperf run --node-rank R`` on each node, or
one Slurm job step), node 0 serving Horovod's own rendezvous server at the master address: the
Gloo controller only (``--controller mpi`` across nodes is refused: mpirun, too, reaches the other
hosts over ssh).

``horovodrun`` leaves its ranks in process groups of their own (its ``safe_shell_exec``), so it
runs under :mod:`dlperf.launchers.launchguard`, which stops every rank when the repeat ends.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from dlperf import envs
from dlperf.errors import UsageError
from dlperf.launchers import exits, spawn
from dlperf.launchers.launch import (START_OTHERS, Launch, MultiLauncher, Rendezvous,
                                     node_0_silent, rendezvous_timeout, worker_argv)
from dlperf.spec import Case

VARIANT = "cpu"  # Horovod is built into the cpu environments only (dlperf.envs.horovod)
# Open MPI refuses to run as root unless told twice (its flag, which horovodrun passes, and these)
MPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
MPI_PACKAGES = "apt-get install openmpi-bin libopenmpi-dev"
_METADATA = re.compile(r"horovod-([0-9][^-]*?)(?:-py[0-9.]+)?\.(?:dist|egg)-info")
_GLOO_WAIT = re.compile(r"Wait timeout after \d+ seconds for key\(s\): ([0-9, ]+)")
_SILENT = re.compile(r"dlperf\.launchers\.horovod_gloo: node 0's rendezvous at \S+ never "
                     r"answered")
_FIRST_EXIT = re.compile(r"Process name: (\d+)\s+Exit code: (-?\d+)")
# Horovod's Gloo connecting to a peer that advertised a loopback address
_LOOPBACK_PEER = re.compile(r"connect \[(127\.[0-9.]+)\]:\d+: Connection refused")


def install_hint(framework: str, force: bool = False) -> str:
    return f"`dlperf envs install {framework} --horovod{' --force' if force else ''}`"


def horovod_version(python: str) -> str | None:
    """The Horovod version installed in ``python``'s environment (its dist-info or egg-info), or
    None."""
    try:
        site = envs.manage.site_packages(python)
    except UsageError:
        return None
    for meta in sorted(site.glob("horovod-*-info")):  # a wheel's dist-info, setup.py's egg-info
        named = _METADATA.fullmatch(meta.name)
        if named:
            return named.group(1)
    return None


def check_controller(case: Case) -> None:
    """UsageError (one line) when ``--controller mpi`` cannot run here: no mpirun on PATH, or a
    Horovod built without MPI."""
    if case.controller != "mpi":
        return
    if shutil.which("mpirun") is None:
        raise UsageError(f"--controller mpi: mpirun is not on PATH: install Open MPI "
                         f"({MPI_PACKAGES}), then rebuild Horovod with MPI "
                         f"(`make horovod`, then {install_hint(case.framework, True)})")
    if "mpi" not in envs.horovod_controllers(case.framework, VARIANT):
        raise UsageError(f"--controller mpi: the Horovod for {case.framework} was built without "
                         f"MPI (its horovodrun --check-build): rebuild it now that Open MPI is "
                         f"installed ({install_hint(case.framework, True)}), or use "
                         f"--controller gloo")


class HorovodLaunch(MultiLauncher):
    """The launcher of every ``--launcher horovod`` case (any process count)."""

    name = "horovodrun"

    def __init__(self, case: Case, rendezvous: Rendezvous | None = None,
                 python: str | None = None) -> None:
        super().__init__(rendezvous, python)
        if case.nnodes > 1 and case.controller == "mpi":
            raise UsageError(
                f"--controller mpi runs on one node: across nodes mpirun starts the other hosts' "
                f"ranks over ssh, which dlperf does not do (--nnodes {case.nnodes}); use "
                f"--controller gloo (Horovod's own rendezvous on node 0), or run horovodrun "
                f"--mpi yourself")
        # the framework's environment with Horovod built into it (one line where it is refused
        # or not installed, naming the reason or the install command)
        self.python = python or envs.horovod_interpreter(case.framework, VARIANT)
        check_controller(case)

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        if case.nnodes > 1:
            return self.across_nodes(case, case_file, out_dir)
        start = self.begin(case)
        python = start.python
        processes = case.devices
        ifname = self.rendezvous.socket_ifname or "lo"
        horovodrun = [python, str(Path(python).parent / "horovodrun"), "-np", str(processes),
                      "-H", f"localhost:{processes}", f"--{case.controller}",
                      "--network-interface", ifname,
                      "--start-timeout", str(max(1, round(self.rendezvous.timeout_s)))]
        env = self.worker_env(start)
        if case.controller == "gloo":
            env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, round(self.rendezvous.timeout_s)))
        else:
            env.update(MPI_AS_ROOT)
        # horovodrun's console script as its environment's Python runs it (the script's shebang
        # may name the directory the environment was built in rather than where it lives now)
        argv = [sys.executable, "-m", "dlperf.launchers.launchguard", "--", *horovodrun,
                *worker_argv(python, case_file, out_dir)]
        facts = self.facts(case, start, engine="horovod", controller=case.controller,
                           env_variant=VARIANT,
                           horovod_version=horovod_version(python),
                           hosts=f"localhost:{processes}", network_interface=ifname,
                           environment=str(Path(python).parent.parent))
        return Launch(argv, env=env, ranks=processes, explain=explain, facts=facts)

    def across_nodes(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        """This node's ranks of a job across nodes: :mod:`dlperf.launchers.horovod_gloo` (node 0
        serves Horovod's rendezvous at --master-addr:--master-port; no ssh)."""
        start = self.begin(case)
        rdzv = self.rendezvous
        timeout = str(max(1, round(rdzv.timeout_s)))
        argv = [start.python, "-m", "dlperf.launchers.horovod_gloo", "--nproc", str(case.devices),
                "--nnodes", str(case.nnodes), "--node-rank", str(rdzv.node_rank),
                "--master-addr", str(rdzv.master_addr), "--master-port", str(rdzv.master_port),
                "--timeout", timeout, *(["--iface", rdzv.socket_ifname]
                                        if rdzv.socket_ifname else []),
                "--", *worker_argv(start.python, case_file, out_dir)]
        facts = self.facts(case, start, engine="horovod", controller="gloo", env_variant=VARIANT,
                           horovod_version=horovod_version(start.python),
                           rendezvous="Horovod's RendezvousHTTPServer on node 0",
                           master=rdzv.endpoint,
                           environment=str(Path(start.python).parent.parent))
        return Launch(argv, env=self.worker_env(start), ranks=self.ranks_here(case),
                      explain=lambda log: explain_nodes(log, case, rdzv), facts=facts)


def explain_nodes(log: str, case: Case, rdzv: Rendezvous) -> tuple[str, str] | None:
    """(status, message) for a job across nodes: ``timeout`` when Gloo's rendezvous store gave up
    waiting for ranks (Horovod aborts the rank: no result of its own), else as
    :mod:`dlperf.launchers.spawn` reads a rank killed by a signal."""
    loopback = _LOOPBACK_PEER.search(log)
    if loopback:
        return "crash", (f"a rank's peer advertised {loopback.group(1)}, the loopback address "
                         f"its host name resolves to, and could not be reached: Horovod 0.28.1 "
                         f"makes its process sets' Gloo contexts without --socket-ifname "
                         f"(HOROVOD_GLOO_IFACE) and so from the host name; make each node's "
                         f"host name resolve to its address on the nodes' network (/etc/hosts "
                         f"or DNS)")
    found = _GLOO_WAIT.search(log)
    if _SILENT.search(log) or (found is not None and rdzv.node_rank > 0):
        return rendezvous_timeout(rdzv, node_0_silent(rdzv.endpoint))
    if found is None:
        return spawn.explain(log)
    return rendezvous_timeout(rdzv, f"Horovod's rendezvous at {rdzv.endpoint} never heard from "
                                    f"rank(s) {found.group(1).strip()} of "
                                    f"{case.devices * case.nnodes}; {START_OTHERS}")


def explain(log: str) -> tuple[str, str] | None:
    """(status, message) when horovodrun says a rank was killed by a signal (it wrote no
    result); an exit code leaves the rank's own result file to say more."""
    found = _FIRST_EXIT.search(log)
    if found is None:
        return None
    rank, code = int(found.group(1)), int(found.group(2))
    if code < 0:
        return exits.killed(f"rank {rank}:", -code)
    if code > 128:  # the shell horovodrun runs each rank under: 128 + the signal
        return exits.killed(f"rank {rank}:", code - 128)
    return None

