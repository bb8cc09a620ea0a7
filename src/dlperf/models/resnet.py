"""ResNet v1.5 (50, 101, 152 layers): stages, every convolution with its sizes, the counts."""

from typing import Callable, List, Mapping, Optional, Tuple

from .base import (Conv, IMAGE_DEFAULTS, ModelSpec, activation_elements, conv_out, image_inputs,
                   vision_spec)

#: Bottleneck widths of the four stages; output channels are 4 x width.
RESNET_WIDTHS = (64, 128, 256, 512)
#: Bottleneck blocks per stage for each depth (He et al. 2016, table 1).
RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
#: (bottleneck width, blocks) per stage of ResNet-50.
RESNET50_STAGES = tuple(zip(RESNET_WIDTHS, RESNET_BLOCKS[50]))
RESNET_EXPANSION = 4
#: ResNet-50's ``max_blocks`` knob at its default: its largest stage, so every block is kept.
RESNET50_MAX_BLOCKS = max(RESNET_BLOCKS[50])


def resnet_stages(depth, max_blocks=None):
    # type: (int, Optional[int]) -> Tuple[Tuple[int, int], ...]
    """(bottleneck width, blocks) per stage of the ResNet of ``depth`` layers (50, 101, 152),
    each stage cut to ``max_blocks`` blocks where given (ResNet-50's knob of that name)."""
    if depth not in RESNET_BLOCKS:
        raise ValueError("ResNet depth must be one of %s, got %r"
                         % (", ".join(str(d) for d in sorted(RESNET_BLOCKS)), depth))
    cap = max(RESNET_BLOCKS[depth]) if max_blocks is None else max_blocks
    return tuple((width, min(blocks, cap)) for width, blocks in zip(RESNET_WIDTHS,
                                                                     RESNET_BLOCKS[depth]))


def resnet50_stages(knobs):
    # type: (Mapping[str, int]) -> Tuple[Tuple[int, int], ...]
    """(bottleneck width, blocks) per stage of the ResNet-50 that ``knobs`` (resolved) describe:
    what every backend builds, its ``max_blocks`` knob applied."""
    return resnet_stages(50, knobs.get("max_blocks", RESNET50_MAX_BLOCKS))


def resnet_convs(image_size, depth=50, max_blocks=None):
    # type: (int, int, Optional[int]) -> List[Conv]
    """Every convolution of ResNet-``depth`` v1.5 with its spatial sizes, for a square input.

    v1.5 puts the stride-2 of a downsampling bottleneck on the 3x3 convolution (v1 put it on the
    first 1x1), which costs more FLOPs but is what NVIDIA, MLPerf and torchvision train. Padding
    is ``kernel // 2`` throughout, matching every framework's reference implementation, so the
    sizes here are the sizes a backend actually computes (image 32 ends at 1x1).
    """
    convs = []  # type: List[Conv]
    size = conv_out(image_size, 7, 2, 3)
    convs.append(Conv("conv1", 3, 64, 7, 2, image_size, size))
    size = conv_out(size, 3, 2, 1)  # max pool
    c_in = 64
    for stage, (width, blocks) in enumerate(resnet_stages(depth, max_blocks)):
        c_out = width * RESNET_EXPANSION
        for block in range(blocks):
            stride = 2 if (block == 0 and stage > 0) else 1
            out = conv_out(size, 3, stride, 1)
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


def resnet50_convs(image_size):
    # type: (int) -> List[Conv]
    """Every convolution of ResNet-50 v1.5 (see :func:`resnet_convs`)."""
    return resnet_convs(image_size, 50)


def _resnet_params_fn(depth):
    # type: (int) -> Callable[[Mapping[str, int]], int]
    def params(k):
        # type: (Mapping[str, int]) -> int
        convs = resnet_convs(32, depth, k.get("max_blocks"))
        weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in convs)
        batchnorm = 2 * sum(c.c_out for c in convs)  # gamma and beta (no conv biases)
        features = RESNET_WIDTHS[-1] * RESNET_EXPANSION
        fc = features * k["num_classes"] + k["num_classes"]
        return weights + batchnorm + fc
    return params


def _resnet_tensors_fn(depth):
    # type: (int) -> Callable[[Mapping[str, int]], int]
    def tensors(k):
        # type: (Mapping[str, int]) -> int
        """A weight per convolution, a gamma and a beta per batch norm (one after each
        convolution), the classifier's weight and bias: 161 for ResNet-50."""
        return 3 * len(resnet_convs(32, depth, k.get("max_blocks"))) + 2
    return tensors


def _resnet_flops_fn(depth):
    # type: (int) -> Callable[[Mapping[str, int]], float]
    def flops(k):
        # type: (Mapping[str, int]) -> float
        """Forward FLOPs: every convolution plus the classifier matmul."""
        macs = 0
        for c in resnet_convs(k["image_size"], depth, k.get("max_blocks")):
            macs += c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out
        macs += RESNET_WIDTHS[-1] * RESNET_EXPANSION * k["num_classes"]
        return 2.0 * macs
    return flops


def _resnet50_check(k):
    # type: (Mapping[str, int]) -> None
    if k["image_size"] < 1:
        raise ValueError("image_size must be positive, got %d" % k["image_size"])
    if k["num_classes"] < 2:
        raise ValueError("num_classes must be at least 2, got %d" % k["num_classes"])
    if not 1 <= k["max_blocks"] <= RESNET50_MAX_BLOCKS:
        raise ValueError("max_blocks must be 1 to %d (ResNet-50's stages have %s blocks), got %d"
                         % (RESNET50_MAX_BLOCKS, ", ".join(str(b) for b in RESNET_BLOCKS[50]),
                            k["max_blocks"]))


def _resnet50_activations(k):
    # type: (Mapping[str, int]) -> float
    return activation_elements(resnet_convs(k["image_size"], 50, k["max_blocks"]))


#: ResNet-50's knobs: the image's two, and ``max_blocks``, the most bottleneck blocks a stage
#: keeps (default 6: all of 3, 4, 6, 3). At 1 a stage keeps its first (downsampling) block: the
#: same stem, widths, strides and head at 10.1 M parameters (1000 classes) instead of 25.6 M,
#: which a graph framework builds and traces in about half the time; the tests train it where
#: what they check is a launcher, a link or a store rather than ResNet-50's depth.
RESNET50_DEFAULTS = dict(IMAGE_DEFAULTS, max_blocks=RESNET50_MAX_BLOCKS)

RESNET50 = ModelSpec(
    "resnet50", "vision", "ResNet-50 v1.5 (stride 2 on the 3x3 conv), image classification",
    RESNET50_DEFAULTS, _resnet_params_fn(50), _resnet_flops_fn(50), _resnet50_check,
    image_inputs, _resnet50_activations, _resnet_tensors_fn(50))


def deeper_resnet(depth):
    # type: (int) -> ModelSpec
    """ResNet-101 or -152, the inference models of the Dell EMC V100 study (TensorRT INT8 vs
    FP32 accuracy and speed)."""
    return vision_spec("resnet%d" % depth, "ResNet-%d v1.5 (stride 2 on the 3x3 conv), image "
                       "classification" % depth, _resnet_params_fn(depth), _resnet_flops_fn(depth),
                       lambda size: resnet_convs(size, depth))
