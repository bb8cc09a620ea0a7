"""PyTorch backend's heavy half: ``build(case)`` turns a case dict into a ready-to-step :class:`Workload`.

Everything expensive and one-off happens here, outside the timed window: model construction,
moving to the device, synthetic data generation (once, on the device, seeded), optimizer,
DDP wrapping (or, under ``--launcher horovod``, Horovod's optimizer: :mod:`.horovod`) and the
``torch.compile`` wrapper (compilation itself happens lazily in the first
step, which the timing loop times apart).
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from dlperf import models
from dlperf.backends.common import CaseView, check_resnet_batch
from dlperf.backends.torch.bert import BertForPreTraining, pretraining_loss
from dlperf.backends.torch.face import FaceModel
from dlperf.backends.torch.gpt import GPT, next_token_loss
from dlperf.backends.torch.wide_deep import LazyAdam, WideAndDeep
from dlperf.backends.torch.inference import inference_model
from dlperf.backends.torch.resnet import ResNet50
from dlperf.backends.torch import horovod, input_pipeline, vision
from dlperf.backends.torch import SUPPORT
from dlperf.backends.torch.workload import (COMPILE_MODE, Precision, count_params,
                                            maybe_wrap_ddp, runtime_info, select_device, world_size,
                                            rank)
from dlperf.worker.support import parse_options
from dlperf.worker.workload import UnsupportedError, Workload

__all__ = ["build", "BUILDERS"]

MLM_FRACTION = 0.15
MEMORY_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}
# a convolutional network's layout where the case sets no ``memory_format`` option, by device
# kind: channels-last on a GPU (NVIDIA's and PyTorch's advice for tensor cores under AMP);
# on a CPU PyTorch's own default, NCHW, as torchvision's reference recipe trains, the faster
# one on all of a CPU's threads (docs/fidelity.md, "What was found", torch).
# ``--option memory_format`` chooses either.
DEFAULT_MEMORY_FORMAT = {"cuda": "channels_last", "cpu": "contiguous"}
# the models the option applies to, as SUPPORT declares them (and `dlperf tune` searches it)
CONV_MODELS = frozenset(SUPPORT.options["memory_format"].models or ())

# What a model builder hands back: the bare network (for counting and the optimizer), how to
# compute the step's scalar from a (possibly wrapped) model, and the optimizer settings.
Parts = NamedTuple(
    "Parts",
    [
        ("model", nn.Module),
        ("forward_loss", Callable[[nn.Module], torch.Tensor]),
        ("make_optimizer", Callable[[Any], torch.optim.Optimizer]),
        ("clip_grad_norm", Optional[float]),
        ("memory_format", str),
        ("optimizer_desc", str),
    ],
)


def _image_parts(model, knobs, batch, device, gen, train, lr, fmt):
    # type: (nn.Module, Dict[str, int], int, torch.device, torch.Generator, bool, float, str) -> Parts
    """An image classifier's parts: synthetic images and labels, cross-entropy, SGD with
    momentum 0.9 and weight decay 1e-4 at ``lr``, weights and images in ``fmt``."""
    size, classes = knobs["image_size"], knobs["num_classes"]
    model = model.to(device, memory_format=MEMORY_FORMATS[fmt])
    images = torch.randn(batch, 3, size, size, device=device, generator=gen)
    images = images.contiguous(memory_format=MEMORY_FORMATS[fmt])
    labels = torch.randint(0, classes, (batch,), device=device, generator=gen)

    def train_loss(m):
        # type: (nn.Module) -> torch.Tensor
        return F.cross_entropy(m(images), labels)

    def infer_out(m):
        # type: (nn.Module) -> torch.Tensor
        return m(images).float().mean()

    def make_optimizer(params):
        # type: (Any) -> torch.optim.Optimizer
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)

    return Parts(model, train_loss if train else infer_out, make_optimizer, None,
                 fmt, "SGD(lr=%g, momentum=0.9, weight_decay=1e-4)" % lr)


def _resnet50(knobs, batch, device, gen, train, fmt):
    # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
    check_resnet_batch(knobs, batch, train)
    network = ResNet50(knobs["num_classes"], knobs.get("max_blocks"))
    return _image_parts(network, knobs, batch, device, gen, train, 0.1, fmt)


def _bert(knobs, batch, device, gen, train, fmt):
    # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = BertForPreTraining(
        vocab_size=v,
        hidden=knobs["hidden"],
        layers=knobs["layers"],
        heads=knobs["heads"],
        intermediate=knobs["intermediate"],
        max_positions=knobs["max_positions"],
        type_vocab=knobs["type_vocab"],
    ).to(device)

    ids = torch.randint(0, v, (batch, s), device=device, generator=gen)
    # A fixed count of masked positions per row (never [CLS] at 0) keeps the work identical across
    # seeds and guarantees at least one label, so the MLM loss is never a 0/0 NaN.
    n_masked = max(1, int(round(MLM_FRACTION * s)))
    order = torch.rand(batch, s - 1, device=device, generator=gen).argsort(dim=1)
    masked = torch.zeros(batch, s, dtype=torch.bool, device=device)
    masked.scatter_(1, order[:, :n_masked] + 1, True)
    mlm_labels = torch.where(masked, ids, torch.full_like(ids, -100))
    mask_token = 103 if v > 103 else v - 1  # [MASK] in the uncased BERT vocabulary
    ids = torch.where(masked, torch.full_like(ids, mask_token), ids)
    # sentence A then sentence B, as in NSP pre-training
    segment = (torch.arange(s, device=device) >= s // 2).long().clamp(max=knobs["type_vocab"] - 1)
    token_types = segment.unsqueeze(0).expand(batch, s).contiguous()
    nsp_labels = torch.randint(0, 2, (batch,), device=device, generator=gen)

    def train_loss(m):
        # type: (nn.Module) -> torch.Tensor
        mlm_logits, nsp_logits = m(ids, token_types)
        return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels)

    def infer_out(m):
        # type: (nn.Module) -> torch.Tensor
        mlm_logits, nsp_logits = m(ids, token_types)
        return mlm_logits.float().mean() + nsp_logits.float().mean()

    def make_optimizer(params):
        # type: (Any) -> torch.optim.Optimizer
        return torch.optim.AdamW(params, lr=1e-4)

    clip, clip_desc = models.gradient_clip(knobs)
    return Parts(
        model,
        train_loss if train else infer_out,
        make_optimizer,
        clip,
        "contiguous",
        "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc,
    )


def _gpt(knobs, batch, device, gen, train, fmt):
    # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = GPT(vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"],
                heads=knobs["heads"], max_positions=knobs["max_positions"]).to(device)
    tokens = torch.randint(0, v, (batch, s + 1), device=device, generator=gen)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()  # next token

    def train_loss(m):
        # type: (nn.Module) -> torch.Tensor
        return next_token_loss(m(ids), labels)

    def infer_out(m):
        # type: (nn.Module) -> torch.Tensor
        return m(ids).float().mean()

    def make_optimizer(params):
        # type: (Any) -> torch.optim.Optimizer
        return torch.optim.AdamW(params, lr=1e-4)

    clip, clip_desc = models.gradient_clip(knobs)
    return Parts(model, train_loss if train else infer_out, make_optimizer, clip, "contiguous",
                 "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc)


def _wide_deep(knobs, batch, device, gen, train, fmt):
    # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
    v = knobs["vocab_size"]
    model = WideAndDeep(v, knobs["deep_embedding_size"], knobs["hidden_units"],
                        knobs["hidden_size"], models.WIDE_DEEP_DENSE_FIELDS,
                        models.WIDE_DEEP_DEEP_FIELDS).to(device)
    dense = torch.randn(batch, models.WIDE_DEEP_DENSE_FIELDS, device=device, generator=gen)
    wide_ids = torch.randint(0, v, (batch, models.WIDE_DEEP_WIDE_FIELDS), device=device,
                             generator=gen)
    deep_ids = torch.randint(0, v, (batch, models.WIDE_DEEP_DEEP_FIELDS), device=device,
                             generator=gen)
    labels = torch.randint(0, 2, (batch, 1), device=device, generator=gen).float()

    def train_loss(m):
        # type: (nn.Module) -> torch.Tensor
        return F.binary_cross_entropy_with_logits(m(dense, wide_ids, deep_ids).float(), labels)

    def infer_out(m):
        # type: (nn.Module) -> torch.Tensor
        return torch.sigmoid(m(dense, wide_ids, deep_ids).float()).mean()

    def make_optimizer(params):
        # type: (Any) -> Any
        return LazyAdam(model, lr=1e-3)

    return Parts(model, train_loss if train else infer_out, make_optimizer, None, "contiguous",
                 "Adam(lr=1e-3), lazy (SparseAdam) on the embeddings")


def _face(knobs, batch, device, gen, train, fmt):
    # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    if train and batch < 2:
        raise UnsupportedError("face-resnet50 training needs batch >= 2 (BatchNorm1d on the "
                               "embedding needs more than one value per channel)")
    # training with several processes shards the class centres over the ranks (InsightFace's
    # model-parallel Partial FC); inference never uses the classifier
    world = world_size() if train else 1
    if classes < world:
        raise UnsupportedError("face-resnet50 shards its %d classes over %d processes: needs "
                               "at least one class per process" % (classes, world))
    sampler = torch.Generator(device=device)
    sampler.manual_seed(int(gen.initial_seed()) + 1)  # gen's seed differs per rank
    model = FaceModel(size, knobs["embedding_size"], classes, knobs["partial_fc"],
                      sampler, world=world, rank=rank()).to(device,
                                                            memory_format=MEMORY_FORMATS[fmt])
    if model.ddp_ignored():  # each rank's own centres: never all-reduced nor broadcast by DDP
        from torch.nn.parallel import DistributedDataParallel

        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            model, model.ddp_ignored())
    images = torch.randn(batch, 3, size, size, device=device, generator=gen)
    images = images.contiguous(memory_format=MEMORY_FORMATS[fmt])
    labels = torch.randint(0, classes, (batch,), device=device, generator=gen)

    def train_loss(m):
        # type: (nn.Module) -> torch.Tensor
        return m(images, labels)

    def infer_out(m):
        # type: (nn.Module) -> torch.Tensor
        return m(images).float().mean()

    def make_optimizer(params):
        # type: (Any) -> torch.optim.Optimizer
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)

    return Parts(model if train else model.embedder(), train_loss if train else infer_out,
                 make_optimizer, None, fmt,
                 "SGD(lr=0.1, momentum=0.9, weight_decay=5e-4) (InsightFace's)")


def _image_classifier(name):
    # type: (str) -> Callable[..., Parts]
    """Builder of one of the INT8 study's other CNNs (ResNet-101/152, VGG-16/19, GoogLeNet,
    AlexNet): as ResNet-50's, at the network's own learning rate."""

    def builder(knobs, batch, device, gen, train, fmt):
        # type: (Dict[str, int], int, torch.device, torch.Generator, bool, str) -> Parts
        vision.check_batch(name, knobs, batch, train)
        network = vision.network(name, knobs["num_classes"], knobs.get("classifier_width"))
        return _image_parts(network, knobs, batch, device, gen, train, vision.SGD_LR[name], fmt)

    return builder


BUILDERS = {
    "resnet50": _resnet50,
    "bert-base": _bert,
    "gpt": _gpt,
    "wide-deep": _wide_deep,
    "face-resnet50": _face,
}  # type: Dict[str, Callable[..., Parts]]
BUILDERS.update((name, _image_classifier(name)) for name in vision.NETWORKS
                if name not in BUILDERS)


def memory_format(view, device):
    # type: (CaseView, torch.device) -> Tuple[str, str]
    """The layout of a convolutional network's weights and images (``--option memory_format``,
    else :data:`DEFAULT_MEMORY_FORMAT` for the device), and what chose it. Other models are
    contiguous; the option is refused for them."""
    chosen = parse_options(view.case.get("options", "")).get("memory_format")
    if view.name not in CONV_MODELS:
        if chosen is not None:
            raise UnsupportedError("option memory_format=%s: %s is not a convolutional network; "
                                   "the option applies to %s" % (
                                       chosen, view.name, ", ".join(sorted(CONV_MODELS))))
        return "contiguous", "not a convolutional network"
    if chosen is not None:
        return chosen, "the case's option memory_format"
    return DEFAULT_MEMORY_FORMAT[device.type], "dlperf's default on %s" % device.type


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    device = _prepare_device(view.device)
    hvd = horovod.start(case, device)  # --launcher horovod: hvd.init() instead of torchrun's
    world, place = (horovod.size(), horovod.rank()) if hvd else (world_size(), rank())
    _check_processes(case, world)
    precision = Precision(view.precision, device, train=view.train)
    # weights: identical on every rank (DDP broadcasts rank 0's anyway); data: a different
    # batch per rank, like a sharded loader
    torch.manual_seed(view.seed)
    gen = torch.Generator(device=device)
    gen.manual_seed(view.seed + place)
    if view.data_only:  # the input pipeline alone: no model
        return input_pipeline.data_only(case, view.knobs, view.batch, device, view.seed)
    fmt, fmt_source = memory_format(view, device)
    parts = BUILDERS[view.name](view.knobs, view.batch, device, gen, view.train, fmt)
    feed = None  # type: Any
    if view.dataset:  # a dataset folder: the next batch per step
        feed = input_pipeline.make_feed(case, view.knobs["image_size"], view.batch, device,
                                        view.seed, parts.memory_format)
        parts = parts._replace(forward_loss=input_pipeline.classifier_loss(feed))

    params, reduced = _counted(parts.model)
    model = parts.model
    model.train(view.train)
    optimizer = parts.make_optimizer(model.parameters()) if view.train else None
    inference_info = {}  # type: Dict[str, Any]
    if not view.train:  # bf16/fp16 whole-model casts and int8 quantization; fp32/amp-* unchanged
        model, inference_info = inference_model(model, parts.forward_loss, view.precision,
                                                device, view.seed, view.compiled)
    if hvd:  # hvd.DistributedOptimizer and rank 0's weights instead of DDP (training only)
        optimizer = horovod.distribute(model, optimizer)
    else:
        model = maybe_wrap_ddp(model, device)
    if view.compiled:
        model = torch.compile(model, mode=None if COMPILE_MODE == "default" else COMPILE_MODE)

    info = view.info(runtime_info(device), precision.info())
    info.update({
        "memory_format": parts.memory_format,
        "memory_format_set_by": fmt_source,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "compile": view.compiled,
        "compile_mode": COMPILE_MODE if view.compiled else None,
        "ddp": world > 1 and not hvd,
        "data": feed.info if feed is not None else "synthetic, generated once on the device",
    })
    info.update(inference_info)
    if hvd:
        info.update(horovod.info())
        info["optimizer"] = "hvd.DistributedOptimizer(%s)" % parts.optimizer_desc
    if view.train and hasattr(parts.model, "classifier_info"):
        info.update(parts.model.classifier_info())
    workload = horovod.workload_class()  # TorchWorkload, or Horovod's collectives under Horovod
    return workload(model=model, optimizer=optimizer, forward_loss=parts.forward_loss,
                    precision=precision, device=device, samples_per_step=view.batch,
                    params=params, info=info, reduced_params=reduced,
                    clip_grad_norm=parts.clip_grad_norm if view.train else None)


def _check_processes(case, world):
    # type: (Dict[str, Any], int) -> None
    """A multi-process case must run under its launcher: torchrun, which sets WORLD_SIZE to its
    size, or horovodrun (``hvd.size()``)."""
    processes = int(case.get("devices", 1)) * int(case.get("nnodes", 1))
    if processes != world:
        raise RuntimeError(
            "the case asks for %d processes (devices x nnodes) but its launcher started %d; "
            "multi-process cases must be started through torchrun or horovodrun"
            % (processes, world)
        )


def _prepare_device(requested):
    # type: (str) -> torch.device
    """The device, set up for a measurement: cuDNN's autotuner and a fresh memory peak on a GPU,
    subnormals flushed on a CPU."""
    device = select_device(requested)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.cuda.reset_peak_memory_stats(device)
    else:
        # A fixed synthetic batch is memorised within a few steps; the vanishing gradients then
        # turn subnormal, and subnormal arithmetic is many times slower on x86. Real data never
        # gets there, so flush them: the step time must not depend on how far the loss has fallen.
        torch.set_flush_denormal(True)
    return device


def _counted(model):
    # type: (nn.Module) -> Tuple[int, int]
    """(trainable parameters, those DDP all-reduces). A model-parallel part (the face model's
    sharded classifier) counts whole, every rank's share, and is not all-reduced."""
    params = model.whole_params() if hasattr(model, "whole_params") else count_params(model)
    ignored = set(model.ddp_ignored()) if hasattr(model, "ddp_ignored") else set()
    reduced = sum(p.numel() for n, p in model.named_parameters()
                  if p.requires_grad and n not in ignored)
    return params, reduced
