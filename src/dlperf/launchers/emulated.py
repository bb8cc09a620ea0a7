"""``dlperf run ... --emulate-hosts N [--link RATE]``: one case across N hosts emulated on this
machine (:mod:`dlperf.host.emulated`), each node started as a user starts one on a cluster.

dlperf brings the hosts up, then starts on each host the same ``dlperf run`` (the case's flags,
with ``--nnodes N --node-rank K --master-addr <host 0's address> --socket-ifname <the hosts'
interface> --node-addrs <every host's address>``, the same ``--db``): node 0 measures and stores
the case, the others run their ranks and store nothing, as on real hosts. It waits for them
within a bound (every case's ``--timeout`` times its repeats, plus ``--rdzv-timeout``); a node that
fails while the others go on has them stopped after :data:`FAIL_GRACE_S`, and the case fails
with that node's own message. Then it adds to node 0's stored result what only the emulation
knows (``emulated_hosts``: the hosts, their link, the bytes each host's interface sent and
received over the run; each rank's address) and removes the hosts.

This process holds the host's measurement lock for the whole job; node 0 takes a lock of its
own (one only it uses), so the nodes never wait for the lock this process holds. Each node runs
under :mod:`dlperf.worker.lifeline`: if this process dies, even of SIGKILL, its nodes go too,
and the next start removes the hosts it left.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psutil

from dlperf import display, outputs
from dlperf.errors import UsageError
from dlperf.host import emulated, measurelock
from dlperf.launchers import exits, launch, registry
from dlperf.spec import Case
from dlperf.store import Store
from dlperf.worker.lifeline import HARNESS_PID

# after a node failed, how long the others get to end by themselves (their own failure, which
# the frameworks' launchers bring about within seconds) before they are stopped
FAIL_GRACE_S = 20.0
# a stopped node's time to store what it measured (SIGTERM) before it is killed
STOP_GRACE_S = 30.0
# a node's lifeline's time to kill what is below it once told to
KILL_WAIT_S = 5.0
# the nodes' start (imports, node 0's one-time peak probe) on top of their repeats
START_MARGIN_S = 120.0
POLL_S = 0.2
TAIL_LINES = 40
# the flags the emulation sets on every node itself; a user's value would contradict it
SET_HERE = {"node_rank": "--node-rank", "master_addr": "--master-addr",
            "node_addrs": "--node-addrs", "socket_ifname": "--socket-ifname"}
# not passed on: the emulation's own flags, and what each node is given apart
NOT_PASSED = {"emulate_hosts", "nnodes", "json", "db", "no_wait", "rdzv_dir", "master_port",
              *SET_HERE}


def check_flags(args: argparse.Namespace) -> None:
    """UsageError naming the flag: a host count that is not 2 .. the CPUs this process may run
    on, or a flag that the emulation sets on every node itself. Nothing is made before."""
    emulated.check_request(args.emulate_hosts, sorted(os.sched_getaffinity(0)))
    emulated.own_name_resolution()
    for dest, flag in SET_HERE.items():
        if getattr(args, dest, None) is not None:
            raise UsageError(f"{flag}: --emulate-hosts sets it on every node itself; leave it "
                             f"out")
    count = args.emulate_hosts
    if getattr(args, "nnodes", None) is not None and args.nnodes != count:
        raise UsageError(f"--nnodes: {args.nnodes} contradicts --emulate-hosts {count}; leave "
                         f"--nnodes out (it is the number of hosts)")
    if os.environ.get(emulated.NODE_VARIABLE):
        raise UsageError("--emulate-hosts: this is already a node of emulated hosts")


def flags_of(parser: argparse.ArgumentParser, args: argparse.Namespace,
             drop: set[str]) -> list[str]:
    """The command line that parses back into ``args`` (every flag away from its default),
    without the destinations in ``drop``."""
    out: list[str] = []
    for action in parser._actions:  # argparse keeps its actions here, and nowhere public
        if not action.option_strings or action.dest in drop or action.dest in ("help",
                                                                                "version"):
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default or value is None:
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")),
                    action.option_strings[0])
        if isinstance(action, argparse.BooleanOptionalAction):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreConstAction)):
            out.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                out += [flag, _text(item)]
        elif action.nargs == "?" and value == action.const:
            out.append(flag)
        elif isinstance(action, argparse._StoreAction):
            out += [flag, _text(value)]
        else:
            raise UsageError(f"{flag}: --emulate-hosts cannot pass this flag on to the nodes")
    return out


def _text(value: Any) -> str:
    if isinstance(value, tuple):  # --knob NAME=VALUE, parsed into a pair
        return "=".join(str(part) for part in value)
    return repr(value) if isinstance(value, float) else str(value)


def check_launchers(cases: list[Case]) -> None:
    """What every node's launcher would refuse (a Horovod environment missing, ...), refused
    here before any host is made: the rendezvous as node 0 of each case will see it."""
    for case in cases:  # the link is shaped here, not by a launcher
        rendezvous = launch.Rendezvous(node_rank=0, master_addr=str(emulated.NETWORK[1]),
                                       socket_ifname=emulated.INTERFACE,
                                       node_addrs=tuple(str(emulated.NETWORK[1 + k])
                                                        for k in range(case.nnodes)),
                                       store_dir=tempfile.gettempdir())
        registry.launcher_for(dataclasses.replace(case, link=""), rendezvous)


@dataclass
class Node:
    """One node's ``dlperf run`` on its host."""

    host: emulated.Host
    proc: subprocess.Popen
    json: Path
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    exit_at: float | None = None
    stopped: bool = False  # by this process (another node failed, the bound, Ctrl-C)
    output: Any = None  # what it wrote to its JSON file, read when it ended
    pumps: list[threading.Thread] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"node {self.host.rank} ({self.host.hostname}, {self.host.address})"


def _pump(stream: TextIO, node: Node, sink: TextIO, prefix: str) -> None:
    """Relay a node's output line by line to ours, keeping its last lines."""
    for line in stream:
        node.tail.append(line.rstrip("\n"))
        sink.write(prefix + line)
        sink.flush()
    stream.close()


def start_node(hosts: emulated.Hosts, host: emulated.Host, argv: list[str],
               env: dict[str, str], out: Path) -> Node:
    """``argv`` (a ``dlperf run``) on ``host``, under the lifeline (it dies with this process),
    in a session of its own; node 0's output is ours, the others' go to stderr named."""
    command = hosts.command(host, [sys.executable, "-m", "dlperf.worker.lifeline", "--", *argv])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    node = Node(host, proc, out)
    prefix = "" if host.rank == 0 else f"[{host.hostname}] "
    for stream, sink in ((proc.stdout, sys.stdout if host.rank == 0 else sys.stderr),
                         (proc.stderr, sys.stderr)):
        pump = threading.Thread(target=_pump, args=(stream, node, sink, prefix), daemon=True)
        pump.start()
        node.pumps.append(pump)
    return node


def stop(nodes: list[Node]) -> None:
    """Stop the nodes still running: SIGTERM to each node's `dlperf run` (which stores what it
    measured, marked interrupted), then, after STOP_GRACE_S, SIGKILL to what is left."""
    running = [node for node in nodes if node.proc.poll() is None]
    for node in running:
        node.stopped = True
        try:
            targets = psutil.Process(node.proc.pid).children() or [psutil.Process(node.proc.pid)]
        except psutil.Error:
            continue
        for target in targets:
            try:
                target.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for node in running:
        try:
            node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_node(node)


def kill_node(node: Node) -> None:
    """SIGTERM to the node's lifeline, which SIGKILLs everything below it whatever its session
    (the launcher its `dlperf run` started in a session of its own); SIGKILL to its process
    group if the lifeline is not gone within seconds."""
    try:
        os.kill(node.proc.pid, signal.SIGTERM)
        node.proc.wait(timeout=KILL_WAIT_S)
        return
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(node.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.proc.wait()


def wait(nodes: list[Node], bound_s: float) -> bool:
    """Wait for every node; stop the rest FAIL_GRACE_S after one failed, or all at the bound.
    Whether the bound was reached."""
    deadline = time.monotonic() + bound_s
    while True:
        now = time.monotonic()
        for node in nodes:
            if node.exit_at is None and node.proc.poll() is not None:
                node.exit_at = now
        if all(node.exit_at is not None for node in nodes):
            return False
        failed = [n.exit_at for n in nodes if n.exit_at is not None and n.proc.returncode != 0]
        if failed and now - min(failed) > FAIL_GRACE_S:
            stop(nodes)
            continue
        if now > deadline:
            stop(nodes)
            for node in nodes:
                node.exit_at = node.exit_at or time.monotonic()
            return True
        time.sleep(POLL_S)


def node_message(node: Node) -> tuple[str, str]:
    """(status, message) of a failed node in its own words: its JSON marker's error, else what
    it printed last, else how it ended."""
    marker = node.output
    if isinstance(marker, dict) and marker.get("status") not in (None, "ok") and marker.get(
            "error"):
        return str(marker["status"]), f"{node.name}: {marker['error']}"
    code = node.proc.returncode
    how = (f"{node.name}: its `dlperf run` died from {exits.signal_name(-code)}"
           if code is not None and code < 0 else f"{node.name} exited with code {code}")
    last = next((line for line in reversed(node.tail) if line.strip()), "")
    return "crash", how + (f": {last.strip()[:300]}" if last else " and printed nothing")


def outputs_of(node: Node) -> Any:
    """What the node wrote to its JSON file: node 0 its result(s), another node its marker;
    None when it wrote nothing."""
    try:
        return json.loads(node.json.read_text())
    except (OSError, ValueError):
        return None


def cause(nodes: list[Node]) -> Node | None:
    """The node whose failure is the job's: the first to fail on its own (not stopped here)."""
    failed = [n for n in nodes if n.proc.returncode not in (0, None) and not n.stopped]
    return min(failed, key=lambda n: n.exit_at or 0.0) if failed else None


def hosts_block(hosts: emulated.Hosts, before: list[dict[str, int]],
                after: list[dict[str, int]], nodes: list[Node], wall_s: float) -> dict[str, Any]:
    """``emulated_hosts``: the hosts, their link, and what each host's interface sent and
    received from its node's start to the end of every node."""
    block = hosts.describe()
    block["bytes_over"] = ("the whole job: from the nodes' start to their end, every repeat "
                           "(and both cases of --data both)")
    block["wall_s"] = wall_s
    for entry, start, end, node in zip(block["hosts"], before, after, nodes):
        entry.update({name: end[name] - start[name] for name in end})
        entry["exit_code"] = node.proc.returncode
    return block


def amend(result: dict[str, Any], block: dict[str, Any], failure: tuple[str, str] | None,
          timed_out: str | None) -> None:
    """Put the emulation's block on node 0's result, each rank's address beside its host name,
    and the job's failure where another node's, or the bound, is the cause."""
    result["emulated_hosts"] = block
    by_name = {entry["hostname"]: entry["address"] for entry in block["hosts"]}
    for rank in result.get("ranks") or []:
        rank["address"] = by_name.get(rank.get("host"))
    what = ("timeout", timed_out) if timed_out else failure
    if what is None:
        return
    if result.get("status") == "ok":  # measured and gathered: what failed came after
        result.setdefault("warnings", []).append(f"after the case was measured: {what[1]}")
        return
    if result.get("error"):
        result.setdefault("warnings", []).append(f"node 0 saw: {result['error']}")
    result["status"], result["error"] = what


def store_again(db: str, results: list[dict[str, Any]]) -> None:
    """Node 0's results, amended, stored over what node 0 stored."""
    runs = [r for r in results if r.get("run_id") is not None]
    if not runs:
        return
    with Store(db) as store:
        for result in runs:
            store.finish_run(int(result["run_id"]), result)


def node_env(hosts: emulated.Hosts, work: Path) -> dict[str, str]:
    """Ours, with node 0's own measurement lock, the lifeline's harness (this process), the
    mark of an emulated node, and no Slurm variables (the hosts are not Slurm's)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SLURM_")}
    lock = work / "lock"
    lock.mkdir(exist_ok=True)
    env.update({measurelock.ENV_DIR: str(lock), HARNESS_PID: str(os.getpid()),
                emulated.NODE_VARIABLE: hosts.token, "PYTHONUNBUFFERED": "1"})
    return env


def node_argv(base: list[str], args: argparse.Namespace, hosts: emulated.Hosts,
              host: emulated.Host, work: Path, rdzv_dir: str) -> list[str]:
    """Node ``host.rank``'s `dlperf run` (or the command that asked: `dlperf collectives`): the
    case's flags and the cluster's, as on real hosts."""
    first = hosts.hosts[0]
    return [sys.executable, "-m", "dlperf.cli", getattr(args, "command", None) or "run", *base,
            "--nnodes", str(len(hosts.hosts)), "--node-rank", str(host.rank),
            "--master-addr", first.address,
            "--master-port", str(args.master_port or launch.DEFAULT_PORT),
            "--socket-ifname", host.interface,
            "--node-addrs", ",".join(h.address for h in hosts.hosts),
            "--rdzv-dir", rdzv_dir, "--db", str(Path(args.db).resolve()),
            "--json", str(work / f"node{host.rank}.json")]


def bound_s(cases: list[Case], args: argparse.Namespace) -> float:
    return (sum(case.timeout_s * case.repeats for case in cases) + args.rdzv_timeout
            + START_MARGIN_S)


def say(message: str) -> None:
    """A side remark on stderr, one line however long."""
    display.err.print(message, soft_wrap=True)


def warn(message: str) -> None:
    """A "! ..." line under node 0's tables, one line however long."""
    display.out.print(display.line(("! " + message, "yellow")), soft_wrap=True)


def describe(hosts: emulated.Hosts) -> str:
    """One line: the hosts, their CPUs and link."""
    each = ", ".join(f"{h.hostname} {h.address} on CPU {','.join(map(str, h.cpus))}"
                     for h in hosts.hosts)
    return (f"emulated hosts: {len(hosts.hosts)} ({each}), "
            + (f"links shaped to {hosts.link}" if hosts.link else "links not shaped"))


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, cases: list[Case]) -> int:
    """The case(s) across ``args.emulate_hosts`` emulated hosts; the exit code of `dlperf run`."""
    check_flags(args)
    count = args.emulate_hosts
    link_bits = emulated.parse_rate(cases[-1].link) if cases[-1].link else None
    lacking = emulated.missing(link_bits is not None)
    if lacking:
        raise UsageError(lacking)
    check_launchers(cases)
    base = flags_of(parser, args, NOT_PASSED)
    with measurelock.held(wait=not args.no_wait), \
            tempfile.TemporaryDirectory(prefix="dlperf-emulated-") as tmp, \
            emulated.emulated(count, link_bits, say=say) as hosts:
        work = Path(tmp)
        rdzv_dir = args.rdzv_dir or str(work / "rdzv")
        Path(rdzv_dir).mkdir(parents=True, exist_ok=True)
        say(describe(hosts))
        env = node_env(hosts, work)
        before = hosts.counters()
        started = time.monotonic()
        nodes: list[Node] = []
        timed_out, interrupted = False, None
        try:
            for host in reversed(hosts.hosts):  # node 0 last: the others are waiting for it
                argv = node_argv(base, args, hosts, host, work, rdzv_dir)
                nodes.insert(0, start_node(hosts, host, argv, env, work / f"node{host.rank}.json"))
            timed_out = wait(nodes, bound_s(cases, args))
        except KeyboardInterrupt as stopped:  # Ctrl-C, SIGTERM: node 0 stores what it measured
            interrupted = stopped
            stop(nodes)
        finally:
            for node in nodes:
                for pump in node.pumps:
                    pump.join(timeout=5)
        block = hosts_block(hosts, before, hosts.counters(), nodes, time.monotonic() - started)
        for node in nodes:
            node.output = outputs_of(node)
    code = finish(args, nodes, block, timed_out, bound_s(cases, args))
    if interrupted is not None:
        raise interrupted
    return code


def _bytes(count: int) -> str:
    return display.human_bytes(count) if count else "0 B"


def finish(args: argparse.Namespace, nodes: list[Node], block: dict[str, Any],
           timed_out: bool, bound: float) -> int:
    """Amend and store node 0's result(s), write --json, say what the hosts carried; the exit
    code."""
    written = nodes[0].output
    results = written if isinstance(written, list) else [written] if isinstance(
        written, dict) else []
    culprit = cause(nodes)
    failure = node_message(culprit) if culprit is not None and culprit.host.rank != 0 else None
    late = (f"the nodes did not finish within {bound:g} s (every case's --timeout times its "
            f"repeats, plus --rdzv-timeout and {START_MARGIN_S:g} s to start); they were stopped"
            if timed_out else None)
    views = [node.output["view"] for node in nodes[1:]
             if isinstance(node.output, dict) and isinstance(node.output.get("view"), dict)]
    for result in results:
        amend(result, block, failure, late)
        if views:  # the other nodes' own timelines and host states, beside node 0's own
            result["node_views"] = views
    store_again(args.db, results)
    if args.json and results:
        outputs.write_json(args.json, results if len(results) > 1 else results[0])
    for entry in block["hosts"]:
        display.out.print(f"{entry['hostname']} {entry['address']}: sent "
                          f"{_bytes(entry['tx_bytes'])}, received {_bytes(entry['rx_bytes'])} "
                          f"on {entry['interface']}"
                          + (f" (link {block['link']})" if block.get("link") else ""),
                          soft_wrap=True)
    if not results:
        _, message = failure or node_message(nodes[0])
        warn(f"no result stored: {message}")
        return 2 if nodes[0].proc.returncode == 2 else 1
    for result in results:
        if failure and result["error"] == failure[1] or late and result["status"] == "timeout":
            warn(f"case failed: {result['error']}")
    ok = all(r.get("status") == "ok" for r in results) and all(
        n.proc.returncode == 0 for n in nodes)
    return 0 if ok else 1
