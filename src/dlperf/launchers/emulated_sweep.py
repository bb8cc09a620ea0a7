"""A sweep across emulated hosts: ``dlperf sweep FILE --emulate-hosts``.

The sweep brings up as many emulated hosts (:mod:`dlperf.host.emulated`) as its largest case has
nodes, once, and runs on this machine as it runs at the head of a Slurm allocation
(:mod:`dlperf.launchers.slurm_launch`): each repeat of a multi-node case is one step over the
case's first ``nnodes`` hosts. :class:`EmulatedLauncher` asks the case's own launcher
(:func:`dlperf.launchers.registry.launcher_for`) for the command of every node rank, with the
rendezvous a cluster gives (node 0's address, the hosts' interface, every host's address, a
folder all see), wraps each to run on its host, and :mod:`dlperf.launchers.emulated_step`
starts and supervises them. Before each repeat the hosts' links are shaped to the case's
``link`` (or unshaped); the bytes each host's interface sent and received during the repeat are
kept in the repeat's launch facts. Single-node cases run on this machine as in any sweep.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlperf.errors import UsageError
from dlperf.host import emulated
from dlperf.launchers import emulated as emulated_launch
from dlperf.launchers import emulated_step, launch, registry
from dlperf.launchers.slurm_step import encode
from dlperf.spec import Case


def host_count(cases: list[Case]) -> int:
    """The hosts a sweep needs: its largest case's nodes (UsageError when no case has two)."""
    most = max((case.nnodes for case in cases), default=1)
    if most < 2:
        raise UsageError("--emulate-hosts: no case of this sweep has nnodes of 2 or more; "
                         "a sweep of single-node cases needs no emulated hosts")
    return most


def rendezvous(hosts: emulated.Hosts, nnodes: int, node_rank: int, rdzv_dir: str,
               timeout_s: float = launch.DEFAULT_RDZV_TIMEOUT_S) -> launch.Rendezvous:
    """Node ``node_rank``'s rendezvous on the first ``nnodes`` hosts, as a cluster's nodes get
    it from their flags: node 0's address, the interface, every node's address, a shared
    folder."""
    used = hosts.hosts[:nnodes]
    return launch.Rendezvous(node_rank=node_rank, master_addr=used[0].address,
                             master_port=launch.DEFAULT_PORT, timeout_s=timeout_s,
                             socket_ifname=used[node_rank].interface,
                             node_addrs=tuple(h.address for h in used), store_dir=rdzv_dir)


class EmulatedLauncher(launch.MultiLauncher):
    """Runs each repeat of a multi-node ``case`` as one step over its emulated hosts."""

    name = "emulated hosts"

    def __init__(self, case: Case, hosts: emulated.Hosts, rdzv_dir: str,
                 python: str | None = None) -> None:
        super().__init__(launch.Rendezvous(), python)
        if case.nnodes > len(hosts.hosts):
            raise UsageError(f"nnodes: {case.nnodes} is more than the {len(hosts.hosts)} "
                             f"emulated hosts")
        self.hosts = hosts
        self.used = hosts.hosts[:case.nnodes]
        unshaped = dataclasses.replace(case, link="")  # shaped here, not by a node's launcher
        self.nodes = [registry.launcher_for(unshaped, rendezvous(hosts, case.nnodes, rank,
                                                                 rdzv_dir), python)
                      for rank in range(case.nnodes)]

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> launch.Launch:
        link_bits = emulated.parse_rate(case.link, "link") if case.link else None
        for host in self.used:
            emulated.shape(host, link_bits)
        folders = [out_dir] + [out_dir / f"node{rank}" for rank in range(1, case.nnodes)]
        for folder in folders[1:]:
            folder.mkdir(exist_ok=True)
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            launches = list(pool.map(lambda pair: pair[0](case, case_file, pair[1]),
                                     zip(self.nodes, folders)))
        payload = {"nodes": [
            {"name": host.hostname, "argv": self.hosts.command(host, item.argv),
             "env": {**item.env, emulated.NODE_VARIABLE: self.hosts.token}}
            for host, item in zip(self.used, launches)]}
        head = launches[0]
        block = self.hosts.describe()
        block.update(count=case.nnodes, link=case.link or None, link_bits_per_s=link_bits,
                     hosts=[host.describe() for host in self.used])
        facts = {**head.facts, "emulated_hosts": block}
        before = self.counters()
        return launch.Launch(
            [sys.executable, "-m", "dlperf.launchers.emulated_step", encode(payload)],
            env={}, ranks=head.ranks, explain=lambda log: explain(log, head.explain),
            facts=facts, peer_symptoms=head.peer_symptoms,
            observed=lambda: {"emulated_hosts": self.traffic(block, before)})

    def counters(self) -> list[dict[str, int]]:
        return self.hosts.counters()[:len(self.used)]

    def traffic(self, block: dict[str, Any], before: list[dict[str, int]]) -> dict[str, Any]:
        """``block`` with the bytes each host's interface (and its loopback) sent and received
        during the repeat."""
        out = dict(block, bytes_over="this repeat: from the nodes' start to their end")
        out["hosts"] = [dict(entry, **{name: end[name] - start[name] for name in end})
                        for entry, start, end in zip(block["hosts"], before, self.counters())]
        return out


def explain(log: str, inner: Any) -> tuple[str, str] | None:
    """The framework launcher's reading of the log first, then which node failed."""
    found = inner(log) if inner is not None else None
    return found if found is not None else emulated_step.explain(log)


@contextmanager
def launchers(cases: list[Case], say: Any) -> Iterator[Any]:
    """The hosts for ``cases``, up for the block, and a launcher per case: a step over the
    hosts for a multi-node case, this machine's own launcher for the others."""
    count = host_count(cases)
    emulated_launch.check_launchers([case for case in cases if case.nnodes > 1])
    with tempfile.TemporaryDirectory(prefix="dlperf-emulated-") as rdzv, \
            emulated.emulated(count, None, say=say) as hosts:
        say(emulated_launch.describe(hosts) + "; each multi-node case's repeats run across "
            "them, the links shaped to the case's link")

        def pick(case: Case) -> Any:
            if case.nnodes > 1:
                return EmulatedLauncher(case, hosts, rdzv)
            return registry.launcher_for(case)

        yield pick
