"""PyTorch's real input pipeline: a dataset folder decoded, augmented and batched by a DataLoader.

``data`` a dataset directory (``dlperf data make-images``) replaces the synthetic batch made once
on the device: every step takes the next batch from a ``torch.utils.data.DataLoader`` (Pillow
decode and the ImageNet training augmentation of :mod:`dlperf.data.imagefolder` in
``loader_workers`` processes, pinned memory on CUDA, persistent workers, ``prefetch_factor``
batches in flight per worker, the last partial batch dropped) and copies it to the device
(``non_blocking`` from pinned memory on CUDA). The stream never ends: a finished epoch starts the
next with a new shuffle, and the epoch count is recorded so the harness can tell the first pass
over the files from later ones. ``data_only`` times that stream alone, through the same loop,
on one process or on each of several (each its own shard, the window barriered and the warm-up
voted through the process group, gloo on the CPU, as training's). ``info["shard"]`` records the
process's share of epoch 0 (the DistributedSampler's indices with several) as a count and an
additive fingerprint (:func:`dlperf.data.imagefolder.shard_info`).
``loader`` "dali" swaps the DataLoader for NVIDIA DALI (:mod:`.dali_pipeline`) behind the same
``next()``; :func:`make_feed` picks.

torchvision is not importable beside every torch build, so nothing here uses it.
"""

import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torch.utils.data.distributed import DistributedSampler

from dlperf.worker.cpus import loader_workers
from dlperf.data import imagefolder
from dlperf.backends.torch.workload import (CudaPeak, barrier, gather_ints,
                                            join_process_group, rank, runtime_info,
                                            world_size)
from dlperf.worker.workload import PipelineOnlyWorkload, UnsupportedError

PREFETCH_FACTOR = 2  # DataLoader's default: batches each worker keeps ready


class FolderDataset(imagefolder.AugmentedSamples, Dataset):
    """(image, label) pairs of the folder: a float32 (3, size, size) tensor, augmented afresh
    on every read, and the class index."""

    def __getitem__(self, index):
        # type: (int) -> Tuple[torch.Tensor, int]
        pixels, label = self.read(index)
        return torch.from_numpy(pixels), label


def _seed_worker(worker_id):
    # type: (int) -> None
    """Each loader process augments with its own stream, derived from the loader's seeded
    generator (``info.seed`` = base seed + worker id), so a run is repeatable."""
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = random.Random(info.seed)


class Feed(object):
    """An endless stream of (images, labels) batches on the device.

    ``next()`` is what a step calls: the DataLoader's next batch (a new epoch, reshuffled, when
    the last one is used up), copied to the device. ``info`` holds the pipeline's settings and
    counters; it is the dict the result's ``data`` block is built from.
    """

    def __init__(self, case, size, batch, device, seed, memory_format="contiguous"):
        # type: (Dict[str, Any], int, int, torch.device, int, str) -> None
        root = case["data"]
        manifest, samples = imagefolder.open_checked(root)
        workers, requested = loader_workers(case)
        self.device = device
        self.channels_last = memory_format == "channels_last"
        self.non_blocking = device.type == "cuda"
        self.dataset = FolderDataset(samples, size, seed + rank())
        order = torch.Generator()
        order.manual_seed(seed)
        if world_size() > 1:  # each rank its own shard of every epoch
            self.sampler = DistributedSampler(self.dataset, num_replicas=world_size(),
                                              rank=rank(), shuffle=True, seed=seed,
                                              drop_last=True)  # type: Any
        else:
            self.sampler = RandomSampler(self.dataset, generator=order)
        if isinstance(self.sampler, DistributedSampler):  # epoch 0's indices (its epoch is 0)
            first = [samples[i][0] for i in self.sampler]  # type: List[str]
        else:  # every file, in an order that does not change the fingerprint
            first = [path for path, _ in samples]
        if len(self.sampler) < batch:
            raise UnsupportedError(
                "data: %d images per process give no full batch of %d; make a larger dataset "
                "or use a smaller batch" % (len(self.sampler), batch))
        streams = torch.Generator()
        streams.manual_seed(seed * 1000003 + rank() + 1)
        options = {}  # type: Dict[str, Any]
        if workers > 0:
            options.update(persistent_workers=True, prefetch_factor=PREFETCH_FACTOR,
                           worker_init_fn=_seed_worker)
        self.loader = DataLoader(self.dataset, batch_size=batch, sampler=self.sampler,
                                 num_workers=workers, pin_memory=device.type == "cuda",
                                 drop_last=True, generator=streams, **options)
        self.epoch = 0
        self.fetched = 0
        self._batches = None  # type: Any
        self.info = imagefolder.feed_info(
            root, manifest, len(samples), len(self.sampler), len(self.loader),
            workers, requested)
        self.info.update({
            "pin_memory": device.type == "cuda",
            "persistent_workers": workers > 0,
            "prefetch_factor": PREFETCH_FACTOR if workers > 0 else None,
            "drop_last": True,
            "sampler": type(self.sampler).__name__,
            "shard": imagefolder.shard_info(root, first),
            "loader": "native",
            "pipeline": "torch.utils.data.DataLoader",
            "decoder": "Pillow " + imagefolder.pillow_version(),
            "augmentation": imagefolder.describe(size),
            "to_device": ("non_blocking copy from pinned memory" if self.non_blocking
                          else "none (the model runs on the CPU)"),
            "batches_fetched": 0,
            "epochs_started": 0,
        })

    def next(self):
        # type: () -> Tuple[torch.Tensor, torch.Tensor]
        try:
            if self._batches is None:
                raise StopIteration
            images, labels = _take(self._batches)
        except StopIteration:
            if self._batches is not None:
                self.epoch += 1
            if isinstance(self.sampler, DistributedSampler):
                self.sampler.set_epoch(self.epoch)
            self._batches = iter(self.loader)
            images, labels = _take(self._batches)
            self.info["epochs_started"] = self.epoch + 1
        self.fetched += 1
        self.info["batches_fetched"] = self.fetched
        images = images.to(self.device, non_blocking=self.non_blocking)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels.to(self.device, non_blocking=self.non_blocking)


def make_feed(case, size, batch, device, seed, memory_format="contiguous"):
    # type: (Dict[str, Any], int, int, torch.device, int, str) -> Any
    """The case's pipeline: the DataLoader :class:`Feed`, or DALI's with ``loader`` "dali"."""
    if case.get("loader", "native") == "dali":
        from dlperf.backends.torch import dali_pipeline
        return dali_pipeline.DaliFeed(case, size, batch, device, seed, memory_format)
    return Feed(case, size, batch, device, seed, memory_format)


def _take(batches):
    # type: (Any) -> Any
    """The next batch. A loader process's failure arrives as "Caught X in DataLoader worker
    process N." with the cause on the traceback's last line: bring that line to the front, where
    the result's one-line error shows it."""
    try:
        return next(batches)
    except StopIteration:
        raise
    except Exception as error:
        lines = str(error).strip().splitlines()
        if len(lines) > 1 and lines[0].startswith("Caught "):
            raise RuntimeError("{} {}".format(lines[-1], lines[0]))
        raise


def classifier_loss(feed):
    # type: (Any) -> Callable[[nn.Module], torch.Tensor]
    """An image classifier's training loss on the next batch of the feed (what the synthetic
    builders compute on their stored batch)."""

    def train_loss(model):
        # type: (nn.Module) -> torch.Tensor
        images, labels = feed.next()
        return F.cross_entropy(model(images), labels)

    return train_loss


class DataOnlyWorkload(CudaPeak, PipelineOnlyWorkload):
    """``--data-only`` in torch: see :class:`PipelineOnlyWorkload`. With several processes the
    loop's barrier and warm-up vote go through torch.distributed (the process group
    :func:`data_only` joined, as a training step's would); each process's feed reads its own
    shard."""

    def step(self):
        # type: () -> Tuple[torch.Tensor, torch.Tensor]
        return self.feed.next()

    def sync(self):
        # type: () -> None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle[0].float().mean().item())

    def barrier(self):
        # type: () -> None
        barrier(self.device)

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        return gather_ints(value, self.device)


def data_only(case, knobs, batch, device, seed):
    # type: (Dict[str, Any], Dict[str, int], int, torch.device, int) -> DataOnlyWorkload
    """The pipeline alone; with several processes (torchrun) this one joins the process group
    first (gloo on the CPU, NCCL on a GPU), which the worker leaves after gathering the results."""
    join_process_group(device)
    feed = make_feed(case, knobs["image_size"], batch, device, seed, "channels_last")
    info = runtime_info(device)
    info.update({"model": None, "task": "data-only", "data": feed.info,
                 "memory_format": "channels_last"})
    return DataOnlyWorkload(feed, feed.device, batch, info)
