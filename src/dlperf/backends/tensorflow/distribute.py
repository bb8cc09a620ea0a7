"""Data parallelism for the TensorFlow 2 backend, through ``tf.distribute`` as TensorFlow
documents it.

- CPUs, one process per device (dlperf.launchers.spawn): ``tf.distribute.MultiWorkerMirroredStrategy``
  from TF_CONFIG (:mod:`.cluster`), collective ops over gRPC with the RING implementation
  (``CommunicationOptions``); variables are mirrored (worker 0's initial values broadcast) and
  the optimizer all-reduces the gradients in replica context.
- GPUs, one process per node holding ``--devices`` GPUs: ``tf.distribute.MirroredStrategy`` over
  them on one node (NCCL all-reduce), ``MultiWorkerMirroredStrategy`` with NCCL across nodes
  (each worker mirrors its local GPUs), as TensorFlow's distributed training guide lays out.

The cluster forms through TensorFlow's coordination service (the one MultiWorkerMirroredStrategy
starts on worker 0), configured here before the strategy so that registration is a barrier with
``--rdzv-timeout`` as its deadline: a peer that never comes ends in TensorFlow's own
DeadlineExceededError, reported as a rendezvous timeout (:func:`cluster.give_up`).

The worker's own collectives (barrier, warm-up vote, result gather, all-reduce probe) are the
strategy's replica-context ``all_reduce``/``all_gather`` in ``tf.function``s, so they take the
same path as the gradients.
"""

import signal
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from dlperf.backends.common import gather_json
from dlperf.backends.tensorflow import cluster
from dlperf.worker.workload import UnsupportedError

# how long a finished worker waits at TensorFlow's shutdown barrier for the others (they leave
# together after the final gather; this only bounds a job that went wrong)
SHUTDOWN_BARRIER_MS = 60000


def local_replicas(case, gpu):
    # type: (Dict[str, Any], bool) -> int
    """Replicas this process holds: every GPU of the node, one CPU."""
    return int(case.get("devices") or 1) if gpu else 1


def make_strategy(case, gpu):
    # type: (Dict[str, Any], bool) -> Tuple[Optional[Any], Dict[str, Any]]
    """The strategy for this case (None: one replica, no distribution) and what to record.
    Runs before anything initialises TensorFlow's runtime."""
    _, world = cluster.job()
    local = local_replicas(case, gpu)
    if gpu:
        found = tf.config.list_physical_devices("GPU")
        if len(found) < local:
            raise UnsupportedError("--devices %d: TensorFlow sees %d GPU(s) on this node"
                                   % (local, len(found)))
        tf.config.set_visible_devices(found[:local], "GPU")
    if world == 1:
        if local == 1:
            return None, {}
        strategy = tf.distribute.MirroredStrategy(
            devices=["/gpu:%d" % i for i in range(local)])
        return strategy, {"data_parallel": "tf.distribute.MirroredStrategy over %d GPUs "
                                           "(collective all-reduce, NCCL)" % local}
    config = cluster.set_tf_config()
    _register_with_deadline(world, cluster.rdzv_timeout_s())
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if gpu else implementation.RING)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as error:
        cluster.give_up(cluster.rdzv_timeout_s(), error.message)
    # the cluster's forming installs TensorFlow's own SIGTERM handler (a preemption notice that
    # ends nothing): back to the default, so that a launcher stopping this rank ends it at once
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return strategy, {
        "data_parallel": "tf.distribute.MultiWorkerMirroredStrategy over %d workers x %d "
                         "replica(s), collective ops %s" % (world, local,
                                                            "NCCL" if gpu else "RING (gRPC)"),
        "tf_config": config}


def _register_with_deadline(world, timeout_s):
    # type: (int, float) -> None
    """TensorFlow's coordination service, as MultiWorkerMirroredStrategy would configure it
    (leader worker 0, every worker a member), with registration as a barrier that gives up
    after the rendezvous timeout instead of waiting for ever."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    context.context().configure_coordination_service(
        service_type="standalone", service_leader="/job:worker/replica:0/task:0",
        cluster_register_timeout_in_ms=int(timeout_s * 1000),
        shutdown_barrier_timeout_in_ms=SHUTDOWN_BARRIER_MS,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name="worker",
                                                                 num_tasks=world)])
    context.context().coordination_service.cluster_register_with_barrier = True


def per_replica_data(strategy, make):
    # type: (Any, Any) -> Any
    """``make(replica_id) -> {name: numpy array}`` placed on every local replica's own device
    (the strategy calls ``value_fn`` once per local replica with its id in the whole job)."""
    devices = strategy.extended.worker_devices
    first = cluster.job()[0] * len(devices)  # the id of this process's first replica

    def value_fn(context):
        replica = context.replica_id_in_sync_group
        with tf.device(devices[replica - first]):
            return {k: tf.constant(v) for k, v in make(replica).items()}
    return strategy.experimental_distribute_values_from_function(value_fn)


_active = []  # type: List[Collectives]


def activate(strategy):
    # type: (Any) -> Collectives
    """The collectives of this process's strategy, which ``gather_results`` uses later."""
    _active[:] = [Collectives(strategy)]
    return _active[0]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0 (None elsewhere); one process: its own."""
    if not _active or cluster.job()[1] == 1:
        return [payload]
    return _active[0].gather_json(payload, cluster.job()[0])


class Collectives(object):
    """Barrier, warm-up vote, result gather and the all-reduce probe through the strategy's
    replica context."""

    def __init__(self, strategy):
        # type: (Any) -> None
        self.strategy = strategy
        replica = tf.distribute.get_replica_context
        total = tf.distribute.ReduceOp.SUM

        def first(values):
            return strategy.experimental_local_results(values)[0]

        # tf.identity: a tensor of the replica's own device (the collectives need one)
        self._barrier = tf.function(lambda: first(strategy.run(
            lambda: replica().all_reduce(total, tf.identity(tf.ones([]))))))
        self._gather = tf.function(lambda x: first(strategy.run(
            lambda v: replica().all_gather(tf.identity(v), axis=0), args=(x,))))
        self._reduce = tf.function(lambda b: first(strategy.run(
            lambda v: replica().all_reduce(total, tf.identity(v))[:1], args=(b,))))

    def barrier(self):
        # type: () -> None
        self._barrier().numpy()

    def allreduce_seconds(self, elements, median_seconds):
        # type: (int, Any) -> float
        buffers = self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.zeros([elements], tf.float32))
        out = []  # type: List[Any]

        def operation():
            # type: () -> None
            out[:] = [self._reduce(buffers)]

        return median_seconds(operation, lambda: out[0].numpy())

    def gather_ints(self, value):
        # type: (int) -> List[int]
        """Every worker's ``value`` in rank order, on every worker, through the replica-context
        all-gather; a worker's replicas each send it, so every ``local``-th entry is kept."""
        values = self._gather(tf.constant([value], tf.int32)).numpy()
        local = len(self.strategy.extended.worker_devices)
        return [int(v) for v in values[::local]]

    def gather_json(self, payload, rank):
        # type: (Dict[str, Any], int) -> Optional[List[Dict[str, Any]]]
        """Every worker's ``payload`` at rank 0 (None elsewhere): JSON bytes
        (:func:`dlperf.backends.common.gather_json`) as int32 values through the replica-context
        all-gather; a worker's replicas send it once each, so each rank's first is kept."""
        everyone = gather_json(payload, lambda vector: self._gather(tf.constant(vector)).numpy(),
                               rank == 0, "int32", "int32")
        if everyone is None:
            return None
        seen = {}  # type: Dict[int, Dict[str, Any]]
        for result in everyone:
            seen.setdefault(int(result["rank"]), result)
        return [seen[r] for r in sorted(seen)]
