"""OneFlow backend: ``build(case)`` turns a case dict into a ready Workload.

Everything one-off happens here, outside the timed window: model construction on the device,
the synthetic batch (``dlperf.data.synthetic``, seeded, copied to the device once), the
optimizer, and with ``compile`` the ``nn.Graph`` holding forward, backward and optimizer update
(OneFlow compiles it lazily in the first step, which the timing loop times apart).
"""

from typing import Any, Callable, Dict, List, NamedTuple, Tuple

from dlperf.backends.oneflow.workload import (  # noqa: I001  (imports oneflow after setup)
    InferGraph,
    OneFlowWorkload,
    TrainGraph,
    count_params,
    distributed,
    eager_infer_step,
    eager_train_step,
    placement,
    rank,
    runtime_info,
    select_device,
    to_global_batch,
)

import oneflow as flow  # noqa: E402
import oneflow.nn.functional as F  # noqa: E402
from oneflow import nn  # noqa: E402

from dlperf import models  # noqa: E402
from dlperf.backends.common import CaseView, check_resnet_batch  # noqa: E402
from dlperf.data import synthetic  # noqa: E402
from dlperf.backends.oneflow.bert import BertForPreTraining, pretraining_loss  # noqa: E402
from dlperf.backends.oneflow.resnet import ResNet50  # noqa: E402
from dlperf.worker.workload import Workload  # noqa: E402

__all__ = ["build"]

LAYOUT = "NCHW"  # OneFlow's convolution layout (its CPU kernels are NCHW)

# What a model builder hands back: the bare network (for counting and the optimizer), a Module
# that computes the step's scalar from the stored batch, the batch, and the optimizer settings.
Parts = NamedTuple(
    "Parts",
    [
        ("model", nn.Module),
        ("objective", nn.Module),  # objective(*inputs) -> loss (or an output summary)
        ("inputs", Tuple[flow.Tensor, ...]),
        ("make_optimizer", Callable[[List[Any]], Any]),
        ("clip", bool),  # the optimizer's param group clips the global gradient norm
        ("layout", str),
        ("optimizer_desc", str),
        ("loss_desc", str),
    ],
)


def loss_dtype(device):
    # type: (str) -> Any
    """The dtype the classifier's cross-entropy is computed in.

    OneFlow 0.9.0's CPU softmax is inexact near probability one: once the fixed synthetic batch
    is memorised (a few steps at lr 0.1) it returns a positive log p for the label, a negative
    loss and a gradient of the wrong sign on it; the logits then blow up and the loss becomes
    NaN, where torch's float32 loss stays at or above 0. In float64
    it is exact. The logits are batch x classes, so the cost is nothing beside the network."""
    return flow.float64 if device == "cpu" else flow.float32


class _ResNetObjective(nn.Module):
    """Forward and loss in one Module, so an nn.Graph compiles both."""

    def __init__(self, model, train, dtype):
        # type: (nn.Module, bool, Any) -> None
        super(_ResNetObjective, self).__init__()
        self.model = model
        self.train_mode = train
        self.loss_dtype = dtype

    def forward(self, images, labels):
        # type: (flow.Tensor, flow.Tensor) -> flow.Tensor
        logits = self.model(images)
        if self.train_mode:
            return F.cross_entropy(logits.to(self.loss_dtype), labels)
        return logits.float().mean()


class _BertObjective(nn.Module):
    def __init__(self, model, train):
        # type: (nn.Module, bool) -> None
        super(_BertObjective, self).__init__()
        self.model = model
        self.train_mode = train

    def forward(self, ids, token_types, mlm_labels, nsp_labels):
        # type: (flow.Tensor, flow.Tensor, flow.Tensor, flow.Tensor) -> flow.Tensor
        mlm_logits, nsp_logits = self.model(ids, token_types)
        if self.train_mode:
            return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels)
        return mlm_logits.float().mean() + nsp_logits.float().mean()


def _on(array, device, dtype):
    # type: (Any, str, Any) -> flow.Tensor
    return flow.tensor(array, dtype=dtype, device=device)


def _resnet50(knobs, batch, train, device, seed):
    # type: (Dict[str, int], int, bool, str, int) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    check_resnet_batch(knobs, batch, train)
    model = ResNet50(classes, knobs.get("max_blocks")).to(device)
    data = synthetic.resnet_batch(batch, size, classes, seed, channels_last=False)
    inputs = (_on(data["images"], device, flow.float32), _on(data["labels"], device, flow.int64))

    def make_optimizer(params):
        # type: (List[Any]) -> Any
        return flow.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)

    dtype = loss_dtype(device)
    loss_desc = ("cross-entropy in float64 (OneFlow 0.9.0's CPU float32 softmax gives the label "
                 "log p > 0 once the batch is memorised, and training diverges)"
                 if dtype == flow.float64 else "cross-entropy in float32")
    return Parts(model, _ResNetObjective(model, train, dtype), inputs, make_optimizer, False,
                 LAYOUT, "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)", loss_desc)


def _bert(knobs, batch, train, device, seed):
    # type: (Dict[str, int], int, bool, str, int) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = BertForPreTraining(
        vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"], heads=knobs["heads"],
        intermediate=knobs["intermediate"], max_positions=knobs["max_positions"],
        type_vocab=knobs["type_vocab"]).to(device)
    data = synthetic.bert_batch(batch, s, v, knobs["type_vocab"], seed)
    inputs = tuple(_on(data[k], device, flow.int64) for k in
                   ("input_ids", "token_type_ids", "mlm_labels", "nsp_labels"))
    clip, clip_desc = models.gradient_clip(knobs)

    def make_optimizer(params):
        # type: (List[Any]) -> Any
        # torch.optim.AdamW's settings; a clip is declared on the param group, which is how
        # OneFlow applies it both in eager (optimizer.clip_grad) and inside an nn.Graph
        group = {"params": params}  # type: Dict[str, Any]
        if clip:
            group.update(clip_grad_max_norm=clip, clip_grad_norm_type=2.0)
        return flow.optim.AdamW([group], lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01)

    return Parts(model, _BertObjective(model, train), inputs, make_optimizer, bool(clip),
                 "batch-major (B, S, H)", "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc,
                 "MLM + NSP cross-entropy in float32")


BUILDERS = {"resnet50": _resnet50, "bert-base": _bert}  # type: Dict[str, Callable[..., Parts]]


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    train, compiled = view.train, view.compiled
    device = select_device(view.device)
    flow.manual_seed(view.seed)  # the same weights on every rank; each rank its own batch
    parts = BUILDERS[view.name](view.knobs, view.batch, train, device, view.seed + rank())
    model = parts.model
    params = count_params(model)
    objective, inputs = parts.objective, parts.inputs
    parallel = None  # type: Any
    if distributed() and compiled:
        # nn.Graph's data parallelism: global tensors, the parameters broadcast (one copy per
        # rank) and the batch split along dim 0; OneFlow inserts the gradients' all-reduce
        model.to_global(placement=placement(), sbp=flow.sbp.broadcast)
        inputs = tuple(to_global_batch(inputs))
        parallel = "nn.Graph over global tensors (parameters broadcast, batch split(0))"
    elif distributed() and train:
        # eager: OneFlow's DDP broadcasts rank 0's parameters and all-reduces the gradients
        # in buckets during backward
        objective = nn.parallel.DistributedDataParallel(objective)
        parallel = "flow.nn.parallel.DistributedDataParallel"
    if train:
        model.train()
        optimizer = parts.make_optimizer(list(model.parameters()))
        if compiled:
            run = TrainGraph(objective, optimizer)  # type: Callable[..., flow.Tensor]
        else:
            run = eager_train_step(objective, optimizer, parts.clip)
    else:
        model.eval()
        run = InferGraph(objective) if compiled else eager_infer_step(objective)

    info = view.info(runtime_info(device))
    info.update({
        "precision": view.precision,
        "layout": parts.layout,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "loss": parts.loss_desc if train else None,
        "compile": compiled,
        "compile_mode": ("nn.Graph (forward, backward and optimizer in one graph)" if train
                         else "nn.Graph (forward)") if compiled else "eager",
        "data": "synthetic (dlperf.data.synthetic, seeded), copied to the device once",
        "data_parallel": parallel,
    })
    return OneFlowWorkload(run, inputs, device, view.batch, params, info, model)
