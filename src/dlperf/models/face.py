"""Face recognition with a huge classifier (InsightFace's ResNet-50, ArcFace, Partial FC).

InsightFace's iresnet50 (arcface_torch "r50", the backbone DLPerf's InsightFace study trains):
a 3x3 stem of 64 with BN and PReLU at 112 x 112, four stages of "improved" basic blocks (BN,
3x3, BN, PReLU, 3x3 with the stage's stride 2, BN; 1x1 stride-2 projection + BN on the first
block) with 3, 4, 14 and 3 blocks of 64, 128, 256 and 512 channels, a BN, a linear map of the
7 x 7 x 512 map to the 512-d embedding and a BatchNorm1d whose scale is frozen at 1. The
classifier is a bias-free (num_classes x 512) matrix of class centres under ArcFace
(s = 64, m = 0.5) on normalised embeddings and centres; Partial FC samples `partial_fc`
percent of the centres per step (every positive of the batch, the rest at random), so logits
and their softmax cost that fraction. num_classes defaults to MS1M-ArcFace (emore): 85,742.
"""

from typing import List, Mapping

from .base import Conv, ModelSpec, check_positive, conv_out, image_inputs

FACE_STAGES = ((64, 3), (128, 4), (256, 14), (512, 3))
FACE_STEM = 64
DEFAULTS = {"image_size": 112, "num_classes": 85742, "embedding_size": 512, "partial_fc": 100}


def face_convs(image_size):
    # type: (int) -> List[Conv]
    convs = [Conv("conv1", 3, FACE_STEM, 3, 1, image_size, image_size)]
    size, c_in = image_size, FACE_STEM
    for stage, (width, blocks) in enumerate(FACE_STAGES):
        for block in range(blocks):
            stride = 2 if block == 0 else 1
            out = conv_out(size, 3, stride, 1)
            name = "layer%d.%d" % (stage + 1, block)
            convs.append(Conv(name + ".conv1", c_in, width, 3, 1, size, size))
            convs.append(Conv(name + ".conv2", width, width, 3, stride, size, out))
            if block == 0:
                convs.append(Conv(name + ".downsample", c_in, width, 1, stride, size, out))
            c_in, size = width, out
    return convs


def _face_sampled_classes(k):
    # type: (Mapping[str, int]) -> int
    return max(1, k["num_classes"] * k["partial_fc"] // 100)


def _face_params(k):
    # type: (Mapping[str, int]) -> int
    """Trainable parameters: convolutions (no biases), BN scales and shifts, PReLU slopes, the
    embedding layer, the embedding BN's shift (its scale is frozen) and the class centres."""
    convs = face_convs(k["image_size"])
    weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in convs)
    bn = 2 * FACE_STEM  # stem BN
    prelu = FACE_STEM
    c_in = FACE_STEM
    for width, blocks in FACE_STAGES:
        for block in range(blocks):
            bn += 2 * (c_in + width + width)  # bn1 (input), bn2, bn3
            prelu += width
            if block == 0:
                bn += 2 * width  # projection's BN
            c_in = width
    last = face_convs(k["image_size"])[-1].size_out
    e = k["embedding_size"]
    head = 2 * c_in + (c_in * last * last * e + e) + e  # BN2d, linear, BN1d shift only
    return weights + bn + prelu + head + k["num_classes"] * e


def _face_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs of one image: convolutions, the embedding layer and the classifier over the
    sampled centres (all of them without Partial FC)."""
    convs = face_convs(k["image_size"])
    macs = sum(c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out for c in convs)
    last = convs[-1].size_out
    e = k["embedding_size"]
    macs += FACE_STAGES[-1][0] * last * last * e + e * _face_sampled_classes(k)
    return 2.0 * macs


def _face_check(k):
    # type: (Mapping[str, int]) -> None
    check_positive(k, ("image_size", "num_classes", "embedding_size"))
    if k["image_size"] % 16:
        raise ValueError("image_size must be a multiple of 16 (four stride-2 stages), got %d"
                         % k["image_size"])
    if not 1 <= k["partial_fc"] <= 100:
        raise ValueError("partial_fc is the percent of class centres sampled per step, 1..100 "
                         "(100 = the full softmax), got %d" % k["partial_fc"])


FACE_RESNET50 = ModelSpec(
    "face-resnet50", "face", "InsightFace ResNet-50 (iresnet50) with an ArcFace classifier over "
    "num_classes identities; Partial FC samples partial_fc percent of them",
    DEFAULTS, _face_params, _face_flops, _face_check, image_inputs)
