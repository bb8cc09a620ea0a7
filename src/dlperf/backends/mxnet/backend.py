"""MXNet 1.9 backend (Gluon): ``build(case)`` turns a case dict into a ready Workload.

Everything one-off happens here, outside the timed window: OpenMP threads, AMP initialisation
(before the model is built, as ``mxnet.contrib.amp`` requires), model construction and
initialisation on the device, synthetic data (once, on the device, seeded), the Gluon Trainer,
and ``hybridize`` for ``--compile`` (the cached graph is built lazily in the first step, which
the timing loop times apart).
"""

from typing import Any, Callable, Dict, List, NamedTuple, Optional

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import HybridBlock

from dlperf import models
from dlperf.backends.common import CaseView, check_resnet_batch
from dlperf.backends.mxnet import horovod
from dlperf.data import synthetic
from dlperf.backends.mxnet.bert import BertForPreTraining, pretraining_loss
from dlperf.backends.mxnet.optim import AdamW
from dlperf.backends.mxnet.resnet import ResNet50
from dlperf.backends.mxnet.workload import (MXNetWorkload, Precision, broadcast_weights,
                                            configure_threads, count_params, join, launch_rank,
                                            op_dtypes, runtime_info, select_context)
from dlperf.worker.workload import UnsupportedError, Workload

__all__ = ["build"]

# MXNet 1.9.1's CPU convolutions (oneDNN and the native ones) refuse NHWC ("could not create a
# descriptor for a dilated convolution forward propagation primitive"), so NCHW it is.
LAYOUT = "NCHW"
HYBRIDIZE_FLAGS = {"static_alloc": True, "static_shape": True}
HYBRIDIZE = "hybridize(static_alloc=True, static_shape=True)"

# What a model builder hands back: the bare network (for counting and the optimizer), a block
# that computes the step's scalar from the stored batch, the batch, the trainer and descriptions.
Parts = NamedTuple(
    "Parts",
    [
        ("model", HybridBlock),
        ("objective", HybridBlock),  # objective(*inputs) -> loss (or an output summary)
        ("inputs", List[Any]),
        ("make_trainer", Callable[[Any], Any]),
        ("clip", Optional[float]),
        ("layout", str),
        ("optimizer_desc", str),
        # how many per-sample losses the objective returns in training: the Trainer divides the
        # summed gradient by it (Gluon's step(batch_size)); 1 when the objective is already a mean
        ("loss_samples", int),
        ("loss_desc", str),
    ],
)


class _ResNetObjective(HybridBlock):
    """Forward and loss in one block, so ``hybridize`` compiles both.

    Training returns Gluon's per-sample ``SoftmaxCrossEntropyLoss`` and the Trainer averages
    (``step(batch)``), as Gluon's recipes do: the same mean cross-entropy written as one scalar
    runs faster on MXNet's engine than the step MXNet's users run, so it would not measure
    theirs. The logits are cast to float32 only under AMP (in fp32 the cast is a copy the
    tutorial loop does not make).
    """

    def __init__(self, model, train, amp, **kwargs):
        # type: (HybridBlock, bool, bool, **Any) -> None
        super(_ResNetObjective, self).__init__(**kwargs)
        self.model = model
        self.train_mode = train
        self.amp = amp
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def hybrid_forward(self, F, images, labels=None):
        # type: (Any, Any, Any) -> Any
        logits = self.model(images)
        if self.amp:
            logits = F.amp_cast(logits, dtype="float32")
        if self.train_mode:
            return self.loss(logits, labels)
        return F.mean(logits)


class _BertObjective(HybridBlock):
    """Forward and the pre-training loss in one block; the logits cast to float32 under AMP."""

    def __init__(self, model, train, amp, **kwargs):
        # type: (HybridBlock, bool, bool, **Any) -> None
        super(_BertObjective, self).__init__(**kwargs)
        self.model = model
        self.train_mode = train
        self.amp = amp

    def hybrid_forward(self, F, ids, token_types, mlm_labels=None, nsp_labels=None):
        # type: (Any, Any, Any, Any, Any) -> Any
        mlm_logits, nsp_logits = self.model(ids, token_types)
        if self.amp:
            mlm_logits = F.amp_cast(mlm_logits, dtype="float32")
            nsp_logits = F.amp_cast(nsp_logits, dtype="float32")
        if self.train_mode:
            return pretraining_loss(F, mlm_logits, nsp_logits, mlm_labels, nsp_labels)
        return F.mean(mlm_logits) + F.mean(nsp_logits)


def _resnet50(knobs, batch, train, amp, ctx, seed):
    # type: (Dict[str, int], int, bool, bool, Any, int) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, train)
    model = ResNet50(classes, knobs.get("max_blocks"))
    data = synthetic.resnet_batch(batch, size, classes, seed, channels_last=False)
    inputs = [mx.nd.array(data["images"], ctx=ctx, dtype="float32")]
    if train:
        inputs.append(mx.nd.array(data["labels"], ctx=ctx, dtype="float32"))

    def make_trainer(params, kvstore):
        # type: (Any, Any) -> Any
        # MXNet's sgd_mom_update: state = 0.9 state - lr (g + wd w); w += state, which is
        # PyTorch's SGD(momentum=0.9, weight_decay=1e-4) at a constant learning rate
        return new_trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4},
                           kvstore)

    return Parts(model, _ResNetObjective(model, train, amp), inputs, make_trainer, None, LAYOUT,
                 "SGD(lr=0.1, momentum=0.9, L2 weight_decay=1e-4)", batch,
                 "gluon.loss.SoftmaxCrossEntropyLoss per sample, averaged by Trainer.step(batch)")


def _bert(knobs, batch, train, amp, ctx, seed):
    # type: (Dict[str, int], int, bool, bool, Any, int) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = BertForPreTraining(
        vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"], heads=knobs["heads"],
        intermediate=knobs["intermediate"], max_positions=knobs["max_positions"],
        type_vocab=knobs["type_vocab"])
    data = synthetic.bert_batch(batch, s, v, knobs["type_vocab"], seed)
    inputs = [mx.nd.array(data["input_ids"], ctx=ctx, dtype="int32"),
              mx.nd.array(data["token_type_ids"], ctx=ctx, dtype="int32")]
    if train:
        inputs += [mx.nd.array(data["mlm_labels"], ctx=ctx, dtype="float32"),
                   mx.nd.array(data["nsp_labels"], ctx=ctx, dtype="float32")]
    clip, clip_desc = models.gradient_clip(knobs)

    def make_trainer(params, kvstore):
        # type: (Any, Any) -> Any
        # torch.optim.AdamW's settings; update_on_kvstore=False lets the step clip in between
        optimizer = AdamW(learning_rate=1e-4, beta1=0.9, beta2=0.999, epsilon=1e-8, wd=0.01)
        return new_trainer(params, optimizer, None, kvstore, update_on_kvstore=False)

    return Parts(model, _BertObjective(model, train, amp), inputs, make_trainer, clip,
                 "batch-major (B, S, H)",
                 "AdamW(lr=1e-4, weight_decay=0.01, fused _multi_adamw_update), " + clip_desc, 1,
                 "MLM cross-entropy (mean over labelled positions) + NSP cross-entropy (mean)")


def trainer_kvstore(kvstore):
    # type: (Any) -> Dict[str, Any]
    """The Trainer's kvstore arguments: Gluon's defaults for one process; with the job's
    dist_sync kvstore, the gradients summed over the workers and the update on each worker."""
    if kvstore is None:
        return {}
    return {"kvstore": kvstore, "update_on_kvstore": False}


def new_trainer(params, optimizer, optimizer_params, kvstore, **options):
    # type: (Any, Any, Optional[Dict[str, Any]], Any, **Any) -> Any
    """Gluon's Trainer with the job's kvstore (:func:`trainer_kvstore`) and ``options``; under
    Horovod, ``hvd.DistributedTrainer`` (which has no kvstore and never updates on one)."""
    if horovod.started():
        return horovod.trainer(params, optimizer, optimizer_params)
    return gluon.Trainer(params, optimizer, optimizer_params,
                         **dict(options, **trainer_kvstore(kvstore)))


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Parts]]


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    name, train = view.name, view.train
    threads = configure_threads()
    ctx = select_context(view.device)
    hvd = horovod.start(case)  # --launcher horovod: hvd.init() instead of the kvstore
    kvstore = None if hvd else join()  # one worker of several: the dist_sync kvstore
    precision = Precision(view.precision, ctx)  # AMP must be on before the model exists
    mx.random.seed(view.seed, ctx="all")  # the same initial weights on every worker
    amp = precision.dtype is not None
    rank = horovod.rank() if hvd else launch_rank()
    parts = BUILDERS[name](view.knobs, view.batch, train, amp, ctx,
                           view.seed + rank)  # its own batch

    model = parts.model
    model.initialize(ctx=ctx)  # each parameter carries its own initializer
    if hvd:
        horovod.broadcast(model.collect_params())  # rank 0's weights, once Gluon makes them
    params = count_params(model)
    objective = parts.objective
    info = runtime_info(ctx, threads)
    if hvd:
        info.update(horovod.info())
    info.update(precision.info())
    if precision.dtype is not None:
        # which operators really compute in bf16 in this very network
        dtypes = op_dtypes(objective, parts.inputs)
        info["op_dtypes"] = dtypes
        if not dtypes.get("bfloat16"):
            raise UnsupportedError("precision %s: mxnet.contrib.amp converted no operator of %s "
                                   "to bfloat16" % (precision.name, name))
    info["compute_dtype"] = precision.dtype or "float32"

    trainer = parts.make_trainer(model.collect_params(), kvstore) if train else None
    if trainer is not None and kvstore is not None:
        broadcast_weights(trainer)
    if view.compiled:
        objective.hybridize(**HYBRIDIZE_FLAGS)
    info = view.info(info)
    info.update({
        "layout": parts.layout,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "compile": view.compiled,
        "compile_mode": HYBRIDIZE if view.compiled else "imperative (Gluon blocks not hybridized)",
        "data": "synthetic, generated once (numpy, seeded) and copied to the device",
        "loss": parts.loss_desc if train else None,
    })
    workload = (horovod.HorovodWorkload if hvd else MXNetWorkload)(
        objective, parts.inputs, trainer, parts.clip if train else None, view.batch, params,
        info, parts.loss_samples)
    workload.hybridized = dict(HYBRIDIZE_FLAGS) if view.compiled else None
    return workload
