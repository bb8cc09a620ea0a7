"""PaddlePaddle backend (dygraph): ``build(case)`` turns a case dict into a ready Workload.

Everything one-off happens here, outside the timed window: model construction on the device,
synthetic data (once, on the device, seeded), optimizer, AMP decoration and the
``paddle.jit.to_static`` wrapper (the static program is built lazily in the first step, which
the timing loop times apart). With ``data`` a dataset folder the image classifier takes the next
batch of :mod:`.input_pipeline`'s ``paddle.io.DataLoader`` every step instead of the synthetic
one; ``data_only`` builds no model and times that stream alone.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from dlperf.backends.paddle.workload import (  # noqa: I001  (imports paddle after setup)
    PaddleWorkload,
    Precision,
    compile_model,
    count_params,
    init_distributed,
    rank,
    runtime_info,
    select_device,
    wrap_data_parallel,
)

import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402

from dlperf import models  # noqa: E402
from dlperf.backends.common import CaseView, check_resnet_batch  # noqa: E402
from dlperf.backends.paddle import input_pipeline  # noqa: E402
from dlperf.backends.paddle.bert import BertForPreTraining, pretraining_loss  # noqa: E402
from dlperf.backends.paddle.resnet import ResNet50  # noqa: E402
from dlperf.worker.workload import Workload  # noqa: E402

__all__ = ["build"]

MLM_FRACTION = 0.15
# Paddle's CPU convolution kernels train ResNet-50 faster in NCHW than in NHWC, so NCHW it is
# (the layout is a framework's choice to make, as channels_last is torch's and NHWC JAX's).
DATA_FORMAT = "NCHW"

# What a model builder hands back: the bare network (for counting and the optimizer), a Layer
# that computes the step's scalar from the stored batch, and the optimizer settings.
Parts = NamedTuple(
    "Parts",
    [
        ("model", nn.Layer),
        ("objective", nn.Layer),  # objective(*inputs) -> loss (or an output summary)
        ("inputs", Tuple[paddle.Tensor, ...]),
        ("make_optimizer", Callable[[Any], Any]),
        ("layout", str),
        ("optimizer_desc", str),
    ],
)


class _ResNetObjective(nn.Layer):
    """Forward and loss in one Layer, so ``to_static`` compiles both."""

    def __init__(self, model, train):
        # type: (nn.Layer, bool) -> None
        super(_ResNetObjective, self).__init__()
        self.model = model
        self.train_mode = train

    def forward(self, images, labels):
        # type: (paddle.Tensor, paddle.Tensor) -> paddle.Tensor
        logits = self.model(images)
        if self.train_mode:
            return F.cross_entropy(logits.astype("float32"), labels)
        return logits.astype("float32").mean()


class _BertObjective(nn.Layer):
    def __init__(self, model, train):
        # type: (nn.Layer, bool) -> None
        super(_BertObjective, self).__init__()
        self.model = model
        self.train_mode = train

    def forward(self, ids, token_types, mlm_labels, nsp_labels):
        # type: (paddle.Tensor, paddle.Tensor, paddle.Tensor, paddle.Tensor) -> paddle.Tensor
        mlm_logits, nsp_logits = self.model(ids, token_types)
        if self.train_mode:
            return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels)
        return mlm_logits.astype("float32").mean() + nsp_logits.astype("float32").mean()


def _resnet50(knobs, batch, train):
    # type: (Dict[str, int], int, bool) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, train)
    model = ResNet50(classes, data_format=DATA_FORMAT, max_blocks=knobs.get("max_blocks"))
    shape = [batch, 3, size, size] if DATA_FORMAT == "NCHW" else [batch, size, size, 3]
    images = paddle.randn(shape, dtype="float32")
    labels = paddle.randint(0, classes, [batch], dtype="int64")

    def make_optimizer(params):
        # type: (Any) -> Any
        return paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9, parameters=params,
                                         weight_decay=1e-4)

    return Parts(model, _ResNetObjective(model, train), (images, labels), make_optimizer,
                 DATA_FORMAT, "Momentum(lr=0.1, momentum=0.9, L2 weight_decay=1e-4)")


def _bert(knobs, batch, train):
    # type: (Dict[str, int], int, bool) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = BertForPreTraining(
        vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"], heads=knobs["heads"],
        intermediate=knobs["intermediate"], max_positions=knobs["max_positions"],
        type_vocab=knobs["type_vocab"])
    ids = paddle.randint(0, v, [batch, s], dtype="int64")
    # A fixed count of masked positions per row (never [CLS] at 0) keeps the work identical
    # across seeds and guarantees at least one label, so the MLM loss is never 0/0.
    n_masked = max(1, int(round(MLM_FRACTION * s)))
    order = paddle.argsort(paddle.rand([batch, s - 1]), axis=1)
    masked = paddle.put_along_axis(paddle.zeros([batch, s], dtype="int64"),
                                   order[:, :n_masked] + 1, paddle.to_tensor(1, "int64"),
                                   axis=1).astype("bool")
    mask_token = 103 if v > 103 else v - 1  # [MASK] in the uncased BERT vocabulary
    segment = (paddle.arange(s) >= s // 2).astype("int64").clip(max=knobs["type_vocab"] - 1)
    inputs = (
        paddle.where(masked, paddle.full_like(ids, mask_token), ids),
        segment.unsqueeze(0).expand([batch, s]).clone(),
        paddle.where(masked, ids, paddle.full_like(ids, -100)),
        paddle.randint(0, 2, [batch], dtype="int64"),
    )

    clip, clip_desc = models.gradient_clip(knobs)

    def make_optimizer(params):
        # type: (Any) -> Any
        # torch.optim.AdamW's settings; the clip is applied inside the optimizer step
        return paddle.optimizer.AdamW(learning_rate=1e-4, beta1=0.9, beta2=0.999,
                                      epsilon=1e-8, weight_decay=0.01, parameters=params,
                                      grad_clip=nn.ClipGradByGlobalNorm(clip) if clip else None)

    return Parts(model, _BertObjective(model, train), inputs, make_optimizer,
                 "batch-major (B, S, H)", "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc)


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Parts]]


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    knobs, train, batch, seed = view.knobs, view.train, view.batch, view.seed
    device = select_device(view.device)
    if device.startswith("gpu"):
        paddle.device.cuda.reset_max_memory_allocated()
    precision = Precision(view.precision, device)
    init_distributed()  # one rank of several: join the others before building
    paddle.seed(seed + rank())
    if view.data_only:  # the input pipeline alone: no model, a shard per process
        return input_pipeline.data_only(case, knobs, batch, device, seed)
    feed = None  # type: Optional[input_pipeline.Feed]
    if view.dataset:  # a dataset folder: the next batch per step
        feed = input_pipeline.Feed(case, knobs["image_size"], batch, device, seed)
    parts = BUILDERS[view.name](knobs, batch, train)

    model = parts.model
    params = count_params(model)
    if train:
        model.train()
    else:
        model.eval()
    optimizer = parts.make_optimizer(model.parameters()) if train else None
    model, optimizer = precision.decorate(model, optimizer)
    objective = parts.objective
    compile_info = {"compile_mode": None}  # type: Dict[str, Any]
    if view.compiled:
        objective, compile_info = compile_model(objective)
    if train:
        # outside to_static: Paddle's DataParallel runs in dygraph around the static program
        objective = wrap_data_parallel(objective)

    info = view.info(runtime_info(device), precision.info(), compile_info)
    info.update({
        "layout": parts.layout,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "compile": view.compiled,
        "data": feed.info if feed is not None else "synthetic, generated once on the device",
    })
    if feed is not None:  # every step the loader's next (images, labels)
        return PaddleWorkload(lambda: objective(*feed.next()), optimizer, precision, device,
                              batch, params, info)
    inputs = parts.inputs
    return PaddleWorkload(lambda: objective(*inputs), optimizer, precision, device, batch, params, info)
