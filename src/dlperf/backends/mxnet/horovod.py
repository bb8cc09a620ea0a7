"""Horovod for the MXNet backend (``--launcher horovod``): Gluon's ``hvd.DistributedTrainer``
instead of the kvstore's Trainer.

horovodrun starts one worker per device (``dlperf.launchers.horovod``); each calls
``hvd.init()``, builds the model of one process on its own seeded batch (seed + rank, as the
kvstore path seeds each worker), broadcasts rank 0's parameters (``hvd.broadcast_parameters``,
which waits for Gluon's deferred initialisation), and trains through ``hvd.DistributedTrainer``,
whose ``allreduce_grads`` sums every rank's gradients over Gloo or MPI and whose update divides
by the ranks (the mean gradient, as the kvstore path and torch's DDP). The worker's barrier,
warm-up vote, results' gather (JSON bytes, never pickles) and all-reduce probe are Horovod's
collectives on NDArrays.

Imports Horovod only when a case asks for it: the mxnet environment without Horovod runs every
other case.
"""

from typing import Any, Dict, List, Optional

import mxnet as mx

from dlperf.backends.horovod import Horovod
from dlperf.backends.mxnet.workload import MXNetWorkload
from dlperf.backends.mxnet import workload as kvstore_path
from dlperf.worker.workload import median_seconds

JOB = Horovod("horovod.mxnet")


def start(case):
    # type: (Dict[str, Any]) -> Optional[Any]
    """``hvd.init()`` for a Horovod case (once), the module; None for any other case."""
    return JOB.start(case)


def started():
    # type: () -> bool
    return JOB.started()


def rank():
    # type: () -> int
    return JOB.rank()


def trainer(params, optimizer, optimizer_params=None):
    # type: (Any, Any, Optional[Dict[str, Any]]) -> Any
    """Gluon's Trainer for Horovod: every rank's gradients summed in ``allreduce_grads``, the
    update on each rank from their mean."""
    return JOB.hvd.DistributedTrainer(params, optimizer, optimizer_params)


def broadcast(params):
    # type: (Any) -> None
    """Rank 0's initial parameters to every rank (deferred ones when Gluon initialises them).

    Gluon's ``initialize`` leaves each parameter's initializer queued on MXNet's engine;
    broadcasting while they still ran crashed a rank (SIGSEGV in a native thread, inside
    ``broadcast_parameters``) in 3 of 92 two-rank starts here (MXNet 1.9.1, Horovod 0.28.1,
    Gloo), and in none of 100 once the engine had drained first."""
    mx.nd.waitall()
    JOB.hvd.broadcast_parameters(params, root_rank=0)


def summed_grads(trainer_):
    # type: (Any) -> int
    """How many ranks' gradients the trainer's ``allreduce_grads`` leaves summed (the CPU build
    sums and folds 1/size into the update; with NCCL >= 2.10 Horovod averages in the
    all-reduce): a gradient clip between the two scales its bound by it."""
    return JOB.size() if getattr(trainer_, "_average_in_framework", True) else 1


def info():
    # type: () -> Dict[str, Any]
    return JOB.facts("hvd.DistributedTrainer (gradients summed over %(size)d ranks, "
                     "%(controller)s controller, the update from their mean), "
                     "hvd.broadcast_parameters(root_rank=0)")


class HorovodWorkload(MXNetWorkload):
    """The MXNet workload whose collectives are Horovod's. Its Trainer divides by the ranks
    itself, so the update's scale is the loss's samples alone; a gradient clip bounds the norm of
    the mean gradient, which ``allreduce_grads`` may leave summed (:func:`summed_grads`)."""

    def __init__(self, objective, inputs, trainer_, clip, samples_per_step, params, info,
                 loss_samples=1):
        # type: (Any, Any, Any, Optional[float], int, int, Dict[str, Any], int) -> None
        super(HorovodWorkload, self).__init__(objective, inputs, trainer_, clip,
                                              samples_per_step, params, info, loss_samples)
        if self.clip and trainer_ is not None:
            self.clip *= summed_grads(trainer_)

    def barrier(self):
        # type: () -> None
        mx.nd.waitall()
        JOB.hvd.allreduce(mx.nd.ones(1), average=False, name="dlperf_barrier").asnumpy()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value`` in rank order (``hvd.allgather`` concatenates in rank order)."""
        out = JOB.hvd.allgather(mx.nd.array([value], dtype="int32"), name="dlperf_vote")
        return [int(v) for v in out.asnumpy()]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """One Horovod all-reduce of a float32 buffer as large as the gradients."""
        hvd = JOB.hvd
        buffer = mx.nd.zeros(self.params, dtype="float32")
        return median_seconds(lambda: hvd.allreduce_(buffer, average=False,
                                                     name="dlperf_probe"), self.sync)


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at rank 0 (None elsewhere): Horovod's allgather under a Horovod case,
    else the kvstore's (:func:`.workload.gather_results`)."""
    if not JOB.started():
        return kvstore_path.gather_results(payload)
    return JOB.gather_json(payload, lambda vector: mx.nd.array(vector, dtype=vector.dtype),
                           lambda array: array.asnumpy())
