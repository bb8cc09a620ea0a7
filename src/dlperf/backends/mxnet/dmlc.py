"""``python -m dlperf.backends.mxnet.dmlc --python PY [--scheduler] [--servers K] -- COMMAND``:
one node's processes of an MXNet parameter-server job, as MXNet's ``tools/launch.py --launcher
local`` starts them (that script lives in MXNet's source tree, not in its wheel).

ps-lite's roles come from ``DMLC_ROLE``: the scheduler (node 0 only, at
``DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT``) and the servers are ``PY -c "import mxnet"`` (MXNet runs
the server loop at import when the role is not ``worker``, and exits after the workers leave);
COMMAND (dlperf.launchers.spawn, which starts this node's workers) gets ``DMLC_ROLE=worker``. The other
``DMLC_*`` variables (root address and port, numbers of servers and workers) come from the
environment. When COMMAND ends the scheduler and servers get a moment to leave by themselves and
are then stopped; when one of them fails first, COMMAND is stopped (its workers would wait for it
forever). Each role's end is one line (``dlperf.mxnet.dmlc: ...``). The exit status is COMMAND's,
or 1 when a scheduler or server failed first.

Standard library only, valid Python 3.7.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

PREFIX = "dlperf.mxnet.dmlc:"
POLL_S = 0.1
LEAVE_S = 10.0  # after the workers: the scheduler and servers leave once every worker finalized
STOP_S = 5.0


def start(argv, role):
    # type: (List[str], str) -> subprocess.Popen
    env = dict(os.environ)
    env["DMLC_ROLE"] = role
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def stop(procs):
    # type: (List[subprocess.Popen]) -> None
    """SIGTERM, then SIGKILL after STOP_S, for every process still running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(sig)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_S
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(POLL_S)


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    parser = argparse.ArgumentParser(prog="python -m dlperf.backends.mxnet.dmlc")
    parser.add_argument("--python", required=True, help="the mxnet environment's interpreter")
    parser.add_argument("--scheduler", action="store_true", help="this node runs the scheduler")
    parser.add_argument("--servers", type=int, default=1, help="servers on this node")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the workers' command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command after -- is needed")
    root = os.environ.get("DMLC_PS_ROOT_URI")
    if root:  # ps-lite binds and connects by address; a host name (Slurm's) is resolved here
        try:
            os.environ["DMLC_PS_ROOT_URI"] = socket.gethostbyname(root)
        except OSError:
            pass
    infrastructure = {}  # type: Dict[str, subprocess.Popen]
    serve = [args.python, "-c", "import mxnet"]
    if args.scheduler:
        infrastructure["scheduler"] = start(serve, "scheduler")
    for index in range(args.servers):
        infrastructure["server %d" % index] = start(serve, "server")
    workers = start(command, "worker")
    everything = list(infrastructure.values()) + [workers]

    def forward(signum, _frame):
        # type: (int, object) -> None
        stop(everything)
        sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while workers.poll() is None:
        for name, proc in infrastructure.items():
            code = proc.poll()
            if code is not None and code != 0:
                print("{} the {} exited with code {} before the workers; stopping them".format(
                    PREFIX, name, code), flush=True)
                stop(everything)
                return 1
        time.sleep(POLL_S)
    # workers that failed (a rank's error, the rendezvous alarm) never finalized with the
    # scheduler and servers, which would wait for them forever: no grace then
    deadline = time.monotonic() + (LEAVE_S if workers.returncode == 0 else 0.0)
    while any(p.poll() is None for p in infrastructure.values()) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    left = [name for name, p in infrastructure.items() if p.poll() is None]
    if left:
        print("{} stopping {} (still running after the workers)".format(PREFIX, ", ".join(left)),
              flush=True)
        stop(list(infrastructure.values()))
    code = workers.returncode
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
