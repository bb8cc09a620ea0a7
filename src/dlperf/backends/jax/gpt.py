"""GPT-2 style decoder in Flax linen, layer for layer the PyTorch backend's ``gpt``.

Learned token and position embeddings, pre-LN blocks with fused-QKV causal self-attention
(``jax.nn.dot_product_attention`` with ``is_causal``: JAX's own attention API, whose default in
jax 0.10 is the XLA implementation on every device; cuDNN's flash kernel is not forced, as it is
untested here and refuses fp32), a 4 x hidden tanh-GELU MLP, a final LayerNorm and the
language-model head tied to the token embeddings (``Embed.attend``, no bias). LayerNorm eps
1e-5 and no dropout, as torch's. The parameter count equals :func:`dlperf.models` ``gpt``.
``dtype`` is the compute dtype; parameters stay float32.
"""

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlperf.models import GPT_MLP_RATIO

LN_EPS = 1e-5  # torch.nn.LayerNorm's default (flax's is 1e-6)
INIT = nn.initializers.normal(stddev=0.02)  # GPT-2's initialiser; biases start at zero
# The torch backend's DROPOUT is 0.0 (nanoGPT's and Megatron's benchmark setting), so no
# dropout layer is built here: the step draws no masks, in either framework.


class CausalSelfAttention(nn.Module):
    hidden: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        # type: (Any) -> Any
        b, s, h = x.shape
        qkv = nn.Dense(3 * h, dtype=self.dtype, kernel_init=INIT, name="qkv")(x)
        # (B, S, 3H) -> three (B, S, heads, d), the layout dot_product_attention takes
        q, k, v = (t.reshape(b, s, self.heads, h // self.heads)
                   for t in jnp.split(qkv, 3, axis=-1))
        ctx = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return nn.Dense(h, dtype=self.dtype, kernel_init=INIT, name="out")(ctx.reshape(b, s, h))


class Block(nn.Module):
    """Pre-LN: x = x + attn(LN(x)); x = x + mlp(LN(x))."""

    hidden: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        # type: (Any) -> Any
        h = self.hidden
        ln = lambda name: nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name=name)  # noqa
        x = x + CausalSelfAttention(h, self.heads, self.dtype, name="attn")(ln("ln_1")(x))
        y = nn.Dense(GPT_MLP_RATIO * h, dtype=self.dtype, kernel_init=INIT, name="fc")(
            ln("ln_2")(x))
        y = nn.Dense(h, dtype=self.dtype, kernel_init=INIT, name="proj")(
            nn.gelu(y, approximate=True))
        return x + y


class GPT(nn.Module):
    vocab_size: int = 50257
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    max_positions: int = 1024
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, ids):
        # type: (Any) -> Any
        """Next-token logits for every position, (B, S, V)."""
        h = self.hidden
        tokens = nn.Embed(self.vocab_size, h, dtype=self.dtype, embedding_init=INIT,
                          name="tokens")
        positions = nn.Embed(self.max_positions, h, dtype=self.dtype, embedding_init=INIT,
                             name="positions")
        x = tokens(ids) + positions(jnp.arange(ids.shape[1])[None, :])
        for i in range(self.layers):
            x = Block(h, self.heads, self.dtype, name="block%d" % i)(x)
        x = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name="ln_f")(x)
        return tokens.attend(x)  # the head is the token embedding matrix, as in GPT-2


def init_rule(names, shape, rng):
    # type: (Sequence[str], Sequence[int], np.random.Generator) -> np.ndarray
    """The initialisers declared above, drawn with numpy on the host (see ``host_init``)."""
    leaf = names[-1]
    if leaf in ("kernel", "embedding"):
        return (rng.standard_normal(shape, np.float32) * 0.02).astype(np.float32)
    if leaf == "bias":
        return np.zeros(shape, np.float32)
    if leaf == "scale":
        return np.ones(shape, np.float32)
    raise KeyError("no initialiser for %s" % "/".join(names))


def next_token_loss(logits, labels):
    # type: (Any, Any) -> Any
    """Mean cross-entropy over every position, in float32 (torch's ``F.cross_entropy``)."""
    with jax.named_scope("loss"):  # names the loss's ops for the profile
        return optax.softmax_cross_entropy_with_integer_labels(
            logits.astype(jnp.float32), labels).mean()
