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
# ResNet v1.5 (50, 101, 152 layers)
# --------------------------------------------------------------------------------------------

#: Bottleneck widths of the four stages; output channels are 4 x width.
RESNET_WIDTHS = (64, 128, 256, 512)
#: Bottleneck blocks per stage for each depth (He et al. 2016, table 1).
RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
#: (bottleneck width, blocks) per stage of ResNet-50.
RESNET50_STAGES = tuple(zip(RESNET_WIDTHS, RESNET_BLOCKS[50]))
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


def resnet_stages(depth):
    # type: (int) -> Tuple[Tuple[int, int], ...]
    """(bottleneck width, blocks) per stage of the ResNet of ``depth`` layers (50, 101, 152)."""
    if depth not in RESNET_BLOCKS:
        raise ValueError("ResNet depth must be one of %s, got %r"
                         % (", ".join(str(d) for d in sorted(RESNET_BLOCKS)), depth))
    return tuple(zip(RESNET_WIDTHS, RESNET_BLOCKS[depth]))


def resnet_convs(image_size, depth=50):
    # type: (int, int) -> List[Conv]
    """Every convolution of ResNet-``depth`` v1.5 with its spatial sizes, for a square input.

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
    for stage, (width, blocks) in enumerate(resnet_stages(depth)):
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


def resnet50_convs(image_size):
    # type: (int) -> List[Conv]
    """Every convolution of ResNet-50 v1.5 (see :func:`resnet_convs`)."""
    return resnet_convs(image_size, 50)


def _resnet_params_fn(depth):
    # type: (int) -> Callable[[Mapping[str, int]], int]
    def params(k):
        # type: (Mapping[str, int]) -> int
        convs = resnet_convs(32, depth)
        weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in convs)
        batchnorm = 2 * sum(c.c_out for c in convs)  # gamma and beta (no conv biases)
        features = RESNET_WIDTHS[-1] * RESNET_EXPANSION
        fc = features * k["num_classes"] + k["num_classes"]
        return weights + batchnorm + fc
    return params


def _resnet_flops_fn(depth):
    # type: (int) -> Callable[[Mapping[str, int]], float]
    def flops(k):
        # type: (Mapping[str, int]) -> float
        """Forward FLOPs: every convolution plus the classifier matmul."""
        macs = 0
        for c in resnet_convs(k["image_size"], depth):
            macs += c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out
        macs += RESNET_WIDTHS[-1] * RESNET_EXPANSION * k["num_classes"]
        return 2.0 * macs
    return flops


_resnet50_params = _resnet_params_fn(50)
_resnet50_flops = _resnet_flops_fn(50)


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
    if k["clip_grad_norm"] < 0:
        raise ValueError("clip_grad_norm must be 0 (no clipping) or a positive global norm, got %d"
                         % k["clip_grad_norm"])


def _bert_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    s = k["seq_len"]
    return {"input_ids": (s,), "token_type_ids": (s,), "mlm_labels": (s,), "nsp_label": ()}


# --------------------------------------------------------------------------------------------
# GPT (decoder-only, GPT-2 style)
# --------------------------------------------------------------------------------------------
#
# GPT-2 (Radford et al. 2019) as nanoGPT and Megatron-LM's GPT build it: learned token and
# position embeddings, pre-LN blocks (causal self-attention with fused QKV, a 4 x hidden GELU
# MLP, biases everywhere), a final LayerNorm and the language-model head tied to the token
# embeddings. The defaults are GPT-2 small (124,439,808 parameters at vocabulary 50257).

GPT_MLP_RATIO = 4


def _gpt_params(k):
    # type: (Mapping[str, int]) -> int
    h, v = k["hidden"], k["vocab_size"]
    layer = (2 * h  # ln_1
             + 3 * h * h + 3 * h  # fused query, key, value
             + h * h + h  # attention output
             + 2 * h  # ln_2
             + GPT_MLP_RATIO * h * h + GPT_MLP_RATIO * h  # MLP up
             + GPT_MLP_RATIO * h * h + h)  # MLP down
    return (v + k["max_positions"]) * h + k["layers"] * layer + 2 * h  # + ln_f; head tied


def _gpt_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs of one sequence: per token and layer 24 h^2 (QKV, output, MLP) plus 4 s h
    (scores and context over the full s x s product the kernels compute), plus the vocabulary
    head 2 h V. Three times this per training step is exactly Megatron-LM's count without
    activation recomputation: 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)) per iteration."""
    s, h, v, l = k["seq_len"], k["hidden"], k["vocab_size"], k["layers"]
    return float(s * (l * (24 * h * h + 4 * s * h) + 2 * h * v))


def megatron_flops_per_iteration(batch, seq_len, layers, hidden, vocab_size, recompute=False):
    # type: (int, int, int, int, int, bool) -> float
    """Narayanan et al. 2021 (Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM, eq. 3): 96 B s l h^2 (1 + s / 6h + V / 16 l h) with full activation
    recomputation (a second forward pass), 72 B s l h^2 (1 + s / 6h + V / 12 l h) without."""
    b, s, l, h, v = batch, seq_len, layers, hidden, vocab_size
    if recompute:
        return 96.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (16.0 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (12.0 * l * h))


def _gpt_check(k):
    # type: (Mapping[str, int]) -> None
    for name in ("seq_len", "vocab_size", "hidden", "layers", "heads", "max_positions"):
        if k[name] < 1:
            raise ValueError("%s must be positive, got %d" % (name, k[name]))
    if k["hidden"] % k["heads"]:
        raise ValueError("hidden (%d) must be divisible by heads (%d)" % (k["hidden"], k["heads"]))
    if k["seq_len"] > k["max_positions"]:
        raise ValueError(
            "seq_len (%d) exceeds max_positions (%d)" % (k["seq_len"], k["max_positions"]))
    if k["seq_len"] < 2:
        raise ValueError("seq_len must be at least 2 (a token and the next one to predict)")
    if k["clip_grad_norm"] < 0:
        raise ValueError("clip_grad_norm must be 0 (no clipping) or a positive global norm, got %d"
                         % k["clip_grad_norm"])


def _gpt_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"input_ids": (k["seq_len"],), "labels": (k["seq_len"],)}


# --------------------------------------------------------------------------------------------
# Wide & Deep (the OneFlow / HugeCTR click-through-rate benchmark)
# --------------------------------------------------------------------------------------------
#
# The configuration of OneFlow-Benchmark's ClickThroughRate/WideDeepLearning/wdl_train_eval.py,
# which DLPerf's Wide & Deep study runs against HugeCTR: Criteo's 13 dense and 26 categorical
# fields; a wide part (an embedding of size 1 over 2 hashed cross features, summed into a score)
# and a deep part (an embedding of size 16 over the 26 categorical fields, concatenated with the
# dense fields, then 7 ReLU layers of 1024 with dropout 0.5 and a linear score); the two scores
# add into one logit (sigmoid cross-entropy); Adam with lr 1e-3, lazy (sparse) on the two
# embeddings. Its default vocabulary is 3,200,000 for both tables (the scripts pass one size to
# both, as `vocab_size` does here); DLPerf's study grows it to 819,200,000.

WIDE_DEEP_DENSE_FIELDS = 13
WIDE_DEEP_WIDE_FIELDS = 2
WIDE_DEEP_DEEP_FIELDS = 26


def _wide_deep_input_width(k):
    # type: (Mapping[str, int]) -> int
    return WIDE_DEEP_DEEP_FIELDS * k["deep_embedding_size"] + WIDE_DEEP_DENSE_FIELDS


def _wide_deep_params(k):
    # type: (Mapping[str, int]) -> int
    v, e, n, h = k["vocab_size"], k["deep_embedding_size"], k["hidden_units"], k["hidden_size"]
    mlp = _wide_deep_input_width(k) * h + h + (n - 1) * (h * h + h) + h + 1
    return v * 1 + v * e + mlp  # wide table, deep table, MLP with its score layer


def _wide_deep_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs of one sample: the MLP's matmuls (embedding look-ups are gathers, which
    the catalogue's convention does not count; they cost memory bandwidth, not FLOPs)."""
    n, h = k["hidden_units"], k["hidden_size"]
    return 2.0 * (_wide_deep_input_width(k) * h + (n - 1) * h * h + h)


def _wide_deep_check(k):
    # type: (Mapping[str, int]) -> None
    for name in ("vocab_size", "deep_embedding_size", "hidden_units", "hidden_size"):
        if k[name] < 1:
            raise ValueError("%s must be positive, got %d" % (name, k[name]))


def _wide_deep_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"dense_fields": (WIDE_DEEP_DENSE_FIELDS,), "wide_ids": (WIDE_DEEP_WIDE_FIELDS,),
            "deep_ids": (WIDE_DEEP_DEEP_FIELDS,), "label": (1,)}


# --------------------------------------------------------------------------------------------
# Face recognition with a huge classifier (InsightFace's ResNet-50, ArcFace, Partial FC)
# --------------------------------------------------------------------------------------------
#
# InsightFace's iresnet50 (arcface_torch "r50", the backbone DLPerf's InsightFace study trains):
# a 3x3 stem of 64 with BN and PReLU at 112 x 112, four stages of "improved" basic blocks (BN,
# 3x3, BN, PReLU, 3x3 with the stage's stride 2, BN; 1x1 stride-2 projection + BN on the first
# block) with 3, 4, 14 and 3 blocks of 64, 128, 256 and 512 channels, a BN, a linear map of the
# 7 x 7 x 512 map to the 512-d embedding and a BatchNorm1d whose scale is frozen at 1. The
# classifier is a bias-free (num_classes x 512) matrix of class centres under ArcFace
# (s = 64, m = 0.5) on normalised embeddings and centres; Partial FC samples `partial_fc`
# percent of the centres per step (every positive of the batch, the rest at random), so logits
# and their softmax cost that fraction. num_classes defaults to MS1M-ArcFace (emore): 85,742.

FACE_STAGES = ((64, 3), (128, 4), (256, 14), (512, 3))
FACE_STEM = 64


def face_convs(image_size):
    # type: (int) -> List[Conv]
    convs = [Conv("conv1", 3, FACE_STEM, 3, 1, image_size, image_size)]
    size, c_in = image_size, FACE_STEM
    for stage, (width, blocks) in enumerate(FACE_STAGES):
        for block in range(blocks):
            stride = 2 if block == 0 else 1
            out = _conv_out(size, 3, stride, 1)
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
    for name in ("image_size", "num_classes", "embedding_size"):
        if k[name] < 1:
            raise ValueError("%s must be positive, got %d" % (name, k[name]))
    if k["image_size"] % 16:
        raise ValueError("image_size must be a multiple of 16 (four stride-2 stages), got %d"
                         % k["image_size"])
    if not 1 <= k["partial_fc"] <= 100:
        raise ValueError("partial_fc is the percent of class centres sampled per step, 1..100 "
                         "(100 = the full softmax), got %d" % k["partial_fc"])


def _face_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"image": (3, k["image_size"], k["image_size"]), "label": ()}


# --------------------------------------------------------------------------------------------
# The other networks of the Dell EMC INT8 study: VGG-16/19, AlexNet, GoogLeNet (Inception v1)
# --------------------------------------------------------------------------------------------
#
# Each is the torchvision architecture (so a user's torchvision weights load by name): VGG and
# AlexNet without batch normalisation, with biases and an adaptive average pool in front of the
# classifier (7x7 for VGG, 6x6 for AlexNet) so the classifier's size does not depend on the
# image size; GoogLeNet with batch normalisation after every convolution and without the two
# auxiliary training heads. Unlike ResNet these have a smallest image size: a pooling window
# cannot be larger than the (padded) map it slides over, and the check says which size is the
# first that works.

Pool = NamedTuple("Pool", [("kernel", int), ("stride", int), ("padding", int), ("ceil", bool)])
Linear = NamedTuple("Linear", [("name", str), ("n_in", int), ("n_out", int)])

#: Output channels of VGG's 3x3 convolutions, "M" a 2x2 max pool (Simonyan & Zisserman, D and E).
VGG_CONFIGS = {
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
         512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"),
}  # type: Dict[int, Tuple[Any, ...]]
VGG_POOL = 7  # adaptive average pool in front of the classifier
VGG_HIDDEN = 4096

#: AlexNet (torchvision's one-GPU variant, Krizhevsky 2014): (c_out, kernel, stride, padding)
#: per convolution, a 3x3 stride-2 max pool after the 1st, 2nd and 5th.
ALEXNET_CONVS = ((64, 11, 4, 2), (192, 5, 1, 2), (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1))
ALEXNET_POOL_AFTER = (0, 1, 4)
ALEXNET_POOL = 6
ALEXNET_HIDDEN = 4096

#: GoogLeNet's inception modules: (name, c_in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5",
#: pool proj) (Szegedy et al. 2015, table 1). As in torchvision the "5x5" branch uses a 3x3
#: kernel (a long-standing torchvision quirk its pretrained weights depend on).
GOOGLENET_INCEPTIONS = (
    ("inception3a", 192, 64, 96, 128, 16, 32, 32),
    ("inception3b", 256, 128, 128, 192, 32, 96, 64),
    ("inception4a", 480, 192, 96, 208, 16, 48, 64),
    ("inception4b", 512, 160, 112, 224, 24, 64, 64),
    ("inception4c", 512, 128, 128, 256, 24, 64, 64),
    ("inception4d", 512, 112, 144, 288, 32, 64, 64),
    ("inception4e", 528, 256, 160, 320, 32, 128, 128),
    ("inception5a", 832, 256, 160, 320, 32, 128, 128),
    ("inception5b", 832, 384, 192, 384, 48, 128, 128),
)
GOOGLENET_BRANCH3_KERNEL = 3
#: Max pools (kernel, stride) with ceil_mode before the inception module of that name (the one
#: before inception3a is the stem's maxpool2).
GOOGLENET_POOLS_BEFORE = {"inception4a": (3, 2), "inception5a": (2, 2)}
GOOGLENET_FEATURES = 1024


class ImageTooSmall(ValueError):
    """A layer of the network would see a map smaller than its window."""


def _pool_out(size, pool):
    # type: (int, Pool) -> int
    """Output size of a max pool exactly as PyTorch computes it (ceil_mode included)."""
    span = size + 2 * pool.padding - pool.kernel + (pool.stride - 1 if pool.ceil else 0)
    out = span // pool.stride + 1
    if pool.ceil and (out - 1) * pool.stride >= size + pool.padding:
        out -= 1  # the last window must start inside the input
    return out


def _checked(size, what):
    # type: (int, str) -> int
    if size < 1:
        raise ImageTooSmall(what)
    return size


def _conv(convs, name, c_in, c_out, kernel, stride, padding, size):
    # type: (List[Conv], str, int, int, int, int, int, int) -> int
    out = _checked(_conv_out(size, kernel, stride, padding), name)
    convs.append(Conv(name, c_in, c_out, kernel, stride, size, out))
    return out


def _pool(name, pool, size):
    # type: (str, Pool, int) -> int
    return _checked(_pool_out(size, pool), name)


def vgg_convs(image_size, depth=16):
    # type: (int, int) -> List[Conv]
    """VGG-``depth``'s convolutions (3x3, padding 1, with bias) and their sizes."""
    convs = []  # type: List[Conv]
    size, c_in, index = image_size, 3, 0
    for item in VGG_CONFIGS[depth]:
        if item == "M":
            size = _pool("features.%d (max pool)" % index, Pool(2, 2, 0, False), size)
        else:
            size = _conv(convs, "features.%d" % index, c_in, item, 3, 1, 1, size)
            c_in = item
            index += 1  # a ReLU follows every convolution
        index += 1
    return convs


def vgg_linears(num_classes):
    # type: (int) -> List[Linear]
    last = [c for c in VGG_CONFIGS[16] if c != "M"][-1]
    return [Linear("classifier.0", last * VGG_POOL * VGG_POOL, VGG_HIDDEN),
            Linear("classifier.3", VGG_HIDDEN, VGG_HIDDEN),
            Linear("classifier.6", VGG_HIDDEN, num_classes)]


def alexnet_convs(image_size):
    # type: (int) -> List[Conv]
    """AlexNet's five convolutions (with bias) and their sizes."""
    convs = []  # type: List[Conv]
    size, c_in = image_size, 3
    for i, (c_out, kernel, stride, padding) in enumerate(ALEXNET_CONVS):
        size = _conv(convs, "features.conv%d" % (i + 1), c_in, c_out, kernel, stride, padding,
                     size)
        if i in ALEXNET_POOL_AFTER:
            size = _pool("the max pool after conv%d" % (i + 1), Pool(3, 2, 0, False), size)
        c_in = c_out
    return convs


def alexnet_linears(num_classes):
    # type: (int) -> List[Linear]
    return [Linear("classifier.1", ALEXNET_CONVS[-1][0] * ALEXNET_POOL * ALEXNET_POOL,
                   ALEXNET_HIDDEN),
            Linear("classifier.4", ALEXNET_HIDDEN, ALEXNET_HIDDEN),
            Linear("classifier.6", ALEXNET_HIDDEN, num_classes)]


def googlenet_convs(image_size):
    # type: (int) -> List[Conv]
    """GoogLeNet's convolutions (no bias; each followed by batch norm) and their sizes."""
    convs = []  # type: List[Conv]
    size = _conv(convs, "conv1", 3, 64, 7, 2, 3, image_size)
    size = _pool("maxpool1", Pool(3, 2, 0, True), size)
    size = _conv(convs, "conv2", 64, 64, 1, 1, 0, size)
    size = _conv(convs, "conv3", 64, 192, 3, 1, 1, size)
    size = _pool("maxpool2", Pool(3, 2, 0, True), size)
    for name, c_in, b1, b2_red, b2, b3_red, b3, b4 in GOOGLENET_INCEPTIONS:
        if name in GOOGLENET_POOLS_BEFORE:
            kernel, stride = GOOGLENET_POOLS_BEFORE[name]
            size = _pool("the max pool before " + name, Pool(kernel, stride, 0, True), size)
        k3 = GOOGLENET_BRANCH3_KERNEL
        _conv(convs, name + ".branch1", c_in, b1, 1, 1, 0, size)
        _conv(convs, name + ".branch2.0", c_in, b2_red, 1, 1, 0, size)
        _conv(convs, name + ".branch2.1", b2_red, b2, 3, 1, 1, size)
        _conv(convs, name + ".branch3.0", c_in, b3_red, 1, 1, 0, size)
        _conv(convs, name + ".branch3.1", b3_red, b3, k3, 1, k3 // 2, size)
        _pool(name + ".branch4 (max pool)", Pool(3, 1, 1, True), size)
        _conv(convs, name + ".branch4.1", c_in, b4, 1, 1, 0, size)
    return convs


def _smallest_image(convs_fn):
    # type: (Callable[[int], Any]) -> int
    size = 1
    while True:
        try:
            convs_fn(size)
            return size
        except ImageTooSmall:
            size += 1


def _vision_check(convs_fn, model):
    # type: (Optional[Callable[[int], Any]], str) -> Callable[[Mapping[str, int]], None]
    """Knob check of an image classifier: classes >= 2, and an image every layer can take."""
    def check(k):
        # type: (Mapping[str, int]) -> None
        if k["num_classes"] < 2:
            raise ValueError("num_classes must be at least 2, got %d" % k["num_classes"])
        if k["image_size"] < 1:
            raise ValueError("image_size must be positive, got %d" % k["image_size"])
        if convs_fn is None:
            return
        try:
            convs_fn(k["image_size"])
        except ImageTooSmall as error:
            raise ValueError(
                "image_size %d is too small for %s: %s would get an empty map; the smallest "
                "image_size it takes is %d" % (k["image_size"], model, error,
                                                _smallest_image(convs_fn)))
    return check


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


def _conv_params(convs, bias):
    # type: (List[Conv], bool) -> int
    """Weights plus either a bias per output channel or a batch norm's gamma and beta."""
    weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in convs)
    return weights + (1 if bias else 2) * sum(c.c_out for c in convs)


def _conv_macs(convs):
    # type: (List[Conv]) -> int
    return sum(c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out for c in convs)


def _classifier_fns(convs_fn, linears_fn, bias):
    # type: (Callable[[int], List[Conv]], Callable[[int], List[Linear]], bool) -> Tuple[Callable[[Mapping[str, int]], int], Callable[[Mapping[str, int]], float]]
    """(params, forward FLOPs) of convolutions followed by fully connected layers."""
    def params(k):
        # type: (Mapping[str, int]) -> int
        fc = sum(l.n_in * l.n_out + l.n_out for l in linears_fn(k["num_classes"]))
        return _conv_params(convs_fn(224), bias) + fc

    def flops(k):
        # type: (Mapping[str, int]) -> float
        fc = sum(l.n_in * l.n_out for l in linears_fn(k["num_classes"]))
        return 2.0 * (_conv_macs(convs_fn(k["image_size"])) + fc)
    return params, flops


def _googlenet_linears(num_classes):
    # type: (int) -> List[Linear]
    return [Linear("fc", GOOGLENET_FEATURES, num_classes)]


def _vision_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"image": (3, k["image_size"], k["image_size"]), "label": ()}


def final_feature_size(name, knobs=None):
    # type: (str, Optional[Mapping[str, Any]]) -> int
    """Side of the last convolutional feature map of vision model ``name`` (before pooling)."""
    k = resolve_knobs(name, knobs)
    return _VISION_CONVS[name](k["image_size"])[-1].size_out


_VISION_CONVS = {
    "resnet50": lambda size: resnet_convs(size, 50),
    "resnet101": lambda size: resnet_convs(size, 101),
    "resnet152": lambda size: resnet_convs(size, 152),
    "vgg16": lambda size: vgg_convs(size, 16),
    "vgg19": lambda size: vgg_convs(size, 19),
    "alexnet": alexnet_convs,
    "googlenet": googlenet_convs,
}  # type: Dict[str, Callable[[int], List[Conv]]]


def _vision_spec(name, description, params_fn, flops_fn, needs_size_check):
    # type: (str, str, Callable[[Mapping[str, int]], int], Callable[[Mapping[str, int]], float], bool) -> ModelSpec
    return ModelSpec(
        name=name,
        kind="vision",
        description=description,
        defaults={"image_size": 224, "num_classes": 1000},
        params_fn=params_fn,
        flops_fn=flops_fn,
        check_fn=_vision_check(_VISION_CONVS[name] if needs_size_check else None, name),
        inputs_fn=_vision_inputs,
    )


# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------


ZERO_ALLOWED_KNOBS = ("clip_grad_norm",)


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
        # knobs that may be 0 (a switch such as clip_grad_norm=0); every other knob is >= 1
        self.minimums = {name: 0 for name in ZERO_ALLOWED_KNOBS if name in self.defaults}
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
            # global gradient-norm clip of the training step; 0 = none (DLPerf reports both)
            "clip_grad_norm": 1,
        },
        params_fn=_bert_params,
        flops_fn=_bert_flops,
        check_fn=_bert_check,
        inputs_fn=_bert_inputs,
    ),
    "gpt": ModelSpec(
        name="gpt",
        kind="language",
        description="GPT-2 style decoder (pre-LN, causal attention, tied LM head), next-token "
                    "training; defaults are GPT-2 small",
        defaults={
            "seq_len": 1024,
            "vocab_size": 50257,
            "hidden": 768,
            "layers": 12,
            "heads": 12,
            "max_positions": 1024,
            "clip_grad_norm": 1,
        },
        params_fn=_gpt_params,
        flops_fn=_gpt_flops,
        check_fn=_gpt_check,
        inputs_fn=_gpt_inputs,
    ),
    "wide-deep": ModelSpec(
        name="wide-deep",
        kind="recommendation",
        description="Wide & Deep click-through-rate model (OneFlow-Benchmark's WDL config: "
                    "2 wide + 26 deep sparse fields, 13 dense, 7 x 1024 MLP)",
        defaults={"vocab_size": 3200000, "deep_embedding_size": 16, "hidden_units": 7,
                  "hidden_size": 1024},
        params_fn=_wide_deep_params,
        flops_fn=_wide_deep_flops,
        check_fn=_wide_deep_check,
        inputs_fn=_wide_deep_inputs,
    ),
    "face-resnet50": ModelSpec(
        name="face-resnet50",
        kind="face",
        description="InsightFace ResNet-50 (iresnet50) with an ArcFace classifier over "
                    "num_classes identities; Partial FC samples partial_fc percent of them",
        defaults={"image_size": 112, "num_classes": 85742, "embedding_size": 512,
                  "partial_fc": 100},
        params_fn=_face_params,
        flops_fn=_face_flops,
        check_fn=_face_check,
        inputs_fn=_face_inputs,
    ),
}  # type: Dict[str, ModelSpec]

# The inference models of the Dell EMC V100 study (TensorRT INT8 vs FP32 accuracy and speed).
for _depth in (101, 152):
    CATALOGUE["resnet%d" % _depth] = _vision_spec(
        "resnet%d" % _depth, "ResNet-%d v1.5 (stride 2 on the 3x3 conv), image classification"
        % _depth, _resnet_params_fn(_depth), _resnet_flops_fn(_depth), False)
for _depth in (16, 19):
    _params, _flops = _classifier_fns(_VISION_CONVS["vgg%d" % _depth], vgg_linears, True)
    CATALOGUE["vgg%d" % _depth] = _vision_spec(
        "vgg%d" % _depth, "VGG-%d (configuration %s, no batch norm), image classification"
        % (_depth, "D" if _depth == 16 else "E"), _params, _flops, True)
_params, _flops = _classifier_fns(alexnet_convs, alexnet_linears, True)
CATALOGUE["alexnet"] = _vision_spec(
    "alexnet", "AlexNet (torchvision's single-tower variant), image classification",
    _params, _flops, True)
_params, _flops = _classifier_fns(googlenet_convs, _googlenet_linears, False)
CATALOGUE["googlenet"] = _vision_spec(
    "googlenet", "GoogLeNet / Inception v1 (batch norm, no auxiliary heads), image "
    "classification", _params, _flops, True)
del _depth, _params, _flops


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
