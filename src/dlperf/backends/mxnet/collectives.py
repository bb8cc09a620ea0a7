"""MXNet's collective paths for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``kvstore``: the parameter servers of ps-lite, joined as the training path joins them
(:func:`.workload.join`: ``mx.kv.create("dist_sync")`` under the rendezvous alarm, the scheduler
and servers started by dlperf's launcher as MXNet's tools/launch.py does); its one collective is
``pushpull`` (every worker pushes its buffer, the servers sum them, every worker pulls the sum:
what Gluon's Trainer does with the gradients, ``update_on_kvstore=False``). Each message size
under a key of its own, initialised once. ``horovod`` / ``horovod-mpi``: Horovod 0.28.1's
collectives on NDArrays in the mxnet+horovod environment, started by horovodrun as ``--launcher
horovod`` trains.

Light to import: the harness reads :data:`PATHS`; MXNet is imported by :func:`join`.
"""

from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

HOROVOD_OPS = ("allreduce", "allgather", "broadcast")
PATHS = (
    CollectivePath("kvstore", "cpu", "native", ("pushpull",),
                   "ps-lite's dist_sync kvstore: push to the parameter servers (one per node), "
                   "which sum, then pull; started as MXNet's tools/launch.py --launcher local "
                   "does"),
    CollectivePath("horovod", "cpu", "horovod", HOROVOD_OPS,
                   "Horovod 0.28.1's collectives on NDArrays (its Gloo controller), started by "
                   "horovodrun as --launcher horovod trains"),
    CollectivePath("horovod-mpi", "cpu", "horovod", HOROVOD_OPS,
                   "Horovod 0.28.1's collectives on NDArrays over MPI (horovodrun --mpi)", "mpi"),
)
KEY_BASE = 1 << 20  # a key per message size: kvstore keys are integers


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    if path.startswith("horovod"):
        return HorovodComm(case)
    return KVStoreComm()


class KVStoreComm(object):
    """The dist_sync kvstore; ranks in ps-lite's order (the combined times' rows)."""

    def __init__(self):
        # type: () -> None
        import mxnet as mx

        from dlperf.backends.mxnet import workload

        self.mx = mx
        self.kv = workload.join()
        self.rank, self.size = workload.rank(), workload.world_size()
        self.keys = 0

    def _key(self, zeros):
        # type: (Any) -> int
        """A fresh key, initialised with ``zeros`` (every worker does it, in the same order)."""
        self.keys += 1
        key = KEY_BASE + self.keys
        self.kv.init(key, zeros)
        return key

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        mx = self.mx
        buffer = mx.nd.ones(elements, dtype="float32")
        key = self._key(mx.nd.zeros(elements, dtype="float32"))

        def once():
            # type: () -> None
            self.kv.pushpull(key, buffer, out=buffer)
            buffer.wait_to_read()
        return once

    def barrier(self):
        # type: () -> None
        self.mx.nd.waitall()
        self.kv._barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy

        mx = self.mx
        value = mx.nd.array(rows, dtype="float32")
        key = self._key(mx.nd.zeros(rows.shape, dtype="float32"))
        self.kv.pushpull(key, value, out=value)
        return value.asnumpy().astype(numpy.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.mx.__version__, "kvstore": self.kv.type}

    def close(self):
        # type: () -> None
        self.mx.nd.waitall()


class HorovodComm(object):
    """Horovod's collectives on NDArrays, joined by ``hvd.init()`` from horovodrun's
    variables; each operation named by its size, as Horovod matches its ranks' calls by name."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        import mxnet as mx

        from dlperf.backends.mxnet.horovod import JOB

        self.mx, self.job = mx, JOB
        self.hvd = JOB.start(case)
        self.rank, self.size = JOB.rank(), JOB.size()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        mx, hvd = self.mx, self.hvd
        whole = mx.nd.ones(elements, dtype="float32")
        shard = mx.nd.ones(elements // self.size, dtype="float32")
        name = "dlperf_%s_%d" % (op, elements)
        calls = {
            "allreduce": lambda: hvd.allreduce_(whole, average=False, name=name),
            "allgather": lambda: hvd.allgather(shard, name=name),
            "broadcast": lambda: hvd.broadcast_(whole, root_rank=0, name=name),
        }
        call = calls[op]

        def once():
            # type: () -> None
            call().wait_to_read()
        return once

    def barrier(self):
        # type: () -> None
        self.mx.nd.waitall()
        self.hvd.allreduce(self.mx.nd.ones(1), average=False, name="dlperf_barrier").asnumpy()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy

        out = self.hvd.allreduce(self.mx.nd.array(rows, dtype="float32"), average=False,
                                 name="dlperf_rows_%d" % rows.size)
        return out.asnumpy().astype(numpy.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        facts = self.job.facts("%(controller)s controller, %(size)d ranks")
        facts["framework_version"] = self.mx.__version__
        return facts

    def close(self):
        # type: () -> None
        self.mx.nd.waitall()
        self.hvd.shutdown()
