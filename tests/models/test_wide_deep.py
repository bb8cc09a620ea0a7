"""Wide & Deep: the catalogue's count and FLOPs, the torch build, lazy (sparse) updates."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dlperf import models
from dlperf.backends.torch.wide_deep import LazyAdam, WideAndDeep
from declared import covers

SMALL = {"vocab_size": 1000, "deep_embedding_size": 4, "hidden_units": 2, "hidden_size": 32}


def build(k):
    return WideAndDeep(k["vocab_size"], k["deep_embedding_size"], k["hidden_units"],
                       k["hidden_size"], 13, 26)


@pytest.mark.parallel
def test_default_count_by_hand():
    # 3.2 M x 1 wide + 3.2 M x 16 deep; MLP 429 -> 1024, 6 x 1024 -> 1024, 1024 -> 1 with biases
    mlp = (26 * 16 + 13) * 1024 + 1024 + 6 * (1024 * 1024 + 1024) + 1024 + 1
    assert mlp == 6_738_945
    assert models.get("wide-deep").params() == 3_200_000 * 17 + mlp == 61_138_945
    # DLPerf's largest vocabulary: 819.2 M rows, 13.9 G parameters, all but 6.7 M in the tables
    assert models.get("wide-deep").params({"vocab_size": 819_200_000}) == 819_200_000 * 17 + mlp


def test_torch_build_matches_the_catalogue_and_flop_counter():
    k = models.resolve_knobs("wide-deep", SMALL)
    model = build(k)
    assert sum(p.numel() for p in model.parameters()) == models.get("wide-deep").params(k) \
        == 1000 + 4000 + (26 * 4 + 13) * 32 + 32 + 32 * 32 + 32 + 32 + 1
    dense, wide, deep = torch.randn(5, 13), torch.randint(0, 1000, (5, 2)), \
        torch.randint(0, 1000, (5, 26))
    with FlopCounterMode(display=False) as counter:
        model.eval()(dense, wide, deep)
    assert counter.get_total_flops() == 5 * models.get("wide-deep").flops_per_sample(k, False)


def test_the_optimizer_updates_only_the_rows_a_batch_looked_up():
    k = models.resolve_knobs("wide-deep", SMALL)
    torch.manual_seed(0)
    model = build(k)
    before = model.deep.weight.detach().clone()
    optimizer = LazyAdam(model, lr=1e-3)
    deep = torch.tensor([[3] * 26, [7] * 26])
    loss = F.binary_cross_entropy_with_logits(
        model(torch.randn(2, 13), torch.tensor([[1, 2], [3, 4]]), deep), torch.ones(2, 1))
    loss.backward()
    assert model.deep.weight.grad.is_sparse
    optimizer.step()
    changed = (model.deep.weight.detach() != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [3, 7]


@covers("torch", "wide-deep", "train", "fp32")
def test_a_tiny_wide_deep_trains_with_latency_and_memory(tmp_path):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "dlperf.cli", "run", "--framework", "torch", "--model",
            "wide-deep", "--batch-size", "64", "--warmup-steps", "2", "--steps", "3",
            "--repeats", "1", "--db", str(tmp_path / "r.db"), "--json", str(out)]
    for name, value in SMALL.items():
        args += ["--knob", "%s=%d" % (name, value)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    assert abs(result["iteration_ms"] - 1000 * 64 / result["throughput"]["median"]) < 1e-6
    assert result["memory"]["peak_host_bytes"] > 0
    assert result["env"]["worker"]["framework"]["optimizer"] == \
        "Adam(lr=1e-3), lazy (SparseAdam) on the embeddings"
