"""`dlperf run --emulate-hosts 2` for real: torch's torchrun (static rendezvous) trains a tiny
ResNet-50 across two emulated hosts, each rank on its own host name and address, the gradients
crossing the hosts' interfaces (not loopback); a node that dies fails the case with its own
message; a dlperf killed with SIGKILL leaves nothing running and the next start removes its hosts
(saying so in one line) and runs over a shaped link; a shaped link never carries more than its
rate. Each `dlperf run` brings its own pair of hosts up and down (under a second: see
docs/distributed.md), so the runs share nothing but the module's fixture result.

The other frameworks across two emulated hosts: tests/launchers/test_emulated_frameworks.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import TAG, assert_nothing_left, dlperf
from dlperf.host import emulated
from dlperf.worker.placement import share
from two_hosts import (TINY_RESNET50, across_two_hosts, check_across_two_hosts,
                       skip_without_emulation)

# two-node jobs, a rank per emulated host (each host one of the machine's CPUs); their checks are
# of behaviour, never of speed (the one reading of a rate is marked whole_machine below)
pytestmark = pytest.mark.spans_cores

# a 2-layer BERT with a 512-word vocabulary (tests/backends/test_distributed_frameworks.py's): its
# gradients, 0.4 MB, cross a 100 Mbit/s link in a blink
STATE = "DLPERF_EMULATED_STATE"
TINY_BERT = ["--model", "bert-base", "--seq-len", "16", "--knob", "layers=2", "--knob",
             "hidden=64", "--knob", "heads=2", "--knob", "intermediate=128", "--knob",
             "vocab_size=512", "--batch-size", "2", "--warmup-steps", "1", "--steps", "2",
             "--repeats", "1", "--device", "cpu", "--rdzv-timeout", "120"]


@pytest.fixture(autouse=True)
def _emulation_possible():
    skip_without_emulation()


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    skip_without_emulation()
    return across_two_hosts("torch", tmp_path_factory.mktemp("torch"))


def test_torch_resnet50_trains_across_two_emulated_hosts(torch_run):
    block = check_across_two_hosts(torch_run)
    result = torch_run.result
    assert result["launch"]["launcher"] == "torchrun"
    assert result["launch"]["rendezvous"] == "static"
    assert result["launch"]["master"] == f"{block['hosts'][0]['address']}:29500"
    assert result["launch"]["socket_ifname"] == "emu0"
    cpus = sorted(os.sched_getaffinity(0))  # each host its own half of them
    assert [h["cpus"] for h in block["hosts"]] == [share(cpus, 2, 0), share(cpus, 2, 1)]
    assert result["env"]["hostname"] == "dlperf-h0"  # node 0 measured on its own host
    # node 1's own monitor reached node 0: its timeline and its host's state, stored
    (view,) = result["node_views"]
    assert view["node_rank"] == 1 and view["hostname"] == "dlperf-h1"
    assert view["timeline"] and view["monitor"]["samples"] and view["host"]
    assert "dlperf-h1 " + block["hosts"][1]["address"] + ": sent" in torch_run.stdout


def records_of(pid: int, folder: Path | None = None) -> list[dict]:
    """The emulation records (each names what one run made) that ``pid`` owns."""
    folder = folder or emulated.state_dir()
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob(f"{emulated.PREFIX}*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("pid") == pid:
            out.append(record)
    return out


def in_namespace(namespace: str, words: str) -> list[psutil.Process]:
    """The processes in ``namespace`` whose command line holds ``words``."""
    found = []
    if not Path("/run/netns", namespace).exists():
        return found
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                          text=True).stdout.split()
    for pid in pids:
        try:
            proc = psutil.Process(int(pid))
            if words in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def start_long_run(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, dict]:
    """A torch run across two emulated hosts with steps enough to be caught mid-window, with
    ``env`` added to its environment; once both hosts' ranks run: the process and its record.
    Its temporary folders are made in the test's own (TMPDIR): the harness or node the test
    kills cannot remove its own, which were left in /tmp by every run of the suite."""
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch",
                             *TINY_RESNET50, "--steps", "1000", "--emulate-hosts", "2",
                             "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(own_tmp), **env})
    folder = Path(env.get(STATE, emulated.state_dir()))
    drained = threading.Thread(target=proc.stdout.read, daemon=True)  # never blocks on a pipe
    drained.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        records = records_of(proc.pid, folder)
        if records and all(in_namespace(ns, "dlperf.worker") for ns in records[0]["namespaces"]):
            return proc, records[0]
        assert proc.poll() is None, "the run ended before its ranks ran"
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("the ranks never ran on both hosts within 300 s")


def test_a_node_that_dies_fails_the_case_with_its_own_message(tmp_path):
    tag = uuid.uuid4().hex
    proc, record = start_long_run(tmp_path, {TAG: tag})
    time.sleep(3)  # into the window
    node = [p for p in in_namespace(record["namespaces"][1], "dlperf.cli run")
            if "lifeline" not in " ".join(p.cmdline())]
    assert len(node) == 1
    node[0].kill()
    assert proc.wait(timeout=300) == 1
    assert_nothing_left(tag)
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "crash"
    assert result["error"].startswith("node 1 (dlperf-h1, ")
    assert "its `dlperf run` died from SIGKILL" in result["error"], result["error"]
    # node 0's own failure (a lost peer, or stopped FAIL_GRACE_S later) is kept beside it
    assert any(w.startswith("node 0 saw: ") for w in result["warnings"]), result["warnings"]
    assert result["emulated_hosts"]["hosts"][1]["exit_code"] == -signal.SIGKILL
    assert not any(Path("/run/netns", ns).exists() for ns in record["namespaces"])


def test_sigkill_leaves_nothing_running_and_the_next_start_removes_its_hosts(tmp_path):
    """The killed run's records go to a folder of this test's (DLPERF_EMULATED_STATE): another
    test's run starting meanwhile must not clean them up before this test's next start does."""
    tag = uuid.uuid4().hex
    env = {TAG: tag, STATE: str(tmp_path / "state")}
    proc, record = start_long_run(tmp_path, env)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # its nodes die with it (each under dlperf.worker.lifeline), their ranks with them
        assert_nothing_left(tag, within_s=30)
        assert all(Path("/run/netns", ns).exists() for ns in record["namespaces"])
        # the next start: a tiny BERT over links shaped to 100 Mbit/s
        nxt = dlperf("run", "--framework", "torch", *TINY_BERT, "--emulate-hosts", "2", "--link",
                     "100mbit", "--db", str(tmp_path / "next.db"), "--json",
                     str(tmp_path / "next.json"), env=env, timeout=600)
        said = [line for line in nxt.stderr.splitlines()
                if "removed what a dead dlperf run" in line]
        assert len(said) == 1 and f"(pid {proc.pid}, started " in said[0], nxt.stderr
        assert said[0].endswith("left: 2 namespaces, 3 interfaces, 0 processes"), said[0]
        assert nxt.returncode == 0, nxt.stdout + nxt.stderr
        assert_nothing_left(tag)
        assert not records_of(proc.pid, tmp_path / "state")
        for name in record["namespaces"]:
            assert not Path("/run/netns", name).exists()
        for name in record["links"]:
            assert not Path("/sys/class/net", name).exists()
        shaped = json.loads((tmp_path / "next.json").read_text())
        assert shaped["status"] == "ok" and shaped["case"]["link"] == "100mbit"
        assert "100mbit-link" in shaped["label"]
        block = shaped["emulated_hosts"]
        assert block["link"] == "100mbit" and block["link_bits_per_s"] == 10**8
        # whatever crossed a host's interface, it did not cross faster than its link
        for host in block["hosts"]:
            assert host["tx_bytes"] * 8 <= 10**8 * block["wall_s"], host
    finally:  # a no-op after the next start's clean-up; after a failed assertion, the
        # killed run's hosts go too (its records are this test's: no other start finds them)
        emulated.remove(record)


# ------------------------------------------------------------------------------------------------
# the link's rate, read against the clock
# ------------------------------------------------------------------------------------------------

RECEIVE = """
import socket, sys, time
server = socket.create_server((sys.argv[1], 5001))
server.settimeout(30)
conn, _ = server.accept()
conn.settimeout(30)
total, first, last = 0, None, None
while True:
    data = conn.recv(1 << 20)
    if not data:
        break
    now = time.monotonic()
    if first is None:  # the clock starts at the first bytes: count what came after them
        first = now
        continue
    total, last = total + len(data), now
print(total, last - first)
"""
SEND = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], 5001), timeout=30)
block, end = b"x" * (1 << 16), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    conn.sendall(block)
conn.close()
"""


@pytest.mark.whole_machine
def test_a_shaped_link_never_carries_more_than_its_rate():
    """2 s of TCP as fast as it goes from host 0 to host 1 over links shaped to 100 Mbit/s: the
    receiver's bytes over its time, and the sender's interface counter over the same, stay
    within the rate (plus one bucket of burst), and near it (the shaper, not the sender, set
    the pace). Both ends are bounded in time and stop by themselves."""
    rate, seconds = 100 * 10**6, 2.0
    with emulated.emulated(2, rate, say=print) as hosts:
        receiver, sender = hosts.hosts[1], hosts.hosts[0]
        listening = subprocess.Popen(hosts.command(receiver, ["timeout", "60", sys.executable,
                                                              "-c", RECEIVE, receiver.address]),
                                     stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        before = hosts.counters()
        subprocess.run(hosts.command(sender, ["timeout", "60", sys.executable, "-c", SEND,
                                              receiver.address, str(seconds)]),
                       check=True, timeout=90)
        out, _ = listening.communicate(timeout=90)
        after = hosts.counters()
    received, took = out.split()
    received, took = int(received), float(took)
    print(f"received {received * 8 / took / 1e6:.1f} Mbit/s over {took:.2f} s")
    burst = max(64 * 1024, rate // 8 // 250)
    assert received * 8 <= rate * took + 8 * burst, (received, took)
    assert received * 8 >= 0.5 * rate * took, (received, took)
    sent = after[0]["tx_bytes"] - before[0]["tx_bytes"]
    assert sent >= received  # headers on top of the payload
    assert sent * 8 <= rate * (took + 0.5) + 8 * burst, (sent, took)
    assert not Path("/run/netns", hosts.hosts[0].namespace).exists()
