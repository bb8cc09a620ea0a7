"""Data parallelism for the TensorFlow 1.15 backend: its collective all-reduce strategy in graph
mode with a Session, as TF 1.15 documents for independent workers.

- CPUs, one process per device (dlperf.launchers.spawn): ``tf.distribute.experimental.
  MultiWorkerMirroredStrategy`` (``CollectiveAllReduceStrategy``) from TF_CONFIG
  (:mod:`dlperf.backends.tensorflow.cluster`), RING collectives; each worker starts its
  ``tf.distribute.Server`` with the strategy's session config (collective group leader, device
  filters, scoped allocator for the all-reduces) and runs its Session against it. Variables are
  mirrored (worker 0's initial values broadcast when the initialiser runs) and the optimizer's
  ``apply_gradients`` all-reduces the gradients (summed: the loss is divided by the replicas).
- GPUs, one process per node holding ``--devices`` GPUs: ``MirroredStrategy`` over them on one
  node, the collective strategy with NCCL across nodes.

TF 1.15's collectives have no timeout (a RunOptions deadline does not cancel them), so the first
collective — the variable initialiser, which needs every worker — runs under
:class:`cluster.Deadline` with ``--rdzv-timeout``: a worker whose peers never come reports a
rendezvous timeout and leaves. The first step's all-reduce does too: once, across two emulated
hosts in a loaded test run, the broadcast completed and one worker never reached the first
step, and the job waited out its repeat's ``--timeout``.

The worker's own collectives (barrier, warm-up vote, result gather, all-reduce probe) are
replica-context ``all_reduce`` ops built into the same graph before it is finalised. The gather
is an all-reduce too (TF 1.15 has no replica-context all-gather): every worker fills its own row
of a zero matrix with its result's JSON bytes, chunk by chunk, and the sum holds every row; the
vote likewise sums a vector of one entry per worker, fed to an op built once.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from dlperf.backends.common import gather_json, summed_rows
from dlperf.backends.tensorflow import cluster
from dlperf.worker.workload import UnsupportedError

tf1 = tf.compat.v1
CHUNK = 16384  # int32 values (one JSON byte each) per gather round


def local_replicas(case, gpu):
    # type: (Dict[str, Any], bool) -> int
    return int(case.get("devices") or 1) if gpu else 1


def make_strategy(case, gpu, config):
    # type: (Dict[str, Any], bool, Any) -> Tuple[Optional[Any], str, Any, Dict[str, Any]]
    """(strategy or None, session target, session config, facts) for this case."""
    rank, world = cluster.job()
    local = local_replicas(case, gpu)
    if gpu:
        found = len(tf1.config.experimental.list_physical_devices("GPU"))
        if found < local or (world > 1 and found != local):
            raise UnsupportedError(
                "--devices %d: TensorFlow 1.15 sees %d GPU(s) on this node; its collective "
                "strategy mirrors every visible GPU, so show it exactly these "
                "(CUDA_VISIBLE_DEVICES)" % (local, found))
    if world == 1:
        if local == 1:
            return None, "", config, {}
        strategy = tf1.distribute.MirroredStrategy(devices=["/gpu:%d" % i for i in range(local)])
        return strategy, "", strategy.update_config_proto(config), {
            "data_parallel": "tf.distribute.MirroredStrategy over %d GPUs (NCCL)" % local}
    spec = cluster.set_tf_config()
    communication = tf.distribute.experimental.CollectiveCommunication
    strategy = tf1.distribute.experimental.MultiWorkerMirroredStrategy(
        communication=communication.NCCL if gpu else communication.RING)
    config = strategy.update_config_proto(config)
    server = tf1.distribute.Server(tf1.train.ClusterSpec(spec["cluster"]), job_name="worker",
                                   task_index=rank, config=config, start=True)
    return strategy, server.target, config, {
        "data_parallel": "CollectiveAllReduceStrategy (MultiWorkerMirroredStrategy) over %d "
                         "workers x %d replica(s), %s collectives, Session on the worker's "
                         "tf.distribute.Server" % (world, local, "NCCL" if gpu else "RING"),
        "tf_config": spec}


def replica_index(strategy):
    # type: (Any) -> int
    """This replica's index among the process's replicas (in graph mode the replica id is a
    constant; TF 1.15's ``ReplicaContext.devices`` fails under the collective strategy). The id
    is taken modulo the process's replicas: under the collective strategy TF 1.15 gives every
    worker's replicas ids from 0, and subtracting the rank's offset read past the list from
    rank 2 on (4 workers: 2 nodes of 2)."""
    replica = int(tf1.get_static_value(tf1.distribute.get_replica_context()
                                       .replica_id_in_sync_group))
    return replica % len(strategy.extended.worker_devices)


class Collectives(object):
    """Barrier, warm-up vote, result gather and all-reduce probe: all-reduce ops in the job's
    graph, built before it is finalised and run with the workload's session."""

    def __init__(self, strategy, params, world):
        # type: (Any, int, int) -> None
        total = tf.distribute.ReduceOp.SUM
        self.local = len(strategy.extended.worker_devices)  # each sums its process's input
        self.world = world

        def reduce(value):
            return tf1.distribute.get_replica_context().all_reduce(total, tf.identity(value))

        def first(values):
            return strategy.experimental_local_results(values)[0]

        self.rows = tf1.placeholder(tf.int32, [world, CHUNK], name="dlperf_gather_rows")
        self.votes = tf1.placeholder(tf.int32, [world], name="dlperf_vote")
        buffers = []  # the probe's gradient-sized buffer on every replica's device
        for index, device in enumerate(strategy.extended.worker_devices):
            with tf.device(device):
                buffers.append(tf1.Variable(tf.zeros([params], tf.float32), trainable=False,
                                            name="dlperf_probe_%d" % index,
                                            collections=[tf1.GraphKeys.LOCAL_VARIABLES]))
        with strategy.scope():
            self._barrier = first(strategy.experimental_run_v2(
                lambda: reduce(tf.ones([], tf.int32))))
            self._gather = first(strategy.experimental_run_v2(reduce, args=(self.rows,)))
            self._vote = first(strategy.experimental_run_v2(reduce, args=(self.votes,)))
            self._probe = first(strategy.experimental_run_v2(
                lambda: reduce(buffers[replica_index(strategy)])[:1]))
        self.session = None  # type: Any

    def barrier(self):
        # type: () -> None
        self.session.run(self._barrier)

    def allreduce_seconds(self, median_seconds):
        # type: (Any) -> float
        return median_seconds(lambda: self.session.run(self._probe), lambda: None)

    def gather_ints(self, value):
        # type: (int) -> List[int]
        """Every worker's ``value`` in rank order: the vote vector (zero but for this worker's
        own entry) fed to the all-reduce op built with the graph, summed over every replica."""
        votes = np.zeros([self.world], np.int32)
        votes[cluster.job()[0]] = value
        return [int(v) for v in self.session.run(self._vote, {self.votes: votes}) // self.local]

    def _summed(self, rows):
        # type: (np.ndarray) -> np.ndarray
        """The sum over every worker of ``rows`` (world x n int32), CHUNK columns per run of the
        all-reduce op built with the graph (which every local replica feeds, hence // local)."""
        out = []  # type: List[np.ndarray]
        for start in range(0, rows.shape[1], CHUNK):
            chunk = np.zeros([self.world, CHUNK], np.int32)
            part = rows[:, start:start + CHUNK]
            chunk[:, :part.shape[1]] = part
            out.append(self.session.run(self._gather, {self.rows: chunk}) // self.local)
        return np.concatenate(out, axis=1)[:, :rows.shape[1]]

    def gather_json(self, payload, rank):
        # type: (Dict[str, Any], int) -> Optional[List[Dict[str, Any]]]
        """Every worker's ``payload`` at rank 0 (None elsewhere): JSON bytes
        (:func:`dlperf.backends.common.gather_json`) as int32 values, each worker's in its own
        row of the summed matrix (TF 1.15 has no replica-context all-gather)."""
        return gather_json(payload, summed_rows(self._summed, rank, self.world), rank == 0,
                           "int32", "int32")


_active = []  # type: List[Collectives]


def activate(collectives):
    # type: (Collectives) -> None
    _active[:] = [collectives]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0 (None elsewhere); one process: its own."""
    rank, world = cluster.job()
    if not _active or world == 1:
        return [payload]
    return _active[0].gather_json(payload, rank)
