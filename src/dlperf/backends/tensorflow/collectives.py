"""TensorFlow 2's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``ring``: the workers dlperf.launchers.spawn started form the cluster as the training path does
(:func:`.distribute.make_strategy`: TF_CONFIG, the coordination service with --rdzv-timeout,
``MultiWorkerMirroredStrategy`` with ``CommunicationOptions(RING)``: collective ops over gRPC),
and each operation is the strategy's replica-context collective in a ``tf.function``: the
``all_reduce`` (SUM) Keras reduces gradients with, and ``all_gather``. Replica context has no
broadcast (the strategy broadcasts worker 0's initial values inside variable creation only), so
the path does not offer one. Each call reads back one element of the result, which waits for
the collective without copying the whole buffer.

Light to import: the harness reads :data:`PATHS`; TensorFlow is imported by :func:`join`.
"""

from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("ring", "cpu", "native", ("allreduce", "allgather"),
                   "tf.distribute.MultiWorkerMirroredStrategy's collective ops, RING over gRPC, "
                   "one CPU worker per process (TF_CONFIG); started by dlperf.launchers.spawn"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return StrategyComm(case)


class StrategyComm(object):
    """The strategy's replica-context collectives, one replica per worker."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        import tensorflow as tf

        from dlperf.backends.tensorflow import cluster, distribute

        self.tf = tf
        self.strategy, self.info = distribute.make_strategy(case, gpu=False)
        self.rank, self.size = cluster.job()
        replica = tf.distribute.get_replica_context
        total = tf.distribute.ReduceOp.SUM
        strategy = self.strategy

        def first(values):
            return strategy.experimental_local_results(values)[0]

        self.kernels = {
            "allreduce": tf.function(lambda b: first(strategy.run(
                lambda v: replica().all_reduce(total, tf.identity(v))[:1], args=(b,)))),
            "allgather": tf.function(lambda b: first(strategy.run(
                lambda v: replica().all_gather(tf.identity(v), axis=0)[:1], args=(b,)))),
        }
        self._sum = tf.function(lambda b: first(strategy.run(
            lambda v: replica().all_reduce(total, tf.identity(v)), args=(b,))))
        self._barrier = distribute.Collectives(strategy)

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        tf = self.tf
        width = elements // self.size if op == "allgather" else elements
        buffer = self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.ones([width], tf.float32))
        kernel = self.kernels[op]

        def once():
            # type: () -> None
            kernel(buffer).numpy()
        return once

    def barrier(self):
        # type: () -> None
        self._barrier.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy as np

        tf = self.tf
        values = self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.constant(rows.astype(np.float32)))
        return self._sum(values).numpy().astype(np.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        return dict(self.info, framework_version=self.tf.__version__)

    def close(self):
        # type: () -> None
        pass
