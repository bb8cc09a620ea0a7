"""PaddlePaddle's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``gloo``: the ranks paddle.distributed.launch started join with ``init_parallel_env`` as the
training path does (:func:`.workload.init_distributed`; the launcher sets
PADDLE_DISTRI_BACKEND=gloo on a CPU), and each operation is ``paddle.distributed``'s own
(``all_reduce``, what DataParallel reduces gradients with, ``all_gather``, ``broadcast``).

Light to import: the harness reads :data:`PATHS`; Paddle is imported by :func:`join`.
"""

from typing import Any, Callable, Dict, List

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("gloo", "cpu", "native", ("allreduce", "allgather", "broadcast"),
                   "paddle.distributed over gloo, the process group paddle.DataParallel trains "
                   "with on a CPU; started by paddle.distributed.launch"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return GroupComm()


class GroupComm(object):
    """paddle.distributed's default group, joined from the launcher's PADDLE_* variables."""

    def __init__(self):
        # type: () -> None
        import paddle
        import paddle.distributed as dist

        from dlperf.backends.paddle.workload import init_distributed

        paddle.set_device("cpu")
        init_distributed()
        self.paddle, self.dist = paddle, dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        paddle, dist = self.paddle, self.dist
        whole = paddle.ones([elements], dtype="float32")
        shard = paddle.ones([elements // self.size], dtype="float32")
        gathered = []  # type: List[Any]

        def allgather():
            # type: () -> None
            del gathered[:]
            dist.all_gather(gathered, shard)
        calls = {
            "allreduce": lambda: dist.all_reduce(whole),
            "allgather": allgather,
            "broadcast": lambda: dist.broadcast(whole, src=0),
        }
        return calls[op]  # a CPU kernel has finished when its call returns

    def barrier(self):
        # type: () -> None
        self.dist.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        tensor = self.paddle.to_tensor(rows)
        self.dist.all_reduce(tensor)
        return tensor.numpy()

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.paddle.__version__,
                "backend": str(self.dist.get_backend()).lower()}

    def close(self):
        # type: () -> None
        self.dist.destroy_process_group()
