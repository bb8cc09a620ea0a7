"""The other networks of the Dell EMC INT8 study: VGG-16/19, AlexNet, GoogLeNet (Inception v1).

Each is the torchvision architecture (so a user's torchvision weights load by name): VGG and
AlexNet without batch normalisation, with biases and an adaptive average pool in front of the
classifier (7x7 for VGG, 6x6 for AlexNet) so the classifier's size does not depend on the
image size; GoogLeNet with batch normalisation after every convolution and without the two
auxiliary training heads. Unlike ResNet these have a smallest image size: a pooling window
cannot be larger than the (padded) map it slides over, and the check says which size is the
first that works.
"""

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Tuple

from .base import IMAGE_DEFAULTS, Conv, ImageTooSmall, ModelSpec, conv_out, vision_spec

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
#: The ``classifier_width`` knob of VGG and AlexNet: the two hidden fully connected layers'
#: width (the papers' 4096). They hold most of the weights (VGG-16: 119 of 138 million), so a
#: narrower classifier keeps every layer and operator of the network at a fraction of the
#: weights: what the tests' tiny cases use.
CLASSIFIER_DEFAULTS = dict(IMAGE_DEFAULTS, classifier_width=VGG_HIDDEN)

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
    out = _checked(conv_out(size, kernel, stride, padding), name)
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


def vgg_linears(num_classes, width=VGG_HIDDEN):
    # type: (int, int) -> List[Linear]
    last = [c for c in VGG_CONFIGS[16] if c != "M"][-1]
    return [Linear("classifier.0", last * VGG_POOL * VGG_POOL, width),
            Linear("classifier.3", width, width),
            Linear("classifier.6", width, num_classes)]


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


def alexnet_linears(num_classes, width=ALEXNET_HIDDEN):
    # type: (int, int) -> List[Linear]
    return [Linear("classifier.1", ALEXNET_CONVS[-1][0] * ALEXNET_POOL * ALEXNET_POOL, width),
            Linear("classifier.4", width, width),
            Linear("classifier.6", width, num_classes)]


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


def _googlenet_linears(k):
    # type: (Mapping[str, int]) -> List[Linear]
    return [Linear("fc", GOOGLENET_FEATURES, k["num_classes"])]


def _vgg_linears(k):
    # type: (Mapping[str, int]) -> List[Linear]
    return vgg_linears(k["num_classes"], k["classifier_width"])


def _alexnet_linears(k):
    # type: (Mapping[str, int]) -> List[Linear]
    return alexnet_linears(k["num_classes"], k["classifier_width"])


def _conv_params(convs, bias):
    # type: (List[Conv], bool) -> int
    """Weights plus either a bias per output channel or a batch norm's gamma and beta."""
    weights = sum(c.c_in * c.c_out * c.kernel * c.kernel for c in convs)
    return weights + (1 if bias else 2) * sum(c.c_out for c in convs)


def _conv_macs(convs):
    # type: (List[Conv]) -> int
    return sum(c.c_in * c.c_out * c.kernel * c.kernel * c.size_out * c.size_out for c in convs)


def _classifier_spec(name, description, convs_fn, linears_fn, bias, defaults=IMAGE_DEFAULTS):
    # type: (str, str, Callable[[int], List[Conv]], Callable[[Mapping[str, int]], List[Linear]], bool, Mapping[str, int]) -> ModelSpec
    """The entry of convolutions followed by fully connected layers, with its params and
    forward FLOPs."""
    def params(k):
        # type: (Mapping[str, int]) -> int
        fc = sum(l.n_in * l.n_out + l.n_out for l in linears_fn(k))
        return _conv_params(convs_fn(224), bias) + fc

    def flops(k):
        # type: (Mapping[str, int]) -> float
        fc = sum(l.n_in * l.n_out for l in linears_fn(k))
        return 2.0 * (_conv_macs(convs_fn(k["image_size"])) + fc)
    return vision_spec(name, description, params, flops, convs_fn, defaults)


def vgg(depth):
    # type: (int) -> ModelSpec
    return _classifier_spec(
        "vgg%d" % depth, "VGG-%d (configuration %s, no batch norm), image classification"
        % (depth, "D" if depth == 16 else "E"), lambda size: vgg_convs(size, depth), _vgg_linears,
        True, CLASSIFIER_DEFAULTS)


ALEXNET = _classifier_spec(
    "alexnet", "AlexNet (torchvision's single-tower variant), image classification",
    alexnet_convs, _alexnet_linears, True, CLASSIFIER_DEFAULTS)
GOOGLENET = _classifier_spec(
    "googlenet", "GoogLeNet / Inception v1 (batch norm, no auxiliary heads), image "
    "classification", googlenet_convs, _googlenet_linears, False)
