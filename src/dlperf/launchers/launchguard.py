"""``python -m dlperf.launchers.launchguard [--rdzv-timeout S --joined GLOB [--nnodes N --members-url URL]]
-- COMMAND``: run a framework's own launcher with the two things dlperf needs from every launcher
and some lack (harness side).

- **A rendezvous deadline.** Paddle's HTTP master (``paddle.distributed.launch --master``) waits
  for missing nodes forever. The guard waits ``S`` seconds for a
  file matching ``GLOB``, which the launcher only creates once every node has joined (Paddle's
  ``workerlog.0``); without one it prints one line (``dlperf.launchers.launchguard: rendezvous timed out
  after S s``, with ``K of N nodes joined`` when ``--members-url`` lists them; read back by
  :func:`timed_out`), stops everything and exits 124.
- **Nothing left running.** Some launchers start their ranks in sessions of their own (Paddle's
  ``os.setsid``), out of the process group the runner stops. The guard makes itself a child
  subreaper (``PR_SET_CHILD_SUBREAPER``), so any rank orphaned by its launcher is re-parented to
  the guard instead of init, and when the launcher ends (or the guard is told to stop) it stops
  every process still below it: SIGTERM, then SIGKILL.

- **Addresses where names will not do.** ``--resolve NAME`` replaces NAME in the command's words
  (as a whole host name: ``NAME``, ``NAME:PORT``, ``http://NAME:PORT/...``) by the IPv4 address
  it resolves to on the node that runs the command: Paddle's launcher compares its master's
  address with its own, and under Slurm the master is only known, often as a host name, on the
  nodes themselves.

The exit status is the launcher's (128 + N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil

PREFIX = "dlperf.launchers.launchguard:"
POLL_S = 0.2
TERM_GRACE_S = 3.0
TIMED_OUT = 124
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants come to this process (Linux 3.4+); False where that is refused."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def stop_descendants(grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM every process below this one, then SIGKILL what is left after ``grace_s``."""
    me = psutil.Process()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            below = me.children(recursive=True)
        except psutil.Error:
            return
        if not below:
            return
        for proc in below:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(below, timeout=grace_s)


def resolve(words: list[str], name: str) -> list[str]:
    """``words`` with the host name ``name`` replaced by its IPv4 address (unchanged when it
    does not resolve here: the launcher then says what it makes of the name)."""
    try:
        address = socket.gethostbyname(name)
    except OSError:
        return words
    host = re.compile(r"(?<![A-Za-z0-9_.-])" + re.escape(name) + r"(?![A-Za-z0-9_.-])")
    return [host.sub(address, word) for word in words]


def count_members(url: str) -> int | None:
    """How many nodes an HTTP key-value master lists under ``url`` (a JSON object, one key per
    node that joined; 404 = none), or None when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return len(json.loads(reply.read().decode("utf-8")))
    except urllib.error.HTTPError as error:
        return 0 if error.code == 404 else None
    except (OSError, ValueError):
        return None


def timeout_line(args: argparse.Namespace) -> str:
    line = f"{PREFIX} rendezvous timed out after {args.rdzv_timeout:g} s"
    if args.members_url:
        joined = count_members(args.members_url)
        if joined is not None:
            line += f": {joined} of {args.nnodes} nodes joined"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlperf.launchers.launchguard")
    parser.add_argument("--rdzv-timeout", type=float, default=None,
                        help="seconds to wait for --joined; none: no deadline")
    parser.add_argument("--joined", action="append", default=[],
                        help="a glob that matches once every node has joined (repeatable)")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--members-url", default=None,
                        help="HTTP URL listing the joined nodes as JSON keys")
    parser.add_argument("--resolve", action="append", default=[],
                        help="a host name to replace by its address in the command (repeatable)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the launcher command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command after -- is needed")
    for name in args.resolve:
        command = resolve(command, name)
        if args.members_url:
            args.members_url = resolve([args.members_url], name)[0]
    become_subreaper()
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = (time.monotonic() + args.rdzv_timeout
                if args.rdzv_timeout is not None and args.joined else None)
    code: int | None = None
    while code is None:
        code = child.poll()
        if code is not None:
            break
        if stopping:
            stop_descendants()
            return 128 + stopping[0]
        if deadline is not None:
            if any(glob.glob(pattern) for pattern in args.joined):
                deadline = None
            elif time.monotonic() > deadline:
                print(timeout_line(args), flush=True)
                stop_descendants()
                return TIMED_OUT
        time.sleep(POLL_S)
    stop_descendants()  # ranks the launcher left behind or orphaned
    return 128 - code if code < 0 else code


_TIMED_OUT = re.compile(re.escape(PREFIX) + r" rendezvous timed out after (\S+) s(?:: (\d+) of "
                        r"(\d+) nodes joined)?")


def timed_out(log: str) -> tuple[int | None, int | None] | None:
    """None when the guard's deadline did not pass in this log; else (nodes joined, nodes),
    each None where the guard could not count them."""
    found = _TIMED_OUT.search(log)
    if found is None:
        return None
    if found.group(2) is None:
        return None, None
    return int(found.group(2)), int(found.group(3))


if __name__ == "__main__":
    sys.exit(main())
