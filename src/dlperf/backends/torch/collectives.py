"""PyTorch's collective paths for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``gloo`` and ``nccl`` are the process group DDP trains with (torchrun's variables, joined by
:func:`.workload.join_process_group`: gloo on CPUs, NCCL on GPUs); ``horovod`` is Horovod's
Gloo controller in the torch+horovod environment, started by horovodrun as ``--launcher
horovod`` is (``hvd.init()``, :class:`dlperf.backends.horovod.Horovod`).

Light to import: the harness reads :data:`PATHS`; torch is imported by :func:`join`.
"""

import os
from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

OPS = ("allreduce", "allgather", "reducescatter", "broadcast")

PATHS = (
    CollectivePath("gloo", "cpu", "native", OPS,
                   "torch.distributed over gloo (TCP), the process group DDP trains with on a "
                   "CPU; started by torchrun"),
    CollectivePath("nccl", "cuda", "native", OPS,
                   "torch.distributed over NCCL, one GPU per rank, the process group DDP trains "
                   "with on GPUs; started by torchrun"),
    CollectivePath("horovod", "cpu", "horovod", OPS,
                   "Horovod 0.28.1's collectives on CPU tensors (its Gloo controller), started by "
                   "horovodrun as --launcher horovod trains"),
    CollectivePath("horovod-mpi", "cpu", "horovod", OPS,
                   "Horovod 0.28.1's collectives on CPU tensors over MPI (horovodrun --mpi, Open "
                   "MPI's mpirun), as --launcher horovod --controller mpi trains", "mpi"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    """Join the job the launcher started, through ``path``."""
    if path.startswith("horovod"):
        return HorovodComm(case)
    return ProcessGroupComm(path)


class ProcessGroupComm(object):
    """torch.distributed's process group (gloo or NCCL) with the launcher's RANK/WORLD_SIZE."""

    def __init__(self, path):
        # type: (str) -> None
        import torch
        import torch.distributed as dist

        from dlperf.backends.torch.workload import join_process_group

        self.torch, self.dist = torch, dist
        if path == "nccl":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
        else:
            self.device = torch.device("cpu")
        join_process_group(self.device)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def sync(self):
        # type: () -> None
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        torch, dist = self.torch, self.dist
        whole = torch.ones(elements, dtype=torch.float32, device=self.device)
        shard = torch.ones(elements // self.size, dtype=torch.float32, device=self.device)
        calls = {
            "allreduce": lambda: dist.all_reduce(whole),
            "allgather": lambda: dist.all_gather_into_tensor(whole, shard),
            "reducescatter": lambda: dist.reduce_scatter_tensor(shard, whole),
            "broadcast": lambda: dist.broadcast(whole, src=0),
        }
        call = calls[op]

        def once():
            # type: () -> None
            call()
            self.sync()
        return once

    def barrier(self):
        # type: () -> None
        from dlperf.backends.torch.workload import barrier

        barrier(self.device)

    def sum_rows(self, rows):
        # type: (Any) -> Any
        tensor = self.torch.from_numpy(rows).to(self.device)
        self.dist.all_reduce(tensor)
        return tensor.cpu().numpy()

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.torch.__version__,
                "backend": self.dist.get_backend()}

    def close(self):
        # type: () -> None
        self.dist.destroy_process_group()


class HorovodComm(object):
    """Horovod's collectives on CPU tensors, joined by ``hvd.init()`` from horovodrun's
    variables; each operation named by its size, as Horovod matches its ranks' calls by name."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        import torch

        from dlperf.backends.torch.horovod import JOB

        self.torch, self.job = torch, JOB
        self.hvd = JOB.start(case)
        self.rank, self.size = JOB.rank(), JOB.size()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        torch, hvd = self.torch, self.hvd
        whole = torch.ones(elements, dtype=torch.float32)
        shard = torch.ones(elements // self.size, dtype=torch.float32)
        name = "dlperf_%s_%d" % (op, elements)
        calls = {
            "allreduce": lambda: hvd.allreduce_(whole, op=hvd.Sum, name=name),
            "allgather": lambda: hvd.allgather(shard, name=name),
            "reducescatter": lambda: hvd.reducescatter(whole, op=hvd.Sum, name=name),
            "broadcast": lambda: hvd.broadcast_(whole, root_rank=0, name=name),
        }
        return calls[op]

    def barrier(self):
        # type: () -> None
        self.hvd.allreduce(self.torch.ones(1), op=self.hvd.Sum, name="dlperf_barrier")

    def sum_rows(self, rows):
        # type: (Any) -> Any
        out = self.hvd.allreduce(self.torch.from_numpy(rows), op=self.hvd.Sum,
                                 name="dlperf_rows_%d" % rows.size)
        return out.numpy()

    def facts(self):
        # type: () -> Dict[str, Any]
        facts = self.job.facts("%(controller)s controller, %(size)d ranks")
        facts["framework_version"] = self.torch.__version__
        return facts

    def close(self):
        # type: () -> None
        self.hvd.shutdown()
