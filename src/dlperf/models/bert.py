"""BERT-Base with pre-training heads (MLM + NSP, the decoder tied to the word embeddings)."""

from typing import Dict, Mapping, Tuple

from .base import ModelSpec, check_transformer

DEFAULTS = {
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
}


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


def _bert_tensors(k):
    # type: (Mapping[str, int]) -> int
    """The tensors of :func:`_bert_params`: three embedding tables and their layer norm's two;
    per layer four projections and two feed-forward linears (a weight and a bias each) and two
    layer norms; the pooler's two, the MLM transform's two, its layer norm's two and the
    decoder's bias; the NSP classifier's two (206 for BERT-Base)."""
    return 5 + 16 * k["layers"] + 2 + 5 + 2


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


def encoder_activations(s, h, i, heads, layers):
    # type: (int, int, int, int, int) -> float
    """Activation elements of ``layers`` post-LN encoder layers over ``s`` tokens: Q, K, V,
    the scores and probabilities of every head, the context, the attention output and its
    normalised sum, the feed-forward's up projection and activation, its down projection and
    normalised sum."""
    per_layer = s * (4 * h + 2 * h) + 2 * heads * s * s + s * (2 * i + 2 * h)
    return float(layers * per_layer)


def _bert_activations(k):
    # type: (Mapping[str, int]) -> float
    s, h, v = k["seq_len"], k["hidden"], k["vocab_size"]
    heads = 2 * s * h + s * v  # MLM transform and its norm, the vocabulary scores
    return encoder_activations(s, h, k["intermediate"], k["heads"], k["layers"]) + heads


def _bert_check(k):
    # type: (Mapping[str, int]) -> None
    check_transformer(k, ("seq_len", "vocab_size", "hidden", "layers", "heads", "intermediate",
                          "max_positions", "type_vocab"),
                      "seq_len must be at least 2 (a [CLS] token and one more)")


def _bert_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    s = k["seq_len"]
    return {"input_ids": (s,), "token_type_ids": (s,), "mlm_labels": (s,), "nsp_label": ()}


BERT_BASE = ModelSpec(
    "bert-base", "language",
    "BERT-Base pre-training (MLM + NSP heads, tied decoder), post-LN encoder",
    DEFAULTS, _bert_params, _bert_flops, _bert_check, _bert_inputs, _bert_activations,
    _bert_tensors)
