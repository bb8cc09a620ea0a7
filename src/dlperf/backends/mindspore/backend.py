"""MindSpore backend: ``build(case)`` turns a case dict into a ready Workload.

``nn.Cell`` models built in the project (ResNet-50 v1.5, BERT-Base pre-training), trained by a
step Cell written out with ``mindspore.value_and_grad`` and the optimizer: ``--compile`` =
GRAPH_MODE, the whole step Cell (forward, loss, gradients, clipping, update) compiled as one
graph on its first call; otherwise PYNATIVE_MODE, op by op. Everything one-off happens here, outside
the timed window: mode, threads, model construction, mixed precision, optimizer, synthetic data
(made once with numpy, seeded, held as MindSpore tensors). Graph compilation happens in the first
step, which the timing loop times apart.

Same recipes as the PyTorch backend: ResNet ``nn.Momentum`` (lr 0.1, momentum 0.9, L2 weight
decay 1e-4 on every parameter, coupled as ``torch.optim.SGD(weight_decay=...)``); BERT AdamW
with PyTorch's semantics (``mindspore.experimental.optim.AdamW``: bias-corrected, decoupled
decay 0.01; MindSpore's own ``nn.AdamWeightDecay`` has no bias correction) and global-norm
clipping at the ``clip_grad_norm`` knob.
"""

from typing import Any, Callable, Dict, NamedTuple, Tuple

from dlperf.backends.mindspore.workload import (  # noqa: I001  (imports mindspore after setup)
    MindSporeWorkload,
    Precision,
    count_params,
    join,
    rank,
    runtime_info,
    select_device,
    serve_if_scheduler,
    set_mode,
    set_threads,
    TrainStep,
)

import mindspore as ms  # noqa: E402
from mindspore import nn  # noqa: E402

from dlperf import models  # noqa: E402
from dlperf.backends.common import CaseView, check_resnet_batch  # noqa: E402
from dlperf.data import synthetic  # noqa: E402
from dlperf.backends.mindspore.bert import BertForPreTraining, pretraining_loss  # noqa: E402
from dlperf.backends.mindspore.resnet import ResNet50  # noqa: E402
from dlperf.worker.workload import Workload  # noqa: E402

__all__ = ["build"]

RESNET_WEIGHT_DECAY = 1e-4
# MindSpore's CPU Conv2d takes NCHW only ("the NHWC format only support in GPU target")
LAYOUT = "NCHW"

# What a model builder hands back: the network before mixed precision (for counting), a function
# from the (possibly cast) network to the step's objective Cell, the inputs, and the optimizer.
Parts = NamedTuple("Parts", [
    ("network", nn.Cell),
    ("objective", Callable[[nn.Cell, bool, bool], nn.Cell]),  # (network, train, cast_logits)
    ("inputs", Tuple[ms.Tensor, ...]),
    ("make_optimizer", Callable[[Any], Any]),
    ("clip", Any),  # global-norm clip, or None
    ("layout", str),
    ("optimizer_desc", str),
])


class _ResNetObjective(nn.Cell):
    """Forward and loss in one Cell (training), or a scalar summary of the logits (inference).

    The loss is ``nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")``, one fused
    kernel, as MindSpore's model zoo trains ResNet; ``nn.CrossEntropyLoss`` (log-softmax, then
    NLL: several kernels) is the same mean cross-entropy but slower in PyNative
    (docs/fidelity.md, "What was found"). Logits are cast to float32 only under
    mixed precision (``cast_logits``): in PyNative every cast is a kernel launch of its own.
    """

    def __init__(self, network, train, cast_logits=False):
        # type: (nn.Cell, bool, bool) -> None
        super(_ResNetObjective, self).__init__()
        self.network = network
        self.train_mode = train
        self.cast_logits = cast_logits
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, images, labels):
        # type: (ms.Tensor, ms.Tensor) -> ms.Tensor
        logits = self.network(images)
        if self.cast_logits:
            logits = logits.astype(ms.float32)
        if self.train_mode:
            return self.loss(logits, labels)
        return logits.mean()


class _BertObjective(nn.Cell):
    def __init__(self, network, train, cast_logits=False):
        # type: (nn.Cell, bool, bool) -> None
        # (its summaries cast the logits whatever the precision: inference only)
        super(_BertObjective, self).__init__()
        self.network = network
        self.train_mode = train

    def construct(self, ids, token_types, mlm_labels, nsp_labels):
        # type: (ms.Tensor, ms.Tensor, ms.Tensor, ms.Tensor) -> ms.Tensor
        mlm_logits, nsp_logits = self.network(ids, token_types)
        if self.train_mode:
            return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels)
        return mlm_logits.astype(ms.float32).mean() + nsp_logits.astype(ms.float32).mean()


def _resnet50(knobs, batch, train, seed):
    # type: (Dict[str, int], int, bool, int) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, train)
    network = ResNet50(classes, knobs.get("max_blocks"))
    data = synthetic.resnet_batch(batch, size, classes, seed, channels_last=False)
    inputs = (ms.Tensor(data["images"]), ms.Tensor(data["labels"]))

    def make_optimizer(params):
        # type: (Any) -> Any
        return nn.Momentum(params, learning_rate=0.1, momentum=0.9,
                           weight_decay=RESNET_WEIGHT_DECAY)

    return Parts(network, _ResNetObjective, inputs, make_optimizer, None, LAYOUT,
                 "nn.Momentum(lr=0.1, momentum=0.9, weight_decay=1e-4 on all parameters)")


def _bert(knobs, batch, train, seed):
    # type: (Dict[str, int], int, bool, int) -> Parts
    network = BertForPreTraining(
        vocab_size=knobs["vocab_size"], hidden=knobs["hidden"], layers=knobs["layers"],
        heads=knobs["heads"], intermediate=knobs["intermediate"],
        max_positions=knobs["max_positions"], type_vocab=knobs["type_vocab"])
    data = synthetic.bert_batch(batch, knobs["seq_len"], knobs["vocab_size"],
                                knobs["type_vocab"], seed)
    inputs = tuple(ms.Tensor(data[k]) for k in ("input_ids", "token_type_ids", "mlm_labels",
                                                  "nsp_labels"))
    clip, clip_desc = models.gradient_clip(knobs)

    def make_optimizer(params):
        # type: (Any) -> Any
        # torch.optim.AdamW's semantics and settings
        return ms.experimental.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                           weight_decay=0.01)

    return Parts(network, _BertObjective, inputs, make_optimizer, clip,
                 "batch-major (B, S, H)",
                 "experimental.optim.AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc)


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Parts]]


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    train = view.train
    serve_if_scheduler()  # msrun's scheduler process never gets past this
    device = select_device(view.device)
    threads = set_threads()
    mode = set_mode(view.compiled)  # before any Cell exists
    join()  # one worker of several (msrun): init() and DATA_PARALLEL mode
    info = runtime_info(device)
    info.update(threads)
    info.update(mode)
    ms.set_seed(view.seed)  # the same initial weights on every rank, as data parallelism needs
    precision = Precision(view.precision, train)

    # each rank its own batch
    parts = BUILDERS[view.name](view.knobs, view.batch, train, view.seed + rank())
    params = count_params(parts.network)
    network = precision.apply(parts.network)
    objective = parts.objective(network, train, precision.dtype is not None)
    objective.set_train(train)
    if train:
        optimizer = parts.make_optimizer(network.trainable_params())
        step = TrainStep(objective, optimizer, parts.clip, precision.scaler)
        step.set_train(True)
    else:
        step = objective  # GRAPH_MODE compiles the forward Cell on its first call

    info = view.info(info, precision.info())
    info.update({
        "layout": parts.layout,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "step": ("mindspore.value_and_grad + optimizer" if train else "forward (eval mode)"),
        "data": "synthetic, generated once (numpy, seeded) and held as MindSpore tensors",
    })
    return MindSporeWorkload(step, parts.inputs, view.batch, params, info, parts.network)
