"""PyTorch side of ``dlperf accuracy``: train the catalogue network briefly, cache it, evaluate it.

Training is a short, fixed, seeded recipe (AdamW, or SGD with Nesterov momentum; a linear
warm-up then a cosine decay; no augmentation) on the training split the harness prepared; its
batch-norm statistics are then re-estimated with the final weights
(:func:`recompute_batch_norm`). The weights go to the cache file the harness named (its name is
a digest of the model, knobs, seed, data and recipe), written atomically under a lock, so the
next run — with another precision or engine — evaluates the very same network. A user's own
state dict (``--weights``) replaces training entirely.

Evaluation by precision: fp32 as trained; ``amp-bf16``/``amp-fp16`` under autocast; ``bf16``/
``fp16`` as a whole-model cast (:func:`dlperf.backends.torch.inference.cast_model`); ``int8`` by
the torch backend's own static quantization
(:func:`dlperf.backends.torch.inference.quantize_int8`), calibrated on training images only.

Valid Python 3.7; imports torch, numpy and the standard library.
"""

import copy
import math
import os
import time
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.worker.cache import file_sha256, locked, private_dir, save_facts, store, verified_facts
from dlperf.backends.torch import vision
from dlperf.backends.torch.inference import cast_model, quantize_int8
from dlperf.worker.workload import UnsupportedError

AUTOCAST = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}
CAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: At most this many training images (whole batches) re-estimate the batch-norm statistics.
BN_STATS_IMAGES = 4096


class Trained(object):
    """The fp32 network in eval mode, where its weights live and a digest of them."""

    def __init__(self, model, weights_path, digest, image_size):
        # type: (nn.Module, str, str, int) -> None
        self.model = model
        self.weights_path = weights_path
        self.digest = digest
        self.image_size = image_size


def _lr_at(step, total, warmup, base):
    # type: (int, int, int, float) -> float
    """Linear warm-up over ``warmup`` steps, then cosine decay to zero at ``total``."""
    if step < warmup:
        return base * (step + 1) / float(warmup)
    progress = (step - warmup) / float(max(1, total - warmup))
    return 0.5 * base * (1.0 + math.cos(math.pi * progress))


def _tensor(images):
    # type: (np.ndarray) -> torch.Tensor
    return torch.from_numpy(np.ascontiguousarray(images)).contiguous(
        memory_format=torch.channels_last)


def recompute_batch_norm(model, split, batch, order):
    # type: (nn.Module, Any, int, np.ndarray) -> int
    """Batch-norm running statistics of the *final* weights; how many images estimated them.

    The statistics training leaves are an exponential average (momentum 0.1) over its last
    few dozen steps, i.e. over networks whose weights were still moving fast: after two short
    epochs they can describe none of them (GoogLeNet's eval-mode top-1 on the very images it
    trained on is then near chance, where batch statistics give it almost all). So they are
    reset and re-estimated as an equal-weight average over whole batches of ``batch`` training
    images (in ``order``, at most :data:`BN_STATS_IMAGES`), no gradients, everything else in
    eval mode. Returns 0, changing nothing, for a network without batch norm.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return 0
    usable = len(order) - len(order) % batch
    count = min(usable, max(batch, BN_STATS_IMAGES - BN_STATS_IMAGES % batch))
    momenta = [m.momentum for m in norms]
    model.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative (equal-weight) average of the batches below
        norm.train()
    try:
        with torch.no_grad():
            for start in range(0, count, batch):
                model(_tensor(split.normalised(order[start:start + batch])))
    finally:
        for norm, momentum in zip(norms, momenta):
            norm.momentum = momentum
        model.eval()
    return count


def train(name, num_classes, data, recipe, seed):
    # type: (str, int, Any, Dict[str, Any], int) -> Tuple[nn.Module, Dict[str, Any]]
    """Train ``name`` from scratch on ``data.train`` with ``recipe``; the model and the facts."""
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    model = vision.network(name, num_classes).to(memory_format=torch.channels_last)
    model.train()
    batch = int(recipe["batch_size"])
    n = len(data.train)
    if n < batch:
        raise ValueError("the training split has %d images, fewer than one batch of %d"
                         % (n, batch))
    steps_per_epoch = n // batch  # drop the ragged last batch: batch norm needs > 1 value
    total = steps_per_epoch * int(recipe["epochs"])
    warmup = int(round(float(recipe["warmup_epochs"]) * steps_per_epoch))
    decay, no_decay = [], []  # type: List[Any], List[Any]
    for param in model.parameters():
        (no_decay if param.dim() <= 1 else decay).append(param)  # no decay on biases and BN
    groups = [{"params": decay, "weight_decay": float(recipe["weight_decay"])},
              {"params": no_decay, "weight_decay": 0.0}]
    kind = recipe.get("optimizer", "sgd")
    if kind == "sgd":
        optimizer = torch.optim.SGD(groups, lr=float(recipe["lr"]),
                                    momentum=float(recipe["momentum"]), nesterov=True)
    elif kind == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=float(recipe["lr"]))
    else:
        raise ValueError("unknown optimizer %r in the training recipe; allowed: sgd, adamw"
                         % kind)
    epochs = []  # type: List[Dict[str, Any]]
    step = 0
    start = time.perf_counter()
    for epoch in range(int(recipe["epochs"])):
        loss_sum, correct, seen = 0.0, 0, 0
        for images, labels in data.train.batches(batch, rng.permutation(n), drop_last=True):
            lr = _lr_at(step, total, warmup, float(recipe["lr"]))
            for group in optimizer.param_groups:
                group["lr"] = lr
            target = torch.from_numpy(labels)
            logits = model(_tensor(images))
            loss = F.cross_entropy(logits, target)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(
                    "training %s diverged: loss %r at epoch %d step %d (lr %.4g); lower --lr"
                    % (name, value, epoch + 1, step + 1, lr))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if recipe.get("clip_grad_norm"):
                nn.utils.clip_grad_norm_(model.parameters(), float(recipe["clip_grad_norm"]))
            optimizer.step()
            step += 1
            loss_sum += value * labels.shape[0]
            correct += int((logits.detach().argmax(1) == target).sum())
            seen += labels.shape[0]
        epochs.append({"epoch": epoch + 1, "loss": loss_sum / seen,
                       "train_top1": 100.0 * correct / seen})
        print("accuracy: %s epoch %d/%d loss %.4f train top-1 %.1f%%"
              % (name, epoch + 1, int(recipe["epochs"]), epochs[-1]["loss"],
                 epochs[-1]["train_top1"]), flush=True)
    bn_images = recompute_batch_norm(model, data.train, batch, rng.permutation(n))
    facts = {"source": "trained here", "train_s": time.perf_counter() - start,
             "steps": step, "epochs": epochs, "recipe": dict(recipe), "seed": seed,
             "batch_norm_stats_images": bn_images,
             "torch_version": torch.__version__, "threads": torch.get_num_threads()}
    return model.eval(), facts


def _load_state(path):
    # type: (str) -> Dict[str, Any]
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError("cannot read weights %s as a PyTorch state dict: %s" % (path, error))
    if isinstance(state, dict):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), dict):
                state = state[key]
    if not isinstance(state, dict):
        raise ValueError("weights %s hold a %s, not a state dict" % (path, type(state).__name__))
    return state


def _user_model(name, num_classes, path):
    # type: (str, int, str) -> nn.Module
    model = vision.network(name, num_classes)
    state = _load_state(path)
    # torchvision's GoogLeNet checkpoints carry the two auxiliary training heads; inference
    # (and dlperf's network) has none
    state = {k: v for k, v in state.items() if not k.startswith(("aux1.", "aux2."))}
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as error:  # a shape that differs: another class count, another net
        raise ValueError("weights %s do not fit dlperf's %s with %d classes: %s"
                         % (path, name, num_classes,
                            " ".join(str(error).split())[:600]))
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            "weights %s do not fit dlperf's %s with %d classes (torchvision parameter names): "
            "missing %s; unexpected %s" % (path, name, num_classes,
                                           ", ".join(result.missing_keys[:5]) or "none",
                                           ", ".join(result.unexpected_keys[:5]) or "none"))
    return model.to(memory_format=torch.channels_last).eval()


def trained_model(request, data):
    # type: (Dict[str, Any], Any) -> Tuple[Trained, Dict[str, Any]]
    """The fp32 network: the user's weights, the cached training, or a training run now."""
    torch.set_flush_denormal(True)
    name = request["model"]
    classes = int(request["knobs"]["num_classes"])
    size = int(request["knobs"]["image_size"])
    if classes != len(data.classes):
        raise ValueError("num_classes %d but the data set has %d classes"
                         % (classes, len(data.classes)))
    if request.get("user_weights"):
        path = request["user_weights"]
        model = _user_model(name, classes, path)
        digest = file_sha256(path)
        return Trained(model, path, digest, size), {"source": "user weights %s" % path,
                                                    "sha256": digest, "cached": True}
    path = request["weights_path"]
    meta = path + ".json"
    private_dir(os.path.dirname(path))
    with locked(path):
        facts = None if request.get("retrain") else verified_facts(path, meta)
        if facts is None:  # never made, retrain asked, or the file changed since it was cached
            model, facts = train(name, classes, data, request["recipe"], int(request["seed"]))
            _, facts["sha256"] = store(path, ".pt",
                                       lambda tmp: torch.save(model.state_dict(), tmp))
            save_facts(meta, facts)
            facts["cached"] = False
        else:
            model = vision.network(name, classes)
            model.load_state_dict(_load_state(path))
            model = model.to(memory_format=torch.channels_last).eval()
            facts["cached"] = True
    facts["weights_path"] = path
    return Trained(model, path, facts["sha256"], size), facts


def calibration_batches(data, request):
    # type: (Any, Dict[str, Any]) -> List[np.ndarray]
    """Normalised *training* images for INT8 calibration, ``calibration_batch`` at a time."""
    index = data.calibration_indices(int(request["calibration_samples"]), int(request["seed"]))
    size = int(request["calibration_batch"])
    return [data.train.normalised(index[i:i + size]) for i in range(0, len(index), size)]


def predict(trained, precision, data, request, facts):
    # type: (Trained, str, Any, Dict[str, Any], Dict[str, Any]) -> Iterator[np.ndarray]
    """fp32 logits of the held-out split, batch by batch, from ``trained`` run at ``precision``."""
    model = trained.model
    autocast = None
    facts["torch_version"] = torch.__version__
    facts["device"] = "cpu"  # the study's torch engine evaluates on the CPU (x86 int8 kernels)
    if precision == "fp32":
        pass
    elif precision in AUTOCAST:
        autocast = AUTOCAST[precision]
        facts["autocast"] = str(autocast).replace("torch.", "")
    elif precision in CAST:
        model = cast_model(copy.deepcopy(model), CAST[precision]).eval()
        facts["cast_dtype"] = str(CAST[precision]).replace("torch.", "")
    elif precision == "int8":
        batches = calibration_batches(data, request)
        start = time.perf_counter()
        model = quantize_int8(copy.deepcopy(model).eval(), (_tensor(batches[0]),),
                              [(_tensor(b),) for b in batches])
        facts.update({"method": "FX graph-mode static post-training quantization (x86)",
                      "calibration": "%d training images (never held-out ones)"
                                     % sum(b.shape[0] for b in batches),
                      "quantize_s": time.perf_counter() - start})
    else:
        raise UnsupportedError("torch accuracy on CPU has no precision %r (has fp32, amp-bf16, "
                               "amp-fp16, bf16, fp16, int8)" % precision)
    with torch.no_grad():
        for images, _ in data.test.batches(int(request["eval_batch"])):
            x = _tensor(images)
            if autocast is not None:
                with torch.autocast("cpu", dtype=autocast):
                    logits = model(x)
            else:
                logits = model(x)
            yield logits.float().numpy()
