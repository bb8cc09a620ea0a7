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

WORLD_BLOB = "dlperf_collectives_world"


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return GlooWorld()


class GlooWorld(object):
    """A Gloo common world of every rank, made from the launcher's variables."""

    def __init__(self):
        # type: () -> None
        from caffe2.python import core, workspace

        from dlperf.backends.caffe2 import distribute

        settings = distribute.rendezvous()
        if settings is None:
            raise RuntimeError("Caffe2's collectives need 2 or more ranks")
        self.rank, self.size = distribute.rank(), distribute.world_size()
        self._core, self._workspace = core, workspace
        extra = {"interface": settings["interface"]} if "interface" in settings else {}
        workspace.RunOperatorOnce(core.CreateOperator(
            "CreateCommonWorld", [settings["kv_handler"]], [WORLD_BLOB],
            size=self.size, rank=self.rank, engine="GLOO", transport=settings["transport"],
            timeout_ms=distribute.timeout_s() * 1000, **extra))
        self._nets = {}  # type: Dict[str, str]

    def _net(self, name, build):
        # type: (str, Callable[[Any], None]) -> Callable[[], None]
        """A net of ``build``'s operators, created once; a function that runs it."""
        if name not in self._nets:
            net = self._core.Net("dlperf_collectives_" + name)
            build(net)
            self._workspace.CreateNet(net)
            self._nets[name] = net.Proto().name
        created = self._nets[name]
        run = self._workspace.RunNet
        return lambda: run(created)

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        import numpy as np

        name = "%s_%d" % (op, elements)
        whole, shard = name + "_whole", name + "_shard"
        self._workspace.FeedBlob(whole, np.ones(elements, dtype=np.float32))
        self._workspace.FeedBlob(shard, np.ones(elements // self.size, dtype=np.float32))
        builds = {
            "allreduce": lambda net: net.Allreduce([WORLD_BLOB, whole], whole, engine="GLOO"),
            "allgather": lambda net: net.Allgather([WORLD_BLOB, shard], name + "_gathered",
                                                   engine="GLOO"),
            "broadcast": lambda net: net.Broadcast([WORLD_BLOB, whole], whole, root=0,
                                                   engine="GLOO"),
        }
        return self._net(name, builds[op])  # a CPU operator has finished when its net returns

    def barrier(self):
        # type: () -> None
        self._net("barrier", lambda net: net.Barrier([WORLD_BLOB], [], engine="GLOO"))()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy as np

        # float32: Caffe2's Gloo Allreduce sums float and float16 only
        values = np.ascontiguousarray(rows, dtype=np.float32)
        name = "sum_%s" % "x".join(str(n) for n in values.shape)
        self._workspace.FeedBlob(name, values)
        self._net(name, lambda net: net.Allreduce([WORLD_BLOB, name], name, engine="GLOO"))()
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
