"""Framework-neutral model catalogue: knobs, parameter counts and FLOPs per sample.

Every backend builds the networks described here, and tests assert that the parameter count of
what a backend built equals :meth:`ModelSpec.params`; that equality is what makes comparisons
between frameworks honest. Counts are closed-form functions of the knobs so the harness can print
them (``dlperf models``) without any framework installed.

FLOP convention: one multiply-add is 2 FLOPs. Only convolutions and matrix multiplications
(including attention's score and context products) are counted; normalisation, activations,
softmax, pooling, residual additions, biases and the optimizer update are left out because they
are a few percent at most and no two papers count them alike. A training step is counted as 3 x
the forward pass (backward = 2 x forward).

Standard library only; valid Python 3.7: imported inside every framework's own environment.
"""

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

Knobs = Dict[str, int]

# --------------------------------------------------------------------------------------------
# ResNet-50 v1.5
# --------------------------------------------------------------------------------------------

#: (bottleneck width, blocks) per stage; output channels are 4 x width.
RESNET50_STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))
RESNET_EXPANSION = 4

Conv = NamedTuple(
    "Conv",
    [
        ("name", str),
        ("c_in", int),
        ("c_out", int),
        ("kernel", int),
        ("stride", int),
        ("size_in", int),
        ("size_out", int),
    ],
)


def _conv_out(size, kernel, stride, padding):
    # type: (int, int, int, int) -> int
    return (size + 2 * padding - kernel) // stride + 1


def resnet50_convs(image_size):
    # type: (int) -> List[Conv]
    """Every convolution of ResNet-50 v1.5 with its spatial sizes, for a square input.

    v1.5 puts the stride-2 of a downsampling bottleneck on the 3x3 convolution (v1 put it on the
    first 1x1), which costs more FLOPs but is what NVIDIA, MLPerf and torchvision train. Padding
    is ``kernel // 2`` throughout, matching every framework's reference implementation, so the
    sizes here are the sizes a backend actually computes (image 32 ends at 1x1).
    """
    convs = []  # type: List[Conv]
    size = _conv_out(image_size, 7, 2, 3)
    convs.append(Conv("conv1", 3, 64, 7, 2, image_size, size))
    size = _conv_out(size, 3, 2, 1)  # max pool
    c_in = 64
    for stage, (width, blocks) in enumerate(RESNET50_STAGES):
        c_out = width * RESNET_EXPANSION
        for block in range(blocks):
            stride = 2 if (block == 0 and stage > 0) else 1
            out = _conv_out(size, 3, stride, 1)
            name = "layer%d.%d" % (stage + 1, block)
            convs.append(Conv(name + ".conv1", c_in, width, 1, 1, size, size))
            convs.append(Conv(name + ".conv2", width, width, 3, stride, size, out))
            convs.append(Conv(name + ".conv3", width, c_out, 1, 1, out, out))
            if block == 0:
                # 1x1 projection shortcut; its stride equals the 3x3's, so sizes agree.
                convs.append(Conv(name + ".downsample", c_in, c_out, 1, stride, size, out))
            c_in = c_out
            size = out
    return convs


def _resnet50_params(k):
    # type: (Mapping[str, int]) -> int
    weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in resnet50_convs(32))
    batchnorm = 2 * sum(c.c_out for c in resnet50_convs(32))  # gamma and beta (no conv biases)
    features = RESNET50_STAGES[-1][0] * RESNET_EXPANSION
    fc = features * k["num_classes"] + k["num_classes"]
    return weights + batchnorm + fc


def _resnet50_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs: every convolution plus the classifier matmul."""
    macs = 0
    for c in resnet50_convs(k["image_size"]):
        macs += c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out
    macs += RESNET50_STAGES[-1][0] * RESNET_EXPANSION * k["num_classes"]
    return 2.0 * macs


def _resnet50_check(k):
    # type: (Mapping[str, int]) -> None
    if k["image_size"] < 1:
        raise ValueError("image_size must be positive, got %d" % k["image_size"])
    if k["num_classes"] < 2:
        raise ValueError("num_classes must be at least 2, got %d" % k["num_classes"])


def _resnet50_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"image": (3, k["image_size"], k["image_size"]), "label": ()}


# --------------------------------------------------------------------------------------------
# BERT-Base with pre-training heads
# --------------------------------------------------------------------------------------------


def _bert_params(k):
    # type: (Mapping[str, int]) -> int
    """BertForPreTraining with the MLM decoder tied to the word embeddings (counted once)."""
    h, i, v = k["hidden"], k["intermediate"], k["vocab_size"]
    linear = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731  weight + bias
    layer_norm = 2 * h
    embeddings = (v + k["max_positions"] + k["type_vocab"]) * h + layer_norm
    layer = (
        4 * linear(h, h)  # query, key, value, attention output
        + layer_norm
        + linear(h, i)
        + linear(i, h)
        + layer_norm
    )
    pooler = linear(h, h)
    mlm = linear(h, h) + layer_norm + v  # transform + decoder bias; decoder weight is tied
    nsp = linear(h, 2)
    return embeddings + k["layers"] * layer + pooler + mlm + nsp


def _bert_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs for one sequence of ``seq_len`` tokens.

    Counts the Q/K/V/output projections, the attention score (QK^T) and context (PV) products,
    the feed-forward pair, the pooler and NSP classifier (first token only) and the MLM head
    transform and vocabulary decoder **over all seq_len positions** — what a model that returns
    prediction scores for every token (as BertForPreTraining does) computes, even though only
    ~15% of positions carry a label.
    """
    s, h, i, v = k["seq_len"], k["hidden"], k["intermediate"], k["vocab_size"]
    per_layer = (
        4 * s * h * h  # Q, K, V and output projections
        + 2 * s * s * h  # scores QK^T and context PV, summed over heads
        + 2 * s * h * i  # feed-forward up and down
    )
    heads = h * h + h * 2 + s * h * h + s * h * v  # pooler, NSP, MLM transform, MLM decoder
    return 2.0 * (k["layers"] * per_layer + heads)


def _bert_check(k):
    # type: (Mapping[str, int]) -> None
    for name in ("seq_len", "vocab_size", "hidden", "layers", "heads", "intermediate",
                 "max_positions", "type_vocab"):
        if k[name] < 1:
            raise ValueError("%s must be positive, got %d" % (name, k[name]))
    if k["hidden"] % k["heads"]:
        raise ValueError("hidden (%d) must be divisible by heads (%d)" % (k["hidden"], k["heads"]))
    if k["seq_len"] > k["max_positions"]:
        raise ValueError(
            "seq_len (%d) exceeds max_positions (%d)" % (k["seq_len"], k["max_positions"])
        )
    if k["seq_len"] < 2:
        raise ValueError("seq_len must be at least 2 (a [CLS] token and one more)")


def _bert_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    s = k["seq_len"]
    return {"input_ids": (s,), "token_type_ids": (s,), "mlm_labels": (s,), "nsp_label": ()}


# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------


class ModelSpec(object):
    """One catalogue entry; every method accepts partial knobs and fills in the defaults."""

    def __init__(
        self,
        name,  # type: str
        kind,  # type: str
        description,  # type: str
        defaults,  # type: Knobs
        params_fn,  # type: Callable[[Mapping[str, int]], int]
        flops_fn,  # type: Callable[[Mapping[str, int]], float]
        check_fn,  # type: Callable[[Mapping[str, int]], None]
        inputs_fn,  # type: Callable[[Mapping[str, int]], Dict[str, Tuple[int, ...]]]
    ):
        # type: (...) -> None
        self.name = name
        self.kind = kind
        self.description = description
        self.defaults = dict(defaults)
        self.knobs = tuple(defaults)  # every knob has a default, so they are the settable ones
        self._params_fn = params_fn
        self._flops_fn = flops_fn
        self._check_fn = check_fn
        self._inputs_fn = inputs_fn

    def resolve(self, overrides=None):
        # type: (Optional[Mapping[str, Any]]) -> Knobs
        """Defaults merged with the non-None overrides, validated.

        Unknown knob names and impossible values raise here, with the allowed names, rather than
        deep inside a framework where the message would be about tensor shapes.
        """
        knobs = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key not in self.defaults:
                raise KeyError(
                    "model %s has no knob %r; allowed: %s"
                    % (self.name, key, ", ".join(self.knobs))
                )
            if isinstance(value, bool) or int(value) != value:
                raise ValueError("knob %s must be an integer, got %r" % (key, value))
            knobs[key] = int(value)
        self._check_fn(knobs)
        return knobs

    def params(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> int
        """Trainable parameters of the network as every backend must build it."""
        return self._params_fn(self.resolve(knobs))

    def flops_per_sample(self, knobs=None, train=True):
        # type: (Optional[Mapping[str, Any]], bool) -> float
        """Analytic FLOPs for one sample; a training step counts 3 x the forward pass."""
        forward = self._flops_fn(self.resolve(knobs))
        return 3.0 * forward if train else forward

    def input_shapes(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> Dict[str, Tuple[int, ...]]
        """Per-sample shape of each synthetic input, so every backend feeds the same data."""
        return self._inputs_fn(self.resolve(knobs))

    def __repr__(self):
        # type: () -> str
        return "ModelSpec(%r, kind=%r)" % (self.name, self.kind)


CATALOGUE = {
    "resnet50": ModelSpec(
        name="resnet50",
        kind="vision",
        description="ResNet-50 v1.5 (stride 2 on the 3x3 conv), image classification",
        defaults={"image_size": 224, "num_classes": 1000},
        params_fn=_resnet50_params,
        flops_fn=_resnet50_flops,
        check_fn=_resnet50_check,
        inputs_fn=_resnet50_inputs,
    ),
    "bert-base": ModelSpec(
        name="bert-base",
        kind="language",
        description="BERT-Base pre-training (MLM + NSP heads, tied decoder), post-LN encoder",
        defaults={
            "seq_len": 128,
            "vocab_size": 30522,
            "hidden": 768,
            "layers": 12,
            "heads": 12,
            "intermediate": 3072,
            "max_positions": 512,
            "type_vocab": 2,
        },
        params_fn=_bert_params,
        flops_fn=_bert_flops,
        check_fn=_bert_check,
        inputs_fn=_bert_inputs,
    ),
}  # type: Dict[str, ModelSpec]


def names():
    # type: () -> List[str]
    return sorted(CATALOGUE)


def get(name):
    # type: (str) -> ModelSpec
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError("unknown model %r; allowed: %s" % (name, ", ".join(names())))


def resolve_knobs(name, overrides=None):
    # type: (str, Optional[Mapping[str, Any]]) -> Knobs
    """The model's default knobs with every non-None override applied (validated)."""
    return get(name).resolve(overrides)
