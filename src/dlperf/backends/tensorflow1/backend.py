"""TensorFlow 1.x backend (``tensorflow1``): graph mode and ``tf.Session``, in the style of
NVIDIA's TF1 ResNet scripts. Runs in its own Python 3.7 environment with tensorflow-cpu 1.15, so
this package is valid Python 3.7 and imports only numpy, TensorFlow and stdlib-only dlperf parts.

``build(case)`` constructs the whole graph once (model, loss, gradients, optimizer, batch-norm
update ops), places the synthetic batch in non-trainable variables (fed once, so Grappler cannot
constant-fold the input), creates the session and runs the initialisers — all outside the timed
window. A step is one ``session.run`` of the train op that also fetches the loss; ``session.run``
returns only when the step is done, so it is its own synchronisation.

- ``--compile`` = XLA auto-clustering via the session config (``global_jit_level = ON_1``; on a
  CPU TF 1.15 also needs ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit``, set here before the session).
- several processes (``--devices``/``--nnodes``): the collective all-reduce strategy in graph mode
  (:mod:`.distribute`): the step is built once per replica under ``strategy.scope()`` with
  ``experimental_run_v2``, each replica on its own batch.
- ``--launcher horovod`` (:mod:`.horovod`): the single-process graph on every rank, its
  optimizer wrapped in ``hvd.DistributedOptimizer``, rank 0's initial weights broadcast.
- ``amp-fp16`` = the automatic mixed precision graph rewrite
  (``tf.train.experimental.enable_mixed_precision_graph_rewrite``, dynamic loss scaling); TF 1.15
  applies it on GPUs only. ``amp-bf16`` does not exist in TF 1.15 (its bf16 rewrite arrived in
  TF 2.x) and ``tf32`` needs CUDA 11, which TF 1.15 predates: both report ``unsupported``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no C++ chatter

from typing import Any, Callable, Dict, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dlperf import models  # noqa: E402
from dlperf.backends.common import (  # noqa: E402
    CaseView, CollectiveRanks, check_built, check_device_name, check_resnet_batch)
from dlperf.data import synthetic  # noqa: E402
from dlperf.backends.tensorflow import cluster  # noqa: E402
from dlperf.backends.tensorflow1 import distribute, horovod  # noqa: E402
from dlperf.backends.tensorflow1.bert import bert_pretraining, pretraining_loss  # noqa: E402
from dlperf.backends.tensorflow1.resnet import resnet50  # noqa: E402
from dlperf.worker.support import CPU_BUILD, resolved_device  # noqa: E402
from dlperf.worker.workload import UnsupportedError, Workload, median_seconds  # noqa: E402

tf1 = tf.compat.v1
tf1.logging.set_verbosity(tf1.logging.ERROR)  # deprecation notices are not results

__all__ = ["build"]

RESNET_WEIGHT_DECAY = 1e-4
BERT_WEIGHT_DECAY = 0.01
BERT_LR = 1e-4


def select_device(requested):
    # type: (str) -> bool
    """True when the graph runs on a GPU."""
    check_device_name(requested)
    has_gpu = tf.test.is_built_with_cuda() and tf.test.is_gpu_available()
    if requested == "cuda" and not has_gpu:
        raise UnsupportedError("device cuda requested but tensorflow %s sees no GPU (this is the "
                               "tensorflow-cpu build or no GPU is present)" % tf.__version__)
    if requested == "cpu" and has_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return False
    return has_gpu


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name (from the description TensorFlow 1.15 gives its first GPU), or why the CPU."""
    if select_device(requested):
        from tensorflow.python.client import device_lib

        gpus = [d for d in device_lib.list_local_devices() if d.device_type == "GPU"]
        described = gpus[0].physical_device_desc if gpus else ""
        fields = dict(part.strip().split(": ", 1) for part in described.split(",")
                      if ": " in part)
        return resolved_device("cuda", int(fields.get("device", 0)), fields.get("name"))
    if not tf.test.is_built_with_cuda():
        return resolved_device("cpu", reason=CPU_BUILD % ("tensorflow1", "tensorflow1"))
    return resolved_device("cpu", reason="tensorflow %s (a CUDA build) sees no GPU (driver, "
                                         "CUDA_VISIBLE_DEVICES)" % tf.__version__)


def _data_variable(name, array, feeds):
    # type: (str, np.ndarray, Dict[Any, np.ndarray]) -> Any
    """A non-trainable variable holding ``array``, initialised by feeding it once."""
    holder = tf1.placeholder(tf.as_dtype(array.dtype), array.shape, name=name + "_init")
    feeds[holder] = array
    return tf1.Variable(holder, trainable=False, name=name,
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])


def _resnet_data(knobs, batch, seed, train, feeds, suffix=""):
    # type: (Dict[str, int], int, int, bool, Dict[Any, np.ndarray], str) -> Dict[str, Any]
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, train)
    data = synthetic.resnet_batch(batch, size, classes, seed, channels_last=True)
    return {k: _data_variable(k + suffix, v, feeds) for k, v in data.items()}


def _resnet50(knobs, data, train):
    # type: (Dict[str, int], Dict[str, Any], bool) -> Tuple[Any, Any, str]
    classes = knobs["num_classes"]
    images, labels = data["images"], data["labels"]
    logits = resnet50(images, classes, training=train, stages=models.resnet50_stages(knobs))
    if not train:
        return tf.reduce_mean(logits), None, ""
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    l2 = RESNET_WEIGHT_DECAY * tf.add_n([tf.nn.l2_loss(v) for v in tf1.trainable_variables()])
    optimizer = tf1.train.MomentumOptimizer(learning_rate=0.1, momentum=0.9)
    return loss, (loss + l2, optimizer, None), (
        "MomentumOptimizer(lr=0.1, momentum=0.9) + L2 1e-4 on all parameters")


def _bert_data(knobs, batch, seed, train, feeds, suffix=""):
    # type: (Dict[str, int], int, int, bool, Dict[Any, np.ndarray], str) -> Dict[str, Any]
    data = synthetic.bert_batch(batch, knobs["seq_len"], knobs["vocab_size"],
                                knobs["type_vocab"], seed)
    return {k: _data_variable(k + suffix, v, feeds) for k, v in data.items()}


def _bert(knobs, t, train):
    # type: (Dict[str, int], Dict[str, Any], bool) -> Tuple[Any, Any, str]
    mlm, nsp = bert_pretraining(t["input_ids"], t["token_type_ids"], knobs, training=train)
    if not train:
        return tf.reduce_mean(mlm) + tf.reduce_mean(nsp), None, ""
    loss = pretraining_loss(mlm, nsp, t["mlm_labels"], t["nsp_labels"])
    from tensorflow.contrib.opt import AdamWOptimizer  # TF 1.15's decoupled-decay Adam

    # contrib's decay is not scaled by the learning rate (w -= wd * w); PyTorch's AdamW does
    # w -= lr * wd * w, so pass lr * wd to get the same update.
    optimizer = AdamWOptimizer(weight_decay=BERT_LR * BERT_WEIGHT_DECAY, learning_rate=BERT_LR,
                               beta1=0.9, beta2=0.999, epsilon=1e-8)
    clip, clip_desc = models.gradient_clip(knobs)
    return loss, (loss, optimizer, clip), "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc


# model -> (its synthetic batch as data variables, the network and its loss on a batch)
BUILDERS = {"resnet50": (_resnet_data, _resnet50),
            "bert-base": (_bert_data, _bert)}  # type: Dict[str, Tuple[Callable[..., Any], Callable[..., Any]]]


def _train_op(total, optimizer, clip, fp16, update_ops=None):
    # type: (Any, Any, Optional[float], bool, Optional[List[Any]]) -> Any
    if fp16:
        optimizer = tf1.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    variables = tf1.trainable_variables()
    grads_and_vars = optimizer.compute_gradients(total, var_list=variables)
    if clip is not None:
        grads, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars], clip)
        grads_and_vars = list(zip(grads, [v for _, v in grads_and_vars]))
    if update_ops is None:
        update_ops = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        return optimizer.apply_gradients(grads_and_vars,
                                         global_step=tf1.train.get_or_create_global_step())


def _session_config(compiled):
    # type: (bool) -> Any
    config = tf1.ConfigProto(allow_soft_placement=True,
                             intra_op_parallelism_threads=_threads("TF_NUM_INTRAOP_THREADS"),
                             inter_op_parallelism_threads=_threads("TF_NUM_INTEROP_THREADS"))
    config.gpu_options.allow_growth = True
    if compiled:
        config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    return config


def _threads(variable):
    # type: (str) -> int
    """The worker's per-process thread count (dlperf.worker.placement), 0: TensorFlow's own."""
    value = os.environ.get(variable, "").strip()
    return int(value) if value.isdigit() else 0


class SessionWorkload(CollectiveRanks, Workload):
    """One ``session.run`` per step, fetching the loss (synchronous by construction)."""

    def __init__(self, session, fetches, samples_per_step, params, info, memory_op=None,
                 collectives=None, first_step_deadline=None):
        # type: (Any, List[Any], int, int, Dict[str, Any], Any, Any, Optional[float]) -> None
        self.session = session
        self._collectives = collectives  # distribute.Collectives with several replicas
        # seconds the first step may take with several workers (see build)
        self._first_step_deadline = first_step_deadline
        self.fetches = fetches
        super(SessionWorkload, self).__init__(samples_per_step, params, info)
        self._memory_op = memory_op  # MaxBytesInUse on the GPU, None on the CPU
        self.tracer = None  # type: Any  # profiling.SessionProfiler, after the window

    def step(self):
        # type: () -> Any
        if self._first_step_deadline is not None:
            seconds, self._first_step_deadline = self._first_step_deadline, None
            deadline = cluster.Deadline(seconds, cluster.FIRST_STEP_STALLED)
            handle = self.session.run(self.fetches)[-1]
            deadline.met()
            return handle
        if self.tracer is None:
            return self.session.run(self.fetches)[-1]
        return self.tracer.run(self.session, self.fetches)[-1]  # profiled steps only

    def sync(self):
        # type: () -> None
        return None  # session.run has already waited for the step's outputs

    def allreduce_probe(self):
        # type: () -> Optional[float]
        if self._collectives is None:
            return None
        return self._collectives.allreduce_seconds(median_seconds)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle)

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.tensorflow1.profiling import SessionProfiler

        return SessionProfiler(self, str(self.info.get("device", "")).startswith("/gpu"))

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if self._memory_op is None:
            return None
        return int(self.session.run(self._memory_op))


def runtime_info(gpu):
    # type: (bool) -> Dict[str, Any]
    info = {
        "tensorflow_version": tf.__version__,
        "device": "/gpu:0" if gpu else "/cpu:0",
        "graph_mode": "tf.compat.v1.Session",
        "cuda_build": bool(tf.test.is_built_with_cuda()),
        "mkl": _mkl_enabled(),
    }  # type: Dict[str, Any]
    return info


def _mkl_enabled():
    # type: () -> Optional[bool]
    try:
        from tensorflow.python.framework import test_util
        return bool(test_util.IsMklEnabled())
    except Exception:  # private API; only a fact worth recording when present
        return None


def build(case):
    # type: (Dict[str, Any]) -> Workload
    check_built(case["model"], BUILDERS, "tensorflow1")
    view = CaseView(case)
    gpu = select_device(view.device)
    if view.compiled and not gpu:
        _xla_on_cpu()
    config = _session_config(view.compiled)
    hvd = horovod.start(case)
    if hvd is not None:
        strategy, target, parallel_info = None, "", horovod.info()
        if gpu:
            horovod.gpu_options(config)
    else:
        strategy, target, config, parallel_info = distribute.make_strategy(case, gpu, config)
    graph = tf.Graph()
    feeds = {}  # type: Dict[Any, np.ndarray]
    with graph.as_default():
        tf1.set_random_seed(view.seed)
        fetches, optimizer_desc, collectives = _fetches(view, strategy, gpu, feeds, hvd)
        params = _trainable_params()
        memory_op = tf1.contrib.memory_stats.MaxBytesInUse() if gpu else None
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
        graph.finalize()  # nothing may add ops per step (a classic TF1 slowdown)
    session = tf1.Session(target, graph=graph, config=config)
    # TF 1.15's collectives have no timeout: with several workers, the first two (the
    # initialiser's broadcast, the first step's all-reduce) get --rdzv-timeout's
    deadline_s = cluster.rdzv_timeout_s() if strategy is not None and cluster.job()[1] > 1 else None
    _initialise(session, init, feeds, deadline_s)
    if hvd is not None:
        horovod.activate(collectives, session)  # rank 0's initial weights to every rank
    elif collectives is not None:
        collectives.session = session
        distribute.activate(collectives)

    info = view.info(runtime_info(gpu))
    info.update({
        "precision": view.precision,
        "amp_graph_rewrite": view.precision == "amp-fp16",
        "layout": "NHWC (channels_last)" if view.name == "resnet50" else None,
        "optimizer": view.optimizer(optimizer_desc),
        "compile": view.compiled,
        "compile_mode": "xla auto-clustering (global_jit_level ON_1)" if view.compiled else None,
        "tf_xla_flags": os.environ.get("TF_XLA_FLAGS"),
        "data": "synthetic, generated once (numpy, seeded) into non-trainable variables",
    })
    info.update(parallel_info)
    if strategy is not None and view.train and models.gradient_clip(view.knobs)[0]:
        info["gradient_clipping"] = ("each replica's gradients, before the all-reduce "
                                     "(clip_by_global_norm ahead of apply_gradients' sum)")
    rank, world = horovod.rank_and_size() if hvd is not None else cluster.job()
    info.update({"world_size": world, "rank": rank,
                 "replicas_in_sync": strategy.num_replicas_in_sync if strategy else 1,
                 "intra_op_threads": config.intra_op_parallelism_threads or "default",
                 "inter_op_threads": config.inter_op_parallelism_threads or "default",
                 "num_threads": config.intra_op_parallelism_threads or None})
    local = distribute.local_replicas(case, gpu)
    return SessionWorkload(session, fetches, view.batch * local, params, info, memory_op,
                           collectives, deadline_s)


def _xla_on_cpu():
    # type: () -> None
    """TF 1.15 auto-clusters for XLA on GPUs only unless told otherwise; the flag is read lazily
    by the first session's graph optimisation, so setting it before the session works."""
    if "--tf_xla_cpu_global_jit" not in os.environ.get("TF_XLA_FLAGS", ""):
        os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "")
                                      + " --tf_xla_cpu_global_jit").strip()


def _fetches(view, strategy, gpu, feeds, hvd=None):
    # type: (CaseView, Any, bool, Dict[Any, np.ndarray], Any) -> Tuple[List[Any], str, Any]
    """(what a step runs, the optimizer's description, the worker's collectives or None), built
    in the default graph: the train op (when training) and the output, last; with a strategy,
    the step once per replica (:func:`_replicated`) and the collectives beside it; under
    Horovod (``hvd``), each rank its own batch (seed + rank) and the optimizer wrapped in
    ``hvd.DistributedOptimizer`` (Horovod runs training only), Horovod's collectives beside."""
    if strategy is not None:
        fetches, optimizer_desc = _replicated(strategy, view, feeds)
        collectives = distribute.Collectives(strategy, _trainable_params(), cluster.job()[1])
        return fetches, optimizer_desc, collectives
    make_data, make_model = BUILDERS[view.name]
    seed = view.seed + (horovod.rank_and_size()[0] if hvd is not None else 0)
    with tf.device("/gpu:0" if gpu else "/cpu:0"):
        data = make_data(view.knobs, view.batch, seed, view.train, feeds)
        output, training, optimizer_desc = make_model(view.knobs, data, view.train)
        if not view.train:
            return [output], optimizer_desc, None
        total, optimizer, clip = training
        if hvd is not None:
            optimizer = horovod.wrap(optimizer)
            optimizer_desc = "hvd.DistributedOptimizer(%s)" % optimizer_desc
        train_op = _train_op(total, optimizer, clip, view.precision == "amp-fp16")
    collectives = horovod.Collectives(_trainable_params()) if hvd is not None else None
    return [train_op, output], optimizer_desc, collectives


def _initialise(session, init, feeds, deadline_s):
    # type: (Any, List[Any], Dict[Any, np.ndarray], Optional[float]) -> None
    """Run the initialisers, feeding the synthetic batch into its variables. With several
    workers (``deadline_s`` given) the initialiser broadcasts worker 0's values: the first
    collective, which needs every worker, and TF 1.15 gives it no deadline of its own, so
    dlperf's applies."""
    if deadline_s is not None:
        deadline = cluster.Deadline(deadline_s,
                                    "the variable initialiser's collective broadcast (TF 1.15's "
                                    "first collective) did not complete: not every worker "
                                    "joined")
        session.run(init, feed_dict=feeds)
        deadline.met()
    else:
        session.run(init, feed_dict=feeds)


def _trainable_params():
    # type: () -> int
    """Trainable parameters of the graph's model (a mirrored variable counts once)."""
    seen = {}  # type: Dict[str, int]
    for v in tf1.trainable_variables():
        seen[v.name] = int(np.prod(v.shape.as_list()))
    return sum(seen.values())


def _replicated(strategy, view, feeds):
    # type: (Any, CaseView, Dict[Any, np.ndarray]) -> Tuple[List[Any], str]
    """The step built once per replica under the strategy: each replica its own batch (data
    variables on its device, seeded by its place in the job); gradients all-reduced by the
    optimizer. Fetches: every replica's output (so every replica's step runs), this process's
    first replica's last."""
    make_data, make_model = BUILDERS[view.name]
    knobs, batch, seed, train = view.knobs, view.batch, view.seed, view.train
    rank = cluster.job()[0]
    devices = strategy.extended.worker_devices
    data = []  # type: List[Dict[str, Any]]
    for index, device in enumerate(devices):
        replica = rank * len(devices) + index
        with tf.device(device):
            data.append(make_data(knobs, batch, seed + replica, train, feeds, "_%d" % replica))
    replicas = strategy.num_replicas_in_sync
    described = []  # type: List[str]

    def replica_step():
        before = len(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS))
        output, training, desc = make_model(knobs, data[distribute.replica_index(strategy)],
                                            train)
        described[:] = [desc]
        if not train:
            return tf.identity(output)
        total, optimizer, clip = training
        # apply_gradients sums the replicas' gradients: divide, so the update is the mean
        update_ops = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)[before:]  # this replica's BN
        step = _train_op(total / replicas, optimizer, clip, view.precision == "amp-fp16",
                         update_ops)
        with tf.control_dependencies([step]):
            return tf.identity(output)

    with strategy.scope():
        outputs = strategy.experimental_local_results(strategy.experimental_run_v2(replica_step))
    return [tf.group(*outputs), outputs[0]], described[0] if described else ""
