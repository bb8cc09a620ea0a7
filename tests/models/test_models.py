"""The model catalogue and the PyTorch backend agree on every network they describe.

Real models, real steps, no mocks. Full-size networks are built only where the test is about
the full size; everything else uses small knobs so the file runs in well under two minutes.
"""

import math

import pytest

from conftest import CUT_RESNET50
from dlperf import models

import torch

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlperf.backends.torch import SUPPORT  # noqa: E402
from dlperf.backends.torch.backend import build  # noqa: E402
from dlperf.backends.torch.bert import BertForPreTraining  # noqa: E402
from dlperf.backends.torch.resnet import ResNet50  # noqa: E402
from dlperf.worker.workload import UnsupportedError  # noqa: E402
from declared import covers

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


SMALL_BERT = {"layers": 2, "hidden": 128, "heads": 2, "intermediate": 256, "seq_len": 16}
SMALL_RESNET = {"image_size": 32}


def make_case(model, knobs, precision="fp32", task="train", batch_size=2, compile=False):
    return {
        "framework": "torch",
        "model": model,
        "task": task,
        "batch_size": batch_size,
        "precision": precision,
        "compile": compile,
        "device": "cpu",
        "seed": 0,
        "knobs": models.resolve_knobs(model, knobs),
        "devices": 1,
        "nnodes": 1,
    }


def bert_from_knobs(knobs):
    k = models.resolve_knobs("bert-base", knobs)
    del k["seq_len"], k["clip_grad_norm"]
    return BertForPreTraining(**k)


def unique_params(module):
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


# ---------------------------------------------------------------------------- catalogue


def test_catalogue_default_params_are_the_reference_counts():
    assert models.get("resnet50").params() == 25557032
    assert models.get("bert-base").params() == 110106428


def test_catalogue_lookup_and_knobs():
    with pytest.raises(KeyError, match="allowed: .*bert-base.*resnet50"):
        models.get("no-such-model")
    knobs = models.resolve_knobs("resnet50", {"image_size": 32, "num_classes": None})
    assert knobs == {"image_size": 32, "num_classes": 1000, "max_blocks": 6}
    with pytest.raises(KeyError, match="image_size"):
        models.resolve_knobs("resnet50", {"seq_len": 16})
    with pytest.raises(ValueError, match="divisible"):
        models.resolve_knobs("bert-base", {"hidden": 100, "heads": 12})
    with pytest.raises(ValueError, match="max_positions"):
        models.resolve_knobs("bert-base", {"seq_len": 1024})
    spec = models.get("bert-base")
    assert spec.kind == "language" and "seq_len" in spec.knobs
    assert models.get("resnet50").input_shapes({"image_size": 64})["image"] == (3, 64, 64)


def test_resnet50_max_blocks_cuts_each_stage_to_its_first_blocks():
    """The knob by hand: one bottleneck a stage is the stem (7x7 conv + BN), four downsampling
    bottlenecks (1x1, 3x3, 1x1 and the 1x1 shortcut, a BN after each) and the classifier."""
    def block(c_in, width):
        weights = c_in * width + width * width * 9 + width * 4 * width + c_in * 4 * width
        return weights + 2 * (width + width + 4 * width + 4 * width)
    stem = 3 * 64 * 7 * 7 + 2 * 64
    stages = block(64, 64) + block(256, 128) + block(512, 256) + block(1024, 512)
    assert stem + stages + 2048 * 1000 + 1000 == 10_064_936
    spec = models.get("resnet50")
    assert spec.params({"max_blocks": 1}) == 10_064_936
    assert models.resnet50_stages(spec.resolve({"max_blocks": 1})) == (
        (64, 1), (128, 1), (256, 1), (512, 1))
    assert models.resnet50_stages(spec.resolve({"max_blocks": 4})) == (
        (64, 3), (128, 4), (256, 4), (512, 3))
    assert models.resnet50_stages(spec.resolve()) == models.RESNET50_STAGES
    assert spec.params({"max_blocks": 6}) == spec.params() == 25_557_032
    # the same strides, so the same final map; fewer blocks, fewer FLOPs and activations
    assert models.final_feature_size("resnet50", {"image_size": 64, "max_blocks": 1}) == 2
    assert spec.flops_per_sample({"max_blocks": 1}) < 0.4 * spec.flops_per_sample()
    assert spec.activations_per_sample({"max_blocks": 1}) < spec.activations_per_sample()
    for bad in (0, 7):
        with pytest.raises(ValueError, match="max_blocks must be 1 to 6"):
            spec.resolve({"max_blocks": bad})


def test_resnet50_flops():
    spec = models.get("resnet50")
    fwd = spec.flops_per_sample(train=False)
    assert 7.8e9 < fwd < 8.6e9
    assert spec.flops_per_sample() == pytest.approx(3 * fwd)
    # convolution work scales with the pixel count (not exactly: padding and rounding)
    ratio = spec.flops_per_sample({"image_size": 448}, train=False) / fwd
    assert 3.8 < ratio < 4.2
    small = spec.flops_per_sample({"image_size": 32}, train=False)
    assert 0 < small < fwd / 30


def test_bert_flops_grow_with_seq_len():
    spec = models.get("bert-base")
    f = [spec.flops_per_sample({"seq_len": s}) for s in (64, 128, 256, 512)]
    assert f == sorted(f) and len(set(f)) == 4
    # linear parts double with seq_len; attention's quadratic part makes it a bit more than 2x
    assert 2.0 < f[3] / f[2] < 2.3
    assert spec.flops_per_sample({"seq_len": 128}, train=False) == pytest.approx(f[1] / 3)


def test_catalogue_flops_match_torch_flop_counter():
    """An independent count: torch's FlopCounterMode over the real modules."""
    spec = models.get("resnet50")
    for size in (32, 97):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            ResNet50(10).eval()(torch.randn(1, 3, size, size))
        knobs = {"image_size": size, "num_classes": 10}
        assert counter.get_total_flops() == spec.flops_per_sample(knobs, train=False)

    # BERT in train mode: attention takes the decomposed path the counter sees, and the
    # counter's backward is exactly 2x forward for matmuls, so the total is our 3x forward.
    knobs = dict(SMALL_BERT, seq_len=32)
    model = bert_from_knobs(knobs).train()
    ids = torch.randint(0, 30522, (1, 32))
    with FlopCounterMode(display=False) as counter:
        mlm, nsp = model(ids, torch.zeros_like(ids))
        (mlm.float().mean() + nsp.float().mean()).backward()
    assert counter.get_total_flops() == models.get("bert-base").flops_per_sample(knobs)


# ---------------------------------------------------------------------------- built models


def test_full_size_torch_models_match_catalogue():
    assert unique_params(ResNet50(1000)) == 25557032
    assert unique_params(bert_from_knobs({})) == 110106428


@pytest.mark.parametrize(
    "model,knobs",
    [
        ("resnet50", {"num_classes": 10}),
        ("resnet50", {"num_classes": 2, "image_size": 64}),
        ("bert-base", SMALL_BERT),
        ("bert-base", dict(SMALL_BERT, vocab_size=1000, max_positions=64, type_vocab=3)),
    ],
)
def test_built_workload_params_match_catalogue(model, knobs):
    workload = build(make_case(model, knobs))
    assert workload.params == models.get(model).params(knobs)
    assert workload.params == unique_params(workload.model)


def test_bert_decoder_is_tied_to_word_embeddings():
    model = bert_from_knobs(SMALL_BERT)
    names = [n for n, _ in model.named_parameters()]
    assert "word.weight" in names and not any("decoder.weight" in n for n in names)
    ids = torch.randint(0, 30522, (2, 8))
    mlm, nsp = model(ids, torch.zeros_like(ids))
    assert mlm.shape == (2, 8, 30522) and nsp.shape == (2, 2)


# ---------------------------------------------------------------------------- stepping


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
# ResNet-50 cut to a bottleneck a stage: every operator stepped, a third of the FLOPs
@pytest.mark.parametrize("model,knobs", [("resnet50", dict(SMALL_RESNET, **CUT_RESNET50)),
                                         ("bert-base", SMALL_BERT)])
@covers("torch", ("resnet50", "bert-base"), "train", ("fp32", "amp-bf16"))
def test_training_steps_give_finite_changing_loss(model, knobs, precision):
    workload = build(make_case(model, knobs, precision=precision))
    assert workload.samples_per_step == 2
    assert workload.info["precision"] == precision
    losses = []
    for _ in range(3):
        handle = workload.step()
        workload.sync()
        losses.append(workload.loss_value(handle))
    assert all(math.isfinite(v) for v in losses), losses
    assert losses[0] != losses[-1], losses
    assert workload.peak_device_bytes() is None  # CPU


def test_resnet_runs_in_its_memory_format():
    from dlperf.backends.torch.backend import DEFAULT_MEMORY_FORMAT

    layouts = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}
    workload = build(make_case("resnet50", SMALL_RESNET))  # no option: the CPU's default
    default = DEFAULT_MEMORY_FORMAT["cpu"]
    assert workload.info["memory_format"] == default
    assert workload.info["memory_format_set_by"] == "dlperf's default on cpu"
    assert workload.model.conv1.weight.is_contiguous(memory_format=layouts[default])
    for name, layout in layouts.items():
        case = dict(make_case("resnet50", SMALL_RESNET), options=f"memory_format={name}")
        workload = build(case)
        assert workload.info["memory_format"] == name
        assert workload.model.conv1.weight.is_contiguous(memory_format=layout)
        if name == "channels_last":  # a 4-D tensor that is both only when C or H*W is 1
            assert not workload.model.conv1.weight.is_contiguous()


@pytest.mark.parametrize("model,knobs", [("resnet50", SMALL_RESNET), ("bert-base", SMALL_BERT)])
@covers("torch", ("resnet50", "bert-base"), "infer", "fp32")
def test_inference_step_is_finite_and_keeps_weights(model, knobs):
    workload = build(make_case(model, knobs, task="infer"))
    before = [p.clone() for p in workload.model.parameters()]
    value = workload.loss_value(workload.step())
    assert math.isfinite(value)
    assert not workload.model.training
    assert all(torch.equal(a, b) for a, b in zip(before, workload.model.parameters()))


def test_tf32_on_cpu_is_unsupported():
    """Refused by the backend's declaration, which the worker checks before building."""
    with pytest.raises(UnsupportedError, match="tf32 needs a CUDA device; this run is on cpu"):
        SUPPORT.check(make_case("resnet50", SMALL_RESNET, precision="tf32"), "cpu")


def test_cuda_without_cuda_is_unsupported():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    case = make_case("resnet50", SMALL_RESNET)
    case["device"] = "cuda"
    with pytest.raises(UnsupportedError, match="CUDA"):
        build(case)


def test_unknown_model_is_unsupported():
    case = make_case("resnet50", SMALL_RESNET)
    case["model"] = "no-such-model"
    with pytest.raises(UnsupportedError, match="does not build model 'no-such-model'"):
        SUPPORT.check(case, "cpu")

