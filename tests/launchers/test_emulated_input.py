"""`dlperf run --emulate-hosts N [--link RATE]` before anything is made: bad input and a machine
that cannot emulate hosts are one line naming the flag (or what is missing), exit 2, and leave no
namespace, interface, record or database behind; the rate's spelling, the names' length and
uniqueness, the case's identity, and the node command line written back from the parsed flags.

Nothing here starts a framework; the one bring-up attempted (in a user namespace, where the
machine refuses it) is undone by dlperf itself.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import dlperf_main, own_lock
from dlperf import cli
from dlperf.host import emulated
from dlperf.launchers import emulated as emulated_launch
from dlperf.spec import Case

pytestmark = pytest.mark.parallel

TINY = ["run", "--framework", "torch", "--model", "resnet50", "--image-size", "32",
        "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--repeats", "1"]
CPUS = len(os.sched_getaffinity(0))


def namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def records_of(pid: int) -> list[Path]:
    """The emulation records (each names what one run made) owned by ``pid``."""
    if not emulated.state_dir().is_dir():
        return []
    return [path for path in emulated.state_dir().glob(f"{emulated.PREFIX}*.json")
            if f'"pid": {pid},' in path.read_text()]


def check_refused(proc: subprocess.CompletedProcess, flag: str, words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"dlperf run: error: {flag}"), lines
    assert words in lines[0], lines[0]


@pytest.mark.parametrize("extra, flag, words", [
    (["--emulate-hosts", "1"], "--emulate-hosts", "2 or more"),
    (["--emulate-hosts", "2", "env:DLPERF_EMULATED_OWN_NAME=dns"], "DLPERF_EMULATED_OWN_NAME",
     "is not one of address, loopback"),
    (["--emulate-hosts", "0"], "--emulate-hosts", "2 or more"),
    (["--emulate-hosts", str(CPUS + 1)], "--emulate-hosts", f"this process may run on {CPUS}"),
    (["--emulate-hosts", "2", "--link", "fast"], "--link", "is not a link rate"),
    (["--emulate-hosts", "2", "--link", "100mbps"], "--link", "bits"),
    (["--emulate-hosts", "2", "--link", "999kbit"], "--link", "below 1 Mbit/s"),
    (["--emulate-hosts", "2", "--link", "0.5mbit"], "--link", "below 1 Mbit/s"),
    (["--link", "1gbit"], "--link", "needs --emulate-hosts"),
    (["--emulate-hosts", "2", "--nnodes", "3"], "--nnodes", "contradicts"),
    (["--emulate-hosts", "2", "--node-rank", "1"], "--node-rank", "sets it on every node"),
    (["--emulate-hosts", "2", "--master-addr", "10.0.0.1"], "--master-addr", "sets it"),
    (["--emulate-hosts", "2", "--socket-ifname", "eth0"], "--socket-ifname", "sets it"),
])
def test_bad_input_is_one_line_naming_the_flag_and_makes_nothing(extra, flag, words, tmp_path):
    before = namespaces()
    db = tmp_path / "r.db"
    env = dict(arg[4:].split("=", 1) for arg in extra if arg.startswith("env:"))
    extra = [arg for arg in extra if not arg.startswith("env:")]
    proc = dlperf_main(*TINY, *extra, "--db", str(db), "--json", str(tmp_path / "r.json"),
                       env=env)
    check_refused(proc, flag, words)
    assert not db.exists() and not (tmp_path / "r.json").exists()
    assert not records_of(os.getpid())
    assert not {ns for ns in namespaces() - before if ns.startswith(emulated.PREFIX)}


def test_a_machine_without_what_it_needs_is_one_line(tmp_path, monkeypatch):
    """Not root; no `ip`, `unshare`, `taskset` (nor `tc` for a link) on PATH: each named."""
    args = [*TINY, "--emulate-hosts", "2", "--db", str(tmp_path / "r.db")]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    check_refused(dlperf_main(*args), "--emulate-hosts", "needs root")
    monkeypatch.undo()
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = dlperf_main(*args, "--link", "1gbit", env={"PATH": str(empty)})
    check_refused(proc, "--emulate-hosts", "needs `ip` (iproute2), `unshare` (util-linux), "
                                           "`taskset` (util-linux), `tc` (iproute2) on PATH")
    assert not (tmp_path / "r.db").exists()


def test_a_machine_that_refuses_the_network_is_one_line_and_undone(tmp_path):
    """Root in a user namespace of its own (`unshare --user --map-root-user`) may not make
    interfaces in this machine's network: the bring-up's first step is refused, said in one
    line with the command's own words, and the record written before it is removed. Its
    records go to a folder of its own: a dead run's, left on this machine, is not its concern."""
    skip_without_user_namespaces()
    state = tmp_path / "state"
    node = subprocess.Popen(["unshare", "--user", "--map-root-user", sys.executable, "-m",
                             "dlperf.cli", *TINY, "--emulate-hosts", "2",
                             "--db", str(tmp_path / "r.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **own_lock("refused-network"),
                                 "DLPERF_EMULATED_STATE": str(state)})
    out, err = node.communicate(timeout=120)
    check_refused(subprocess.CompletedProcess(node.args, node.returncode, out, err),
                  "--emulate-hosts", "failed: ")
    assert "Operation not permitted" in err
    assert not list(state.glob("*.json"))  # `unshare` execs: the record was dlperf's own
    assert not (tmp_path / "r.db").exists()


def skip_without_user_namespaces() -> None:
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--user", "--map-root-user", "true"], capture_output=True).returncode:
        pytest.skip("this machine allows no user namespace (`unshare --user` fails), in which "
                    "the refusal is made")


CLEAN = ("import sys; from dlperf.host import emulated; "
         "print(emulated.clean_stale(lambda line: print(line, file=sys.stderr)))")


def test_a_dead_runs_remains_that_cannot_be_removed_keep_their_record_until_one_can(tmp_path):
    """A start that may not remove a dead run's namespace (root of a user namespace) says so and
    keeps the record, rather than saying "removed" and orphaning it; root's next start removes
    it. The dead run is a record naming a real namespace and a pid that no longer runs."""
    skip_without_user_namespaces()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    token = os.urandom(3).hex()
    namespace, state = f"{emulated.PREFIX}{token}-h0", tmp_path / "state"
    state.mkdir()
    record = state / f"{emulated.PREFIX}{token}.json"
    record.write_text(json.dumps({"token": token, "pid": dead.pid, "pid_start": 0.0,
                                  "since": 0.0, "namespaces": [namespace], "links": []}))
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        env = {**os.environ, "DLPERF_EMULATED_STATE": str(state)}
        user = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                               CLEAN], capture_output=True, text=True, env=env, timeout=60)
        assert user.returncode == 0 and user.stdout.strip() == "0", user.stdout + user.stderr
        said = user.stderr.strip().splitlines()
        assert len(said) == 1 and said[0].startswith(
            f"emulated hosts: could not remove what a dead dlperf run (pid {dead.pid}, "), said
        assert f"(namespace {namespace})" in said[0] and said[0].endswith("rights to remove it")
        assert record.exists() and Path("/run/netns", namespace).exists()
        root = subprocess.run([sys.executable, "-c", CLEAN], capture_output=True, text=True,
                              env=env, timeout=60)
        assert root.stdout.strip() == "1", root.stdout + root.stderr
        assert root.stderr.strip().endswith("left: 1 namespaces, 0 interfaces, 0 processes")
        assert not record.exists() and not Path("/run/netns", namespace).exists()
    finally:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@pytest.mark.parametrize("text, bits, spelled", [
    ("10gbit", 10**10, "10gbit"), ("1gbit", 10**9, "1gbit"), ("1000mbit", 10**9, "1gbit"),
    ("100mbit", 10**8, "100mbit"), ("2.5gbit", 25 * 10**8, "2500mbit"),
    ("1500kbit", 15 * 10**5, "1500kbit"), ("1mbit", 10**6, "1mbit"), ("1MBit", 10**6, "1mbit"),
    ("none", None, ""), ("", None, ""),
])
def test_rates_parse_in_tcs_spelling_and_keep_one_spelling(text, bits, spelled):
    assert emulated.parse_rate(text) == bits
    assert emulated.normalize_rate(text) == spelled


def test_every_name_fits_an_interface_and_two_runs_never_share_one():
    for count in (2, 64, 999):
        names = emulated._names("abcdef", count)
        for name in [names["bridge"], *names["outside"], emulated.INTERFACE]:
            assert len(name) <= 15, name
    one, two = emulated._names("abcdef", 8), emulated._names("abcdee", 8)
    assert not set(one["outside"] + [one["bridge"]] + one["namespaces"]) & set(
        two["outside"] + [two["bridge"]] + two["namespaces"])
    assert all(name.startswith(emulated.PREFIX) for name in one["outside"] + one["namespaces"])


def test_each_run_gets_its_own_subnet_of_the_benchmarking_block(tmp_path, monkeypatch):
    """The addresses a run is given are RFC 2544's (198.18.0.0/15, never routed), a /24 no live
    run holds: the records the real allocation writes (nothing is brought up)."""
    monkeypatch.setenv("DLPERF_EMULATED_STATE", str(tmp_path))
    benchmarking = ipaddress.ip_network("198.18.0.0/15")
    with emulated._records_locked():
        subnets = [ipaddress.ip_network(emulated._new_record(2)["subnet"]) for _ in range(4)]
    assert all(s.subnet_of(benchmarking) and s.prefixlen == 24 for s in subnets), subnets
    assert len(set(subnets)) == 4, subnets


def test_the_link_is_part_of_the_case_only_when_set():
    plain = Case(framework="torch", model="resnet50", batch_size=2, nnodes=2)
    shaped = Case(framework="torch", model="resnet50", batch_size=2, nnodes=2, link="1000mbit")
    assert "link" not in plain.identity() and plain.link == ""
    assert shaped.link == "1gbit" and shaped.identity()["link"] == "1gbit"
    assert shaped.key() != plain.key() and "1gbit-link" in shaped.label()
    assert Case(framework="torch", model="resnet50", batch_size=2, nnodes=2,
                link="none").key() == plain.key()
    with pytest.raises(ValueError, match="link: a link rate shapes the network between nodes"):
        Case(framework="torch", model="resnet50", batch_size=2, link="1gbit")


def test_each_node_gets_the_command_line_the_user_gave():
    """The flags parsed back from what the emulation writes for the nodes are the user's, less
    the ones it sets on each node itself."""
    parser = cli.build_parser()
    argv = [*TINY, "--precision", "amp-bf16", "--no-compile", "--knob", "num_classes=10",
            "--option", "a=1", "--option", "b=2", "--min-duration", "0.25",
            "--require-quiet", "--timeout", "99.5", "--emulate-hosts", "2", "--link", "1gbit",
            "--db", "x.db", "--json", "x.json", "--rdzv-timeout", "60", "--label", "two words"]
    args = parser.parse_args(argv)
    written = emulated_launch.flags_of(args.run_parser, args, emulated_launch.NOT_PASSED)
    back = parser.parse_args(["run", *written])
    drop = emulated_launch.NOT_PASSED | {"handler", "run_parser"}
    assert {k: v for k, v in vars(back).items() if k not in drop} == {
        k: v for k, v in vars(args).items() if k not in drop}
    assert "--emulate-hosts" not in written and "--db" not in written
    assert written[written.index("--link") + 1] == "1gbit"
    assert isinstance(back, argparse.Namespace)
