"""MindSpore's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``mccl``: the workers msrun started join with ``mindspore.communication.init()`` as the training
path's do (:func:`.workload.join`; msrun's scheduler, which runs the same command, serves the
cluster and leaves in :func:`.workload.serve_if_scheduler`), and each operation is MindSpore's
own primitive in PyNative mode on CPU tensors (``ops.AllReduce``, what DistributedGradReducer
reduces gradients with, ``ops.AllGather``, ``ops.Broadcast``) over MCCL, MindSpore's own CPU
collectives. Each call waits for its result: the PyNative queue drained, then one element of the
output read back (a slice, so the wait copies nothing large).

Light to import: the harness reads :data:`PATHS`; MindSpore is imported by :func:`join`.
"""

from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("mccl", "cpu", "native", ("allreduce", "allgather", "broadcast"),
                   "mindspore.ops collectives in PyNative mode over MCCL, MindSpore's own CPU "
                   "collectives (mindspore.communication.init()); started by msrun"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return OpsComm()


class OpsComm(object):
    """MindSpore's collective primitives over the world group."""

    def __init__(self):
        # type: () -> None
        import mindspore as ms
        from mindspore import ops

        from dlperf.backends.mindspore import workload

        workload.serve_if_scheduler()  # msrun's scheduler process never gets past this
        workload.select_device("cpu")
        workload.join()
        self.ms, self.ops, self.workload = ms, ops, workload
        self.rank, self.size = workload.rank(), workload.world_size()
        self._sum = ops.AllReduce()

    def wait(self, out):
        # type: (Any) -> None
        self.workload.synchronize(None)
        out.reshape(-1)[0:1].asnumpy()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        import numpy

        ms, ops = self.ms, self.ops
        width = elements // self.size if op == "allgather" else elements
        buffer = ms.Tensor(numpy.ones(width, numpy.float32))
        kernel = {"allreduce": ops.AllReduce(), "allgather": ops.AllGather(),
                  "broadcast": ops.Broadcast(0)}[op]
        if op == "broadcast":  # a tuple of tensors in, a tuple out

            def once():
                # type: () -> None
                self.wait(kernel((buffer,))[0])
            return once

        def call():
            # type: () -> None
            self.wait(kernel(buffer))
        return call

    def barrier(self):
        # type: () -> None
        import numpy

        self._sum(self.ms.Tensor(numpy.ones(1, numpy.float32))).asnumpy()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy

        out = self._sum(self.ms.Tensor(rows.astype(numpy.float32))).asnumpy()
        return out.astype(numpy.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.ms.__version__,
                "backend": self.workload.comm_description()}

    def close(self):
        # type: () -> None
        self.workload.synchronize(None)
