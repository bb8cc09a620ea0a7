"""Multi-process and multi-node Caffe2 cases (harness side): Caffe2 ships no launcher (its ImageNet
trainer is started once per shard by hand or by MPI), and its shards meet through a store handler,
so :mod:`dlperf.launchers.spawn` starts each node's ranks and the backend
(:mod:`dlperf.backends.caffe2.distribute`) turns their ``DLPERF_*`` variables into
``data_parallel_model.Parallelize``'s Gloo rendezvous through ``FileStoreHandlerCreate`` in the
directory ``DLPERF_CAFFE2_STORE``.

One node: a directory inside the repeat's own output directory (under Slurm, the step's private
directory on the node). Several nodes: the file store must be one directory that every node
sees (the wheel's Redis store handler is not built), so ``--rdzv-dir`` names a shared directory
(NFS, a cluster file system) and each repeat meets in a fresh subdirectory of it, which rank 0
removes when the job's results are gathered.
"""

from __future__ import annotations

import re
from pathlib import Path

from dlperf.backends.caffe2 import STORE_VARIABLE
from dlperf.errors import UsageError
from dlperf.launchers import spawn
from dlperf.launchers.launch import (START_OTHERS, Launch, Rendezvous, SpawnLauncher,
                                     rendezvous_timeout)
from dlperf.spec import Case

# Gloo's own line when a shard waited for the others' keys in the store past its timeout
_NOT_JOINED = re.compile(r"Wait timeout for key|Timed out waiting \d+ms for|"
                         r"Timed out after \d+ seconds waiting for")


class Caffe2Gloo(SpawnLauncher):
    """The launcher for caffe2 cases with devices x nnodes > 1."""

    name = "dlperf.launchers.spawn (caffe2 data_parallel_model, Gloo)"

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        store = self.store(case, out_dir)
        spec = super().__call__(case, case_file, out_dir)
        spec.env[STORE_VARIABLE] = str(store)
        spec.facts.update(rendezvous="Caffe2 FileStoreHandler (Gloo)", store_dir=str(store))
        rdzv = self.rendezvous
        spec.explain = lambda log: explain(log, case, rdzv, store)
        return spec

    def check(self, case: Case) -> None:
        if case.nnodes > 1 and not self.rendezvous.store_dir:
            raise UsageError("--rdzv-dir: caffe2 across nodes meets through Caffe2's file store, "
                             "which needs a directory every node shares (NFS or a cluster file "
                             "system; the wheel has no Redis store handler); under a Slurm sweep "
                             "run caffe2 on one node, or `dlperf run --rdzv-dir DIR` on each node")

    def store(self, case: Case, out_dir: Path) -> Path:
        """Where this repeat's shards meet: the repeat's own directory on one node; across nodes
        a fresh subdirectory of the shared ``--rdzv-dir`` (the same name on every node: the
        case, the repeat's number and the master port, which every node knows alike)."""
        if case.nnodes == 1:
            return out_dir / "caffe2-store"
        self.check(case)
        shared = str(self.rendezvous.store_dir)
        port = self.rendezvous.master_port
        return Path(shared) / f"dlperf-caffe2-{case.key()}-r{self.launches}-p{port}"


def explain(log: str, case: Case, rdzv: Rendezvous, store: Path) -> tuple[str, str] | None:
    """(status, message) for shards that never all met in the store, else what
    dlperf.launchers.spawn saw, else None."""
    if _NOT_JOINED.search(log):
        where = (f"the shared directory {store}" if case.nnodes > 1
                 else f"the store directory {store}")
        return rendezvous_timeout(rdzv, f"not every Caffe2 shard registered in {where}; "
                                        f"{START_OTHERS}")
    return spawn.explain(log)
