"""A real Slurm cluster on this one host, in a temporary directory, for the sweep tests.

MUNGE (``munged``) authenticates, ``slurmctld`` schedules, and two ``slurmd`` daemons serve two
node names, ``n1`` and ``n2``, that share this host (``NodeHostname`` this host, ``NodeAddr``
127.0.0.1, a port each; Debian's build runs several slurmd per host with ``slurmd -N NAME``). So
``salloc -N 2`` really grants two Slurm nodes and ``srun`` really starts one task on each through
its own slurmd. Everything lives under a fresh directory in /tmp (MUNGE refuses sockets under
pytest's 0700 directories), on free ports, with ``SLURM_CONF`` pointing there; nothing under /etc
is read or changed. Every daemon is started in the foreground by us and stopped by its pid.

``make slurm`` installs the packages (Debian's slurm-wlm and munge). When a daemon cannot start,
:class:`ClusterError` says which, with its own log, and the tests fail with that text.

Run by hand: ``.venv/bin/python tests/slurm_cluster.py salloc -N 2 .venv/bin/dlperf sweep FILE``
starts the cluster, runs the command with ``SLURM_CONF`` set, and stops the cluster
(``scripts/slurm-one-host.sh`` does this).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
START_TIMEOUT_S = 90.0
DAEMONS = ("munged", "slurmctld", "slurmd", "salloc", "srun", "sinfo", "scontrol")

SLURM_CONF = """\
ClusterName=dlperftest
SlurmctldHost={head}
SlurmctldPort={ctld_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmdDebug=verbose
PlugStackConfig={root}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
FirstJobId={first_job}
KillWait=5
InactiveLimit=0
MailProg=/bin/true
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=debug Nodes={node_names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class ClusterError(RuntimeError):
    """The cluster could not start; the message says which daemon and why."""


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port the kernel picks (bind to 0)
    comes from the range outgoing connections use, and another test's connection took one
    between the pick and slurmd's bind ("Unable to bind listen port: Address already in use")."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default start
    for _ in range(200):
        port = random.randrange(10000, max(ephemeral, 10001))
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found in 10000-{ephemeral - 1}")


def clean_environ() -> dict[str, str]:
    """Our environment without any outer Slurm job's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


class SlurmCluster:
    """munged + slurmctld + one slurmd per node name, all on this host; with ``hosts`` (emulated
    hosts, dlperf.host.emulated), each slurmd on a host of its own, named as the host, at its
    address (NodeAddr), and slurmctld and every client command (salloc, srun, sinfo) on the first
    host, as on a cluster whose head is its first node."""

    def __init__(self, nodes: tuple[str, ...] = NODES, hosts: Any = None) -> None:
        self.hosts = hosts
        if hosts is not None:
            nodes = tuple(host.hostname for host in hosts.hosts)
        self.nodes = nodes
        self.root = Path(tempfile.mkdtemp(prefix="dlperf-slurm-cluster-", dir="/tmp"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.daemons: list[tuple[str, subprocess.Popen]] = []
        # job ids far apart between runs: srun's rendezvous port derives from the id's digits
        self.first_job = random.randrange(1000, 9000)

    # -- environment ------------------------------------------------------------------------

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = clean_environ()
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def on_head(self, argv: list[str], node: int = 0) -> list[str]:
        """``argv`` where the cluster's commands run: this host, or emulated host ``node``."""
        return argv if self.hosts is None else self.hosts.command(self.hosts.hosts[node], argv)

    def run(self, argv: list[str], timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.on_head(argv), capture_output=True, text=True,
                              timeout=timeout, env=self.env(env))

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    # -- start and stop ---------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], node: int = 0) -> subprocess.Popen:
        out = open(self.root / "log" / f"{name}.out", "wb")
        proc = subprocess.Popen(self.on_head(argv, node), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env())
        out.close()
        self.daemons.append((name, proc))
        return proc

    def _died(self, name: str, proc: subprocess.Popen, log: str) -> ClusterError:
        text = (self.root / "log" / f"{name}.out").read_text(errors="replace")
        text += self.log(log) if log else ""
        tail = " | ".join(line for line in text.strip().splitlines()[-8:])
        return ClusterError(f"{name} exited with {proc.returncode} at start: {tail or 'no output'}")

    def _wait(self, what: str, ready, checks: list[tuple[str, subprocess.Popen, str]]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, proc, log in checks:
                if proc.poll() is not None:
                    raise self._died(name, proc, log)
            if ready():
                return
            time.sleep(0.5)
        raise ClusterError(f"{what} not ready after {START_TIMEOUT_S:g} s")

    def start(self) -> "SlurmCluster":
        missing = [tool for tool in DAEMONS if shutil.which(tool) is None]
        if missing:
            raise ClusterError(f"{', '.join(missing)} not installed: `make slurm` installs "
                               f"Debian's slurm-wlm and munge")
        if os.geteuid() != 0:
            raise ClusterError("slurmd must run as root to start job steps (uid "
                               f"{os.geteuid()} here)")
        for sub in ("munge", "state", "run", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.chmod(0o755)  # the socket's directory must be searchable by all
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = munge / "munge.socket"
        proc = self._spawn("munged", [
            "munged", "--foreground", f"--key-file={key}", f"--socket={socket_path}",
            f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
            f"--log-file={self.root / 'log' / 'munged.log'}"])
        self._wait("munged", socket_path.exists, [("munged", proc, "munged.log")])

        if self.hosts is None:  # every node on this host, a port each
            host = socket.gethostname().split(".")[0]
            head = f"{host}(127.0.0.1)"
            nodes = "\n".join(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 "
                              f"Port={free_port()} CPUs={CPUS_PER_NODE} State=UNKNOWN"
                              for name in self.nodes)
        else:  # each node on its own host, at its address, on Slurm's own ports
            first = self.hosts.hosts[0]
            head = f"{first.hostname}({first.address})"
            nodes = "\n".join(f"NodeName={h.hostname} NodeHostname={h.hostname} "
                              f"NodeAddr={h.address} Port=6818 CPUs={CPUS_PER_NODE} "
                              f"State=UNKNOWN" for h in self.hosts.hosts)
        (self.root / "plugstack.conf").write_text("")
        self.conf.write_text(SLURM_CONF.format(
            head=head, ctld_port=6817 if self.hosts else free_port(), root=self.root,
            first_job=self.first_job, nodes=nodes, node_names=",".join(self.nodes)))
        ctld = self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        slurmds = [(f"slurmd-{name}", self._spawn(f"slurmd-{name}", [
            *self.cgroups(), "slurmd", "-D", "-f", str(self.conf), "-N", name], node),
            f"slurmd-{name}.log") for node, name in enumerate(self.nodes)]
        self._wait("the nodes (sinfo idle)", self._idle,
                   [("slurmctld", ctld, "slurmctld.log"), *slurmds])
        return self

    def cgroups(self) -> list[str]:
        """On an emulated host, what mounts this machine's cgroup hierarchies under /sys again
        (`ip netns exec` mounts a fresh sysfs of the namespace's own, without them), which
        slurmd reads at start: each as this process's mount table has it."""
        if self.hosts is None:
            return []
        steps = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            device, point, kind, options = line.split()[:4]
            if not point.startswith("/sys/fs/cgroup") or kind not in ("tmpfs", "cgroup",
                                                                        "cgroup2"):
                continue
            kept = ",".join(o for o in options.split(",") if o not in ("rw", "relatime"))
            steps.append(f"mkdir -p {point} && mount -t {kind} "
                         f"{'-o ' + kept + ' ' if kept else ''}{device} {point}")
        return ["sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh"]

    def _idle(self) -> bool:
        proc = subprocess.run(self.on_head(["sinfo", "-h", "-N", "-o", "%N %T"]),
                              capture_output=True, text=True, timeout=30, env=self.env())
        states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        return all(states.get(name) == "idle" for name in self.nodes)

    def step_daemons(self) -> list[psutil.Process]:
        """The slurmstepd processes of this cluster: started by its slurmd (they detach from it),
        told apart from any other cluster's by the SLURM_CONF they inherited."""
        found = []
        for proc in psutil.process_iter(["name"]):
            try:
                if (proc.info["name"] or "").startswith("slurmstepd") and \
                        proc.environ().get("SLURM_CONF") == str(self.conf):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        """Let the steps finish reporting, SIGTERM each daemon we started (by its pid), then
        SIGKILL what is left, step daemons included."""
        deadline = time.monotonic() + 15
        while self.daemons and self.step_daemons() and time.monotonic() < deadline:
            time.sleep(0.5)
        for _, proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.daemons):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.daemons.clear()
        for proc in self.step_daemons():
            try:
                proc.kill()
            except psutil.Error:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_cluster():
    """A started cluster; a cluster that cannot start fails the test with the daemon's reason."""
    cluster = SlurmCluster()
    try:
        cluster.start()
    except (ClusterError, OSError, subprocess.SubprocessError) as error:
        cluster.stop()
        pytest.fail(f"the one-host Slurm cluster did not start: {error}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def emulated_slurm_cluster():
    """A started cluster whose two slurmd run on two emulated hosts (their own addresses,
    names and CPUs); skipped with this machine's reason where hosts cannot be emulated."""
    from dlperf.host import emulated

    why = emulated.missing(link=False)
    if why:
        pytest.skip(f"cannot emulate hosts here: {why}")
    with emulated.emulated(2, None, say=print) as hosts:
        cluster = SlurmCluster(hosts=hosts)
        try:
            cluster.start()
        except (ClusterError, OSError, subprocess.SubprocessError) as error:
            cluster.stop()
            pytest.fail(f"the Slurm cluster on emulated hosts did not start: {error}",
                        pytrace=False)
        yield cluster
        cluster.stop()


def main(argv: list[str]) -> int:
    """Start a cluster, run ``argv`` with SLURM_CONF set (or wait for Ctrl-C), stop it."""
    cluster = SlurmCluster()
    try:
        cluster.start()
    except ClusterError as error:
        cluster.stop()
        print(f"slurm_cluster: the cluster did not start: {error}", file=sys.stderr)
        return 1
    print(f"slurm_cluster: nodes {', '.join(cluster.nodes)} idle; SLURM_CONF={cluster.conf}",
          file=sys.stderr)
    try:
        if argv:
            return subprocess.run(argv, env=cluster.env()).returncode
        print("slurm_cluster: Ctrl-C stops it", file=sys.stderr)
        signal.pause()
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
