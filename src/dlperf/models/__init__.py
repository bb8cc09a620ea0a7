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

One module per family (``resnet``, ``bert``, ``gpt``, ``wide_deep``, ``face``, ``vision`` for
VGG, AlexNet and GoogLeNet), each with its constants, counts, knob check and catalogue entry;
``base`` holds the entry type and what several families share. This package assembles the
catalogue and re-exports every family's public names, so ``models.X`` reads as it always has.

Standard library only; valid Python 3.7: imported inside every framework's own environment.
"""

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .base import (IMAGE_DEFAULTS, ZERO_ALLOWED_KNOBS, Conv, ImageTooSmall, Knobs,  # noqa: F401
                   ModelSpec)
from .bert import BERT_BASE
from .face import FACE_RESNET50, FACE_STAGES, FACE_STEM, face_convs  # noqa: F401
from .gpt import GPT, GPT_MLP_RATIO, megatron_flops_per_iteration  # noqa: F401
from .resnet import (RESNET50, RESNET50_MAX_BLOCKS, RESNET50_STAGES, RESNET_BLOCKS,  # noqa: F401
                     RESNET_EXPANSION, RESNET_WIDTHS, deeper_resnet, resnet50_convs,
                     resnet50_stages, resnet_convs, resnet_stages)
from .vision import (ALEXNET, ALEXNET_CONVS, ALEXNET_HIDDEN, ALEXNET_POOL,  # noqa: F401
                     ALEXNET_POOL_AFTER, GOOGLENET, GOOGLENET_BRANCH3_KERNEL, GOOGLENET_FEATURES,
                     GOOGLENET_INCEPTIONS, GOOGLENET_POOLS_BEFORE, VGG_CONFIGS, VGG_HIDDEN,
                     VGG_POOL, Linear, Pool, alexnet_convs, alexnet_linears, googlenet_convs, vgg,
                     vgg_convs, vgg_linears)
from .wide_deep import (WIDE_DEEP, WIDE_DEEP_DEEP_FIELDS, WIDE_DEEP_DENSE_FIELDS,  # noqa: F401
                        WIDE_DEEP_WIDE_FIELDS)

CATALOGUE = {spec.name: spec for spec in (
    RESNET50, BERT_BASE, GPT, WIDE_DEEP, FACE_RESNET50,
    # the inference models of the Dell EMC V100 study (TensorRT INT8 vs FP32 accuracy and speed)
    deeper_resnet(101), deeper_resnet(152), vgg(16), vgg(19), ALEXNET, GOOGLENET,
)}  # type: Dict[str, ModelSpec]

#: Every convolution of each image classifier, for a square image of the given side.
_VISION_CONVS = {
    "resnet50": lambda size: resnet_convs(size, 50),
    "resnet101": lambda size: resnet_convs(size, 101),
    "resnet152": lambda size: resnet_convs(size, 152),
    "vgg16": lambda size: vgg_convs(size, 16),
    "vgg19": lambda size: vgg_convs(size, 19),
    "alexnet": alexnet_convs,
    "googlenet": googlenet_convs,
}  # type: Dict[str, Callable[[int], List[Conv]]]


def gradient_clip(knobs):
    # type: (Mapping[str, int]) -> Tuple[Optional[float], str]
    """BERT's global gradient-norm clip from its knob (None = off) and how results describe it."""
    clip = float(knobs.get("clip_grad_norm", 0)) or None
    return clip, ("global-norm clip %g" % clip) if clip else "no gradient clipping"


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


def smallest_image_size(name):
    # type: (str) -> int
    """The smallest ``image_size`` the catalogue's vision model ``name`` accepts."""
    spec = get(name)
    size = 1
    while True:
        try:
            spec.resolve({"image_size": size})
            return size
        except ValueError:
            size += 1


def final_feature_size(name, knobs=None):
    # type: (str, Optional[Mapping[str, Any]]) -> int
    """Side of the last convolutional feature map of vision model ``name`` (before pooling)."""
    k = resolve_knobs(name, knobs)
    return _VISION_CONVS[name](k["image_size"])[-1].size_out
