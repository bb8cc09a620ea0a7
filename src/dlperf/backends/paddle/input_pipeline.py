"""PaddlePaddle's real input pipeline: a dataset folder decoded, augmented and batched by
``paddle.io.DataLoader``.

``data`` a dataset directory (``dlperf data make-images``) replaces the synthetic batch made once
on the device: every step takes the next batch of a ``paddle.io.DataLoader`` over a
``paddle.io.Dataset`` of the folder (Pillow decode and the ImageNet training augmentation of
:mod:`dlperf.data.imagefolder`, the very code the torch loader runs; NCHW float32 as the
Paddle ResNet-50 takes it, int64 labels). The loader runs ``loader_workers`` worker processes
(default the torch loader's: min(4, usable CPUs); 0 decodes in the step's process) that hand
batches back through shared memory (``use_shared_memory``, Paddle's default, which it only uses
with workers), ``prefetch_factor`` batches in flight per worker; its buffered reader puts each
batch on the device's place (pinned host memory on CUDA). The last partial batch of each epoch
is dropped, so batch k of the stream belongs to epoch k // batches_per_epoch.

The stream never ends: one DataLoader iterator over :class:`EndlessBatches`, which starts the
next epoch with a new shuffle, seeded by (seed + epoch) as torch's DistributedSampler does, when
one is used up. The workers so live for the whole run and prefetch across epoch boundaries;
``persistent_workers=True`` with a new iterator per epoch would instead pay Paddle's reset,
which polls its workers with 0.5 s sleeps (paddle 3.3.1), at every epoch.

With several processes (paddle.distributed) :class:`SeededSampler` gives each rank its own shard
of every epoch, torch's DistributedSampler(drop_last=True) rule: the same number of files per
rank, none read twice in an epoch (``info["shard"]`` records the rank's first one as a count and
an additive fingerprint, :func:`dlperf.data.imagefolder.shard_info`).
Paddle seeds its workers from the global numpy state, so ``worker_init_fn`` gives each worker's
augmentation its own stream derived from the case's seed, rank and worker id: a run is
repeatable. ``data_only`` times that stream alone, through the same loop.
"""

import functools
import random
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import paddle

from dlperf.worker.cpus import loader_workers
from dlperf.data import imagefolder
from dlperf.backends.paddle.workload import (GpuPeak, barrier, gather_ints, rank, runtime_info,
                                             world_size)
from dlperf.worker.workload import PipelineOnlyWorkload, UnsupportedError

PREFETCH_FACTOR = 2  # batches each worker keeps ready (Paddle's and torch's default)
LAYOUT = "NCHW"  # the Paddle ResNet-50's data_format (backend.DATA_FORMAT)


class FolderDataset(imagefolder.AugmentedSamples, paddle.io.Dataset):
    """(image, label) pairs of the folder: a float32 (3, size, size) array, augmented afresh on
    every read, and the class index."""

    def __init__(self, samples, size, seed):
        # type: (Any, int, int) -> None
        paddle.io.Dataset.__init__(self)
        imagefolder.AugmentedSamples.__init__(self, samples, size, seed)

    def __getitem__(self, index):
        # type: (int) -> Tuple[np.ndarray, int]
        try:
            return self.read(index)
        except ImportError as error:
            raise UnsupportedError("data: the paddle environment cannot decode JPEGs: %s "
                                   "(Pillow belongs in its requirements)" % error)


class SeededSampler(paddle.io.Sampler):
    """This rank's share of every epoch: a permutation of every index seeded by seed + epoch
    (np.random.RandomState), cut to a multiple of the ranks, every world-th from the rank on, as
    torch's DistributedSampler(drop_last=True) deals them; one rank takes them all.
    paddle.io.DistributedBatchSampler would instead pad a folder that does not divide evenly
    with files from the front of the permutation, which another rank then also reads in the same
    epoch, and count the padded share in its epoch."""

    def __init__(self, dataset, seed, world=1, rank_=0):
        # type: (Any, int, int, int) -> None
        super(SeededSampler, self).__init__(dataset)
        self.count = len(dataset)
        self.per_rank = self.count // world
        self.world = world
        self.rank = rank_
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch):
        # type: (int) -> None
        self.epoch = epoch

    def indices(self, epoch):
        # type: (int) -> List[int]
        """This rank's indices of ``epoch``, in the order they are read."""
        order = np.arange(self.count).tolist()
        np.random.RandomState((self.seed + epoch) & 0xFFFFFFFF).shuffle(order)
        return order[:self.per_rank * self.world][self.rank::self.world]

    def __iter__(self):
        # type: () -> Iterator[int]
        return iter(self.indices(self.epoch))

    def __len__(self):
        # type: () -> int
        return self.per_rank


class EndlessBatches(paddle.io.Sampler):
    """The batches of ``batches`` (a batch sampler that drops the last partial one) epoch after
    epoch, for ever, ``set_epoch(epoch)`` before each: a new shuffle every epoch, and batch k of
    the stream belongs to epoch k // len(batches). Iterated in the step's process, which sends
    the indices to the workers."""

    def __init__(self, batches, set_epoch):
        # type: (Any, Any) -> None
        super(EndlessBatches, self).__init__()
        self.batches = batches
        self.set_epoch = set_epoch

    def __iter__(self):
        # type: () -> Iterator[List[int]]
        epoch = 0
        while True:
            self.set_epoch(epoch)
            for indices in self.batches:
                yield indices
            epoch += 1

    def __len__(self):
        # type: () -> int
        return len(self.batches)  # per epoch; the stream never ends


def _seed_worker(base, worker_id):
    # type: (int, int) -> None
    """Each loader process augments with its own stream, base + worker id, where base comes from
    the case's seed and rank (Paddle's own worker seed comes from the unseeded numpy state)."""
    paddle.io.get_worker_info().dataset.rng = random.Random(base + worker_id)


class Feed(object):
    """An endless stream of (images, labels) batches on the device.

    ``next()`` is what a step calls: the DataLoader's next batch (a new epoch, reshuffled, when
    the last one is used up). ``info`` holds the pipeline's settings and counters; it is the
    dict the result's ``data`` block is built from.
    """

    def __init__(self, case, size, batch, device, seed):
        # type: (Dict[str, Any], int, int, str, int) -> None
        root = case["data"]
        manifest, samples = imagefolder.open_checked(root)
        workers, requested = loader_workers(case)
        self.device = device
        self.dataset = FolderDataset(samples, size, seed + rank())
        world = world_size()
        # each rank its own shard of every epoch (with several)
        order = SeededSampler(self.dataset, seed, world, rank())
        self.sampler = paddle.io.BatchSampler(sampler=order, batch_size=batch, drop_last=True)
        self._set_epoch = order.set_epoch
        per_process = len(order)
        sampler_desc = ("BatchSampler(drop_last=True) over a permutation seeded by seed + epoch"
                        + (", cut to a multiple of %d ranks, every %d-th from rank %d"
                           % (world, world, rank()) if world > 1 else ""))
        if len(self.sampler) < 1:
            raise UnsupportedError(
                "data: %d images per process give no full batch of %d; make a larger dataset "
                "or use a smaller batch" % (per_process, batch))
        self.batches_per_epoch = len(self.sampler)
        options = {}  # type: Dict[str, Any]
        if workers > 0:
            options.update(prefetch_factor=PREFETCH_FACTOR,
                           worker_init_fn=functools.partial(_seed_worker,
                                                            seed * 1000003 + rank() + 1))
        self.loader = paddle.io.DataLoader(self.dataset,
                                           batch_sampler=EndlessBatches(self.sampler,
                                                                        self._set_epoch),
                                           num_workers=workers, use_shared_memory=workers > 0,
                                           return_list=True, **options)
        _record_thread_errors()
        gpu = device.startswith("gpu")
        self.fetched = 0
        self._batches = None  # type: Any
        self.info = imagefolder.feed_info(
            root, manifest, len(samples), per_process, self.batches_per_epoch,
            self.loader.num_workers, requested)
        self.info.update({
            "workers_kind": "processes" if workers > 0 else "none: decoded in the step's process",
            "use_shared_memory": self.loader.use_shared_memory,
            "pin_memory": bool(gpu and self.loader.pin_memory),
            # one iterator over an endless batch sampler: the workers live for the whole run
            # and prefetch across epoch boundaries (Paddle's persistent_workers reset between
            # epochs polls with 0.5 s sleeps)
            "persistent_workers": workers > 0,
            "stream": "one DataLoader iterator over an endless batch sampler, epoch after epoch",
            "prefetch_factor": PREFETCH_FACTOR if workers > 0 else None,
            "drop_last": True,
            "sampler": sampler_desc,
            "pipeline": "paddle.io.DataLoader (paddle %s)" % paddle.__version__,
            "decoder": imagefolder.decoder(),
            "augmentation": imagefolder.describe(size),
            "layout": LAYOUT,
            "shard": imagefolder.shard_info(root, [samples[i][0] for i in order.indices(0)]),
            "to_device": ("the DataLoader's buffered reader, to %s" % device if gpu
                          else "none (the model runs on the CPU)"),
            "batches_fetched": 0,
            "epochs_started": 0,
        })

    def next(self):
        # type: () -> Tuple[paddle.Tensor, paddle.Tensor]
        if self._batches is None:  # the workers start with the first step, as torch's
            self._batches = iter(self.loader)
            _watch(self._batches)
        images, labels = _take(self._batches)
        self.fetched += 1
        self.info["batches_fetched"] = self.fetched
        self.info["epochs_started"] = (self.fetched - 1) // self.batches_per_epoch + 1
        return images, labels


# exceptions that ended a thread, by thread: Paddle's DataLoader decodes (workers 0) or receives
# the workers' batches (workers > 0) in a thread of the step's process; a failure there kills the
# loader's queue, so the step only sees "SystemError: (Fatal) Blocking queue is killed because
# the data reader raises an exception", while the cause ends the thread
_THREAD_ERRORS = {}  # type: Dict[threading.Thread, BaseException]
# the DataLoader iterator each loader thread belongs to. With no workers, paddle 3.3.1's loader
# thread lets an exception of the dataset end it without killing the queue (only the worker
# path does), and the step would wait for ever: the hook kills the queue itself
_LOADERS = {}  # type: Dict[threading.Thread, Any]
THREAD_JOIN_S = 10.0  # how long the step waits for the loader thread to finish raising


def _stop(iterator):
    # type: (Any) -> None
    """End a DataLoader iterator whose thread died: its queue killed, the step's read fails."""
    try:
        iterator._exit_thread_unexpectedly()
    except Exception:  # noqa: BLE001 - already shut down
        pass


def _record_thread_errors():
    # type: () -> None
    """Keep every thread's uncaught exception in _THREAD_ERRORS (still reported as before), and
    stop the iterator of a loader thread that died."""
    previous = threading.excepthook
    if getattr(previous, "dlperf_loader", False):
        return

    def hook(args):
        # type: (Any) -> None
        if args.thread is not None and args.exc_value is not None:
            _THREAD_ERRORS[args.thread] = args.exc_value  # before the look-up: see _watch
            iterator = _LOADERS.get(args.thread)
            if iterator is not None:
                _stop(iterator)
        previous(args)

    hook.dlperf_loader = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def _watch(iterator):
    # type: (Any) -> None
    """Register a DataLoader iterator's thread for the hook (whose thread may already have died:
    the hook records the error before it looks for the iterator, so one of the two stops it)."""
    thread = getattr(iterator, "_thread", None)
    if isinstance(thread, threading.Thread):
        _LOADERS[thread] = iterator
        if thread in _THREAD_ERRORS:
            _stop(iterator)


def _take(batches):
    # type: (Any) -> List[Any]
    """The next batch, or the loader's own cause of a failure, on one line."""
    try:
        return next(batches)
    except StopIteration:
        raise
    except Exception as error:
        thread = getattr(batches, "_thread", None)
        if isinstance(thread, threading.Thread):
            thread.join(THREAD_JOIN_S)
            cause = _THREAD_ERRORS.pop(thread, None)
            if cause is not None:
                raise _one_line(cause) from error
        raise


def _one_line(error):
    # type: (BaseException) -> BaseException
    """A worker's failure arrives as "DataLoader worker(N) caught X with message:" followed by
    the worker's traceback, whose last line holds the cause: bring that line to the front, where
    the result's one-line error shows it (a DatasetError stays one, naming the file)."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].startswith("DataLoader worker"):
        return error
    where = lines[0].split(" caught ")[0]
    for kind in (imagefolder.DatasetError, UnsupportedError):  # kept: they classify the case
        if isinstance(error, kind):
            return kind("{} (in {})".format(
                lines[-1].split(kind.__name__ + ": ", 1)[-1], where))
    return RuntimeError("{} (in {})".format(lines[-1], where))


class DataOnlyWorkload(GpuPeak, PipelineOnlyWorkload):
    """``--data-only`` in paddle: see :class:`PipelineOnlyWorkload`. With several ranks the loop's
    barrier and warm-up vote go through paddle.distributed, as a training step's would; each
    rank's feed reads its own shard."""

    def step(self):
        # type: () -> Any
        return self.feed.next()[0]

    def sync(self):
        # type: () -> None
        if not self.device.startswith("cpu"):
            paddle.device.synchronize()

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.astype("float32").mean().item())

    def barrier(self):
        # type: () -> None
        barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        return gather_ints(value)


def data_only(case, knobs, batch, device, seed):
    # type: (Dict[str, Any], Dict[str, int], int, str, int) -> DataOnlyWorkload
    feed = Feed(case, knobs["image_size"], batch, device, seed)
    info = runtime_info(device)
    info.update({"model": None, "task": "data-only", "data": feed.info, "layout": LAYOUT,
                 "compile": None})
    return DataOnlyWorkload(feed, feed.device, batch, info)
