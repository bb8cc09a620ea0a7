"""Horovod for the PyTorch backend (``--launcher horovod``): the single-process model on every
rank, its optimizer wrapped in ``hvd.DistributedOptimizer`` instead of DDP around the model.

horovodrun starts one process per device (``dlperf.launchers.horovod``); each calls
``hvd.init()`` (instead of joining torchrun's process group), builds the model of one process
on its own seeded batch (seed + rank, as the DDP path seeds each rank), and trains through
``hvd.DistributedOptimizer(optimizer, named_parameters=...)``, whose hooks start each
gradient's all-reduce (the mean over the ranks, Gloo or MPI) as backward produces it; the update
waits for them (:meth:`HorovodWorkload.reduced`: ``synchronize()`` before BERT's clip or the
grad scaler's unscale, then the step under ``skip_synchronize()``). After the model and the
optimizer are built, ``hvd.broadcast_parameters(model.state_dict(), root_rank=0)`` gives every
rank rank 0's weights (:func:`distribute` says why not ``broadcast_optimizer_state``).
The worker's barrier, warm-up vote, results' gather (JSON bytes, never pickles) and all-reduce
probe are Horovod's collectives on CPU tensors.

Imports Horovod only when a case asks for it (:class:`dlperf.backends.horovod.Horovod`).
"""

from typing import Any, Dict, List, Optional

import torch

from dlperf.backends.horovod import Horovod
from dlperf.backends.torch import workload as ddp_path
from dlperf.backends.torch.workload import TorchWorkload
from dlperf.worker.workload import UnsupportedError, median_seconds

JOB = Horovod("horovod.torch")

#: Models whose training the Horovod path cannot wrap, and why.
REFUSED = {
    "face-resnet50": "face-resnet50 shards its classifier over torch.distributed's process group "
                     "(model-parallel Partial FC), which --launcher horovod does not create; it "
                     "runs with --launcher native (torchrun)",
    "wide-deep": "wide-deep's optimizer is a pair (SparseAdam on the embeddings, Adam on the "
                 "MLP), not one torch.optim.Optimizer that hvd.DistributedOptimizer can wrap; "
                 "it runs with --launcher native (torchrun)",
}


def start(case, device):
    # type: (Dict[str, Any], torch.device) -> Optional[Any]
    """``hvd.init()`` for a Horovod case, the module; None for any other case. Refuses what
    the path cannot run before anything is built."""
    if case.get("launcher") != "horovod":
        return None
    if case["model"] in REFUSED:
        raise UnsupportedError("--launcher horovod: " + REFUSED[case["model"]])
    hvd = JOB.start(case)
    if device.type == "cuda" and not hvd.cuda_built():
        raise UnsupportedError(
            "--launcher horovod: this Horovod %s was built without GPU operations (the "
            "torch+horovod environment is a CPU build: no NCCL or CUDA toolkit in the pinned "
            "sets), so it cannot all-reduce CUDA tensors; use --device cpu, or --launcher native "
            "(DDP over NCCL)" % JOB.version)
    return hvd


def started():
    # type: () -> bool
    return JOB.started()


def rank():
    # type: () -> int
    return JOB.rank()


def size():
    # type: () -> int
    return JOB.size()


class Contiguous(object):
    """Horovod's ``compression`` hook used for layout only: its collectives take contiguous
    tensors, and a channels-last model's convolution gradients are not. Such a gradient goes out
    as a contiguous copy and the mean comes back into the gradient in its own layout (DDP, too,
    copies every gradient into its flat buckets and back); any other goes as it is."""

    @staticmethod
    def compress(tensor):
        # type: (torch.Tensor) -> Any
        if tensor.is_contiguous():
            return tensor, None
        return tensor.contiguous(), tensor

    @staticmethod
    def decompress(tensor, ctx):
        # type: (torch.Tensor, Any) -> torch.Tensor
        if ctx is None:
            return tensor
        return ctx.copy_(tensor)


def distribute(model, optimizer):
    # type: (torch.nn.Module, Any) -> Any
    """The optimizer wrapped in ``hvd.DistributedOptimizer`` (every gradient averaged over the
    ranks, named after the model's parameters), every rank given rank 0's weights and buffers
    (``hvd.broadcast_parameters(model.state_dict(), root_rank=0)``, through contiguous copies of
    the channels-last ones).

    ``hvd.broadcast_optimizer_state`` is not called: the optimizer is new, so it holds no state
    and the same options on every rank (the DDP path has nothing to broadcast either), and
    Horovod 0.28.1's function would first give it state by a step on zero gradients, which with
    weight decay moves every weight and fills SGD's momentum and advances AdamW's step count (the
    first real update 0.74x the native path's), and would send the options with
    ``broadcast_object``, a pickle every other rank unpickles."""
    hvd = JOB.hvd
    wrapped = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                       compression=Contiguous)
    dense = {name: t.contiguous() for name, t in model.state_dict().items()}
    hvd.broadcast_parameters(dense, root_rank=0)
    model.load_state_dict(dense)  # back into the channels-last ones
    return wrapped


def info():
    # type: () -> Dict[str, Any]
    return JOB.facts("hvd.DistributedOptimizer (gradients averaged over %(size)d ranks, "
                     "%(controller)s controller) around the single-process model, "
                     "hvd.broadcast_parameters(model.state_dict(), root_rank=0) after it is "
                     "built")


class HorovodWorkload(TorchWorkload):
    """The torch workload whose gradients Horovod averages and whose collectives are Horovod's."""

    def reduced(self):
        # type: () -> Any
        """Wait for every gradient's all-reduce before the clip / unscale reads them, and step
        without reducing them again."""
        self.optimizer.synchronize()
        return self.optimizer.skip_synchronize()

    def barrier(self):
        # type: () -> None
        JOB.hvd.allreduce(torch.ones(1), op=JOB.hvd.Sum, name="dlperf_barrier")

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value`` in rank order (``hvd.allgather`` concatenates in rank order)."""
        out = JOB.hvd.allgather(torch.tensor([value], dtype=torch.int64), name="dlperf_vote")
        return [int(v) for v in out.tolist()]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One Horovod all-reduce (sum) of a float32 buffer as large as the gradients."""
        if JOB.size() < 2:
            return None
        hvd = JOB.hvd
        buffer = torch.zeros(self.reduced_params, dtype=torch.float32)
        return median_seconds(lambda: hvd.allreduce_(buffer, op=hvd.Sum, name="dlperf_probe"),
                              self.sync)


def workload_class():
    # type: () -> Any
    """The workload of this case: :class:`HorovodWorkload` once Horovod is started."""
    return HorovodWorkload if JOB.started() else TorchWorkload


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at rank 0 (None elsewhere): Horovod's allgather under a Horovod case,
    else the process group's (:func:`.workload.gather_results`)."""
    if not JOB.started():
        return ddp_path.gather_results(payload)
    return JOB.gather_json(payload, torch.from_numpy, lambda tensor: tensor.numpy())

