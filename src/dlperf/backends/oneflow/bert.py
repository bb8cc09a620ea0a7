"""BERT with pre-training heads (MLM + NSP) in ``oneflow.nn``: the torch backend's network.

BertForPreTraining layer for layer: post-LN encoder, LayerNorm eps 1e-12, exact (erf) GELU, MLM
decoder weight tied to the word embeddings with its own bias, so the parameter count equals
:func:`dlperf.models` ``bert-base``. OneFlow 0.9.0 has no fused scaled-dot-product attention, so
attention is written out (softmax(QK^T / sqrt(d)) V, dropout on the probabilities, as BERT and
PyTorch's fused kernel do). No padding mask: synthetic sequences are all full length.
"""

import math
from typing import Tuple

import oneflow as flow
import oneflow.nn.functional as F
from oneflow import nn

LN_EPS = 1e-12
DROPOUT = 0.1


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        # type: (int, int) -> None
        super(SelfAttention, self).__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        # type: (flow.Tensor) -> flow.Tensor
        b, s, h = x.shape
        d = h // self.heads

        def split(t):
            # type: (flow.Tensor) -> flow.Tensor
            """(B, S, H) -> (B, heads, S, H / heads)"""
            return t.reshape(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = flow.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        ctx = flow.matmul(probs, v)
        return self.out(ctx.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """Post-LN, as in the original BERT: x = LN(x + sublayer(x))."""

    def __init__(self, hidden, heads, intermediate):
        # type: (int, int, int) -> None
        super(EncoderLayer, self).__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        # type: (flow.Tensor) -> flow.Tensor
        x = self.ln1(x + self.dropout(self.attn(x)))
        return self.ln2(x + self.dropout(self.fc2(F.gelu(self.fc1(x)))))


class BertForPreTraining(nn.Module):
    def __init__(
        self,
        vocab_size=30522,  # type: int
        hidden=768,  # type: int
        layers=12,  # type: int
        heads=12,  # type: int
        intermediate=3072,  # type: int
        max_positions=512,  # type: int
        type_vocab=2,  # type: int
    ):
        # type: (...) -> None
        super(BertForPreTraining, self).__init__()
        # embeddings
        self.word = nn.Embedding(vocab_size, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.emb_dropout = nn.Dropout(DROPOUT)
        # encoder
        self.layers = nn.ModuleList(
            [EncoderLayer(hidden, heads, intermediate) for _ in range(layers)]
        )
        # pooler + next-sentence head, on the first ([CLS]) token
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)
        # masked-LM head: transform, then a decoder that shares the word-embedding matrix
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlm_bias = nn.Parameter(flow.zeros(vocab_size))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # type: (nn.Module) -> None
        """BERT's initialisation: N(0, 0.02) weights, zero biases, identity LayerNorms."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, input_ids, token_type_ids):
        # type: (flow.Tensor, flow.Tensor) -> Tuple[flow.Tensor, flow.Tensor]
        """Return MLM logits for every position (B, S, V) and NSP logits (B, 2)."""
        # positions 0..S-1 look up the first S rows: a slice of the table, which (unlike an
        # arange made on input_ids.device) is also defined for nn.Graph's global tensors
        positions = self.position.weight[:input_ids.shape[1]]
        x = self.word(input_ids) + positions + self.token_type(token_type_ids)
        x = self.emb_dropout(self.emb_ln(x))
        for layer in self.layers:
            x = layer(x)
        nsp_logits = self.nsp(flow.tanh(self.pooler(x[:, 0])))
        t = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        mlm_logits = F.linear(t, self.word.weight, self.mlm_bias)
        return mlm_logits, nsp_logits


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    # type: (flow.Tensor, flow.Tensor, flow.Tensor, flow.Tensor) -> flow.Tensor
    """MLM cross-entropy over labelled positions (-100 elsewhere) plus NSP cross-entropy."""
    mlm = F.cross_entropy(
        mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(),
        mlm_labels.reshape(-1),
        ignore_index=-100,
    )
    return mlm + F.cross_entropy(nsp_logits.float(), nsp_labels)
