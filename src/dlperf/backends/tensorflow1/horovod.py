"""Horovod for the TensorFlow 1.15 backend (``--launcher horovod``): the graph and Session of the
single-process path, with ``hvd.DistributedOptimizer`` around its optimizer.

horovodrun starts one process per device (``dlperf.launchers.horovod``); each calls
``hvd.init()``, builds the same graph as one process on its own seeded batch (seed + rank, as the
native path seeds each replica), and its optimizer's ``compute_gradients`` averages every rank's
gradients (Horovod's all-reduce over Gloo or MPI) before BERT's clip and ``apply_gradients``.
``hvd.broadcast_global_variables(0)`` runs once after the initialisers, so every rank starts from
rank 0's weights. On a GPU each process takes the GPU of its local rank.

The worker's collectives (barrier, warm-up vote, the results' gather, the all-reduce probe) are
Horovod ops in the same graph, built before it is finalised and run with the workload's session:
an all-reduce of a scalar, ``hvd.allgather`` of int32 / uint8 vectors (JSON bytes, never
pickles), and an all-reduce of a gradient-sized buffer.

Imports Horovod only when a case asks for it: the tensorflow1 environment without Horovod runs
every other case.
"""

from typing import Any, Dict, List, Optional

import numpy as np
import tensorflow as tf

from dlperf.backends.common import gather_json
from dlperf.backends.horovod import Horovod

tf1 = tf.compat.v1

JOB = Horovod("horovod.tensorflow")


def active(case):
    # type: (Dict[str, Any]) -> bool
    return case.get("launcher") == "horovod"


def start(case):
    # type: (Dict[str, Any]) -> Optional[Any]
    """``hvd.init()`` for a Horovod case (once), the module; None for any other case."""
    return JOB.start(case)


def rank_and_size():
    # type: () -> tuple
    return (JOB.rank(), JOB.size()) if JOB.started() else (0, 1)


def gpu_options(config):
    # type: (Any) -> None
    """One GPU per process: the one of this rank's local rank (Horovod's own recipe)."""
    config.gpu_options.visible_device_list = str(JOB.hvd.local_rank())


def wrap(optimizer):
    # type: (Any) -> Any
    """The optimizer whose ``compute_gradients`` averages the gradients of every rank."""
    return JOB.hvd.DistributedOptimizer(optimizer)


def info():
    # type: () -> Dict[str, Any]
    return JOB.facts("hvd.DistributedOptimizer (gradients averaged over %(size)d ranks, "
                     "%(controller)s controller) in the Session graph, "
                     "hvd.broadcast_global_variables(0) after the initialisers")


class Collectives(object):
    """Horovod ops in the job's graph for the worker's barrier, vote, gather and probe."""

    def __init__(self, params):
        # type: (int) -> None
        hvd = JOB.hvd
        self.broadcast = hvd.broadcast_global_variables(0)
        self._barrier = hvd.allreduce(tf.ones([1], tf.float32), op=hvd.Sum,
                                      name="dlperf_barrier")
        self.ints = tf1.placeholder(tf.int32, [None], name="dlperf_gather_ints")
        self._gather_ints = hvd.allgather(self.ints, name="dlperf_gather_ints")
        self.sizes = tf1.placeholder(tf.int64, [None], name="dlperf_gather_sizes")
        self._gather_sizes = hvd.allgather(self.sizes, name="dlperf_gather_sizes")
        self.bytes = tf1.placeholder(tf.uint8, [None], name="dlperf_gather_bytes")
        self._gather_bytes = hvd.allgather(self.bytes, name="dlperf_gather_bytes")
        buffer = tf1.Variable(tf.zeros([params], tf.float32), trainable=False,
                              name="dlperf_probe", collections=[tf1.GraphKeys.LOCAL_VARIABLES])
        self._probe = hvd.allreduce(buffer, op=hvd.Sum, name="dlperf_probe")[:1]
        self.session = None  # type: Any

    def barrier(self):
        # type: () -> None
        self.session.run(self._barrier)

    def gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value`` in rank order (``hvd.allgather`` concatenates in rank order)."""
        return [int(v) for v in self.session.run(self._gather_ints,
                                                 {self.ints: np.array([value], np.int32)})]

    def allreduce_seconds(self, median_seconds):
        # type: (Any) -> float
        return median_seconds(lambda: self.session.run(self._probe), lambda: None)

    def _all_gather(self, vector):
        # type: (np.ndarray) -> np.ndarray
        """Every rank's equally long ``vector``, one row each in rank order."""
        if vector.dtype == np.int64:
            out = self.session.run(self._gather_sizes, {self.sizes: vector})
        else:
            out = self.session.run(self._gather_bytes, {self.bytes: vector})
        return np.asarray(out).reshape(JOB.size(), -1)

    def gather_json(self, payload):
        # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
        return gather_json(payload, self._all_gather, JOB.rank() == 0)


_active = []  # type: List[Collectives]


def activate(collectives, session):
    # type: (Collectives, Any) -> None
    """Give the collectives the workload's session and broadcast rank 0's initial weights."""
    collectives.session = session
    session.run(collectives.broadcast)
    _active[:] = [collectives]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at rank 0 (None elsewhere): Horovod's allgather under a Horovod case,
    else the collective strategy's gather (:func:`.distribute.gather_results`)."""
    if _active:
        return _active[0].gather_json(payload)
    from dlperf.backends.tensorflow1 import distribute
    return distribute.gather_results(payload)
