"""OneFlow's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``cpu``: the ranks oneflow.distributed.launch started meet when they import OneFlow, as the
training path's do (:mod:`.workload`: the import is the rendezvous, under the --rdzv-timeout
alarm), and each operation is ``flow.comm``'s own on CPU tensors (``all_reduce``, what
DistributedDataParallel reduces gradients with, ``all_gather``, ``broadcast``), followed by
OneFlow's virtual-machine sync: its eager ops return before they finish.

Light to import: the harness reads :data:`PATHS`; OneFlow is imported by :func:`join`.
"""

from typing import Any, Callable, Dict, List

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("cpu", "cpu", "native", ("allreduce", "allgather", "broadcast"),
                   "oneflow.comm on CPU tensors, OneFlow's own CPU collectives (the ranks meet "
                   "at rank 0's control server on import); started by "
                   "oneflow.distributed.launch"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return CommComm()


class CommComm(object):
    """``flow.comm`` between every rank of the job."""

    def __init__(self):
        # type: () -> None
        from dlperf.backends.oneflow import workload  # the import joins the job

        self.workload = workload
        self.flow = workload.flow
        self.rank, self.size = workload.rank(), workload.world_size()

    def sync(self):
        # type: () -> None
        self.flow._oneflow_internal.eager.Sync()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        flow = self.flow
        whole = flow.ones(elements, dtype=flow.float32)
        shard = flow.ones(elements // self.size, dtype=flow.float32)
        rows = [flow.zeros(elements // self.size, dtype=flow.float32)
                for _ in range(self.size)]  # type: List[Any]
        calls = {
            "allreduce": lambda: flow.comm.all_reduce(whole),
            "allgather": lambda: flow.comm.all_gather(rows, shard),
            "broadcast": lambda: flow.comm.broadcast(whole, 0),
        }
        call = calls[op]

        def once():
            # type: () -> None
            call()
            self.sync()
        return once

    def barrier(self):
        # type: () -> None
        self.flow.comm.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy

        tensor = self.flow.tensor(rows.astype(numpy.float32), dtype=self.flow.float32)
        self.flow.comm.all_reduce(tensor)
        return tensor.numpy().astype(numpy.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.flow.__version__,
                "backend": "oneflow.comm, CPU"}

    def close(self):
        # type: () -> None
        self.sync()
