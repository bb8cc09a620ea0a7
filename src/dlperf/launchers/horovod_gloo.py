"""``python -m dlperf.launchers.horovod_gloo --nproc P --nnodes N --node-rank R --master-addr A
--master-port PORT [--iface IF] [--timeout S] -- WORKER ...``: this node's ranks of a Horovod job
across nodes over Gloo, without ssh (harness side, run by the ``<fw>+horovod`` environment's
Python, which has Horovod; valid Python 3.7).

What ``horovodrun --gloo`` does for its hosts, done on each node by the command the node runs
itself (``dlperf run --node-rank R`` on every node, or one Slurm job step): node 0 serves
Horovod's own rendezvous (``horovod.runner.http.http_server.RendezvousHTTPServer``, initialised
with the job's slot plan from ``horovod.runner.common.util.hosts.get_host_assignments``) on
``A:PORT``; every node starts its ``P`` ranks with the variables horovodrun gives each slot
(``HOROVOD_RANK`` / ``SIZE`` / ``LOCAL_RANK`` / ``LOCAL_SIZE`` / ``CROSS_RANK`` / ``CROSS_SIZE`` /
``HOSTNAME``, ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``PORT``, ``HOROVOD_CONTROLLER=gloo``), so the
ranks meet in ``hvd.init()`` exactly as under horovodrun. Ranks are numbered node by node, as
dlperf numbers them everywhere. The ranks are supervised as :mod:`dlperf.launchers.spawn` does
(one fails: the others are stopped; each rank's end is one line :func:`spawn.explain` reads).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from dlperf.launchers import spawn

PREFIX = "dlperf.launchers.horovod_gloo:"
NEVER_ANSWERED = 75  # EX_TEMPFAIL: the job never formed


def plan(nproc, nnodes):
    # type: (int, int) -> List[Any]
    """Horovod's slot plan for ``nnodes`` hosts of ``nproc`` slots, named node0, node1, ..."""
    from horovod.runner.common.util import hosts

    return hosts.get_host_assignments(
        [hosts.HostInfo("node%d" % node, nproc) for node in range(nnodes)], nproc * nnodes)


def serve(port, slots):
    # type: (int, List[Any]) -> Any
    """Horovod's rendezvous server on every interface's ``port``, in a thread of this process."""
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
    server.init(slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_for(addr, port, timeout_s):
    # type: (str, int, float) -> bool
    """Whether node 0's rendezvous server accepts a connection within ``timeout_s``: Horovod's
    own HTTP store gives up after a few quick retries, so a node started before node 0 waits
    here first, as long as --rdzv-timeout allows."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((addr, port), timeout=2).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


def slot_env(slot, addr, port, iface, timeout):
    # type: (Any, str, int, Optional[str], Optional[str]) -> Dict[str, str]
    """The variables horovodrun --gloo gives the rank of ``slot``."""
    env = {"HOROVOD_HOSTNAME": str(slot.hostname), "HOROVOD_RANK": str(slot.rank),
           "HOROVOD_SIZE": str(slot.size), "HOROVOD_LOCAL_RANK": str(slot.local_rank),
           "HOROVOD_LOCAL_SIZE": str(slot.local_size), "HOROVOD_CROSS_RANK": str(slot.cross_rank),
           "HOROVOD_CROSS_SIZE": str(slot.cross_size), "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
           "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port), "HOROVOD_CONTROLLER": "gloo",
           "HOROVOD_CPU_OPERATIONS": "gloo"}
    if iface:
        env["HOROVOD_GLOO_IFACE"] = iface
    if timeout:
        env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = timeout
    return env


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    parser = argparse.ArgumentParser(prog="python -m dlperf.launchers.horovod_gloo")
    parser.add_argument("--nproc", type=int, required=True, help="ranks on this node")
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("--node-rank", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--iface", default=None, help="Gloo's network interface")
    parser.add_argument("--timeout", default=None, help="Gloo's timeout in seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.nproc < 1 or not 0 <= args.node_rank < args.nnodes:
        parser.error("need --nproc >= 1, 0 <= --node-rank < --nnodes and a command after --")
    slots = plan(args.nproc, args.nnodes)
    mine = [slot for slot in slots if slot.hostname == "node%d" % args.node_rank]
    server = serve(args.master_port, slots) if args.node_rank == 0 else None
    waited = float(args.timeout or 300)
    if server is None and not wait_for(args.master_addr, args.master_port, waited):
        print("%s node 0's rendezvous at %s:%d never answered within %g s"
              % (PREFIX, args.master_addr, args.master_port, waited), flush=True)
        return NEVER_ANSWERED
    procs = []  # type: List[subprocess.Popen]

    def forward(signum, _frame):
        # type: (int, object) -> None
        spawn.stop(procs, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    for slot in mine:
        env = dict(os.environ)
        env.update(slot_env(slot, args.master_addr, args.master_port, args.iface, args.timeout))
        procs.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    try:
        return spawn.supervise(procs, mine[0].rank)
    finally:
        if server is not None:
            server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
