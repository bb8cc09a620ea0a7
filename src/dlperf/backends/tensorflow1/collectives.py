"""TensorFlow 1.15's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``ring``: the workers dlperf.launchers.spawn started form the cluster as the training path does
(:func:`.distribute.make_strategy`: TF_CONFIG, ``CollectiveAllReduceStrategy`` with RING
collectives, each worker's Session on its own ``tf.distribute.Server``), and the all-reduce is
the replica-context ``all_reduce`` (SUM) that ``apply_gradients`` reduces gradients with, in
graph mode: one op per message size, built with the graph before its Session starts, on a
buffer held in a local variable; each run fetches one element of the result. TF 1.15's replica
context has no all-gather or broadcast, so the path offers the all-reduce alone. Its collectives
have no timeout of their own, so the first one (a barrier) runs under the rendezvous deadline,
as the training path's initialiser does. ``horovod`` / ``horovod-mpi``: Horovod's ops
(``hvd.allreduce``, ``hvd.allgather``, ``hvd.broadcast``) in the Session graph of each rank
horovodrun started (``hvd.init()``, :mod:`.horovod`), built the same way.

Light to import: the harness reads :data:`PATHS`; TensorFlow is imported by :func:`join`.
"""

from typing import Any, Callable, Dict, List, Tuple

from dlperf.worker.collectives import CollectivePath, elements

HOROVOD_OPS = ("allreduce", "allgather", "broadcast")
PATHS = (
    CollectivePath("ring", "cpu", "native", ("allreduce",),
                   "TF 1.15's CollectiveAllReduceStrategy (MultiWorkerMirroredStrategy), RING "
                   "collectives in graph mode, each worker's Session on its tf.distribute.Server "
                   "(TF_CONFIG); started by dlperf.launchers.spawn"),
    CollectivePath("horovod", "cpu", "horovod", HOROVOD_OPS,
                   "Horovod 0.28.1's ops in the Session graph (its Gloo controller), started by "
                   "horovodrun as --launcher horovod trains"),
    CollectivePath("horovod-mpi", "cpu", "horovod", HOROVOD_OPS,
                   "Horovod 0.28.1's ops in the Session graph over MPI (horovodrun --mpi)",
                   "mpi"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    if path.startswith("horovod"):
        return HorovodSessionComm(case)
    return SessionComm(case)


def counts(spec, size):
    # type: (Dict[str, Any], int) -> List[Tuple[str, int]]
    """Every (operation, elements) the job's spec will prepare, in its order."""
    return [(op, elements(op, int(n), size)) for op in spec["ops"] for n in spec["sizes"]]


class SessionComm(object):
    """Every size's all-reduce op, the barrier and the rows' sum, built into one graph."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        import tensorflow as tf

        from dlperf.backends.tensorflow import cluster
        from dlperf.backends.tensorflow1 import backend, distribute

        tf1 = tf.compat.v1
        spec = case["collectives"]
        self.tf = tf
        self.rank, self.size = cluster.job()
        strategy, target, config, self.info = distribute.make_strategy(
            case, False, backend._session_config(False))
        total = tf.distribute.ReduceOp.SUM

        def reduce(value):
            return tf1.distribute.get_replica_context().all_reduce(total, tf.identity(value))

        def first(values):
            return strategy.experimental_local_results(values)[0]

        graph = tf.Graph()
        self.ops = {}  # type: Dict[Tuple[str, int], Any]
        with graph.as_default():
            buffers = {}  # type: Dict[Tuple[str, int], Any]
            with tf.device(strategy.extended.worker_devices[0]):
                for op, count in counts(spec, self.size):
                    buffers[(op, count)] = local_buffer(tf, count, "dlperf_%s_%d" % (op, count))
            self.rows = tf1.placeholder(tf.float32, [self.size, int(spec["iters"])])
            with strategy.scope():
                for key, buffer in buffers.items():
                    self.ops[key] = first(strategy.experimental_run_v2(
                        lambda b=buffer: reduce(b)[:1]))
                self._sum = first(strategy.experimental_run_v2(reduce, args=(self.rows,)))
            self.collectives = distribute.Collectives(strategy, 1, self.size)
            init = tf1.local_variables_initializer()
            graph.finalize()
        self.session = tf1.Session(target, graph=graph, config=config)
        self.session.run(init)
        self.collectives.session = self.session
        deadline = cluster.Deadline(cluster.rdzv_timeout_s(),
                                    "the first collective (a barrier) did not complete: not "
                                    "every worker joined")
        self.collectives.barrier()
        deadline.met()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        fetch = self.ops[(op, elements)]
        return lambda: self.session.run(fetch)

    def barrier(self):
        # type: () -> None
        self.collectives.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy as np

        return self.session.run(self._sum, {self.rows: rows.astype(np.float32)}).astype(
            np.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        return dict(self.info, framework_version=self.tf.__version__)

    def close(self):
        # type: () -> None
        self.session.close()


def local_buffer(tf, count, name):
    # type: (Any, int, str) -> Any
    """A float32 buffer of ``count`` ones in a local variable (initialised once, not mirrored)."""
    tf1 = tf.compat.v1
    return tf1.Variable(tf.ones([count], tf.float32), trainable=False, name=name,
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])


class HorovodSessionComm(object):
    """Every (operation, size)'s Horovod op, the barrier and the rows' sum in one graph."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        import tensorflow as tf

        from dlperf.backends.tensorflow1 import backend
        from dlperf.backends.tensorflow1.horovod import JOB

        tf1 = tf.compat.v1
        spec = case["collectives"]
        self.tf, self.job = tf, JOB
        hvd = JOB.start(case)
        self.rank, self.size = JOB.rank(), JOB.size()
        graph = tf.Graph()
        self.ops = {}  # type: Dict[Tuple[str, int], Any]
        with graph.as_default():
            for op, count in counts(spec, self.size):
                name = "dlperf_%s_%d" % (op, count)
                if op == "allgather":
                    shard = local_buffer(tf, count // self.size, name + "_shard")
                    self.ops[(op, count)] = hvd.allgather(shard, name=name)[:1]
                elif op == "broadcast":
                    self.ops[(op, count)] = hvd.broadcast(local_buffer(tf, count, name + "_b"),
                                                          0, name=name)[:1]
                else:
                    self.ops[(op, count)] = hvd.allreduce(local_buffer(tf, count, name + "_b"),
                                                          op=hvd.Sum, name=name)[:1]
            self.rows = tf1.placeholder(tf.float32, [self.size, int(spec["iters"])])
            self._sum = hvd.allreduce(self.rows, op=hvd.Sum, name="dlperf_rows")
            self._barrier = hvd.allreduce(tf.ones([1], tf.float32), op=hvd.Sum,
                                          name="dlperf_barrier")
            init = tf1.local_variables_initializer()
            graph.finalize()
        self.session = tf1.Session(graph=graph, config=backend._session_config(False))
        self.session.run(init)

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        fetch = self.ops[(op, elements)]
        return lambda: self.session.run(fetch)

    def barrier(self):
        # type: () -> None
        self.session.run(self._barrier)

    def sum_rows(self, rows):
        # type: (Any) -> Any
        import numpy as np

        return self.session.run(self._sum, {self.rows: rows.astype(np.float32)}).astype(
            np.float64)

    def facts(self):
        # type: () -> Dict[str, Any]
        facts = self.job.facts("%(controller)s controller, %(size)d ranks, ops in the Session "
                               "graph")
        facts["framework_version"] = self.tf.__version__
        return facts

    def close(self):
        # type: () -> None
        self.session.close()
        self.job.hvd.shutdown()
