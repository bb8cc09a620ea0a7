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
from dlperf.backends import synthetic  # noqa: E402
from dlperf.backends.tensorflow1.bert import bert_pretraining, pretraining_loss  # noqa: E402
from dlperf.backends.tensorflow1.resnet import resnet50  # noqa: E402
from dlperf.worker.workload import UnsupportedError, Workload  # noqa: E402

tf1 = tf.compat.v1
tf1.logging.set_verbosity(tf1.logging.ERROR)  # deprecation notices are not results

__all__ = ["build"]

RESNET_WEIGHT_DECAY = 1e-4
BERT_WEIGHT_DECAY = 0.01
BERT_LR = 1e-4


def select_device(requested):
    # type: (str) -> bool
    """True when the graph runs on a GPU."""
    if requested not in ("auto", "cpu", "cuda"):
        raise UnsupportedError("unknown device %r; allowed: auto, cpu, cuda" % requested)
    has_gpu = tf.test.is_built_with_cuda() and tf.test.is_gpu_available()
    if requested == "cuda" and not has_gpu:
        raise UnsupportedError("device cuda requested but tensorflow %s sees no GPU (this is the "
                               "tensorflow-cpu build or no GPU is present)" % tf.__version__)
    if requested == "cpu" and has_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return False
    return has_gpu


def _data_variable(name, array, feeds):
    # type: (str, np.ndarray, Dict[Any, np.ndarray]) -> Any
    """A non-trainable variable holding ``array``, initialised by feeding it once."""
    holder = tf1.placeholder(tf.as_dtype(array.dtype), array.shape, name=name + "_init")
    feeds[holder] = array
    return tf1.Variable(holder, trainable=False, name=name,
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])


def _resnet50(knobs, batch, seed, train, feeds):
    # type: (Dict[str, int], int, int, bool, Dict[Any, np.ndarray]) -> Tuple[Any, Any, str]
    size, classes = knobs["image_size"], knobs["num_classes"]
    final = models.resnet50_convs(size)[-1].size_out
    if train and batch * final * final < 2:
        raise UnsupportedError(
            "resnet50 training at image_size %d ends at %dx%d, so batch %d gives BatchNorm a "
            "single value per channel; use batch >= 2 or a larger image" % (size, final, final, batch))
    data = synthetic.resnet_batch(batch, size, classes, seed, channels_last=True)
    images = _data_variable("images", data["images"], feeds)
    labels = _data_variable("labels", data["labels"], feeds)
    logits = resnet50(images, classes, training=train)
    if not train:
        return tf.reduce_mean(logits), None, ""
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    l2 = RESNET_WEIGHT_DECAY * tf.add_n([tf.nn.l2_loss(v) for v in tf1.trainable_variables()])
    optimizer = tf1.train.MomentumOptimizer(learning_rate=0.1, momentum=0.9)
    return loss, (loss + l2, optimizer, None), (
        "MomentumOptimizer(lr=0.1, momentum=0.9) + L2 1e-4 on all parameters")


def _bert(knobs, batch, seed, train, feeds):
    # type: (Dict[str, int], int, int, bool, Dict[Any, np.ndarray]) -> Tuple[Any, Any, str]
    data = synthetic.bert_batch(batch, knobs["seq_len"], knobs["vocab_size"],
                                knobs["type_vocab"], seed)
    t = {k: _data_variable(k, v, feeds) for k, v in data.items()}
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


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Any]]


def _train_op(total, optimizer, clip, fp16):
    # type: (Any, Any, Optional[float], bool) -> Any
    if fp16:
        optimizer = tf1.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    variables = tf1.trainable_variables()
    grads_and_vars = optimizer.compute_gradients(total, var_list=variables)
    if clip is not None:
        grads, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars], clip)
        grads_and_vars = list(zip(grads, [v for _, v in grads_and_vars]))
    with tf.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
        return optimizer.apply_gradients(grads_and_vars,
                                         global_step=tf1.train.get_or_create_global_step())


def _session_config(compiled):
    # type: (bool) -> Any
    config = tf1.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    if compiled:
        config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    return config


class SessionWorkload(Workload):
    """One ``session.run`` per step, fetching the loss (synchronous by construction)."""

    def __init__(self, session, fetches, samples_per_step, params, info, memory_op=None):
        # type: (Any, List[Any], int, int, Dict[str, Any], Any) -> None
        self.session = session
        self.fetches = fetches
        self.samples_per_step = samples_per_step
        self.params = params
        self.info = info
        self._memory_op = memory_op  # MaxBytesInUse on the GPU, None on the CPU

    def step(self):
        # type: () -> Any
        return self.session.run(self.fetches)[-1]

    def sync(self):
        # type: () -> None
        return None  # session.run has already waited for the step's outputs

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle)

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
    name = case["model"]
    if name not in BUILDERS:
        raise UnsupportedError("the tensorflow1 backend does not build model %r; it builds: %s"
                               % (name, ", ".join(sorted(BUILDERS))))
    task = case["task"]
    gpu = select_device(case.get("device", "auto"))
    precision = case["precision"]
    compiled = bool(case.get("compile", False))
    if compiled and not gpu and "--tf_xla_cpu_global_jit" not in os.environ.get(
            "TF_XLA_FLAGS", ""):
        # TF 1.15 auto-clusters for XLA on GPUs only unless told otherwise; read lazily by the
        # first session's graph optimisation, so setting it here (before the session) works.
        os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "")
                                      + " --tf_xla_cpu_global_jit").strip()
    batch = int(case["batch_size"])
    knobs = models.resolve_knobs(name, case.get("knobs") or {})
    train = task == "train"
    seed = int(case.get("seed", 0))

    graph = tf.Graph()
    feeds = {}  # type: Dict[Any, np.ndarray]
    with graph.as_default():
        tf1.set_random_seed(seed)
        with tf.device("/gpu:0" if gpu else "/cpu:0"):
            output, training, optimizer_desc = BUILDERS[name](knobs, batch, seed, train, feeds)
            if train:
                total, optimizer, clip = training
                train_op = _train_op(total, optimizer, clip, precision == "amp-fp16")
                fetches = [train_op, output]
            else:
                fetches = [output]
        params = int(sum(np.prod(v.shape.as_list()) for v in tf1.trainable_variables()))
        memory_op = None
        if gpu:
            memory_op = tf1.contrib.memory_stats.MaxBytesInUse()
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
        graph.finalize()  # nothing may add ops per step (a classic TF1 slowdown)

    session = tf1.Session(graph=graph, config=_session_config(compiled))
    session.run(init, feed_dict=feeds)

    info = runtime_info(gpu)
    info.update({
        "model": name,
        "knobs": knobs,
        "task": task,
        "precision": precision,
        "amp_graph_rewrite": precision == "amp-fp16",
        "layout": "NHWC (channels_last)" if name == "resnet50" else None,
        "optimizer": optimizer_desc if train else None,
        "compile": compiled,
        "compile_mode": "xla auto-clustering (global_jit_level ON_1)" if compiled else None,
        "tf_xla_flags": os.environ.get("TF_XLA_FLAGS"),
        "data": "synthetic, generated once (numpy, seeded) into non-trainable variables",
    })
    return SessionWorkload(session, fetches, batch, params, info, memory_op)
