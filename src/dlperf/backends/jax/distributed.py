"""Data parallelism for the JAX backend, JAX's own way: ``jax.distributed.initialize`` joins the
processes dlperf.launchers.spawn started (one per device), and the step runs on a mesh over every device
of the job.

- Joining: ``coordinator_address`` is ``DLPERF_MASTER_ADDR:PORT`` (process 0 hosts JAX's
  coordination service there), ``num_processes``/``process_id`` are the job's size and this
  rank, ``initialization_timeout`` is ``--rdzv-timeout``; on GPUs each process takes the GPU of
  its local rank (``local_device_ids``). Cluster auto-detection is off: dlperf says where
  everything is. On CPUs the collectives are gloo's (``jax_cpu_collectives_implementation``).
- The step: ``jax.shard_map`` over the mesh axis ``data`` — every device runs the step on its
  own shard of the global batch (``--batch-size`` samples) and differentiates the devices' mean
  loss (``jax.lax.pmean``): ``shard_map`` sums each replicated parameter's gradient inside the
  compiled program (one all-reduce per gradient, which XLA schedules), DistributedDataParallel's
  average; parameters and optimizer state stay replicated. BatchNorm
  normalises each device's own batch (as DDP without SyncBatchNorm), and its running statistics
  are averaged too so the state stays replicated.
- The worker's collectives (barrier, warm-up vote, result gather, all-reduce probe) go through
  the same mesh.

A JAX job whose peers never join ends in JAX's own fatal error (it aborts the process with
``DEADLINE_EXCEEDED`` from ``RegisterTask``), which the launcher's ``explain`` reads. A rank that
exits without reaching the final gather (it failed, or refused the case) leaves at once instead
of waiting in JAX's shutdown barrier for peers that are stuck in a collective.
"""

import atexit
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from dlperf.backends.common import gather_json

AXIS = "data"
# how long a finished process waits in JAX's shutdown barrier for the others: they leave
# together after the final gather, so this only bounds a job that went wrong
SHUTDOWN_TIMEOUT_S = 60

_state = {"joined": False, "gathered": False}  # type: Dict[str, bool]


def job():
    # type: () -> Tuple[int, int, int]
    """(rank, world size, local rank) as dlperf.launchers.spawn set them; (0, 1, 0) for one process."""
    return (int(os.environ.get("DLPERF_RANK", "0")),
            int(os.environ.get("DLPERF_WORLD_SIZE", "1")),
            int(os.environ.get("DLPERF_LOCAL_RANK", "0")))


def active():
    # type: () -> bool
    return job()[1] > 1


def rdzv_timeout_s():
    # type: () -> int
    return max(1, int(round(float(os.environ.get("DLPERF_RDZV_TIMEOUT_S", "300")))))


def initialize(requested):
    # type: (str) -> None
    """Join the job, before JAX creates its backends (the first ``jax.devices()``)."""
    if _state["joined"] or not active():
        return
    rank, world, local_rank = job()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    _gloo_endpoint(os.environ["DLPERF_MASTER_ADDR"], int(os.environ["DLPERF_MASTER_PORT"]))
    jax.distributed.initialize(
        coordinator_address="%s:%s" % (os.environ["DLPERF_MASTER_ADDR"],
                                       os.environ["DLPERF_MASTER_PORT"]),
        num_processes=world, process_id=rank,
        local_device_ids=None if requested == "cpu" else [local_rank],
        cluster_detection_method="deactivate",
        initialization_timeout=rdzv_timeout_s(),
        shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S)
    _state["joined"] = True
    atexit.register(_leave_if_not_gathered)
    # The collectives' context, formed now while every process has just joined: the collective
    # that forms it waits only 30 s for the others (gloo's store timeout on CPUs: "Gloo context
    # initialization failed: DEADLINE_EXCEEDED: GetKeyValue() timed out"), and the first step's
    # all-reduce comes after each rank's own build and compile, which a loaded host can set
    # further apart than that. Once formed, a collective waits for a late peer.
    barrier()


def local_address(master_addr, master_port):
    # type: (str, int) -> str
    """The address of this host on its route to the master (a UDP socket's connect sends
    nothing; it picks the route): what the peers can reach it at."""
    import socket
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((master_addr, master_port))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def _gloo_endpoint(master_addr, master_port):
    # type: (str, int) -> None
    """Where this process's gloo listens and what it advertises to its peers: the interface
    --socket-ifname names (``GLOO_SOCKET_IFNAME``, which the launcher sets), else the address
    on the route to the master. Left to itself, JAX's gloo advertises the address its host name
    resolves to, which a Debian host's /etc/hosts makes 127.0.1.1: a peer on another host is
    then refused ("Connection refused, remote=[127.0.1.1]"). JAX's backend factory takes no
    argument for it, so the factory's call is given one. Where this jaxlib has no such call
    (the collectives are made elsewhere), nothing changes."""
    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    endpoint = ({"interface": interface} if interface
                else {"hostname": local_address(master_addr, master_port)})
    modules = []
    try:
        from jax._src.lib import _jax
        modules.append(_jax)
    except ImportError:
        pass
    try:
        from jax._src.lib import xla_client
        modules.append(xla_client._xla)
    except (ImportError, AttributeError):
        pass
    for module in modules:
        make = getattr(module, "make_gloo_tcp_collectives", None)
        if make is None or getattr(make, "dlperf_endpoint", None) is not None:
            continue

        def made(distributed_client, hostname=None, interface=None, _make=make):
            # type: (Any, Optional[str], Optional[str], Any) -> Any
            return _make(distributed_client=distributed_client, **endpoint)
        made.dlperf_endpoint = endpoint  # type: ignore[attr-defined]
        try:
            module.make_gloo_tcp_collectives = made
        except (AttributeError, TypeError):
            pass


def _leave_if_not_gathered():
    # type: () -> None
    """A rank that never reached the final gather failed (its result file says why): skip JAX's
    shutdown barrier, which would wait for peers that are stuck in a collective."""
    if _state["joined"] and not _state["gathered"]:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def mesh():
    # type: () -> Any
    """One axis, ``data``, over every device of the job (process order)."""
    return jax.sharding.Mesh(np.array(jax.devices()), (AXIS,))


def replicated(tree, the_mesh):
    # type: (Any, Any) -> Any
    """The same value on every device (each process holds the same host value)."""
    sharding = jax.sharding.NamedSharding(the_mesh, jax.sharding.PartitionSpec())
    return jax.tree_util.tree_map(lambda x: _global(np.asarray(x), sharding), tree)


def _global(value, sharding):
    # type: (np.ndarray, Any) -> Any
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def sharded(tree, the_mesh):
    # type: (Any, Any) -> Any
    """This process's arrays as its shard of global arrays split along their first axis."""
    sharding = jax.sharding.NamedSharding(the_mesh, jax.sharding.PartitionSpec(AXIS))
    return jax.tree_util.tree_map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)


def data_parallel(fn, the_mesh, train, donate):
    # type: (Any, Any, bool, bool) -> Any
    """``fn(state, batch) -> (state, loss)`` (or ``-> value`` for inference) run on every
    device's shard, jitted: state replicated, batch split along ``data``, the per-device loss
    returned as a ``(devices,)`` array. ``donate`` (training only): the state's buffers are given to
    the step (see ``backend.donates``)."""
    spec = jax.sharding.PartitionSpec
    if train:
        def body(state, batch):
            new_state, loss = fn(state, batch)
            return new_state, loss[None]
        out_specs = (spec(), spec(AXIS))  # type: Any
    else:
        def body(state, batch):
            return fn(state, batch)[None]
        out_specs = spec(AXIS)
    mapped = jax.shard_map(body, mesh=the_mesh, in_specs=(spec(), spec(AXIS)),
                           out_specs=out_specs)
    return jax.jit(mapped, donate_argnums=(0,) if donate else ())


def local_value(array):
    # type: (Any) -> Any
    """This process's first shard of a global array (a loss: this rank's own)."""
    return np.asarray(array.addressable_shards[0].data).reshape(-1)[0]


def barrier():
    # type: () -> None
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices("dlperf")


def gather_ints(value):
    # type: (int) -> List[int]
    """Every process's ``value`` in process order, on every process, through JAX's own
    collective (``process_allgather``, as the result gather)."""
    from jax.experimental import multihost_utils
    values = multihost_utils.process_allgather(np.array([value], np.int32))
    return [int(v) for v in np.asarray(values).reshape(-1)]


def allreduce_seconds(elements, median_seconds):
    # type: (int, Any) -> float
    """One all-reduce (``psum`` over the mesh) of ``elements`` float32 per device, timed."""
    the_mesh = mesh()
    spec = jax.sharding.PartitionSpec(AXIS)
    buffer = sharded(np.zeros((1, elements), np.float32), the_mesh)
    reduce = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, AXIS), mesh=the_mesh,
                                   in_specs=spec, out_specs=spec))
    out = []  # type: List[Any]

    def operation():
        # type: () -> None
        out[:] = [reduce(buffer)]

    return median_seconds(operation, lambda: jax.block_until_ready(out))


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at rank 0 (None elsewhere), as JSON bytes
    (:func:`dlperf.backends.common.gather_json`) through JAX's own collective
    (``process_allgather``); never pickles."""
    if not _state["joined"]:
        return [payload]
    from jax.experimental import multihost_utils
    everyone = gather_json(payload, multihost_utils.process_allgather,
                           jax.process_index() == 0, size_dtype="int32")
    _state["gathered"] = True
    return everyone
