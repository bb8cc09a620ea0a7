"""TensorFlow 2.x backend: ``build(case)`` -> a ready-to-step :class:`Workload`.

Keras 3 models built in the project (ResNet-50 v1.5, BERT-Base pre-training), trained by a
``tf.function`` step written out with ``GradientTape``: ``--compile`` = XLA
(``jit_compile=True``), otherwise TensorFlow's graph executor (Grappler + oneDNN on CPU).
Everything one-off happens here, outside the timed window: device choice, dtype policy, model and
optimizer construction (optimizer slots built eagerly), synthetic data placed on the device.
Tracing and XLA compilation happen in the first step, which the timing loop times apart.

Same optimisers as the PyTorch backend: ResNet SGD(lr 0.1, momentum 0.9) with L2 weight decay
1e-4 on every parameter (coupled, as ``torch.optim.SGD(weight_decay=...)``, added to the loss as
the TF official models do); BERT AdamW(lr 1e-4, weight decay 0.01, eps 1e-8) with global-norm
clipping at 1.0.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no C++ chatter
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from typing import Any, Callable, Dict, NamedTuple  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from dlperf import models  # noqa: E402
from dlperf.backends.common import CaseView, check_built, check_resnet_batch  # noqa: E402
from dlperf.data import synthetic  # noqa: E402
from dlperf.backends.tensorflow import XLA_CPU_COLLECTIVES  # noqa: E402
from dlperf.backends.tensorflow import cluster, distribute, input_pipeline  # noqa: E402
from dlperf.backends.tensorflow.bert import BertForPreTraining, pretraining_loss  # noqa: E402
from dlperf.backends.tensorflow.resnet import resnet50  # noqa: E402
from dlperf.backends.tensorflow.workload import (  # noqa: E402
    TFWorkload,
    count_params,
    runtime_info,
    select_device,
    set_precision,
    unique,
)
from dlperf.worker.workload import UnsupportedError, Workload  # noqa: E402

__all__ = ["build"]

RESNET_WEIGHT_DECAY = 1e-4

# What a model builder hands back: the network, its synthetic batch as numpy arrays for a seed,
# the loss / inference scalar as functions of a batch of tensors, the optimizer, and the L2
# coefficient added to the loss (0 = none).
Parts = NamedTuple("Parts", [
    ("model", Any),
    ("data", Callable[[int], Dict[str, Any]]),
    ("loss", Callable[[Dict[str, Any]], Any]),
    ("infer", Callable[[Dict[str, Any]], Any]),
    ("optimizer", Callable[[], Any]),
    ("l2", float),
    ("optimizer_desc", str),
])


def _resnet50(knobs, batch):
    # type: (Dict[str, int], int) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, True)  # the builder is not told the task: refused alike
    model = resnet50(size, classes, models.resnet50_stages(knobs))

    def data(seed):
        return synthetic.resnet_batch(batch, size, classes, seed, channels_last=True)

    def loss(b):
        logits = model(b["images"], training=True)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=b["labels"],
                                                                             logits=logits))

    def infer(b):
        return tf.reduce_mean(tf.cast(model(b["images"], training=False), tf.float32))

    def optimizer():
        return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)

    return Parts(model, data, loss, infer, optimizer, RESNET_WEIGHT_DECAY,
                 "SGD(lr=0.1, momentum=0.9) + L2 1e-4 on all parameters")


def _bert(knobs, batch):
    # type: (Dict[str, int], int) -> Parts
    model = BertForPreTraining(
        vocab_size=knobs["vocab_size"], hidden=knobs["hidden"], layers_=knobs["layers"],
        heads=knobs["heads"], intermediate=knobs["intermediate"],
        max_positions=knobs["max_positions"], type_vocab=knobs["type_vocab"])
    ids = tf.zeros([1, knobs["seq_len"]], tf.int32)
    model((ids, ids), training=False)  # create the weights

    def data(seed):
        return synthetic.bert_batch(batch, knobs["seq_len"], knobs["vocab_size"],
                                    knobs["type_vocab"], seed)

    def loss(b):
        mlm, nsp = model((b["input_ids"], b["token_type_ids"]), training=True)
        return pretraining_loss(mlm, nsp, b["mlm_labels"], b["nsp_labels"])

    def infer(b):
        mlm, nsp = model((b["input_ids"], b["token_type_ids"]), training=False)
        return tf.reduce_mean(mlm) + tf.reduce_mean(nsp)

    clip, clip_desc = models.gradient_clip(knobs)

    def optimizer():
        return keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, beta_1=0.9,
                                      beta_2=0.999, epsilon=1e-8, global_clipnorm=clip)

    return Parts(model, data, loss, infer, optimizer, 0.0,
                 "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc)


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Parts]]


def _train_step(parts, variables, optimizer, fp16, replicas=1):
    # type: (Parts, Any, Any, bool, int) -> Callable[[Dict[str, Any]], Any]
    """One replica's step on its batch. With ``replicas`` > 1 the optimizer sums the replicas'
    gradients (Keras's all-reduce in replica context), so each replica's loss is divided by
    their number: the update is the mean over the global batch, as on one device."""
    l2 = parts.l2

    def step(batch):
        with tf.GradientTape() as tape:
            loss = parts.loss(batch)
            total = loss
            if l2:
                total = total + l2 * tf.add_n([tf.nn.l2_loss(v) for v in variables])
            if replicas > 1:
                total = total / replicas
            if fp16:
                total = optimizer.scale_loss(total)
        grads = tape.gradient(total, variables)
        optimizer.apply_gradients(zip(grads, variables))  # unscales and clips where configured
        return loss

    return step


def build(case):
    # type: (Dict[str, Any]) -> Workload
    check_built(case["model"], BUILDERS, "tensorflow")
    view = CaseView(case)
    device = select_device(view.device)
    gpu = device.startswith("/GPU")
    if view.compiled and cluster.job()[1] > 1 and not gpu:
        raise UnsupportedError(XLA_CPU_COLLECTIVES)  # before any worker starts its server
    strategy, parallel_info = distribute.make_strategy(case, gpu)
    if gpu:
        for index in range(len(tf.config.get_visible_devices("GPU"))):
            tf.config.experimental.reset_memory_stats("GPU:%d" % index)
    precision_info = set_precision(view.precision, device)
    keras.utils.set_random_seed(view.seed)
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    local = distribute.local_replicas(case, gpu)
    if view.data_only:  # the input pipeline alone: no model
        return _data_only(view, device, strategy, parallel_info, local)
    feed = None  # type: Any
    if view.dataset:  # a dataset folder: the next batch per step
        feed = input_pipeline.Feed(case, view.knobs["image_size"], view.batch, view.seed,
                                   strategy, local)

    scope = strategy.scope() if strategy is not None else tf.device(device)
    with scope:
        parts = BUILDERS[view.name](view.knobs, view.batch)
        variables = unique(parts.model.trainable_variables)
        body = _replica_body(parts, variables, view, replicas)
    step = _step(body, parts, view, device, strategy, feed)

    info = view.info(runtime_info(device), precision_info)
    info.update({
        "layout": "NHWC (channels_last)" if view.name == "resnet50" else None,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "compile": view.compiled,
        "compile_mode": "xla (jit_compile=True)" if view.compiled else "tf.function graph",
        "data": feed.info if feed is not None else
        "synthetic, generated once (numpy, seeded) and held on the device",
        "world_size": cluster.job()[1],
        "rank": cluster.job()[0],
        "replicas_in_sync": replicas,
    })
    info.update(parallel_info)
    if replicas > 1 and view.train and models.gradient_clip(view.knobs)[0]:
        info["gradient_clipping"] = ("each replica's gradients, before the all-reduce (Keras "
                                     "clips in apply_gradients ahead of its replica-context sum)")
    collectives = distribute.activate(strategy) if strategy is not None else None
    return TFWorkload(step, device, view.batch * local, count_params(variables), info,
                      collectives, variables)


def _data_only(view, device, strategy, parallel_info, local):
    # type: (CaseView, str, Any, Dict[str, Any], int) -> Workload
    """``--data-only``: the input pipeline alone, no model, one feed per process."""
    if local > 1:  # one feed per process: its step takes one batch, not one per GPU
        raise UnsupportedError("data: --data-only in tensorflow feeds one device per "
                               "process; %d GPUs in one process is not measured" % local)
    collectives = distribute.activate(strategy) if strategy is not None else None
    info = runtime_info(device)
    info.update(parallel_info)
    info.update({"world_size": cluster.job()[1], "rank": cluster.job()[0]})
    with tf.device("/CPU:0"):
        return input_pipeline.data_only(view.case, view.knobs, view.batch, device, view.seed,
                                        info, collectives)


def _replica_body(parts, variables, view, replicas):
    # type: (Parts, Any, CaseView, int) -> Callable[[Dict[str, Any]], Any]
    """What one replica runs on its batch: the training step (its optimizer built now, slots
    included, not while tracing the first step) or the inference scalar."""
    if not view.train:
        return parts.infer
    optimizer = parts.optimizer()
    fp16 = view.precision == "amp-fp16"
    if fp16:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return _train_step(parts, variables, optimizer, fp16, replicas)


def _step(body, parts, view, device, strategy, feed):
    # type: (Callable[[Dict[str, Any]], Any], Parts, CaseView, str, Any, Any) -> Callable[[], Any]
    """The traced step of the workload: ``body`` on the feed's next batch or on the synthetic
    one held on the device, on this process's device or on every replica of the strategy."""
    compiled = view.compiled
    if feed is not None and strategy is None:
        traced = tf.function(body, jit_compile=compiled, reduce_retracing=True)

        def fed_step():
            batch_ = feed.next()  # on the host; the traced step copies it to the device
            with tf.device(device):
                return traced(batch_)

        return fed_step
    if feed is not None:
        replica_fn = tf.function(body, jit_compile=True) if compiled else body
        traced = tf.function(lambda per_replica: strategy.experimental_local_results(
            strategy.run(replica_fn, args=(per_replica,)))[0], reduce_retracing=True)

        def step():
            return traced(feed.next())  # one batch per local replica

        return step
    if strategy is None:
        with tf.device(device):
            data = {k: tf.constant(v) for k, v in parts.data(view.seed).items()}
        return tf.function(lambda: body(data), jit_compile=compiled, reduce_retracing=True)
    # each replica its own batch (seeded by its place in the job), on its own device
    data = distribute.per_replica_data(strategy, lambda replica: parts.data(view.seed + replica))
    replica_body = tf.function(body, jit_compile=True) if compiled else body

    def distributed_step():
        per_replica = strategy.run(replica_body, args=(data,))
        return strategy.experimental_local_results(per_replica)[0]

    return tf.function(distributed_step, reduce_retracing=True)
