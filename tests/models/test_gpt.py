"""GPT: the catalogue's parameter count and FLOPs, Megatron-LM's formula, the torch build."""

import json
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dlperf import models
from dlperf.backends.torch.gpt import GPT, next_token_loss
from declared import covers

SMALL = {"layers": 2, "hidden": 64, "heads": 2, "vocab_size": 1000, "seq_len": 16}


@pytest.mark.parallel
def test_defaults_are_gpt2_small():
    # GPT-2 small with its 50257-token vocabulary and 1024 positions: 124,439,808 parameters
    # (the count Hugging Face's and nanoGPT's GPT-2 report with the tied head counted once)
    assert models.get("gpt").params() == 124_439_808


@pytest.mark.parallel
def test_forward_flops_by_hand():
    k = models.resolve_knobs("gpt", SMALL)
    # per token and layer 24 h^2 + 4 s h, plus the head 2 h V, for 16 tokens
    per_token = 2 * (24 * 64 * 64 + 4 * 16 * 64) + 2 * 64 * 1000
    assert per_token == 332_800
    assert models.get("gpt").flops_per_sample(k, train=False) == 16 * per_token == 5_324_800
    assert models.get("gpt").flops_per_sample(k, train=True) == 3 * 5_324_800


@pytest.mark.parallel
def test_training_flops_equal_megatrons_formula_without_recomputation():
    # 72 B s l h^2 (1 + s/6h + V/12lh) for B=8, GPT-2 small at s=1024
    b, s, l, h, v = 8, 1024, 12, 768, 50257
    by_hand = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert abs(by_hand - 6_999_559_372_800) < 1
    assert models.megatron_flops_per_iteration(b, s, l, h, v) == by_hand
    assert b * models.get("gpt").flops_per_sample() == by_hand
    # with full activation recomputation Megatron counts a fourth pass: 96 ... V/16lh
    assert models.megatron_flops_per_iteration(b, s, l, h, v, recompute=True) == \
        96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def test_torch_build_matches_the_catalogue_and_flop_counter():
    k = models.resolve_knobs("gpt", SMALL)
    model = GPT(k["vocab_size"], k["hidden"], k["layers"], k["heads"], k["max_positions"])
    assert sum(p.numel() for p in model.parameters()) == models.get("gpt").params(k) == 229_632
    assert model.head.weight is model.tokens.weight
    ids = torch.randint(0, 1000, (3, 16))
    with FlopCounterMode(display=False) as counter:
        next_token_loss(model(ids), ids).backward()
    # PyTorch's counter has no formula for the CPU attention kernel: it sees every matmul but
    # the scores and context products (4 s^2 h per layer and sequence, times 3 for training)
    attention = 3 * 3 * k["layers"] * 4 * 16 * 16 * 64
    assert counter.get_total_flops() == 3 * models.get("gpt").flops_per_sample(k) - attention


@covers("torch", "gpt", "train", "fp32")
def test_a_tiny_gpt_trains_and_reports_its_achieved_flops(tmp_path):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model", "gpt",
            "--batch-size", "2", "--seq-len", "16", "--warmup-steps", "2", "--steps", "3",
            "--repeats", "1", "--db", str(tmp_path / "r.db"), "--json", str(out)]
    for name in ("layers", "hidden", "heads", "vocab_size"):
        args += ["--knob", "%s=%d" % (name, SMALL[name])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    flops = result["flops"]
    assert flops["per_sample"] == 3 * 5_324_800
    assert abs(flops["achieved_per_s"] - flops["per_sample"] * result["throughput"]["median"]) \
        <= 1e-6 * flops["achieved_per_s"]
