"""JAX's real input pipeline: a dataset folder decoded, augmented and batched on the host by
numpy and Pillow, then ``jax.device_put``.

JAX has no data loader of its own (its documentation points at other frameworks' loaders or
plain numpy), so this is the plain-numpy one: every step takes the next batch of this process
(Pillow decode and the ImageNet training augmentation of :mod:`dlperf.data.imagefolder`,
NHWC float32 as the JAX models take it, int32 labels) and puts it on the device (with several
processes: as this process's shard of the global batch, like the synthetic one).

Decoding runs in a pool of ``loader_workers`` **threads**, each assembling whole batches, with
``PREFETCH_FACTOR`` batches per thread in flight ahead of the step. Threads, not processes:
Pillow releases the GIL while it decodes and resizes, and numpy while it normalises, so threads
decode in parallel; and a JAX process already runs XLA's own threads, which a fork() copies in
an undefined state (JAX warns that it is likely to deadlock), while spawned processes would
start Python afresh and pickle every batch back. ``loader_workers`` 0 decodes in the step's own
thread, when the step asks. The default is the torch DataLoader's: min(4, usable CPUs).

The order follows DistributedSampler: every epoch a permutation of all the files seeded by
(seed, epoch), cut to a multiple of the processes, this process taking every world-th; the
last partial batch of each epoch is dropped, so batch k belongs to epoch k // batches_per_epoch.
``info["shard"]`` records this process's share of epoch 0 as a count and an additive fingerprint
(:func:`dlperf.data.imagefolder.shard_info`), so a job shows its shards are disjoint.
Each batch's augmentation draws from its own generator, seeded by (seed, rank, epoch, batch),
so a run is repeatable whatever thread decodes it.
"""

import collections
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from dlperf.worker.cpus import loader_workers
from dlperf.data import imagefolder
from dlperf.backends.jax import distributed
from dlperf.backends.jax.workload import JaxWorkload
from dlperf.worker.workload import PipelineOnlyWorkload, UnsupportedError

PREFETCH_FACTOR = 2  # batches each loader thread keeps ready (torch's DataLoader default)


def load_batch(samples, size, seed):
    # type: (List[Tuple[str, int]], int, int) -> Tuple[np.ndarray, np.ndarray]
    """(images (n, size, size, 3) float32, labels (n,) int32) of these samples."""
    rng = random.Random(seed)
    images = np.empty((len(samples), size, size, 3), np.float32)
    labels = np.empty((len(samples),), np.int32)
    for i, (path, label) in enumerate(samples):
        try:
            pixels = imagefolder.read_sample(path, size, rng)
        except ImportError as error:
            raise UnsupportedError("data: the jax environment cannot decode JPEGs: %s (Pillow "
                                   "belongs in its requirements)" % error)
        images[i] = pixels.transpose(1, 2, 0)
        labels[i] = label
    return images, labels


class Feed(object):
    """An endless stream of {"images", "labels"} batches on the device.

    ``next()`` is what a step calls. ``info`` holds the pipeline's settings and counters; it is
    the dict the result's ``data`` block is built from.
    """

    def __init__(self, case, size, batch, device, seed, mesh=None):
        # type: (Dict[str, Any], int, int, Any, int, Optional[Any]) -> None
        root = case["data"]
        manifest, samples = imagefolder.open_checked(root)
        workers, requested = loader_workers(case)
        self.rank, self.world = jax.process_index(), jax.process_count()
        self.samples = samples
        self.size = size
        self.batch = batch
        self.seed = seed
        self.device = device
        self.mesh = mesh
        self.per_process = len(samples) // self.world  # the sampler's drop_last
        self.batches_per_epoch = self.per_process // batch
        if self.batches_per_epoch < 1:
            raise UnsupportedError(
                "data: %d images per process give no full batch of %d; make a larger dataset "
                "or use a smaller batch" % (self.per_process, batch))
        self.workers = workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dlperf-loader") \
            if workers > 0 else None
        self.depth = PREFETCH_FACTOR * workers
        self._tasks = self._schedule()
        self._pending = collections.deque()  # type: Deque[Tuple[int, Any]]
        self.fetched = 0
        self.info = imagefolder.feed_info(
            root, manifest, len(samples), self.per_process, self.batches_per_epoch,
            workers, requested)
        self.info.update({
            "workers_kind": "threads (Pillow and numpy release the GIL; no fork of the JAX "
                            "process)" if workers > 0 else "none: decoded in the step's thread",
            "prefetch_factor": PREFETCH_FACTOR if workers > 0 else None,
            "drop_last": True,
            "sampler": "permutation per epoch seeded by (seed, epoch), every world-th to a "
                       "process (DistributedSampler's order)",
            "pipeline": "numpy loader (thread pool), then jax.device_put",
            "decoder": imagefolder.decoder(),
            "augmentation": imagefolder.describe(size),
            "layout": "NHWC",
            "to_device": ("jax.make_array_from_process_local_data (this process's shard)"
                          if mesh is not None else "jax.device_put"),
            "shard": imagefolder.shard_info(root, [self.samples[int(i)][0]
                                                   for i in self._share(0)]),
            "batches_fetched": 0,
            "epochs_started": 0,
        })

    def _share(self, epoch):
        # type: (int) -> Any
        """This process's sample indices in ``epoch``: a permutation of every file seeded by
        (seed, epoch), cut to a multiple of the processes, every world-th from the rank on."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.samples))
        return order[:self.per_process * self.world][self.rank::self.world]

    def _schedule(self):
        # type: () -> Iterator[Tuple[int, List[Tuple[str, int]], int]]
        """(epoch, samples, augmentation seed) of every batch of this process, for ever."""
        epoch = 0
        while True:
            mine = self._share(epoch)
            for b in range(self.batches_per_epoch):
                chosen = [self.samples[int(i)] for i in mine[b * self.batch:(b + 1) * self.batch]]
                yield epoch, chosen, hash((self.seed, self.rank, epoch, b)) & 0xFFFFFFFF
            epoch += 1

    def _submit(self):
        # type: () -> None
        epoch, chosen, seed = next(self._tasks)
        if self.pool is None:
            self._pending.append((epoch, (chosen, seed)))
        else:
            self._pending.append((epoch, self.pool.submit(load_batch, chosen, self.size, seed)))

    def next(self):
        # type: () -> Dict[str, Any]
        while len(self._pending) < max(1, self.depth):
            self._submit()
        epoch, work = self._pending.popleft()
        if self.pool is None:
            images, labels = load_batch(work[0], self.size, work[1])
        else:
            images, labels = work.result()
            self._submit()  # keep the pool ``depth`` batches ahead
        self.fetched += 1
        self.info["batches_fetched"] = self.fetched
        self.info["epochs_started"] = epoch + 1
        batch = {"images": images, "labels": labels}
        if self.mesh is not None:
            return distributed.sharded(batch, self.mesh)
        return jax.device_put(batch, self.device)


class FedWorkload(JaxWorkload):
    """The jitted step of :class:`JaxWorkload`, given the feed's next batch every step."""

    def __init__(self, feed, *args, **kwargs):
        # type: (Feed, *Any, **Any) -> None
        super(FedWorkload, self).__init__(*args, **kwargs)
        self.feed = feed

    def step(self):
        # type: () -> Any
        self.batch = self.feed.next()
        return super(FedWorkload, self).step()


class DataOnlyWorkload(PipelineOnlyWorkload):
    """``--data-only`` in jax: see :class:`PipelineOnlyWorkload`. With several processes the
    loop's barrier and warm-up vote go through JAX's own collectives (those of
    :mod:`dlperf.backends.jax.distributed`); each process's feed reads its own shard."""

    def step(self):
        # type: () -> Any
        self._last = self.feed.next()["images"]
        return self._last

    def sync(self):
        # type: () -> None
        jax.block_until_ready(self._last)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(jnp.mean(handle))

    def barrier(self):
        # type: () -> None
        if distributed.active():
            distributed.barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        if not distributed.active():
            return [value]
        return distributed.gather_ints(value)

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        try:
            stats = self.device.memory_stats()
        except Exception:  # noqa: BLE001 - some PJRT clients do not implement it
            return None
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats \
            else None


def data_only(case, knobs, batch, device, seed, info):
    # type: (Dict[str, Any], Dict[str, int], int, Any, int, Dict[str, Any]) -> DataOnlyWorkload
    feed = Feed(case, knobs["image_size"], batch, device, seed)
    info.update({"model": None, "task": "data-only", "data": feed.info, "layout": "NHWC",
                 "compile": None})
    return DataOnlyWorkload(feed, feed.device, batch, info)
