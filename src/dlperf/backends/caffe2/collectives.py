"""Caffe2's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``gloo``: the Gloo operators ``data_parallel_model.Parallelize`` adds to a training net
(``Allreduce`` of every gradient; ``Broadcast`` of the initial parameters) and ``Allgather``, on
a common world made as Parallelize makes its own: ``CreateCommonWorld`` over the file store
handler in the directory :mod:`dlperf.launchers.caffe2` gives every rank
(:func:`.distribute.rendezvous`), TCP, the training path's timeout. Each operation is a net of
its own, created once and run per call, as the training net's operators run.

Light to import: the harness reads :data:`PATHS`; Caffe2 is imported by :func:`join`. Valid
Python 3.7.
"""

import os
import shutil
from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("gloo", "cpu", "native", ("allreduce", "allgather", "broadcast"),
                   "Caffe2's Gloo operators (Allreduce, Allgather, Broadcast) on a common "
                   "world over its file store handler, the operators "
                   "data_parallel_model.Parallelize trains with; started by dlperf's spawn"),
)

#: the common world this path makes; the worker's own Collectives clone it, as they clone
#: Parallelize's in training
CREATED_BLOB = "dlperf_collectives_world"


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return GlooWorld()


class GlooWorld(object):
    """A Gloo common world of every rank, made from the launcher's variables; its nets run
    through the training path's :class:`.distribute.Collectives` (created once, run per call)."""

    def __init__(self):
        # type: () -> None
        from caffe2.python import core, workspace

        from dlperf.backends.caffe2 import distribute

        settings = distribute.rendezvous()
        if settings is None:
            raise RuntimeError("Caffe2's collectives need 2 or more ranks")
        extra = {"interface": settings["interface"]} if "interface" in settings else {}
        workspace.RunOperatorOnce(core.CreateOperator(
            "CreateCommonWorld", [settings["kv_handler"]], [CREATED_BLOB],
            size=distribute.world_size(), rank=distribute.rank(), engine="GLOO",
            transport=settings["transport"], timeout_ms=distribute.timeout_s() * 1000, **extra))
        self._job = distribute.Collectives(CREATED_BLOB, 0)
        self.rank, self.size = self._job.rank, self._job.world
        self._workspace = workspace

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        import numpy as np

        from dlperf.backends.caffe2.distribute import WORLD_BLOB

        name = "%s_%d" % (op, elements)
        whole, shard = name + "_whole", name + "_shard"
        self._workspace.FeedBlob(whole, np.ones(elements, dtype=np.float32))
        self._workspace.FeedBlob(shard, np.ones(elements // self.size, dtype=np.float32))
        job = self._job
        if op == "allreduce":  # the training path's own in-place sum of a gradient blob
            return lambda: job.allreduce(whole)  # a CPU operator has finished when it returns
        builds = {
            "allgather": lambda net: net.Allgather([WORLD_BLOB, shard], name + "_gathered",
                                                   engine="GLOO"),
            "broadcast": lambda net: net.Broadcast([WORLD_BLOB, whole], whole, root=0,
                                                   engine="GLOO"),
        }
        build = builds[op]
        return lambda: job.run(name, build)

    def barrier(self):
        # type: () -> None
        self._job.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy as np

        # float32: Caffe2's Gloo Allreduce sums float and float16 only
        values = np.ascontiguousarray(rows, dtype=np.float32)
        name = "sum_%s" % "x".join(str(n) for n in values.shape)
        self._workspace.FeedBlob(name, values)
        self._job.allreduce(name)
        return self._workspace.FetchBlob(name).astype(np.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        import torch

        return {"framework_version": torch.__version__, "backend": "gloo"}

    def close(self):
        # type: () -> None
        from dlperf.backends.caffe2 import STORE_VARIABLE

        self.barrier()  # every rank is past its last operation: none reads the store again
        if self.rank == 0:
            shutil.rmtree(os.environ.get(STORE_VARIABLE, ""), ignore_errors=True)
