"""JAX's collective path for ``dlperf collectives`` (:mod:`dlperf.worker.collectives`).

``gloo``: the processes dlperf.launchers.spawn started join with ``jax.distributed.initialize``
as the training path does (:func:`.distributed.initialize`: gloo CPU collectives, the
coordination service at the master), and each operation is one jitted ``jax.shard_map`` over
the mesh of every device of the job: ``lax.psum`` (all-reduce, what the training step averages
gradients with), ``lax.all_gather`` and ``lax.psum_scatter`` (tiled). JAX has no broadcast
collective of its own (``multihost_utils.broadcast_one_to_all`` is a psum of zeros from a host
array, a host-to-device copy each call): the path does not offer one.

Light to import: the harness reads :data:`PATHS`; JAX is imported by :func:`join`.
"""

from typing import Any, Callable, Dict

from dlperf.worker.collectives import CollectivePath

PATHS = (
    CollectivePath("gloo", "cpu", "native", ("allreduce", "allgather", "reducescatter"),
                   "jax.lax collectives (psum, all_gather, psum_scatter) in a jitted shard_map "
                   "over every process's CPU device, gloo underneath "
                   "(jax_cpu_collectives_implementation); started by dlperf.launchers.spawn, "
                   "joined by jax.distributed.initialize"),
)


def join(path, case):
    # type: (str, Dict[str, Any]) -> Any
    return MeshComm()


class MeshComm(object):
    """Every device of the job on one mesh axis; each rank one CPU device."""

    def __init__(self):
        # type: () -> None
        import jax

        from dlperf.backends.jax import distributed

        distributed.initialize("cpu")
        self.jax, self.distributed = jax, distributed
        self.mesh = distributed.mesh()
        self.rank, self.size = jax.process_index(), jax.process_count()

    def prepare(self, op, elements):
        # type: (str, int) -> Callable[[], None]
        import numpy as np

        jax, axis = self.jax, self.distributed.AXIS
        lax, spec = jax.lax, jax.sharding.PartitionSpec(axis)
        width = elements // self.size if op == "allgather" else elements
        kernels = {
            "allreduce": lambda x: lax.psum(x, axis),
            "allgather": lambda x: lax.all_gather(x, axis, axis=1, tiled=True),
            "reducescatter": lambda x: lax.psum_scatter(x, axis, scatter_dimension=1,
                                                        tiled=True),
        }
        run = jax.jit(jax.shard_map(kernels[op], mesh=self.mesh, in_specs=spec, out_specs=spec))
        buffer = self.distributed.sharded(np.ones((1, width), np.float32), self.mesh)

        def once():
            # type: () -> None
            jax.block_until_ready(run(buffer))
        return once

    def barrier(self):
        # type: () -> None
        self.distributed.barrier()

    def sum_rows(self, rows):
        # type: (Any) -> Any
        """Every process's matrix through ``process_allgather`` (float32: JAX runs without
        64-bit types), summed here."""
        import numpy as np
        from jax.experimental import multihost_utils

        stacked = multihost_utils.process_allgather(rows.astype(np.float32))
        return np.asarray(stacked, dtype=np.float64).reshape((self.size,) + rows.shape).sum(0)

    def facts(self):
        # type: () -> Dict[str, Any]
        return {"framework_version": self.jax.__version__,
                "backend": "jax.distributed, gloo CPU collectives"}

    def close(self):
        # type: () -> None
        # the job ended together, as after the training path's final gather: leave through
        # JAX's own shutdown (its atexit otherwise takes this rank for a failed one)
        self.distributed._state["gathered"] = True
