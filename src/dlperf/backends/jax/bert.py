"""BERT with pre-training heads (MLM + NSP) in Flax linen.

Matches BertForPreTraining layer for layer, like the PyTorch backend: post-LN encoder,
LayerNorm eps 1e-12, exact (erf) GELU, dropout 0.1 on embeddings, attention probabilities and
sublayer outputs, and an MLM decoder that reuses the word-embedding matrix (``Embed.attend``) with
its own bias, so the parameter count equals :func:`dlperf.models` ``bert-base``. No padding mask:
synthetic sequences are all full length. ``dtype`` is the compute dtype; parameters stay float32.
"""

from typing import Any, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

LN_EPS = 1e-12
DROPOUT = 0.1
INIT = nn.initializers.normal(stddev=0.02)  # BERT's initialiser; biases start at zero


class SelfAttention(nn.Module):
    hidden: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train):
        # type: (Any, bool) -> Any
        b, s, h = x.shape
        d = h // self.heads
        dense = lambda name: nn.Dense(h, dtype=self.dtype, kernel_init=INIT, name=name)  # noqa
        # (B, S, H) -> (B, S, heads, d)
        q, k, v = (dense(n)(x).reshape(b, s, self.heads, d) for n in ("query", "key", "value"))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d).astype(self.dtype)
        probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(self.dtype)
        probs = nn.Dropout(DROPOUT, deterministic=not train)(probs)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, h)
        return dense("out")(ctx)


class EncoderLayer(nn.Module):
    """Post-LN, as in the original BERT: x = LN(x + sublayer(x))."""

    hidden: int
    heads: int
    intermediate: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train):
        # type: (Any, bool) -> Any
        drop = nn.Dropout(DROPOUT, deterministic=not train)
        attn = SelfAttention(self.hidden, self.heads, self.dtype, name="attn")(x, train)
        x = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name="ln1")(x + drop(attn))
        y = nn.Dense(self.intermediate, dtype=self.dtype, kernel_init=INIT, name="fc1")(x)
        y = nn.Dense(self.hidden, dtype=self.dtype, kernel_init=INIT, name="fc2")(
            nn.gelu(y, approximate=False))
        return nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name="ln2")(x + drop(y))


class BertForPreTraining(nn.Module):
    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, token_type_ids, train):
        # type: (Any, Any, bool) -> Tuple[Any, Any]
        """Return MLM logits for every position (B, S, V) and NSP logits (B, 2)."""
        h = self.hidden
        word = nn.Embed(self.vocab_size, h, dtype=self.dtype, embedding_init=INIT, name="word")
        position = nn.Embed(self.max_positions, h, dtype=self.dtype, embedding_init=INIT,
                            name="position")
        token_type = nn.Embed(self.type_vocab, h, dtype=self.dtype, embedding_init=INIT,
                              name="token_type")
        positions = jnp.arange(input_ids.shape[1])[None, :]
        x = word(input_ids) + position(positions) + token_type(token_type_ids)
        x = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name="emb_ln")(x)
        x = nn.Dropout(DROPOUT, deterministic=not train)(x)
        for i in range(self.layers):
            x = EncoderLayer(h, self.heads, self.intermediate, self.dtype,
                             name="layer%d" % i)(x, train)
        # pooler + next-sentence head, on the first ([CLS]) token
        pooled = jnp.tanh(nn.Dense(h, dtype=self.dtype, kernel_init=INIT, name="pooler")(x[:, 0]))
        nsp_logits = nn.Dense(2, dtype=self.dtype, kernel_init=INIT, name="nsp")(pooled)
        # masked-LM head: transform, then a decoder that shares the word-embedding matrix
        t = nn.Dense(h, dtype=self.dtype, kernel_init=INIT, name="mlm_dense")(x)
        t = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name="mlm_ln")(
            nn.gelu(t, approximate=False))
        bias = self.param("mlm_bias", nn.initializers.zeros, (self.vocab_size,), jnp.float32)
        mlm_logits = word.attend(t) + bias.astype(self.dtype)
        return mlm_logits, nsp_logits


def init_rule(names, shape, rng):
    # type: (Sequence[str], Sequence[int], np.random.Generator) -> np.ndarray
    """The initialisers declared above, drawn with numpy on the host (see ``host_init``)."""
    leaf = names[-1]
    if leaf in ("kernel", "embedding"):
        return (rng.standard_normal(shape, np.float32) * 0.02).astype(np.float32)
    if leaf in ("bias", "mlm_bias"):
        return np.zeros(shape, np.float32)
    if leaf == "scale":
        return np.ones(shape, np.float32)
    raise KeyError("no initialiser for %s" % "/".join(names))


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    # type: (Any, Any, Any, Any) -> Any
    """MLM cross-entropy over labelled positions (-100 elsewhere) plus NSP cross-entropy, fp32."""
    with jax.named_scope("loss"):  # names the loss's ops for the profile
        labelled = mlm_labels >= 0
        per_token = optax.softmax_cross_entropy_with_integer_labels(
            mlm_logits.astype(jnp.float32), jnp.where(labelled, mlm_labels, 0))
        mlm = jnp.sum(jnp.where(labelled, per_token, 0.0)) / jnp.maximum(jnp.sum(labelled), 1)
        nsp = optax.softmax_cross_entropy_with_integer_labels(
            nsp_logits.astype(jnp.float32), nsp_labels).mean()
        return mlm + nsp
