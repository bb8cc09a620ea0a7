"""GPT (decoder-only, GPT-2 style).

GPT-2 (Radford et al. 2019) as nanoGPT and Megatron-LM's GPT build it: learned token and
position embeddings, pre-LN blocks (causal self-attention with fused QKV, a 4 x hidden GELU
MLP, biases everywhere), a final LayerNorm and the language-model head tied to the token
embeddings. The defaults are GPT-2 small (124,439,808 parameters at vocabulary 50257).
"""

from typing import Dict, Mapping, Tuple

from .base import ModelSpec, check_transformer
from .bert import encoder_activations

GPT_MLP_RATIO = 4

DEFAULTS = {
    "seq_len": 1024,
    "vocab_size": 50257,
    "hidden": 768,
    "layers": 12,
    "heads": 12,
    "max_positions": 1024,
    "clip_grad_norm": 1,
}


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
    check_transformer(k, ("seq_len", "vocab_size", "hidden", "layers", "heads", "max_positions"),
                      "seq_len must be at least 2 (a token and the next one to predict)")


def _gpt_activations(k):
    # type: (Mapping[str, int]) -> float
    s, h = k["seq_len"], k["hidden"]
    return (encoder_activations(s, h, GPT_MLP_RATIO * h, k["heads"], k["layers"])
            + s * (h + k["vocab_size"]))  # the final norm, the vocabulary scores


def _gpt_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"input_ids": (k["seq_len"],), "labels": (k["seq_len"],)}


GPT = ModelSpec(
    "gpt", "language", "GPT-2 style decoder (pre-LN, causal attention, tied LM head), next-token "
    "training; defaults are GPT-2 small",
    DEFAULTS, _gpt_params, _gpt_flops, _gpt_check, _gpt_inputs, _gpt_activations)
