"""Wide & Deep in Flax linen, layer for layer the PyTorch backend's ``wide-deep`` (see
:mod:`dlperf.models`): a wide embedding of size 1 summed over the 2 cross features, a deep
embedding over the 26 categorical fields concatenated with the 13 dense ones through
``hidden_units`` ReLU layers of ``hidden_size`` with dropout 0.5 and a linear score; the two
scores add into one logit. Same parameter tree as torch's (``wide``/``deep`` tables of
``vocab_size`` rows, ``mlp`` Dense layers), same initialisers (tables uniform(-0.05, 0.05), Dense
kernels Glorot-uniform, biases zero), so the parameter count is the catalogue's.

The optimizer is the torch backend's ``LazyAdam``: ``torch.optim.Adam(lr=1e-3)`` on the MLP and
``torch.optim.SparseAdam(lr=1e-3)`` on the two tables, here :class:`LazyAdam`. A dense Adam over
the tables would read and write every row each step (time growing with the vocabulary, which is
what the reference's lazy Adam avoids), so the step never differentiates the tables themselves:

1. it gathers the rows the batch looks up (one per occurrence) and differentiates the loss with
   respect to those gathered rows (and the MLP);
2. it coalesces the per-occurrence gradients into one gradient per distinct row
   (``jnp.unique`` with a static size, padded with the out-of-range id ``vocab_size``, and
   ``segment_sum``), as ``grad.coalesce()`` does in ``SparseAdam``;
3. for those rows only it applies SparseAdam's arithmetic: ``m = b1 m + (1 - b1) g``,
   ``v = b2 v + (1 - b2) g^2``, ``row -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``
   with torch's defaults (b1 0.9, b2 0.999, eps 1e-8), ``t`` the optimizer's own step count
   (every step, as torch keeps one ``step`` per table), and writes the rows, ``m`` and ``v`` back
   with ``.at[ids].set/add`` (the padding id is dropped). Rows the batch did not look up keep
   their values *and* their moments untouched (neither decayed nor stepped), exactly
   SparseAdam's semantics. The moments are per row, full tables like torch's ``exp_avg`` and
   ``exp_avg_sq`` (allocated at build here, at the first step in torch).

The work per step is O(batch x fields x embedding) whatever the vocabulary; the state is donated
to the jitted step, so the scatters update the tables in place. With several devices each
device's coalesced rows and gradients are all-gathered and coalesced again, gradients divided by
the device count (DDP's average), so every replica applies the same update.
"""

from typing import Any, Callable, Dict, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlperf.backends.jax.workload import LOSS_SCALE_GROWTH_INTERVAL

EMBEDDING_INIT = 0.05  # uniform(-0.05, 0.05), the reference's initializer
DROPOUT = 0.5
LR = 1e-3
BETAS = (0.9, 0.999)  # torch.optim.Adam's and SparseAdam's defaults
EPS = 1e-8
TABLES = ("wide", "deep")
OPTIMIZER_DESC = "Adam(lr=1e-3), lazy (SparseAdam) on the embeddings"


class Tower(nn.Module):
    """The deep part after the look-up: ReLU layers with dropout, then the linear score."""

    hidden_units: int
    hidden_size: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train):
        # type: (Any, bool) -> Any
        for i in range(self.hidden_units):
            x = nn.Dense(self.hidden_size, dtype=self.dtype, name="hidden%d" % i)(x)
            x = nn.Dropout(DROPOUT, deterministic=not train)(nn.relu(x))
        return nn.Dense(1, dtype=self.dtype, name="score")(x)


def combine(tower, wide_rows, deep_rows, dense):
    # type: (Callable[[Any], Any], Any, Any, Any) -> Any
    """The logit (B, 1) from the looked-up rows, wide (B, 2, 1) and deep (B, 26, E). The rows,
    the wide sum and the concatenation stay float32 (torch's autocast leaves embeddings and
    ``cat`` alone); the tower's Dense layers compute in the compute dtype."""
    wide_score = wide_rows.sum(axis=(1, 2))[:, None]
    deep_in = jnp.concatenate([deep_rows.reshape(deep_rows.shape[0], -1), dense], axis=1)
    return wide_score + tower(deep_in).astype(jnp.float32)


class WideAndDeep(nn.Module):
    vocab_size: int
    embedding_size: int
    hidden_units: int
    hidden_size: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, dense, wide_ids, deep_ids, train=False):
        # type: (Any, Any, Any, bool) -> Any
        wide = nn.Embed(self.vocab_size, 1, name="wide")  # float32 look-ups, as torch's
        deep = nn.Embed(self.vocab_size, self.embedding_size, name="deep")
        tower = Tower(self.hidden_units, self.hidden_size, self.dtype, name="mlp")
        return combine(lambda x: tower(x, train), wide(wide_ids), deep(deep_ids), dense)


def init_rule(names, shape, rng):
    # type: (Sequence[str], Sequence[int], np.random.Generator) -> np.ndarray
    """torch's initialisers drawn with numpy on the host (see ``host_init``): the tables
    uniform(-0.05, 0.05) (drawn in float32, in place: they are most of the memory), Dense
    kernels Glorot-uniform (``xavier_uniform_``), biases zero."""
    leaf = names[-1]
    if leaf == "embedding":
        table = rng.random(shape, np.float32)
        table *= 2 * EMBEDDING_INIT
        table -= EMBEDDING_INIT
        return table
    if leaf == "kernel":
        limit = np.sqrt(6.0 / (shape[0] + shape[1]))
        return rng.uniform(-limit, limit, shape).astype(np.float32)
    if leaf == "bias":
        return np.zeros(shape, np.float32)
    raise KeyError("no initialiser for %s" % "/".join(names))


def bce_with_logits(logits, labels):
    # type: (Any, Any) -> Any
    """``F.binary_cross_entropy_with_logits``: the mean over the batch, in float32."""
    return optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), labels).mean()


def coalesce(ids, grads, vocab_size):
    # type: (Any, Any, int) -> Any
    """Per-occurrence ``ids`` (N,) and gradients (N, D) -> (distinct ids (N,), padded with
    ``vocab_size``; each one's summed gradient (N, D), zero on the padding)."""
    n = ids.shape[0]
    unique, inverse = jnp.unique(ids, size=n, fill_value=vocab_size, return_inverse=True)
    summed = jax.ops.segment_sum(grads, inverse.reshape(-1), num_segments=n)
    return unique, summed


def gather_all(x, axis_name):
    # type: (Any, str) -> Any
    """Every device's ``x`` (N, ...) stacked along the first axis, (devices x N, ...), as a
    value shard_map knows is the same on every device: each device writes its block into zeros
    and the blocks are summed (an all-gather by psum)."""
    n = x.shape[0]
    blocks = jnp.zeros((jax.lax.axis_size(axis_name) * n,) + x.shape[1:], x.dtype)
    start = (jax.lax.axis_index(axis_name) * n,) + (0,) * (x.ndim - 1)
    return jax.lax.psum(jax.lax.dynamic_update_slice(blocks, x, start), axis_name)


def sparse_adam_rows(table, m, v, ids, grads, t, apply=True):
    # type: (Any, Any, Any, Any, Any, Any, Any) -> Any
    """``torch.optim.SparseAdam``'s step on the rows ``ids`` (distinct; ``vocab_size`` entries
    are padding and dropped) with their coalesced ``grads``, at step ``t`` (1-based). Only those
    rows of ``table``, ``m`` and ``v`` change. ``apply`` False (a loss-scaling overflow) leaves
    everything as it was. Returns (table, m, v)."""
    b1, b2 = BETAS
    m_old = m.at[ids].get(mode="fill", fill_value=0)
    v_old = v.at[ids].get(mode="fill", fill_value=0)
    m_new = m_old + (grads - m_old) * (1 - b1)
    v_new = v_old + (grads * grads - v_old) * (1 - b2)
    t = t.astype(jnp.float32)
    step_size = LR * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    delta = -step_size * m_new / (jnp.sqrt(v_new) + EPS)
    m_new = jnp.where(apply, m_new, m_old)
    v_new = jnp.where(apply, v_new, v_old)
    delta = jnp.where(apply, delta, jnp.zeros_like(delta))
    return (table.at[ids].add(delta, mode="drop"), m.at[ids].set(m_new, mode="drop"),
            v.at[ids].set(v_new, mode="drop"))


class LazyAdam(object):
    """Adam (optax, torch's defaults) on the MLP, SparseAdam on the tables (:func:`sparse_adam_rows`):
    ``init(params)`` makes the state, ``update`` applies one step."""

    def __init__(self):
        # type: () -> None
        self.dense = optax.adam(LR, b1=BETAS[0], b2=BETAS[1], eps=EPS)

    def init(self, params):
        # type: (Dict[str, Any]) -> Dict[str, Any]
        state = {"mlp": self.dense.init(params["mlp"]),
                 "step": jnp.zeros((), jnp.int32)}  # type: Dict[str, Any]
        for name in TABLES:
            table = params[name]["embedding"]
            state[name] = {"m": jnp.zeros(table.shape, jnp.float32),
                           "v": jnp.zeros(table.shape, jnp.float32)}
        return state

    def update(self, params, opt, mlp_grads, rows, finite):
        # type: (Dict[str, Any], Dict[str, Any], Any, Dict[str, Any], Any) -> Any
        """``rows[table] = (distinct ids, coalesced grads)``; ``finite`` False skips the step
        (GradScaler's rule: no update, the step count does not advance)."""
        updates, mlp_opt = self.dense.update(mlp_grads, opt["mlp"], params["mlp"])
        mlp = optax.apply_updates(params["mlp"], updates)
        keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
            lambda a, b: jnp.where(finite, a, b), new, old)
        new_params = {"mlp": keep(mlp, params["mlp"])}
        new_opt = {"mlp": keep(mlp_opt, opt["mlp"]),
                   "step": jnp.where(finite, opt["step"] + 1, opt["step"])}
        t = opt["step"] + 1
        for name in TABLES:
            ids, grads = rows[name]
            table, m, v = sparse_adam_rows(params[name]["embedding"], opt[name]["m"],
                                           opt[name]["v"], ids, grads, t, finite)
            new_params[name] = {"embedding": table}
            new_opt[name] = {"m": m, "v": v}
        return new_params, new_opt


def make_train_step(model, tx, loss_scaling, axis_name=None):
    # type: (WideAndDeep, LazyAdam, bool, Optional[str]) -> Any
    """The whole training step ``(state, batch) -> (state, loss)`` with row-sparse table
    updates; the state, dropout key and dynamic loss scaling (amp-fp16) as the shared step
    (``workload.make_train_step``) has them, but an overflow skips only the looked-up rows."""
    tower = Tower(model.hidden_units, model.hidden_size, model.dtype)  # the "mlp" subtree
    vocab = model.vocab_size

    def step(state, batch):
        rng, dropout_rng = jax.random.split(state["rng"])
        if axis_name is not None:
            dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index(axis_name))
        params = state["params"]
        scale = state["loss_scale"] if loss_scaling else None
        ids = {"wide": batch["wide_ids"], "deep": batch["deep_ids"]}
        looked_up = {name: params[name]["embedding"][ids[name]]
                     for name in TABLES}  # (B, fields, width): one row per occurrence

        def objective(mlp, wide_rows, deep_rows):
            logits = combine(
                lambda x: tower.apply({"params": mlp}, x, True, rngs={"dropout": dropout_rng}),
                wide_rows, deep_rows, batch["dense"])
            loss = bce_with_logits(logits, batch["labels"])
            # the devices' mean loss (workload.make_train_step says why): the tower's replicated
            # parameters get DDP's average from shard_map's own sum, each device's rows 1/N of it
            mean = jax.lax.pmean(loss, axis_name) if axis_name is not None else loss
            return (mean * scale if loss_scaling else mean), loss

        (g_mlp, g_wide, g_deep), loss = jax.grad(objective, argnums=(0, 1, 2), has_aux=True)(
            params["mlp"], looked_up["wide"], looked_up["deep"])
        rows = {}
        for name, g in (("wide", g_wide), ("deep", g_deep)):
            flat_ids = ids[name].reshape(-1)
            flat_g = g.reshape(flat_ids.shape[0], -1)
            unique, summed = coalesce(flat_ids, flat_g, vocab)
            if axis_name is not None:  # every device's rows (each 1/N already): DDP's average
                unique, summed = coalesce(gather_all(unique, axis_name),
                                          gather_all(summed, axis_name), vocab)
            rows[name] = (unique, summed)
        finite = jnp.asarray(True)
        if loss_scaling:
            g_mlp = jax.tree_util.tree_map(lambda x: x / scale, g_mlp)
            rows = {name: (u, s / scale) for name, (u, s) in rows.items()}
            leaves = jax.tree_util.tree_leaves(g_mlp) + [s for _, s in rows.values()]
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
        new_params, new_opt = tx.update(params, state["opt"], g_mlp, rows, finite)
        new_state = dict(state, params=new_params, opt=new_opt, rng=rng)
        if loss_scaling:  # halve on overflow; double after a clean stretch
            good = jnp.where(finite, state["good_steps"] + 1, 0)
            grow = good >= LOSS_SCALE_GROWTH_INTERVAL
            new_state["loss_scale"] = jnp.where(
                finite, jnp.where(grow, scale * 2.0, scale), jnp.maximum(scale / 2.0, 1.0))
            new_state["good_steps"] = jnp.where(grow, 0, good)
        return new_state, loss

    return step
