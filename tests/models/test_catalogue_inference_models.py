"""The INT8 study's inference models: the catalogue's closed forms against the built torch models.

ResNet-101/152, VGG-16/19, GoogLeNet and AlexNet: parameter counts equal the torchvision
reference counts and the modules the torch backend builds; FLOPs equal torch's own
FlopCounterMode over the real modules (on the meta device: shapes, no arithmetic); the smallest
image size the catalogue accepts is the smallest the real network runs on (its shape checks, on
the meta device too). Real modules, no mocks.
"""

import math

import pytest

from dlperf import models

import torch

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlperf.backends.torch import vision  # noqa: E402
from dlperf.backends.torch.backend import BUILDERS, build  # noqa: E402
from dlperf.worker.workload import UnsupportedError  # noqa: E402
from declared import covers

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

#: torchvision's parameter counts (1000 classes; GoogLeNet without the auxiliary heads).
REFERENCE_PARAMS = {
    "resnet50": 25557032,
    "resnet101": 44549160,
    "resnet152": 60192808,
    "vgg16": 138357544,
    "vgg19": 143667240,
    "googlenet": 6624904,
    "alexnet": 61100840,
}
#: torchvision's published forward cost in multiply-adds (its "GFLOPS" column), at 224x224.
REFERENCE_GMACS = {"resnet101": 7.80, "resnet152": 11.51, "vgg16": 15.47, "vgg19": 19.63,
                   "alexnet": 0.71, "googlenet": 1.50}
STUDY = sorted(REFERENCE_PARAMS)


def unique_params(module):
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


def case(model, knobs, task="infer", batch_size=2):
    return {"framework": "torch", "model": model, "task": task, "batch_size": batch_size,
            "precision": "fp32", "compile": False, "device": "cpu", "seed": 0,
            "knobs": models.resolve_knobs(model, knobs), "devices": 1, "nnodes": 1}


def test_catalogue_has_the_study_models_with_reference_counts():
    for name in STUDY:
        spec = models.get(name)
        own = ({"classifier_width": 4096} if name in ("vgg16", "vgg19", "alexnet") else
               {"max_blocks": 6} if name == "resnet50" else {})
        assert spec.kind == "vision"
        assert spec.defaults == {"image_size": 224, "num_classes": 1000, **own}
        assert spec.params() == REFERENCE_PARAMS[name], name
    for name, gmacs in REFERENCE_GMACS.items():
        forward = models.get(name).flops_per_sample(train=False)
        assert forward / 2e9 == pytest.approx(gmacs, abs=0.01), name


@pytest.mark.parametrize("name", STUDY)
def test_full_size_networks_have_the_reference_params(name):
    with torch.device("meta"):  # the real modules, their weights not initialised
        assert unique_params(vision.network(name, 1000)) == REFERENCE_PARAMS[name]


@pytest.mark.parametrize("name", STUDY)
def test_flops_match_torch_flop_counter(name):
    sizes = sorted({models.smallest_image_size(name), 97})
    # VGG's and AlexNet's classifier width, the papers' and a narrow one
    widths = [None, 64] if "classifier_width" in models.get(name).knobs else [None]
    for size in sizes:
        for width in widths:
            # on the meta device: the real modules' forward, its shapes without the arithmetic
            # (the same count as on the CPU; a full-width VGG took 4 s there)
            with torch.device("meta"):
                model = vision.network(name, 10, width).eval()
                image = torch.randn(1, 3, size, size)
            with FlopCounterMode(display=False) as counter, torch.no_grad():
                out = model(image)
            assert out.shape == (1, 10)
            knobs = {"image_size": size, "num_classes": 10, "classifier_width": width}
            assert counter.get_total_flops() == models.get(name).flops_per_sample(
                {k: v for k, v in knobs.items() if v is not None}, train=False)


@pytest.mark.parametrize("name", ["vgg16", "vgg19", "alexnet", "googlenet"])
def test_smallest_image_size_is_the_real_networks(name):
    smallest = models.smallest_image_size(name)
    assert smallest == {"vgg16": 32, "vgg19": 32, "alexnet": 63, "googlenet": 15}[name]
    # on the meta device: the real modules' shape checks, without initialising a full-width
    # VGG's 4096-wide classifier (2 s a network on a 2-core AVX2 EPYC) to use none of it
    with torch.device("meta"), torch.no_grad():
        model = vision.network(name, 10).eval()
        model(torch.randn(1, 3, smallest, smallest))
        with pytest.raises(RuntimeError, match="Output size is too small"):
            model(torch.randn(1, 3, smallest - 1, smallest - 1))
    with pytest.raises(ValueError, match="image_size %d is too small for %s.*smallest "
                                         "image_size it takes is %d"
                                         % (smallest - 1, name, smallest)):
        models.resolve_knobs(name, {"image_size": smallest - 1})


@pytest.mark.parametrize("name,knobs", [
    ("resnet101", {"image_size": 32, "num_classes": 10}),
    ("resnet152", {"image_size": 32, "num_classes": 7}),
    # VGG with a narrow classifier (its 4096-wide one is counted on the meta device above): every
    # layer, a tenth of the weights to step
    ("vgg16", {"image_size": 32, "num_classes": 10, "classifier_width": 64}),
    ("vgg19", {"image_size": 40, "num_classes": 3, "classifier_width": 64}),
    ("googlenet", {"image_size": 32, "num_classes": 10}),
    ("alexnet", {"image_size": 64, "num_classes": 10, "classifier_width": 32}),
])
@covers("torch", ("resnet101", "resnet152", "vgg16", "vgg19", "googlenet", "alexnet"),
        ("train", "infer"), "fp32")
def test_built_workloads_match_catalogue_and_step(name, knobs):
    assert name in BUILDERS
    workload = build(case(name, knobs, task="train"))
    assert workload.params == models.get(name).params(knobs) == unique_params(workload.model)
    losses = [workload.loss_value(workload.step()) for _ in range(2)]
    assert all(math.isfinite(v) for v in losses), losses
    infer = build(case(name, knobs))
    assert math.isfinite(infer.loss_value(infer.step()))


def test_batchnorm_single_value_training_is_unsupported():
    with pytest.raises(UnsupportedError, match="batch >= 2"):
        build(case("googlenet", {"image_size": 32}, task="train", batch_size=1))
    build(case("alexnet", {"image_size": 63}, task="train", batch_size=1))  # no batch norm
