"""Both ends of one repeat run as a Slurm job step (standard library only).

``python -m dlperf.launchers.slurm_step relay --out-dir DIR -- srun ... python -m dlperf.launchers.slurm_step task
PAYLOAD`` is what :class:`dlperf.launchers.slurm_launch.SlurmLauncher` starts for a repeat:

- ``task`` runs once per node of the step (``srun --ntasks-per-node 1``). It takes its node rank
  from Slurm (``SLURM_NODEID``, the node's index in the step), the master address from the step's
  first host (its ``NodeAddr``), makes a private work directory on its node, writes the case file
  there from the inline payload, and runs the command the framework's launcher built for that
  node rank (torchrun, ``dlperf.launchers.spawn``, ...), with the head's paths and the master placeholder
  replaced. When the command ends it prints every ``rank<N>.json`` its directory holds on its
  stdout as checksummed base64 frames, removes the directory and exits with the command's status
  (a failure after :data:`PEER_GRACE_S`, so that the other nodes' own results are not cut off).
- ``relay`` runs on the head, where the harness runs. srun brings every task's output there; the
  relay passes it through to the log and turns the frames back into ``DIR/rank<N>.json``. So
  node 0's gathered rank files, and a failed node's own file, reach the head's out dir whether or
  not the head is one of the step's nodes (``salloc`` on a login node) and whether or not the
  nodes share /tmp. The relay dies with the harness (``worker.lifeline``) and then stops srun,
  which ends the step on every node.

Frames are short lines (srun forwards output line by line and may split long ones), found
anywhere in a line, and a file is written only when every chunk arrived and its sha256 matches.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

MARK = "@@dlperf.launchers.slurm_step"
PREFIX = "dlperf.launchers.slurm_step:"
CHUNK = 400  # base64 characters per frame line
MASTER_PLACEHOLDER = "DLPERF-SLURM-MASTER"  # the launcher's master address, set per step


def node_placeholder(rank: int) -> str:
    """Stands for node ``rank``'s address (TF_CONFIG names every worker) until the step runs."""
    return f"DLPERF-SLURM-NODE-{rank}-ADDR"

RANK_FILE = re.compile(r"rank\d{1,7}\.json")
STOP_GRACE_S = 10.0
# a node whose command failed waits this long, its frames sent, before its status ends the
# step: srun (--kill-on-bad-exit) then stops every other node, and a peer that fails on its own
# (the same refusal, a second before or after) would lose the result it was writing
PEER_GRACE_S = 5.0


# ------------------------------------------------------------------------------------------------
# the payload: what the head computed for every node
# ------------------------------------------------------------------------------------------------

def encode(payload: dict[str, Any]) -> str:
    """JSON, compressed, base64: one argv word that survives srun and any shell."""
    return base64.urlsafe_b64encode(zlib.compress(json.dumps(payload).encode(), 9)).decode()


def decode(text: str) -> dict[str, Any]:
    return json.loads(zlib.decompress(base64.urlsafe_b64decode(text.encode())).decode())


def substitute(text: str, replacements: list[tuple[str, str]]) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return text


# ------------------------------------------------------------------------------------------------
# frames: rank files through srun's output
# ------------------------------------------------------------------------------------------------

def frames(node: int, name: str, data: bytes) -> list[str]:
    """The lines that carry one file: a header with the chunk count and sha256, then chunks."""
    text = base64.b64encode(data).decode()
    chunks = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
    digest = hashlib.sha256(data).hexdigest()
    lines = [f"{MARK} file {node} {name} {len(chunks)} {digest}"]
    lines += [f"{MARK} chunk {node} {name} {index} {chunk}" for index, chunk in enumerate(chunks)]
    return lines


class Assembler:
    """Collects frames by (node, file) and writes each completed, verified file once."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.files: dict[tuple[str, str], dict[str, Any]] = {}
        self.written: list[str] = []
        self.problems: list[str] = []

    def feed(self, frame: str) -> None:
        parts = frame.split()
        if len(parts) < 5 or not RANK_FILE.fullmatch(parts[3]):
            self.problems.append(f"unreadable frame: {frame[:120]!r}")
            return
        kind, node, name = parts[1], parts[2], parts[3]
        entry = self.files.setdefault((node, name), {"chunks": {}})
        if kind == "file" and len(parts) == 6 and parts[4].isdigit():
            entry.update(total=int(parts[4]), sha256=parts[5])
        elif kind == "chunk" and len(parts) in (5, 6) and parts[4].isdigit():
            entry["chunks"][int(parts[4])] = parts[5] if len(parts) == 6 else ""
        else:
            self.problems.append(f"unreadable frame: {frame[:120]!r}")
            return
        self._complete(node, name, entry)

    def _complete(self, node: str, name: str, entry: dict[str, Any]) -> None:
        total = entry.get("total")
        if total is None or len(entry["chunks"]) < total or entry.get("done"):
            return
        entry["done"] = True
        data = base64.b64decode("".join(entry["chunks"][i] for i in range(total)))
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            self.problems.append(f"{name} from node {node} was damaged in transit "
                                 f"(sha256 mismatch); it is not used")
            return
        path = os.path.join(self.out_dir, name)
        if os.path.exists(path):  # node 0's gathered copy and the rank's own: the same result
            return
        tmp = path + f".relay-{node}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        self.written.append(name)

    def unfinished(self) -> list[str]:
        return [f"{name} from node {node}" for (node, name), entry in self.files.items()
                if not entry.get("done")]


# ------------------------------------------------------------------------------------------------
# relay: on the head
# ------------------------------------------------------------------------------------------------

def _stop(proc: subprocess.Popen) -> None:
    """srun forwards SIGTERM to the step's tasks and ends the step; SIGKILL if it lingers."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        except OSError:
            pass


def relay(out_dir: str, command: list[str]) -> int:
    from dlperf.worker.lifeline import tie_to_harness

    if not command:
        sys.stderr.write(f"{PREFIX} error: relay needs a command after --\n")
        return 2
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    except OSError as error:
        sys.stderr.write(f"{PREFIX} error: cannot start {command[0]!r}: {error.strerror}\n")
        return 127
    # The runner stops us with SIGTERM to our whole process group, srun included: keep reading
    # srun's output until it has ended the step. Without the harness, stop srun ourselves.
    signal.signal(signal.SIGTERM, lambda *_: None)
    tie_to_harness(lambda: _stop(proc))
    assembler = Assembler(out_dir)
    out = sys.stdout.buffer
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", errors="replace")
        at = line.find(MARK)
        if at < 0:
            out.write(raw)
            out.flush()
            continue
        if line[:at].strip():
            out.write(line[:at].encode() + b"\n")
        assembler.feed(line[at:].strip())
    code = proc.wait()
    for problem in assembler.problems + [f"{item} arrived incomplete"
                                         for item in assembler.unfinished()]:
        sys.stderr.write(f"{PREFIX} error: {problem}\n")
    sys.stderr.write(f"{PREFIX} srun exited with {code}; relayed "
                     f"{', '.join(sorted(assembler.written)) or 'no rank file'}\n")
    sys.stderr.flush()
    if code < 0:  # die of srun's signal, so the runner sees what happened
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


# ------------------------------------------------------------------------------------------------
# task: on every node of the step
# ------------------------------------------------------------------------------------------------

def step_place(environ: dict[str, str]) -> tuple[int, int, list[str]]:
    """(node rank, node count, every node's address in rank order) of this task in its step;
    the first address is the master's."""
    from dlperf.launchers import slurm

    node = environ.get("SLURM_NODEID") or environ.get("SLURM_PROCID")
    nnodes = environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_NNODES")
    hosts = slurm.node_hosts(environ)
    if node is None or not node.isdigit() or nnodes is None or not nnodes.isdigit() \
            or not hosts:
        raise RuntimeError("not inside a Slurm step (SLURM_NODEID, SLURM_STEP_NUM_NODES and "
                           "SLURM_STEP_NODELIST are needed); the harness starts this with srun")
    return int(node), int(nnodes), [slurm.node_address(host) for host in hosts]


def emit(node: int, work: str) -> None:
    """Every rank file of this node's directory, as frames on stdout."""
    out = sys.stdout
    for name in sorted(os.listdir(work)):
        if RANK_FILE.fullmatch(name):
            with open(os.path.join(work, name), "rb") as handle:
                data = handle.read()
            for line in frames(node, name, data):
                out.write(line + "\n")
            out.flush()


def task(encoded: str) -> int:
    payload = decode(encoded)
    try:
        node, nnodes, addresses = step_place(dict(os.environ))
        master = addresses[0]
    except RuntimeError as error:
        sys.stderr.write(f"{PREFIX} error: {error}\n")
        return 2
    if nnodes != len(payload["nodes"]):
        sys.stderr.write(f"{PREFIX} error: the step has {nnodes} node(s) but the case needs "
                         f"{len(payload['nodes'])}\n")
        return 2
    spec = payload["nodes"][node]
    work = tempfile.mkdtemp(prefix="dlperf-slurm-")
    try:
        case_file = os.path.join(work, "case.json")
        with open(case_file, "w") as handle:
            handle.write(payload["case"])
        replacements = [(payload["case_file"], case_file), (payload["out_dir"], work),
                        (MASTER_PLACEHOLDER, master)]
        replacements += [(node_placeholder(rank), address)
                         for rank, address in enumerate(addresses)]
        argv = [substitute(word, replacements) for word in spec["argv"]]
        env = dict(os.environ)
        env.update({k: substitute(v, replacements) for k, v in spec["env"].items()})
        # the workers tie their lives to this task (the harness's pid means nothing here)
        env["DLPERF_HARNESS_PID"] = str(os.getpid())
        sys.stderr.write(f"{PREFIX} node {node} of {nnodes} on {socket.gethostname()} "
                         f"(Slurm node {os.environ.get('SLURMD_NODENAME', '?')}), master "
                         f"{master}\n")
        sys.stderr.flush()
        try:
            child = subprocess.Popen(argv, env=env)
        except OSError as error:
            sys.stderr.write(f"{PREFIX} error: node {node}: cannot start {argv[0]!r}: "
                             f"{error.strerror}\n")
            return 127

        def forward(signum: int, _frame: Any) -> None:
            if child.poll() is None:
                child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, forward)
        code = child.wait()
        emit(node, work)
        if code != 0 and nnodes > 1:
            time.sleep(PEER_GRACE_S)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlperf.launchers.slurm_step")
    sub = parser.add_subparsers(dest="role", required=True)
    relay_parser = sub.add_parser("relay", help="on the head: run srun, rebuild rank files")
    relay_parser.add_argument("--out-dir", required=True)
    relay_parser.add_argument("command", nargs=argparse.REMAINDER)
    task_parser = sub.add_parser("task", help="on each node of the step")
    task_parser.add_argument("payload")
    args = parser.parse_args(argv)
    if args.role == "relay":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return relay(args.out_dir, command)
    return task(args.payload)


if __name__ == "__main__":
    sys.exit(main())
