"""face-resnet50: InsightFace's iresnet50, ArcFace and Partial FC's sampled classes."""

import json
import math
import subprocess
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from dlperf import models
from dlperf.backends.torch.face import IResNet50, FaceModel, arcface_logits, sample_classes
from declared import covers


def test_backbone_is_insightfaces_r50():
    # 43,590,848 parameters, the 43.59 M arcface_torch lists for r50; the embedding
    # BatchNorm1d's scale (512 values) is frozen there, so 43,590,336 train
    backbone = IResNet50(112, 512)
    assert sum(p.numel() for p in backbone.parameters()) == 43_590_848
    trainable = sum(p.numel() for p in backbone.parameters() if p.requires_grad)
    assert trainable == 43_590_336
    k = models.resolve_knobs("face-resnet50", {"num_classes": 85742})
    assert models.get("face-resnet50").params(k) == trainable + 85742 * 512 == 87_490_240


def test_flops_match_the_counter_with_and_without_partial_fc():
    for percent in (100, 10):
        k = models.resolve_knobs("face-resnet50", {"image_size": 32, "num_classes": 1000,
                                                   "partial_fc": percent})
        gen = torch.Generator().manual_seed(0)
        model = FaceModel(32, 512, 1000, percent, gen).eval()
        images, labels = torch.randn(2, 3, 32, 32), torch.tensor([5, 700])
        with FlopCounterMode(display=False) as counter:
            model(images, labels)
        assert counter.get_total_flops() == 2 * models.get("face-resnet50").flops_per_sample(
            k, train=False), percent


def test_partial_fc_samples_every_positive_and_maps_the_labels():
    gen = torch.Generator().manual_seed(3)
    labels = torch.tensor([17, 4, 17, 999])
    index, local = sample_classes(labels, 1000, 100, gen)
    assert index.numel() == 100 and torch.equal(index, index.sort().values)
    assert torch.equal(index[local], labels)  # each label points at its own centre
    again, _ = sample_classes(labels, 1000, 100, gen)
    assert not torch.equal(index, again)  # a new sample of negatives every step
    full, same = sample_classes(labels, 1000, 1000, gen)
    assert full is None and torch.equal(same, labels)


def test_arcface_adds_the_angular_margin_at_the_label_only():
    embeddings = torch.tensor([[1.0, 0.0]])
    centres = torch.tensor([[math.cos(0.3), math.sin(0.3)], [0.0, 1.0]])
    logits = arcface_logits(embeddings, centres, torch.tensor([0]))
    assert abs(logits[0, 0].item() - 64 * math.cos(0.3 + 0.5)) < 1e-4
    assert abs(logits[0, 1].item() - 64 * 0.0) < 1e-4


@covers("torch", "face-resnet50", "train", "fp32")
def test_a_tiny_face_model_trains_with_partial_fc(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model",
         "face-resnet50", "--knob", "image_size=32", "--num-classes", "5000", "--partial-fc",
         "0.1", "--batch-size", "4", "--warmup-steps", "2", "--steps", "2", "--repeats", "1",
         "--db", str(tmp_path / "r.db"), "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["case"]["knobs"]["partial_fc"] == 10
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    assert all(math.isfinite(v) for v in result["loss"]["last"])
