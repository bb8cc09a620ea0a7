"""The catalogue's image classifiers as PyTorch modules, by catalogue name.

One table for everything that needs "the network called X with N classes": the benchmark
builders in :mod:`dlperf.backends.torch`, the ONNX export and the accuracy evaluation.

Valid Python 3.7; imports only torch and the catalogue.
"""

from typing import Callable, Dict, Mapping, Optional

from torch import nn

from dlperf import models
from dlperf.backends.torch.alexnet import AlexNet
from dlperf.backends.torch.googlenet import GoogLeNet
from dlperf.backends.torch.resnet import ResNet, ResNet50
from dlperf.backends.torch.vgg import VGG
from dlperf.worker.workload import UnsupportedError

NETWORKS = {
    "resnet50": ResNet50,
    "resnet101": lambda classes: ResNet(101, classes),
    "resnet152": lambda classes: ResNet(152, classes),
    "vgg16": lambda classes, width=models.VGG_HIDDEN: VGG(16, classes, width=width),
    "vgg19": lambda classes, width=models.VGG_HIDDEN: VGG(19, classes, width=width),
    "googlenet": GoogLeNet,
    "alexnet": lambda classes, width=models.ALEXNET_HIDDEN: AlexNet(classes, width=width),
}  # type: Dict[str, Callable[..., nn.Module]]

#: Networks with batch normalisation, which needs more than one value per channel to train.
BATCHNORM = ("resnet50", "resnet101", "resnet152", "googlenet")

#: SGD learning rate of the benchmark's training step: 0.1 with batch norm (Goyal et al.), 0.01
#: without (the rate VGG and AlexNet were trained with; 0.1 diverges from scratch).
SGD_LR = {name: (0.1 if name in BATCHNORM else 0.01) for name in NETWORKS}


def network(name, num_classes, classifier_width=None):
    # type: (str, int, Optional[int]) -> nn.Module
    """A freshly initialised ``name`` with a ``num_classes`` classifier (seed torch first);
    ``classifier_width``: VGG's and AlexNet's knob of that name (None: the catalogue's)."""
    if classifier_width is None:
        return NETWORKS[name](num_classes)
    return NETWORKS[name](num_classes, width=classifier_width)


def check_batch(name, knobs, batch, train):
    # type: (str, Mapping[str, int], int, bool) -> None
    """Refuse a training batch that leaves batch norm a single value per channel."""
    if not train or name not in BATCHNORM:
        return
    final = models.final_feature_size(name, knobs)
    if batch * final * final < 2:
        raise UnsupportedError(
            "%s training at image_size %d ends at %dx%d, so batch %d gives BatchNorm a single "
            "value per channel; use batch >= 2 or a larger image"
            % (name, knobs["image_size"], final, final, batch))
