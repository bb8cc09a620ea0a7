"""BERT with pre-training heads (MLM + NSP) as Gluon HybridBlocks.

Matches BertForPreTraining layer for layer, like the PyTorch backend: post-LN encoder, LayerNorm
eps 1e-12, exact (erf) GELU (MXNet's ``LeakyReLU(act_type="gelu")``), dropout 0.1 on embeddings,
attention probabilities and sublayer outputs, and an MLM decoder that reuses the word-embedding
matrix with its own bias, so the parameter count equals :func:`dlperf.models` ``bert-base``. No
padding mask: synthetic sequences are all full length. The word-embedding matrix is a parameter
of the top block (not an ``nn.Embedding``) because Gluon hands a block only its own parameters,
and the decoder needs the same matrix.
"""

from typing import Any

from mxnet import init
from mxnet.gluon import HybridBlock, nn

LN_EPS = 1e-12
DROPOUT = 0.1
INIT = init.Normal(0.02)  # BERT's initialisation: N(0, 0.02) weights, zero biases


def _dense(n_in, n_out):
    # type: (int, int) -> nn.Dense
    """A linear layer over the last axis of (B, S, n_in)."""
    return nn.Dense(n_out, in_units=n_in, flatten=False, weight_initializer=INIT,
                    bias_initializer="zeros")


def _layer_norm(hidden):
    # type: (int) -> nn.LayerNorm
    return nn.LayerNorm(epsilon=LN_EPS, in_channels=hidden)


def gelu(F, x):
    # type: (Any, Any) -> Any
    return F.LeakyReLU(x, act_type="gelu")  # 0.5 x (1 + erf(x / sqrt 2))


class SelfAttention(HybridBlock):
    def __init__(self, hidden, heads, **kwargs):
        # type: (int, int, **Any) -> None
        super(SelfAttention, self).__init__(**kwargs)
        self.heads = heads
        self.scale = (hidden // heads) ** -0.5
        with self.name_scope():
            self.query = _dense(hidden, hidden)
            self.key = _dense(hidden, hidden)
            self.value = _dense(hidden, hidden)
            self.out = _dense(hidden, hidden)
            self.dropout = nn.Dropout(DROPOUT)

    def hybrid_forward(self, F, x):
        # type: (Any, Any) -> Any
        heads = self.heads

        def split(t):
            # type: (Any) -> Any
            # (B, S, H) -> (B, S, heads, H/heads) -> (B, heads, S, H/heads) -> (B*heads, S, H/heads)
            return t.reshape((0, 0, heads, -1)).transpose((0, 2, 1, 3)).reshape((-3, 0, 0))

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = F.batch_dot(q, k, transpose_b=True) * self.scale
        probs = self.dropout(F.softmax(scores, axis=-1))
        ctx = F.batch_dot(probs, v)  # (B*heads, S, H/heads)
        ctx = ctx.reshape((-4, -1, heads, 0, 0)).transpose((0, 2, 1, 3)).reshape((0, 0, -3))
        return self.out(ctx)


class EncoderLayer(HybridBlock):
    """Post-LN, as in the original BERT: x = LN(x + sublayer(x))."""

    def __init__(self, hidden, heads, intermediate, **kwargs):
        # type: (int, int, int, **Any) -> None
        super(EncoderLayer, self).__init__(**kwargs)
        with self.name_scope():
            self.attn = SelfAttention(hidden, heads)
            self.ln1 = _layer_norm(hidden)
            self.fc1 = _dense(hidden, intermediate)
            self.fc2 = _dense(intermediate, hidden)
            self.ln2 = _layer_norm(hidden)
            self.dropout = nn.Dropout(DROPOUT)

    def hybrid_forward(self, F, x):
        # type: (Any, Any) -> Any
        x = self.ln1(x + self.dropout(self.attn(x)))
        return self.ln2(x + self.dropout(self.fc2(gelu(F, self.fc1(x)))))


class BertForPreTraining(HybridBlock):
    def __init__(
        self,
        vocab_size=30522,  # type: int
        hidden=768,  # type: int
        layers=12,  # type: int
        heads=12,  # type: int
        intermediate=3072,  # type: int
        max_positions=512,  # type: int
        type_vocab=2,  # type: int
        **kwargs  # type: Any
    ):
        # type: (...) -> None
        super(BertForPreTraining, self).__init__(**kwargs)
        self.vocab_size, self.hidden = vocab_size, hidden
        with self.name_scope():
            # embeddings; the word matrix is shared with the MLM decoder
            self.word_weight = self.params.get("word_embed_weight", shape=(vocab_size, hidden),
                                               init=INIT)
            self.position = nn.Embedding(max_positions, hidden, weight_initializer=INIT)
            self.token_type = nn.Embedding(type_vocab, hidden, weight_initializer=INIT)
            self.emb_ln = _layer_norm(hidden)
            self.emb_dropout = nn.Dropout(DROPOUT)
            # encoder
            self.layers = nn.HybridSequential(prefix="encoder_")
            with self.layers.name_scope():
                for _ in range(layers):
                    self.layers.add(EncoderLayer(hidden, heads, intermediate))
            # pooler + next-sentence head, on the first ([CLS]) token
            self.pooler = nn.Dense(hidden, in_units=hidden, activation="tanh",
                                   weight_initializer=INIT, bias_initializer="zeros")
            self.nsp = nn.Dense(2, in_units=hidden, weight_initializer=INIT,
                                bias_initializer="zeros")
            # masked-LM head: transform, then a decoder over the word matrix with its own bias
            self.mlm_dense = _dense(hidden, hidden)
            self.mlm_ln = _layer_norm(hidden)
            self.mlm_bias = self.params.get("mlm_bias", shape=(vocab_size,), init="zeros")

    def hybrid_forward(self, F, input_ids, token_type_ids, word_weight, mlm_bias):
        # type: (Any, Any, Any, Any, Any) -> Any
        """Return MLM logits for every position (B, S, V) and NSP logits (B, 2)."""
        positions = F.contrib.arange_like(input_ids, axis=1)  # (S,)
        x = F.Embedding(input_ids, word_weight, input_dim=self.vocab_size,
                        output_dim=self.hidden)
        x = F.broadcast_add(x + self.token_type(token_type_ids),
                            F.expand_dims(self.position(positions), axis=0))
        x = self.emb_dropout(self.emb_ln(x))
        x = self.layers(x)
        first = F.slice_axis(x, axis=1, begin=0, end=1).reshape((0, -1))  # (B, H)
        nsp_logits = self.nsp(self.pooler(first))
        t = self.mlm_ln(gelu(F, self.mlm_dense(x)))
        mlm_logits = F.FullyConnected(t, word_weight, mlm_bias, num_hidden=self.vocab_size,
                                      flatten=False)
        return mlm_logits, nsp_logits


def pretraining_loss(F, mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    # type: (Any, Any, Any, Any, Any) -> Any
    """MLM cross-entropy over labelled positions (-100 elsewhere) plus NSP cross-entropy.

    The MLM mean is over labelled positions only, as PyTorch's ``ignore_index`` does. Labels are
    float32 (MXNet's ``pick`` convention); log_softmax runs in float32 under AMP.
    """
    labelled = mlm_labels != -100
    picked = F.pick(F.log_softmax(mlm_logits, axis=-1), F.maximum(mlm_labels, 0), axis=-1)
    mlm = -F.sum(picked * labelled) / F.maximum(F.sum(labelled), 1)
    nsp = -F.mean(F.pick(F.log_softmax(nsp_logits, axis=-1), nsp_labels, axis=-1))
    return mlm + nsp
