"""``python -m dlperf.launchers.emulated_step PAYLOAD``: one repeat of a multi-node case across
emulated hosts, started by :class:`dlperf.launchers.emulated_sweep.EmulatedLauncher` (harness
side, dlperf's own Python).

The payload (:func:`dlperf.launchers.slurm_step.encode`) names, per node, the command its
framework's launcher gives for that node rank, already wrapped to run on its host (its network
and UTS namespaces, its CPUs: :meth:`dlperf.host.emulated.Hosts.command`), and the variables it
adds. This starts every node at once, as a Slurm step's tasks start, and supervises them as a
step does with ``--kill-on-bad-exit``: when one node fails the others get
:data:`GRACE_S` to end by themselves (the frameworks notice a lost peer within seconds and write
their own error), then SIGTERM, then SIGKILL. Each node's end is one line
(``dlperf.launchers.emulated_step: node 1 (dlperf-h1) exited with code 1``), which
:func:`explain` reads when no rank wrote its own failure. The exit status is the first failed
node's; node 0's rank files are in the repeat's output directory, where the runner reads them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from typing import Any

from dlperf.launchers import spawn
from dlperf.launchers.slurm_step import decode

PREFIX = "dlperf.launchers.emulated_step:"
GRACE_S = 20.0  # after a node failed: the others' time to notice and say why themselves
_ENDED = re.compile(r"^" + re.escape(PREFIX) + r" node (\d+) \(([^)]*)\) (.*)$", re.M)


def run(payload: dict[str, Any]) -> int:
    nodes = payload["nodes"]
    names = [str(node["name"]) for node in nodes]
    procs: list[subprocess.Popen] = []

    def forward(signum: int, _frame: Any) -> None:
        spawn.stop(procs, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    for node in nodes:
        env = dict(os.environ)
        env.update(node["env"])
        try:
            procs.append(subprocess.Popen(node["argv"], env=env, stdin=subprocess.DEVNULL))
        except OSError as error:
            print(f"{PREFIX} error: {node['name']}: cannot start {node['argv'][0]!r}: "
                  f"{error.strerror}", flush=True)
            spawn.stop(procs, signal.SIGKILL)
            return 127
    return spawn.supervise(procs, labels=[f"node {k} ({name})" for k, name in enumerate(names)],
                           grace_s=GRACE_S, prefix=PREFIX)


def explain(log: str) -> tuple[str, str] | None:
    """The first node that failed, as this supervisor saw it end; None when every node ended
    well (the ranks' own files then say what happened)."""
    for node, name, how in _ENDED.findall(log):
        if how != "exited with code 0":
            return "crash", f"node {node} ({name}) {how}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"{PREFIX} error: needs one argument, the payload", file=sys.stderr)
        return 2
    return run(decode(args[0]))


if __name__ == "__main__":
    sys.exit(main())
