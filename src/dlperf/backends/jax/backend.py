"""JAX backend (Flax linen + Optax): ``build(case)`` turns a case dict into a ready Workload.

Everything one-off happens here, outside the timed window: picking the device, initialising
parameters, generating the synthetic batch (once, on the device, seeded), building the optimizer
and wrapping the step in ``jax.jit`` (XLA compiles lazily in the first step, which the timing loop
times apart). On a GPU the training state is donated to the jitted step, so parameters and
optimizer state are updated in place (half the state's memory); on the CPU only where a model's
step needs it (wide-deep's row-sparse table updates), since XLA's CPU backend runs the donated
step slower (docs/fidelity.md, "What was found"), as the Flax ImageNet example leaves it.

With several processes (:mod:`.distributed`) the same step runs under ``jax.shard_map`` on a
mesh over every device of the job: the state is replicated, each device holds its own
``--batch-size`` samples of the global batch, and the gradients are averaged in the program.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from dlperf import models
from dlperf.backends.common import CaseView
from dlperf.backends.jax import bert as bert_model
from dlperf.backends.jax import distributed
from dlperf.backends.jax import gpt as gpt_model
from dlperf.backends.jax import input_pipeline
from dlperf.backends.jax import resnet as resnet_model
from dlperf.backends.jax import wide_deep as wide_deep_model
from dlperf.backends.jax.workload import (LOSS_SCALE_INIT, JaxWorkload, Precision, count_params,
                                          host_init, make_train_step, rank, runtime_info,
                                          select_device)
from dlperf.worker.workload import UnsupportedError, Workload

__all__ = ["build"]

MLM_FRACTION = 0.15

# What a model builder hands back: initial variables, the training loss and the inference
# output as pure functions, the optimizer, and what to record about them. ``make_step``, when
# a model has one, replaces the shared training step: ``(loss_scaling, axis) -> step``
# (wide-deep's row-sparse table updates); ``tx`` then only needs ``init(params)``, and
# ``loss`` is None.
Parts = NamedTuple(
    "Parts",
    [
        ("variables", Dict[str, Any]),
        ("batch", Dict[str, Any]),
        ("loss", Optional[Callable[..., Any]]),  # (params, stats, batch, rng) -> (loss, stats)
        ("infer", Callable[..., Any]),  # (params, stats, batch) -> scalar
        ("tx", Any),
        ("layout", str),
        ("optimizer_desc", str),
        ("make_step", Optional[Callable[..., Any]]),
        ("donate_on_cpu", bool),
    ],
)
Parts.__new__.__defaults__ = (None, False)  # make_step, donate_on_cpu


def donates(parts, device):
    # type: (Parts, Any) -> bool
    """Whether the training step is given the state's buffers (``donate_argnums``): always on an
    accelerator, where it halves the state's memory; on the CPU only where the model asks
    (``donate_on_cpu``: an update that would otherwise copy a whole table per step)."""
    return device.platform != "cpu" or parts.donate_on_cpu


def _resnet50(knobs, batch, dtype, key, seed):
    # type: (Dict[str, int], int, Any, Any, int) -> Parts
    size, classes = knobs["image_size"], knobs["num_classes"]
    model = resnet_model.ResNet50(num_classes=classes, dtype=dtype,
                                  stages=models.resnet50_stages(knobs))
    k_images, k_labels = jax.random.split(key, 2)
    variables = host_init(
        lambda k: model.init(k, jnp.zeros((1, size, size, 3)), train=False),
        resnet_model.init_rule, seed)
    data = {
        "images": jax.random.normal(k_images, (batch, size, size, 3), jnp.float32),
        "labels": jax.random.randint(k_labels, (batch,), 0, classes),
    }

    def loss(params, stats, b, rng):
        logits, updated = model.apply({"params": params, "batch_stats": stats}, b["images"],
                                      train=True, mutable=["batch_stats"])
        with jax.named_scope("loss"):  # names the loss's ops for the profile
            ce = optax.softmax_cross_entropy_with_integer_labels(
                logits.astype(jnp.float32), b["labels"]).mean()
        return ce, updated["batch_stats"]

    def infer(params, stats, b):
        logits = model.apply({"params": params, "batch_stats": stats}, b["images"], train=False)
        return logits.astype(jnp.float32).mean()

    tx = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(0.1, momentum=0.9))
    return Parts(variables, data, loss, infer, tx, "NHWC",
                 "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)")


def _adamw(knobs):
    # type: (Dict[str, int]) -> Tuple[Any, str]
    """The transformers' optimizer and its description: torch.optim.AdamW's defaults (optax's
    weight_decay default is 1e-4, torch's 0.01), on every parameter as the torch backend does,
    after the global-norm clip of the ``clip_grad_norm`` knob."""
    adamw = optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)
    clip, clip_desc = models.gradient_clip(knobs)
    tx = optax.chain(optax.clip_by_global_norm(clip), adamw) if clip else adamw
    return tx, "AdamW(lr=1e-4, weight_decay=0.01), " + clip_desc


def _bert(knobs, batch, dtype, key, seed):
    # type: (Dict[str, int], int, Any, Any, int) -> Parts
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = bert_model.BertForPreTraining(
        vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"], heads=knobs["heads"],
        intermediate=knobs["intermediate"], max_positions=knobs["max_positions"],
        type_vocab=knobs["type_vocab"], dtype=dtype)
    dummy = jnp.zeros((1, s), jnp.int32)
    variables = host_init(lambda k: model.init(k, dummy, dummy, train=False),
                          bert_model.init_rule, seed)

    def synthetic(key):
        k_ids, k_order, k_nsp = jax.random.split(key, 3)
        ids = jax.random.randint(k_ids, (batch, s), 0, v)
        # A fixed count of masked positions per row (never [CLS] at 0) keeps the work
        # identical across seeds and guarantees at least one label, so the MLM loss is never
        # 0/0.
        n_masked = max(1, int(round(MLM_FRACTION * s)))
        order = jnp.argsort(jax.random.uniform(k_order, (batch, s - 1)), axis=1)
        rows = jnp.arange(batch)[:, None]
        masked = jnp.zeros((batch, s), bool).at[rows, order[:, :n_masked] + 1].set(True)
        mask_token = 103 if v > 103 else v - 1  # [MASK] in the uncased BERT vocabulary
        segment = jnp.minimum((jnp.arange(s) >= s // 2).astype(jnp.int32),
                              knobs["type_vocab"] - 1)
        return {
            "ids": jnp.where(masked, mask_token, ids),
            "token_types": jnp.broadcast_to(segment, (batch, s)),
            "mlm_labels": jnp.where(masked, ids, -100),
            "nsp_labels": jax.random.randint(k_nsp, (batch,), 0, 2),
        }

    # one XLA program instead of a dozen eager ops, each compiled apart (a second of CPU per
    # process, a quarter of the tiny BERT's build); random bits, their exact conversion to [0, 1),
    # a sort and integer selects: bit for bit the batch the eager ops made
    data = jax.jit(synthetic)(key)

    def loss(params, stats, b, rng):
        mlm, nsp = model.apply({"params": params}, b["ids"], b["token_types"], train=True,
                               rngs={"dropout": rng})
        return bert_model.pretraining_loss(mlm, nsp, b["mlm_labels"], b["nsp_labels"]), stats

    def infer(params, stats, b):
        mlm, nsp = model.apply({"params": params}, b["ids"], b["token_types"], train=False)
        return mlm.astype(jnp.float32).mean() + nsp.astype(jnp.float32).mean()

    tx, optimizer_desc = _adamw(knobs)
    return Parts(variables, data, loss, infer, tx, "batch-major (B, S, H)", optimizer_desc)


def _gpt(knobs, batch, dtype, key, seed):
    # type: (Dict[str, int], int, Any, Any, int) -> Parts
    """The torch backend's recipe: next-token cross-entropy on synthetic tokens, AdamW."""
    s, v = knobs["seq_len"], knobs["vocab_size"]
    model = gpt_model.GPT(vocab_size=v, hidden=knobs["hidden"], layers=knobs["layers"],
                          heads=knobs["heads"], max_positions=knobs["max_positions"], dtype=dtype)
    variables = host_init(lambda k: model.init(k, jnp.zeros((1, s), jnp.int32)),
                          gpt_model.init_rule, seed)
    tokens = jax.random.randint(key, (batch, s + 1), 0, v)
    data = {"ids": tokens[:, :-1], "labels": tokens[:, 1:]}  # each position predicts the next

    def loss(params, stats, b, rng):
        return gpt_model.next_token_loss(model.apply({"params": params}, b["ids"]),
                                         b["labels"]), stats

    def infer(params, stats, b):
        return model.apply({"params": params}, b["ids"]).astype(jnp.float32).mean()

    tx, optimizer_desc = _adamw(knobs)
    return Parts(variables, data, loss, infer, tx, "batch-major (B, S, H)", optimizer_desc)


def _wide_deep(knobs, batch, dtype, key, seed):
    # type: (Dict[str, int], int, Any, Any, int) -> Parts
    """The torch backend's recipe: synthetic Criteo-like fields (dense N(0, 1), ids uniform over
    the vocabulary, 0/1 labels), BCE with logits, Adam on the MLP and SparseAdam on the tables
    (:mod:`.wide_deep`: only the looked-up rows and their moments change)."""
    v = knobs["vocab_size"]
    if v >= 2 ** 31 - 1:  # the ids and the padding id `v` are int32 (JAX without x64)
        raise UnsupportedError("jax backend: wide-deep ids are int32; vocab_size %d needs "
                               "int64 ids" % v)
    model = wide_deep_model.WideAndDeep(v, knobs["deep_embedding_size"], knobs["hidden_units"],
                                        knobs["hidden_size"], dtype)
    dense_fields, wide_fields, deep_fields = (models.WIDE_DEEP_DENSE_FIELDS,
                                              models.WIDE_DEEP_WIDE_FIELDS,
                                              models.WIDE_DEEP_DEEP_FIELDS)
    # the tables go to the device leaf by leaf as they are drawn: the host copy of a
    # vocabulary-sized table never lives beside the optimizer's moments
    variables = jax.device_put(host_init(
        lambda k: model.init(k, jnp.zeros((1, dense_fields)), jnp.zeros((1, wide_fields),
                                                                         jnp.int32),
                             jnp.zeros((1, deep_fields), jnp.int32)),
        wide_deep_model.init_rule, seed))
    k_dense, k_wide, k_deep, k_labels = jax.random.split(key, 4)
    data = {
        "dense": jax.random.normal(k_dense, (batch, dense_fields), jnp.float32),
        "wide_ids": jax.random.randint(k_wide, (batch, wide_fields), 0, v),
        "deep_ids": jax.random.randint(k_deep, (batch, deep_fields), 0, v),
        "labels": jax.random.randint(k_labels, (batch, 1), 0, 2).astype(jnp.float32),
    }

    def infer(params, stats, b):
        logits = model.apply({"params": params}, b["dense"], b["wide_ids"], b["deep_ids"])
        return jax.nn.sigmoid(logits.astype(jnp.float32)).mean()

    tx = wide_deep_model.LazyAdam()

    def make_step(loss_scaling, axis):
        return wide_deep_model.make_train_step(model, tx, loss_scaling, axis)

    # no dense-gradient loss: training is make_step's row-sparse step only
    return Parts(variables, data, None, infer, tx, "batch-major (B, fields)",
                 wide_deep_model.OPTIMIZER_DESC, make_step, donate_on_cpu=True)


BUILDERS = {
    "resnet50": _resnet50,
    "bert-base": _bert,
    "gpt": _gpt,
    "wide-deep": _wide_deep,
}  # type: Dict[str, Callable[..., Parts]]


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    name, knobs, train, batch, seed = view.name, view.knobs, view.train, view.batch, view.seed
    device = select_device(view.device)
    precision = Precision(view.precision, device)
    key = jax.random.fold_in(jax.random.PRNGKey(seed), rank())
    if view.data_only:  # the input pipeline alone: no model, a shard per process
        return input_pipeline.data_only(case, knobs, batch, device, seed, runtime_info(device))

    parallel = distributed.active()
    axis = distributed.AXIS if parallel else None
    with jax.default_device(device):
        parts = BUILDERS[name](knobs, batch, precision.compute_dtype, key, seed)
        donate = train and donates(parts, device)
        params = parts.variables["params"]
        stats = parts.variables.get("batch_stats", {})
        if train:
            # every rank starts from the same state: the host initialisation is seeded alike
            # on all of them, and so is the dropout key (folded with the device inside)
            state = {"params": params, "stats": stats, "opt": parts.tx.init(params),
                     "rng": jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), 0),
                                               1)}  # rank 0's key, as for one process
            if precision.loss_scaling:
                state["loss_scale"] = jnp.asarray(LOSS_SCALE_INIT, jnp.float32)
                state["good_steps"] = jnp.asarray(0, jnp.int32)
            if parts.make_step is not None:
                body = parts.make_step(precision.loss_scaling, axis)
            else:
                body = make_train_step(parts.loss, parts.tx, precision.loss_scaling, axis)
        else:
            state = {"params": params, "stats": stats}
            infer = parts.infer

            def body(st, b):
                return infer(st["params"], st["stats"], b)
        if parallel:
            mesh = distributed.mesh()
            step_fn = distributed.data_parallel(body, mesh, train, donate)
            state = distributed.replicated(state, mesh)
            data = distributed.sharded(parts.batch, mesh)  # this rank's own samples
        else:
            step_fn = jax.jit(body, donate_argnums=(0,) if donate else ())
            state = jax.device_put(state, device)
            data = jax.device_put(parts.batch, device)

    info = view.info(runtime_info(device), precision.info())
    info.update({
        "layout": parts.layout,
        "optimizer": view.optimizer(parts.optimizer_desc),
        "compile": "jax.jit (inherent: the whole step is one XLA program)",
        "buffer_donation": donate,
        "flax_api": "linen",
        "init": "numpy on the host (the model's initialisers), then device_put",
        "data": "synthetic, generated once on the device",
    })
    feed = None  # type: Any
    if view.dataset:  # a dataset folder: the next batch per step
        feed = input_pipeline.Feed(case, knobs["image_size"], batch, device, seed,
                                   distributed.mesh() if parallel else None)
        info["data"] = feed.info
    if parallel:
        info["data_parallel"] = ("jax.shard_map over %d devices of %d processes (jax.distributed), "
                                 "gradients of the devices' lax.pmean loss (one all-reduce a "
                                 "leaf)" % (jax.device_count(),
                                                                      jax.process_count()))
        info["cpu_collectives"] = jax.config.jax_cpu_collectives_implementation
    if feed is not None:
        return input_pipeline.FedWorkload(feed, step_fn, state, data, device, batch,
                                          count_params(params), info, data_parallel=parallel)
    return JaxWorkload(step_fn, state, data, device, batch, count_params(params), info,
                       data_parallel=parallel)
