"""Device, precision, the jitted step and the Workload shared by every JAX model.

The model files only describe networks; how they run (compute dtype, matmul precision, loss
scaling, ``jax.jit`` with buffer donation) lives here so every model is measured under the same
rules.

``compile`` for JAX: the step is always one ``jax.jit``-compiled XLA program — that *is* JAX's
execution model, and the idiomatic fastest loop. There is no uncompiled mode worth measuring
(running the step op by op is a debugging aid, not a way anyone trains), so ``compile=false``
is rejected as unsupported instead of silently measuring the same program twice.
"""

import importlib.util
import os
from typing import Any, Callable, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlperf.backends.common import check_device_name
from dlperf.backends.jax import distributed
from dlperf.worker.support import CPU_BUILD, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

# Dynamic loss scaling for amp-fp16, as in NVIDIA's and PyTorch's GradScaler.
LOSS_SCALE_INIT = 2.0 ** 15
LOSS_SCALE_GROWTH_INTERVAL = 2000


def rank():
    # type: () -> int
    return int(os.environ.get("RANK", "0"))


def select_device(requested):
    # type: (str) -> Any
    """Resolve ``auto``/``cpu``/``cuda`` to this process's JAX device, before JAX picks a
    backend; in a job of several processes, join it first (:mod:`.distributed`): each process
    then sees its own device(s) as local ones."""
    check_device_name(requested)
    if requested == "cpu":
        jax.config.update("jax_platforms", "cpu")
    distributed.initialize(requested)
    if requested == "cpu":
        return jax.local_devices(backend="cpu")[0]
    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:
        gpus = []
    if requested == "cuda" and not gpus:
        raise UnsupportedError(
            "device cuda requested but jax %s sees no GPU (is jax[cuda] installed?)"
            % jax.__version__
        )
    if gpus:
        # several processes: each sees only its local rank's GPU (local_device_ids)
        return gpus[0 if distributed.active() else int(os.environ.get("LOCAL_RANK", "0"))]
    return jax.local_devices(backend="cpu")[0]


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name, or why the CPU."""
    device = select_device(requested)
    if device.platform == "gpu":
        return resolved_device("cuda", device.local_hardware_id if getattr(
            device, "local_hardware_id", None) is not None else device.id, device.device_kind)
    if importlib.util.find_spec("jax_cuda12_plugin") is None:  # what jax[cuda12] adds
        return resolved_device("cpu", reason=CPU_BUILD % ("jax", "jax"))
    return resolved_device("cpu", reason="jax %s (with its CUDA plugin) sees no GPU (driver, "
                                         "CUDA_VISIBLE_DEVICES)" % jax.__version__)


class Precision(object):
    """What a precision name means for JAX on a device: compute dtype, matmul precision,
    loss scaling. Parameters, optimizer state and batch statistics always stay float32."""

    def __init__(self, name, device):
        # type: (str, Any) -> None
        gpu = device.platform == "gpu"  # which precisions run where: SUPPORT in __init__
        self.name = name
        self.compute_dtype = {"amp-bf16": jnp.bfloat16, "amp-fp16": jnp.float16}.get(
            name, jnp.float32)
        self.loss_scaling = name == "amp-fp16"
        self.matmul_precision = None  # type: Optional[str]
        if gpu:
            # XLA on GPU runs fp32 dots/convs in TF32 by default; "fp32" must be IEEE fp32.
            self.matmul_precision = "tensorfloat32" if name == "tf32" else "highest"
            jax.config.update("jax_default_matmul_precision", self.matmul_precision)

    def info(self):
        # type: () -> Dict[str, Any]
        return {
            "precision": self.name,
            "compute_dtype": jnp.dtype(self.compute_dtype).name,
            "param_dtype": "float32",
            "loss_scaling": "dynamic" if self.loss_scaling else None,
            "matmul_precision": self.matmul_precision,
        }


def make_train_step(loss_fn, tx, loss_scaling, axis_name=None):
    # type: (Callable[..., Any], Any, bool, Optional[str]) -> Callable[..., Any]
    """One whole training step as a pure function of (state, batch) -> (state, loss).

    ``loss_fn(params, stats, batch, rng) -> (loss, new_stats)``; ``stats`` carries mutable
    model state (BatchNorm running statistics) through the step. The dropout key advances
    inside the step, so every step draws new masks without a host round trip.

    With ``axis_name`` the step runs per device under ``shard_map`` (data parallel): the
    gradients (and BatchNorm's running statistics) are averaged over that mesh axis before the
    optimizer, and each device draws its own dropout masks. The gradient taken is the devices'
    mean loss's, as JAX's data-parallel guide has it: the parameters are replicated, so
    ``shard_map`` already sums each device's gradient (its transpose of a replicated input),
    one all-reduce per leaf; a ``pmean`` of those gradients on top sent every byte twice and
    left the sum, not the mean (N times DDP's average).
    """

    def step(state, batch):
        rng, dropout_rng = jax.random.split(state["rng"])
        if axis_name is not None:
            dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index(axis_name))
        scale = state["loss_scale"] if loss_scaling else None

        def objective(params):
            loss, new_stats = loss_fn(params, state["stats"], batch, dropout_rng)
            mean = jax.lax.pmean(loss, axis_name) if axis_name is not None else loss
            return (mean * scale if loss_scaling else mean), (loss, new_stats)

        grads, (loss, new_stats) = jax.grad(objective, has_aux=True)(state["params"])
        if axis_name is not None:
            new_stats = jax.lax.pmean(new_stats, axis_name)
        if loss_scaling:
            grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
        with jax.named_scope("optimizer"):  # names the optimizer's ops for the profile
            updates, opt_state = tx.update(grads, state["opt"], state["params"])
            params = optax.apply_updates(state["params"], updates)
        new_state = dict(state, params=params, stats=new_stats, opt=opt_state, rng=rng)
        if loss_scaling:
            new_state = _apply_loss_scale(state, new_state, grads)
        return new_state, loss

    return step


def _apply_loss_scale(old, new, grads):
    # type: (Dict[str, Any], Dict[str, Any], Any) -> Dict[str, Any]
    """Skip the update and halve the scale on overflow; double it after a clean stretch."""
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g))
                                for g in jax.tree_util.tree_leaves(grads)]))
    keep = lambda a, b: jax.tree_util.tree_map(  # noqa: E731
        lambda x, y: jnp.where(finite, x, y), a, b)
    good = jnp.where(finite, old["good_steps"] + 1, 0)
    grow = good >= LOSS_SCALE_GROWTH_INTERVAL
    scale = jnp.where(finite, jnp.where(grow, old["loss_scale"] * 2.0, old["loss_scale"]),
                      jnp.maximum(old["loss_scale"] / 2.0, 1.0))
    out = dict(new, params=keep(new["params"], old["params"]), opt=keep(new["opt"], old["opt"]),
               stats=keep(new["stats"], old["stats"]))
    out["loss_scale"] = scale
    out["good_steps"] = jnp.where(grow, 0, good)
    return out


def host_init(init_fn, rule, seed):
    # type: (Callable[[Any], Any], Callable[..., np.ndarray], int) -> Any
    """Initialise a model's variables on the host with numpy, following the model's own rule.

    ``jax.eval_shape(init_fn)`` gives the variable tree without running anything; ``rule(names,
    shape, rng)`` fills each leaf. Calling ``model.init`` instead would make XLA compile one
    threefry kernel per parameter: 7-15 s of CPU per repeat for ResNet-50 or BERT, spent on
    random numbers that do not change what is measured.
    """
    shapes = jax.eval_shape(init_fn, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    leaves, tree = jax.tree_util.tree_flatten_with_path(shapes)
    values = []
    for path, leaf in leaves:
        names = tuple(str(getattr(k, "key", k)) for k in path)
        value = rule(names, tuple(leaf.shape), rng)
        assert value.shape == tuple(leaf.shape), names
        values.append(value)
    return jax.tree_util.tree_unflatten(tree, values)


def count_params(params):
    # type: (Any) -> int
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


class JaxWorkload(Workload):
    """A jitted step, its state (params, BN stats, optimizer, RNG) and one batch on the device.

    ``step`` dispatches asynchronously and returns the loss as a device array (not converted);
    ``sync`` blocks on the newest state and output, which depend on every earlier step.
    """

    def __init__(self, step_fn, state, batch, device, samples_per_step, params, info,
                 data_parallel=False):
        # type: (Callable[..., Any], Any, Any, Any, int, int, Dict[str, Any], bool) -> None
        self._step = step_fn
        self.data_parallel = data_parallel  # the step's output is one loss per device
        self.state = state
        self.batch = batch
        self.device = device
        super(JaxWorkload, self).__init__(samples_per_step, params, info)
        self._last = None  # type: Any
        self.train = isinstance(state, dict) and "opt" in state

    def step(self):
        # type: () -> Any
        if self.train:
            self.state, self._last = self._step(self.state, self.batch)
        else:
            self._last = self._step(self.state, self.batch)
        return self._last

    def sync(self):
        # type: () -> None
        jax.block_until_ready((self.state, self._last))

    def barrier(self):
        # type: () -> None
        if self.data_parallel:
            distributed.barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        if not self.data_parallel:
            return [value]
        return distributed.gather_ints(value)

    def allreduce_probe(self):
        # type: () -> Optional[float]
        if not self.data_parallel:
            return None
        return distributed.allreduce_seconds(self.params, median_seconds)

    def loss_value(self, handle):
        # type: (Any) -> float
        if self.data_parallel:  # this rank's own loss, as the other backends report
            return float(distributed.local_value(handle))
        return float(jnp.asarray(handle, dtype=jnp.float32))

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.jax.profiling import JaxProfiler

        def compiled_text():
            # type: () -> str
            return self._step.lower(self.state, self.batch).compile().as_text()

        return JaxProfiler(compiled_text if hasattr(self._step, "lower") else None)

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        try:
            stats = self.device.memory_stats()
        except Exception:  # noqa: BLE001 - some PJRT clients do not implement it
            return None
        if not stats or "peak_bytes_in_use" not in stats:
            return None
        return int(stats["peak_bytes_in_use"])


def _version(module_name):
    # type: (str) -> Optional[str]
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    return getattr(module, "__version__", None)




def runtime_info(device):
    # type: (Any) -> Dict[str, Any]
    """Facts about this JAX and device that change performance and belong with a result."""
    import jaxlib

    return {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", None),
        "flax_version": _version("flax"),
        "optax_version": _version("optax"),
        "backend": jax.default_backend(),
        "device": str(device),
        "device_kind": getattr(device, "device_kind", None),
        "device_name": cpu_name() if device.platform == "cpu" else device.device_kind,
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "xla_flags": os.environ.get("XLA_FLAGS"),
        # XLA's CPU client sizes its thread pool by the CPUs this process may run on
        "num_threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "world_size": jax.process_count(),
        "rank": jax.process_index(),
    }
