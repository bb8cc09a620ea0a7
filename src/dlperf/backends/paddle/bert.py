"""BERT with pre-training heads (MLM + NSP) in PaddlePaddle dygraph (paddle.nn).

Matches BertForPreTraining layer for layer, like the PyTorch backend: post-LN encoder,
LayerNorm eps 1e-12, exact (erf) GELU, dropout 0.1 on embeddings, attention probabilities and
sublayer outputs, and an MLM decoder that reuses the word-embedding matrix with its own bias, so
the parameter count equals :func:`dlperf.models` ``bert-base``. No padding mask: synthetic
sequences are all full length. (Paddle's ``nn.Linear`` weight is ``(in, out)``.)
"""

from typing import Any, Tuple

import paddle
import paddle.nn.functional as F
from paddle import nn

LN_EPS = 1e-12
DROPOUT = 0.1


def _normal():
    # type: () -> Any
    return paddle.ParamAttr(initializer=nn.initializer.Normal(mean=0.0, std=0.02))


def _zeros():
    # type: () -> Any
    return paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))


def _linear(n_in, n_out):
    # type: (int, int) -> nn.Linear
    """BERT's initialisation: N(0, 0.02) weight, zero bias."""
    return nn.Linear(n_in, n_out, weight_attr=_normal(), bias_attr=_zeros())


def _layer_norm(hidden):
    # type: (int) -> nn.LayerNorm
    return nn.LayerNorm(hidden, epsilon=LN_EPS)


class SelfAttention(nn.Layer):
    def __init__(self, hidden, heads):
        # type: (int, int) -> None
        super(SelfAttention, self).__init__()
        self.heads = heads
        self.query = _linear(hidden, hidden)
        self.key = _linear(hidden, hidden)
        self.value = _linear(hidden, hidden)
        self.out = _linear(hidden, hidden)
        self.dropout = nn.Dropout(DROPOUT)
        self.scale = (hidden // heads) ** -0.5

    def forward(self, x):
        # type: (paddle.Tensor) -> paddle.Tensor
        b, s, h = x.shape
        # (B, S, H) -> (B, heads, S, H / heads)
        split = lambda t: t.reshape([b, s, self.heads, h // self.heads]).transpose(  # noqa
            [0, 2, 1, 3])
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = paddle.matmul(q, k, transpose_y=True) * self.scale
        probs = self.dropout(F.softmax(scores, axis=-1))
        ctx = paddle.matmul(probs, v).transpose([0, 2, 1, 3]).reshape([b, s, h])
        return self.out(ctx)


class EncoderLayer(nn.Layer):
    """Post-LN, as in the original BERT: x = LN(x + sublayer(x))."""

    def __init__(self, hidden, heads, intermediate):
        # type: (int, int, int) -> None
        super(EncoderLayer, self).__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = _layer_norm(hidden)
        self.fc1 = _linear(hidden, intermediate)
        self.fc2 = _linear(intermediate, hidden)
        self.ln2 = _layer_norm(hidden)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        # type: (paddle.Tensor) -> paddle.Tensor
        x = self.ln1(x + self.dropout(self.attn(x)))
        return self.ln2(x + self.dropout(self.fc2(F.gelu(self.fc1(x)))))


class BertForPreTraining(nn.Layer):
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
        self.word = nn.Embedding(vocab_size, hidden, weight_attr=_normal())
        self.position = nn.Embedding(max_positions, hidden, weight_attr=_normal())
        self.token_type = nn.Embedding(type_vocab, hidden, weight_attr=_normal())
        self.emb_ln = _layer_norm(hidden)
        self.emb_dropout = nn.Dropout(DROPOUT)
        # encoder
        self.layers = nn.LayerList(
            [EncoderLayer(hidden, heads, intermediate) for _ in range(layers)])
        # pooler + next-sentence head, on the first ([CLS]) token
        self.pooler = _linear(hidden, hidden)
        self.nsp = _linear(hidden, 2)
        # masked-LM head: transform, then a decoder that shares the word-embedding matrix
        self.mlm_dense = _linear(hidden, hidden)
        self.mlm_ln = _layer_norm(hidden)
        self.mlm_bias = self.create_parameter([vocab_size], attr=_zeros(), is_bias=True)

    def forward(self, input_ids, token_type_ids):
        # type: (paddle.Tensor, paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]
        """Return MLM logits for every position (B, S, V) and NSP logits (B, 2)."""
        positions = paddle.arange(input_ids.shape[1], dtype="int64")
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.emb_dropout(self.emb_ln(x))
        for layer in self.layers:
            x = layer(x)
        nsp_logits = self.nsp(paddle.tanh(self.pooler(x[:, 0])))
        t = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        mlm_logits = paddle.matmul(t, self.word.weight, transpose_y=True) + self.mlm_bias
        return mlm_logits, nsp_logits


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    # type: (paddle.Tensor, paddle.Tensor, paddle.Tensor, paddle.Tensor) -> paddle.Tensor
    """MLM cross-entropy over labelled positions (-100 elsewhere) plus NSP cross-entropy.

    The MLM mean is over labelled positions only, as in PyTorch; Paddle's own ``mean`` with
    ``ignore_index`` divides by every position, so the sum and the count are taken here.
    """
    labels = mlm_labels.reshape([-1])
    per_token = F.cross_entropy(
        mlm_logits.reshape([-1, mlm_logits.shape[-1]]).astype("float32"),
        labels,
        ignore_index=-100,
        reduction="none",
    )
    count = (labels != -100).astype("float32").sum().clip(min=1.0)
    mlm = per_token.sum() / count
    return mlm + F.cross_entropy(nsp_logits.astype("float32"), nsp_labels)
