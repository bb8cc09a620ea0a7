"""Emulated hosts: several machines on this one, for multi-node runs over a real network stack.

Each host is a network namespace with its own address on a bridge of its run, its own host name
(the node's command runs in a UTS namespace of its own), its own slice of this machine's CPUs
(``taskset``) and, optionally, a link rate: a token-bucket filter (``tbf``) on its interface's
egress, so every direction between two hosts passes one shaped queue. The frameworks then meet
across interfaces and addresses as on a cluster, not on 127.0.0.1 (:mod:`dlperf.launchers.emulated`
runs ``dlperf run`` on each host).

What stays contained: addresses come only from 198.18.0.0/15 (RFC 2544's benchmarking range),
one /24 per run; the bridge has no address, no host has a default route, nothing is forwarded or
translated, and IPv6 is off on every interface made here, so the hosts reach each other and
nothing else. Every name starts with ``dlpe`` and the run's random token, within Linux's 15
characters for an interface, so two runs at once never collide.

Clean-up: :func:`emulated` tears everything down when its block ends (processes left in the
namespaces, interfaces, namespaces, the hosts files), however the block ends. A run killed with
SIGKILL cannot: its record (``/run/dlperf-emulated/<token>.json``, written before anything is
made, naming everything it will make and its owner's pid and start time) lets the next start
remove what it left (:func:`clean_stale`) and say so in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dlperf.errors import UsageError
from dlperf.worker.placement import share

STATE_DIR = Path("/run/dlperf-emulated")  # the runs' records; DLPERF_EMULATED_STATE moves it
PREFIX = "dlpe"  # every namespace, interface and record this module makes starts with it
NETWORK = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544: for benchmarking, never routed
SUBNET_BITS = 24
INTERFACE = "emu0"  # each host's interface, inside its namespace (the same name on every host)
HOSTNAME = "dlperf-h{}"
MIN_RATE_BITS = 1_000_000
MAX_RATE_BITS = 1_000_000_000_000
TBF_LATENCY = "100ms"  # how long a packet may wait in the shaper's queue before it is dropped
# TCP payload per byte the shaper counts: a veth's 1500-byte MTU less IPv4's 20 bytes and TCP's
# 32 (with timestamps, Linux's default) carries 1448 bytes in a 1514-byte frame (tbf counts the
# 14-byte Ethernet header, and each segment's headers of a GSO packet), so a shaped link moves
# an application's bytes at 95.6 % of its rate
PAYLOAD_SHARE = 1448 / 1514
COMMAND_TIMEOUT_S = 20.0
KILL_WAIT_S = 10.0
# the variable a node's `dlperf run` finds when an emulation started it (its token)
NODE_VARIABLE = "DLPERF_EMULATED_HOSTS"
OWN_NAME_VARIABLE = "DLPERF_EMULATED_OWN_NAME"
OWN_NAME_CHOICES = ("address", "loopback")

_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*", re.I)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
NO_LINK = ("", "none")


# ------------------------------------------------------------------------------------------------
# what was asked: hosts, CPUs, a link rate
# ------------------------------------------------------------------------------------------------

def parse_rate(text: str, flag: str = "--link", most: int = MAX_RATE_BITS) -> int | None:
    """Bits per second of a rate written as tc writes one (``10gbit``, ``1gbit``, ``100mbit``,
    ``1500kbit``); None for ``none`` or nothing. UsageError naming ``flag`` otherwise, and
    below 1 Mbit/s (the frameworks' rendezvous and heartbeats would time out) or above ``most``
    (1 Tbit/s: what a shaped link may be)."""
    if text is None or str(text).strip().lower() in NO_LINK:
        return None
    found = _RATE.fullmatch(str(text))
    if not found:
        bytes_unit = re.fullmatch(r"\s*\d+(?:\.\d+)?\s*[kmgt]?bps\s*", str(text), re.I)
        hint = (" (tc's bps is bytes per second; write the rate in bits, e.g. 100mbit)"
                if bytes_unit else "")
        raise UsageError(f"{flag}: {text!r} is not a link rate; write NUMBER followed by kbit, "
                         f"mbit, gbit or tbit, e.g. 10gbit, 1gbit, 100mbit{hint}")
    bits = float(found.group(1)) * _UNITS[found.group(2).lower()]
    if bits < MIN_RATE_BITS:
        raise UsageError(f"{flag}: {text!r} is below 1 Mbit/s (1mbit), the slowest link the "
                         f"frameworks' rendezvous and heartbeats are sure to survive")
    if bits > most:
        raise UsageError(f"{flag}: {text!r} is above {format_rate(most)}")
    return int(round(bits))


def format_rate(bits: int) -> str:
    """``bits`` per second in the largest of tc's units that writes it whole: ``1gbit``."""
    for unit in ("t", "g", "m", "k"):
        if bits % _UNITS[unit] == 0:
            return f"{bits // _UNITS[unit]}{unit}bit"
    return f"{bits}bit"


def normalize_rate(text: str, flag: str = "--link") -> str:
    """The case's ``link`` field: "" for none, else the rate in one spelling (``1000mbit`` and
    ``1gbit`` are one case)."""
    bits = parse_rate(text, flag)
    return "" if bits is None else format_rate(bits)


def check_request(count: Any, cpus: list[int], flag: str = "--emulate-hosts") -> None:
    """UsageError naming ``flag`` for a host count that is not 2 or more, or more hosts than the
    CPUs this process may run on (each host gets at least one of its own)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise UsageError(f"{flag}: {count!r} must be a number of hosts, 2 or more (one host is "
                         f"a plain `dlperf run`)")
    if count > len(cpus):
        raise UsageError(f"{flag}: {count} hosts need a CPU each, and this process may run on "
                         f"{len(cpus)} ({_cpu_list(cpus)}); give {len(cpus)} or fewer")


def missing(link: bool) -> str | None:
    """What this machine lacks to emulate hosts, in one line; None when nothing is missing."""
    if os.geteuid() != 0:
        return ("--emulate-hosts: needs root (it makes network namespaces, veth pairs and a "
                "bridge); run dlperf as root")
    needs = [("ip", "iproute2"), ("unshare", "util-linux"), ("taskset", "util-linux")]
    if link:
        needs.append(("tc", "iproute2"))
    absent = [f"`{tool}` ({package})" for tool, package in needs if shutil.which(tool) is None]
    if absent:
        return f"--emulate-hosts: needs {', '.join(absent)} on PATH"
    for kind in ("net", "uts"):
        if not os.path.exists(f"/proc/self/ns/{kind}"):
            return f"--emulate-hosts: this kernel has no {kind} namespaces (/proc/self/ns/{kind})"
    return None


def job_namespaces() -> set[tuple[int, int]]:
    """In a node that an emulation started: the network namespaces of its job's hosts, as
    (device, inode) of their nsfs files, so the host's readings can tell the job's other hosts
    from a competing process (:class:`dlperf.host.hoststate.OtherProcesses`); elsewhere none."""
    token = os.environ.get(NODE_VARIABLE) or ""
    if not re.fullmatch(r"[0-9a-f]{6}", token):
        return set()
    out = set()
    for path in Path("/run/netns").glob(f"{PREFIX}{token}-h*"):
        with contextlib.suppress(OSError):
            info = path.stat()
            out.add((info.st_dev, info.st_ino))
    return out


def state_dir() -> Path:
    """Where the runs' records are: /run/dlperf-emulated, or ``DLPERF_EMULATED_STATE`` (a test
    whose dead run no other start may clean up before its own next start does)."""
    return Path(os.environ.get("DLPERF_EMULATED_STATE") or STATE_DIR)


def _cpu_list(cpus: list[int] | tuple[int, ...]) -> str:
    return ",".join(str(cpu) for cpu in cpus)


# ------------------------------------------------------------------------------------------------
# the hosts
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Host:
    """One emulated host."""

    rank: int
    namespace: str
    hostname: str
    address: str
    outside: str  # its veth's other end: a port of the run's bridge, in this machine's namespace
    cpus: tuple[int, ...]
    interface: str = INTERFACE

    def describe(self) -> dict[str, Any]:
        return {"node_rank": self.rank, "hostname": self.hostname, "address": self.address,
                "interface": self.interface, "namespace": self.namespace,
                "cpus": list(self.cpus)}


@dataclass(frozen=True)
class Hosts:
    """A run's emulated hosts, as :func:`emulated` brought them up."""

    token: str
    hosts: tuple[Host, ...]
    bridge: str
    subnet: str
    link_bits: int | None
    record: Path

    @property
    def link(self) -> str:
        return "" if self.link_bits is None else format_rate(self.link_bits)

    def command(self, host: Host, argv: list[str]) -> list[str]:
        """``argv`` run on ``host``: in its network namespace, in a UTS namespace of its own
        named as the host, on its CPUs. Each step execs the next, so it is one process."""
        return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$1" && shift && exec taskset -c "$@"', "sh",
                host.hostname, _cpu_list(host.cpus), *argv]

    def counters(self) -> list[dict[str, int]]:
        """Per host, the bytes its interface and its loopback have sent and received so far,
        read inside its namespace (``ip -s link``)."""
        out = []
        for host in self.hosts:
            links = {entry.get("ifname"): (entry.get("stats64") or entry.get("stats") or {})
                     for entry in json.loads(_run("ip", "-n", host.namespace, "-j", "-s",
                                                  "link", "show") or "[]")}
            own, loop = links.get(host.interface) or {}, links.get("lo") or {}
            out.append({"tx_bytes": int((own.get("tx") or {}).get("bytes", 0)),
                        "rx_bytes": int((own.get("rx") or {}).get("bytes", 0)),
                        "lo_tx_bytes": int((loop.get("tx") or {}).get("bytes", 0))})
        return out

    def describe(self) -> dict[str, Any]:
        """What a result records of the hosts it ran on."""
        return {"emulated": True, "count": len(self.hosts), "link": self.link or None,
                "link_bits_per_s": self.link_bits,
                "shaping": (f"tbf on each host's egress (latency {TBF_LATENCY})"
                            if self.link_bits else None),
                "network": self.subnet, "hosts": [host.describe() for host in self.hosts]}


def _names(token: str, count: int) -> dict[str, Any]:
    """Everything a run of ``count`` hosts will make, by name (at most 15 characters each)."""
    stem = f"{PREFIX}{token}"
    return {"bridge": f"{stem}br",
            "namespaces": [f"{stem}-h{k}" for k in range(count)],
            "outside": [f"{stem}v{k}" for k in range(count)]}


class EmulationError(UsageError):
    """The machine refused a step of the bring-up: one line, exit 2, everything made removed."""


def _run(*argv: str, check: bool = True) -> str:
    """Run one iproute2 (or util-linux) command; EmulationError with its own words if it fails."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EmulationError(f"--emulate-hosts: `{' '.join(argv)}` did not finish within "
                             f"{COMMAND_TIMEOUT_S:g} s") from None
    if check and proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
        raise EmulationError(f"--emulate-hosts: this machine refused the hosts' network "
                             f"(namespaces, veth pairs, a bridge or tbf not available or not "
                             f"permitted here): `{' '.join(argv)}` failed: "
                             f"{said.splitlines()[0]}")
    return proc.stdout


def _ipv6_off(path: str) -> None:
    """Turn IPv6 off on an interface (no link-local address: the hosts reach each other over
    their IPv4 addresses only, and nothing else)."""
    with contextlib.suppress(OSError):
        Path(path).write_text("1\n")


# ------------------------------------------------------------------------------------------------
# the record of a run, and what a dead one left
# ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _records_locked() -> Iterator[None]:
    """One process at a time reads and writes the records (two starts cleaning one dead run)."""
    state_dir().mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(state_dir() / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _records() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(state_dir().glob(f"{PREFIX}*.json")):
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            out.append((path, {}))
    return out


def _owner_alive(record: dict[str, Any]) -> bool:
    """Whether the process that made ``record`` still runs (the same process: its pid and its
    start time, so a reused pid does not count)."""
    try:
        owner = psutil.Process(int(record["pid"]))
        started = owner.create_time()
        if owner.status() == psutil.STATUS_ZOMBIE:  # dead, not yet waited for
            return False
    except (KeyError, TypeError, ValueError, psutil.Error):
        return False
    return abs(started - float(record.get("pid_start") or 0)) < 1.0


def _namespace_pids(namespace: str) -> list[int]:
    if not Path("/run/netns", namespace).exists():
        return []
    text = _run("ip", "netns", "pids", namespace, check=False)
    return [int(word) for word in text.split() if word.isdigit()]


def _kill(pids: list[int]) -> int:
    """SIGKILL ``pids`` (processes inside a namespace of ours) and wait for them; how many."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=KILL_WAIT_S)
    return len(procs)


def _interface_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def remove(record: dict[str, Any]) -> dict[str, int]:
    """Remove everything ``record`` names that still exists: the processes in its namespaces,
    its interfaces (a veth's deletion takes its other end), its namespaces and hosts files.
    What was found, by kind."""
    found = {"namespaces": 0, "interfaces": 0, "processes": 0}
    namespaces = [str(ns) for ns in record.get("namespaces") or [] if str(ns).startswith(PREFIX)]
    links = [str(link) for link in record.get("links") or [] if str(link).startswith(PREFIX)]
    for namespace in namespaces:
        found["processes"] += _kill(_namespace_pids(namespace))
    for link in links:
        if _interface_exists(link):
            found["interfaces"] += 1
            _run("ip", "link", "del", link, check=False)
    for namespace in namespaces:
        if Path("/run/netns", namespace).exists():
            found["namespaces"] += 1
            _run("ip", "netns", "del", namespace, check=False)
        shutil.rmtree(Path("/etc/netns", namespace), ignore_errors=True)
    with contextlib.suppress(OSError):  # iproute2's folder, made by the first run: if now empty
        Path("/etc/netns").rmdir()
    return found


def leftovers(record: dict[str, Any]) -> list[str]:
    """What of ``record``'s namespaces and interfaces still exists (nothing, after a clean-up)."""
    left = [f"namespace {ns}" for ns in record.get("namespaces") or []
            if Path("/run/netns", str(ns)).exists()]
    left += [f"interface {link}" for link in record.get("links") or []
             if _interface_exists(str(link))]
    left += [f"process {pid}" for ns in record.get("namespaces") or []
             for pid in _namespace_pids(str(ns))]
    return left


def clean_stale(say: Callable[[str], None]) -> int:
    """Remove what runs whose owner died (SIGKILL, a crash of the machine's power aside) left,
    saying so in one line each; how many such runs were removed. Runs still alive are left
    alone; a run whose remains this process may not remove keeps its record, said so."""
    if not state_dir().is_dir():
        return 0
    cleaned = 0
    with _records_locked():
        for path, record in _records():
            if record and _owner_alive(record):
                continue
            found = remove(record)
            since = time.strftime("%Y-%m-%d %H:%M:%S",
                                  time.localtime(float(record.get("since") or 0)))
            run = f"a dead dlperf run (pid {record.get('pid', '?')}, started {since})"
            left = leftovers(record)
            if left:  # e.g. root of a user namespace: the record stays for a start that can
                say(f"emulated hosts: could not remove what {run} left ({', '.join(left)}); "
                    "its record stays for a start with the rights to remove it")
                continue
            with contextlib.suppress(OSError):
                path.unlink()
            cleaned += 1
            say(f"emulated hosts: removed what {run} left: {found['namespaces']} namespaces, "
                f"{found['interfaces']} interfaces, {found['processes']} processes")
    return cleaned


def _taken_subnets() -> set[str]:
    return {str(record.get("subnet")) for _, record in _records() if record}


def _new_record(count: int) -> dict[str, Any]:
    """A fresh token whose names nothing on this machine uses, and a /24 of 198.18.0.0/15 no
    live run has; written before anything is made (called with the records locked)."""
    subnets = list(NETWORK.subnets(new_prefix=SUBNET_BITS))
    taken = _taken_subnets()
    for _ in range(100):
        token = secrets.token_hex(3)
        names = _names(token, count)
        path = state_dir() / f"{PREFIX}{token}.json"
        clash = (path.exists() or _interface_exists(names["bridge"])
                 or any(Path("/run/netns", ns).exists() for ns in names["namespaces"]))
        if clash:
            continue
        start = int(token, 16) % len(subnets)
        subnet = next((str(subnets[(start + i) % len(subnets)]) for i in range(len(subnets))
                       if str(subnets[(start + i) % len(subnets)]) not in taken), None)
        if subnet is None:
            raise EmulationError(f"--emulate-hosts: every /{SUBNET_BITS} of {NETWORK} is in use "
                                 f"by a running emulation")
        me = psutil.Process()
        record = {"token": token, "pid": me.pid, "pid_start": me.create_time(),
                  "since": time.time(), "subnet": subnet, "count": count,
                  "namespaces": names["namespaces"],
                  "links": [*names["outside"], names["bridge"]]}
        path.write_text(json.dumps(record))
        return record
    raise EmulationError("--emulate-hosts: found no free name for a new run's interfaces")


# ------------------------------------------------------------------------------------------------
# up and down
# ------------------------------------------------------------------------------------------------

def _bring_up(record: dict[str, Any], count: int, cpus: list[int],
              link_bits: int | None, own_name: str) -> Hosts:
    """Make the bridge, then each host: namespace (IPv6 off), veth into it, address, the hosts
    file its names resolve through, the shaper."""
    token = record["token"]
    names = _names(token, count)
    subnet = ipaddress.ip_network(record["subnet"])
    addresses = [str(subnet.network_address + 1 + k) for k in range(count)]
    bridge = names["bridge"]
    _run("ip", "link", "add", bridge, "type", "bridge")
    _ipv6_off(f"/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6")
    _run("ip", "link", "set", bridge, "up")
    hosts = []
    for k in range(count):
        namespace, outside = names["namespaces"][k], names["outside"][k]
        host = Host(k, namespace, HOSTNAME.format(k), addresses[k], outside,
                    tuple(share(cpus, count, k)))
        _run("ip", "netns", "add", namespace)
        _run("ip", "netns", "exec", namespace, "sh", "-c",
             "for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 "
             "/proc/sys/net/ipv6/conf/default/disable_ipv6; do "
             "[ -w $f ] && echo 1 > $f; done; true")
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", INTERFACE,
             "netns", namespace)
        _ipv6_off(f"/proc/sys/net/ipv6/conf/{outside}/disable_ipv6")
        _run("ip", "link", "set", outside, "master", bridge, "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "-n", namespace, "addr", "add", f"{host.address}/{SUBNET_BITS}", "dev",
             INTERFACE)
        _run("ip", "-n", namespace, "link", "set", INTERFACE, "up")
        if link_bits:
            shape(host, link_bits)
        hosts.append(host)
    with _records_locked():  # /etc/netns is shared with other runs, which remove it when empty
        for host in hosts:
            _write_hosts_file(host, hosts, own_name)
    return Hosts(token, tuple(hosts), bridge, str(subnet), link_bits,
                 state_dir() / f"{PREFIX}{token}.json")


def shape(host: Host, link_bits: int | None) -> None:
    """Shape ``host``'s egress to ``link_bits`` per second (a token bucket whose bucket holds at
    least one timer tick of traffic at its rate), or remove its shaping (None)."""
    if link_bits is None:
        shown = _run("tc", "-n", host.namespace, "qdisc", "show", "dev", host.interface)
        if " tbf " in f" {shown} ":
            _run("tc", "-n", host.namespace, "qdisc", "del", "dev", host.interface, "root")
        return
    burst = max(64 * 1024, link_bits // 8 // 250)
    _run("tc", "-n", host.namespace, "qdisc", "replace", "dev", host.interface, "root", "tbf",
         "rate", f"{link_bits}bit", "burst", str(burst), "latency", TBF_LATENCY)


def own_name_resolution() -> str:
    """Where each host's own name resolves in its hosts file: ``address`` (its own address, as a
    cluster's DNS or hosts file has it; the default) or ``loopback`` (127.0.1.1, as Debian's
    installer writes a host's own /etc/hosts), chosen by ``DLPERF_EMULATED_OWN_NAME``: to see
    how a framework behaves on hosts of the second kind (one that advertises the address of its
    own host name then gives its peers an address they cannot reach)."""
    value = (os.environ.get(OWN_NAME_VARIABLE) or "address").strip().lower()
    if value not in OWN_NAME_CHOICES:
        raise UsageError(f"{OWN_NAME_VARIABLE}: {value!r} is not one of "
                         f"{', '.join(OWN_NAME_CHOICES)}")
    return value


def _write_hosts_file(host: Host, hosts: list[Host], own_name: str) -> None:
    """/etc/hosts as the host sees it (``ip netns exec`` mounts /etc/netns/NS/hosts there): every
    host by name, as a cluster's DNS gives them; the host's own name on its own address, or on
    127.0.1.1 (``own_name`` ``loopback``, :func:`own_name_resolution`)."""
    folder = Path("/etc/netns", host.namespace)
    folder.mkdir(parents=True, exist_ok=True)
    own = "127.0.1.1" if own_name == "loopback" else host.address
    lines = ["127.0.0.1\tlocalhost", f"{own}\t{host.hostname}"]
    lines += [f"{other.address}\t{other.hostname}" for other in hosts if other is not host]
    (folder / "hosts").write_text("\n".join(lines) + "\n")


def tear_down(hosts: Hosts) -> list[str]:
    """Remove the run's hosts and its record; what could not be removed (nothing, normally)."""
    with _records_locked():
        try:
            record = json.loads(hosts.record.read_text())
        except (OSError, ValueError):
            record = {"namespaces": [h.namespace for h in hosts.hosts],
                      "links": [*(h.outside for h in hosts.hosts), hosts.bridge]}
        remove(record)
        left = leftovers(record)
        if not left:
            with contextlib.suppress(OSError):
                hosts.record.unlink()
        return left


@contextlib.contextmanager
def emulated(count: int, link_bits: int | None, cpus: list[int] | None = None,
             say: Callable[[str], None] = print) -> Iterator[Hosts]:
    """``count`` emulated hosts for the block, each on its share of ``cpus`` (default: the CPUs
    this process may run on), their links shaped to ``link_bits`` per second (None: unshaped).
    What dead runs left is removed first (said through ``say``). Checked before anything is
    made: UsageError naming what is missing or wrong; a step the machine refuses undoes the
    others and is an EmulationError."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    check_request(count, cpus)
    lacking = missing(link_bits is not None)
    if lacking:
        raise UsageError(lacking)
    own_name = own_name_resolution()
    clean_stale(say)
    with _records_locked():
        record = _new_record(count)
    hosts = None
    try:
        hosts = _bring_up(record, count, cpus, link_bits, own_name)
        yield hosts
    finally:
        if hosts is None:  # the bring-up failed: remove what it made by the record
            with _records_locked():
                remove(record)
                if not leftovers(record):
                    (state_dir() / f"{PREFIX}{record['token']}.json").unlink(missing_ok=True)
        else:
            left = tear_down(hosts)
            if left:
                say(f"emulated hosts: could not remove {', '.join(left)}; the next "
                    f"--emulate-hosts run removes them")
