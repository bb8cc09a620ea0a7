"""BERT with pre-training heads (MLM + NSP) as MindSpore ``nn.Cell``\\ s.

Matches BertForPreTraining layer for layer, like the PyTorch backend: post-LN encoder,
LayerNorm eps 1e-12, exact (erf) GELU, dropout 0.1 on embeddings, attention probabilities and
sublayer outputs, and an MLM decoder that reuses the word-embedding matrix with its own bias, so
the parameter count equals :func:`dlperf.models` ``bert-base``. No padding mask: synthetic
sequences are all full length. (MindSpore's ``nn.Dense`` weight is ``(out, in)``, as PyTorch's.)
"""

from typing import Tuple

import mindspore as ms
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import Normal, initializer

LN_EPS = 1e-12
DROPOUT = 0.1
INIT_STD = 0.02


def _linear(n_in, n_out):
    # type: (int, int) -> nn.Dense
    """BERT's initialisation: N(0, 0.02) weight, zero bias."""
    return nn.Dense(n_in, n_out, weight_init=Normal(INIT_STD), bias_init="zeros")


def _layer_norm(hidden):
    # type: (int) -> nn.LayerNorm
    return nn.LayerNorm((hidden,), epsilon=LN_EPS)


def _embedding(count, hidden):
    # type: (int, int) -> nn.Embedding
    return nn.Embedding(count, hidden, embedding_table=Normal(INIT_STD))


class SelfAttention(nn.Cell):
    def __init__(self, hidden, heads):
        # type: (int, int) -> None
        super(SelfAttention, self).__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = _linear(hidden, hidden)
        self.key = _linear(hidden, hidden)
        self.value = _linear(hidden, hidden)
        self.out = _linear(hidden, hidden)
        self.dropout = nn.Dropout(p=DROPOUT)
        self.scale = float(self.head_dim) ** -0.5
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.context = ops.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)

    def _split(self, t, b, s):
        # type: (ms.Tensor, int, int) -> ms.Tensor
        # (B, S, H) -> (B, heads, S, H / heads)
        return t.reshape((b, s, self.heads, self.head_dim)).transpose((0, 2, 1, 3))

    def construct(self, x):
        # type: (ms.Tensor) -> ms.Tensor
        b, s, h = x.shape
        q = self._split(self.query(x), b, s)
        k = self._split(self.key(x), b, s)
        v = self._split(self.value(x), b, s)
        probs = self.dropout(self.softmax(self.scores(q, k) * self.scale))
        ctx = self.context(probs, v).transpose((0, 2, 1, 3)).reshape((b, s, h))
        return self.out(ctx)


class EncoderLayer(nn.Cell):
    """Post-LN, as in the original BERT: x = LN(x + sublayer(x))."""

    def __init__(self, hidden, heads, intermediate):
        # type: (int, int, int) -> None
        super(EncoderLayer, self).__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = _layer_norm(hidden)
        self.fc1 = _linear(hidden, intermediate)
        self.gelu = nn.GELU(approximate=False)
        self.fc2 = _linear(intermediate, hidden)
        self.ln2 = _layer_norm(hidden)
        self.dropout = nn.Dropout(p=DROPOUT)

    def construct(self, x):
        # type: (ms.Tensor) -> ms.Tensor
        x = self.ln1(x + self.dropout(self.attn(x)))
        return self.ln2(x + self.dropout(self.fc2(self.gelu(self.fc1(x)))))


class BertForPreTraining(nn.Cell):
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
        self.word = _embedding(vocab_size, hidden)
        self.position = _embedding(max_positions, hidden)
        self.token_type = _embedding(type_vocab, hidden)
        self.emb_ln = _layer_norm(hidden)
        self.emb_dropout = nn.Dropout(p=DROPOUT)
        # encoder
        self.layers = nn.CellList(
            [EncoderLayer(hidden, heads, intermediate) for _ in range(layers)])
        # pooler + next-sentence head, on the first ([CLS]) token
        self.pooler = _linear(hidden, hidden)
        self.nsp = _linear(hidden, 2)
        # masked-LM head: transform, then a decoder that shares the word-embedding matrix
        self.mlm_dense = _linear(hidden, hidden)
        self.mlm_gelu = nn.GELU(approximate=False)
        self.mlm_ln = _layer_norm(hidden)
        self.mlm_bias = Parameter(initializer("zeros", (vocab_size,), ms.float32),
                                  name="mlm_bias")
        self.decoder = ops.MatMul(transpose_b=True)
        self.vocab_size = vocab_size

    def construct(self, input_ids, token_type_ids):
        # type: (ms.Tensor, ms.Tensor) -> Tuple[ms.Tensor, ms.Tensor]
        """Return MLM logits for every position (B, S, V) and NSP logits (B, 2)."""
        b, s = input_ids.shape
        positions = ops.arange(s, dtype=ms.int32).reshape((1, s))
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.emb_dropout(self.emb_ln(x))
        for layer in self.layers:
            x = layer(x)
        nsp_logits = self.nsp(ops.tanh(self.pooler(x[:, 0])))
        t = self.mlm_ln(self.mlm_gelu(self.mlm_dense(x)))
        hidden = t.shape[-1]
        mlm = self.decoder(t.reshape((b * s, hidden)), self.word.embedding_table) + self.mlm_bias
        return mlm.reshape((b, s, self.vocab_size)), nsp_logits


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    # type: (ms.Tensor, ms.Tensor, ms.Tensor, ms.Tensor) -> ms.Tensor
    """MLM cross-entropy over labelled positions (-100 elsewhere) plus NSP cross-entropy, in
    float32. The MLM mean is over labelled positions only, as in PyTorch."""
    labels = mlm_labels.reshape((-1,))
    per_token = ops.cross_entropy(
        mlm_logits.reshape((-1, mlm_logits.shape[-1])).astype(ms.float32), labels,
        ignore_index=-100, reduction="none")
    count = ops.maximum((labels != -100).astype(ms.float32).sum(), 1.0)
    mlm = per_token.sum() / count
    return mlm + ops.cross_entropy(nsp_logits.astype(ms.float32), nsp_labels)
