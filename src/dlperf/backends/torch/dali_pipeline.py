"""``--loader dali``: the dataset folder read, decoded, augmented and batched by NVIDIA DALI.

The same contract as the DataLoader :class:`~dlperf.backends.torch.input_pipeline.Feed` (an
endless ``next()`` of (images, labels) on the device, epochs counted, ``info`` for the result's
``data`` block), built from DALI's own operators: ``fn.readers.file`` over the folder's files and
labels (one shard per rank, ``random_shuffle``), ``fn.decoders.image`` ("mixed": nvJPEG on the
GPU; "cpu" where the model runs on the CPU, DALI's CPU-only mode with ``device_id=None``),
``fn.random_resized_crop`` to the model's image size with torchvision's area and aspect ranges,
and ``fn.crop_mirror_normalize`` (a coin-flip mirror, ImageNet mean and std, NCHW float32), fed
through ``nvidia.dali.plugin.pytorch.DALIGenericIterator`` with the last partial batch of each
epoch dropped. ``loader_workers`` is DALI's ``num_threads``. ``info["shard"]`` records the rank's
epoch-0 shard (DALI's contiguous slice of the seeded file order) as a count and an additive
fingerprint (:func:`dlperf.data.imagefolder.shard_info`).

Valid Python 3.7; imports DALI only when a case asks for it.
"""

import math
import random
from typing import Any, Dict, List, Tuple

import torch

from dlperf.worker.cpus import loader_workers
from dlperf.data import imagefolder
from dlperf.backends.torch import dali_site
from dlperf.backends.torch.workload import rank, world_size
from dlperf.worker.workload import UnsupportedError

READER = "Reader"  # the reader's name, which the iterator asks for the shard's size
PREFETCH_QUEUE_DEPTH = 2  # DALI's default: batches prepared ahead
INSTALL_HINT = ("`dlperf envs install dali` (CPU) or `dlperf envs install torch --variant cuda` "
                "(GPU) installs it")


def import_dali():
    # type: () -> Any
    """The ``nvidia.dali`` module: from dlperf's environment (torch's CUDA build), else from the
    CPU overlay (:mod:`.dali_site`); UnsupportedError saying how to install it otherwise."""
    try:
        import nvidia.dali as dali
        return dali
    except ImportError as first:
        if not dali_site.reach():
            raise UnsupportedError("loader: NVIDIA DALI is not installed beside this torch "
                                   "(%s); %s" % (first, INSTALL_HINT))
    try:
        import nvidia.dali as dali
        return dali
    except ImportError as error:
        raise UnsupportedError("loader: NVIDIA DALI in %s does not import: %s; %s"
                               % (dali_site.site_dir(), error, INSTALL_HINT))


def shard_bounds(count, shard, shards):
    # type: (int, int, int) -> Tuple[int, int]
    """DALI's shard ``shard`` of ``shards`` over ``count`` files as [low, high):
    [floor(N*i/S), floor(N*(i+1)/S))."""
    return (int(math.floor(count * shard / float(shards))),
            int(math.floor(count * (shard + 1) / float(shards))))


def shard_size(count, shard, shards):
    # type: (int, int, int) -> int
    """Files in DALI's shard ``shard`` of ``shards`` (:func:`shard_bounds`)."""
    low, high = shard_bounds(count, shard, shards)
    return high - low


def build_pipeline(dali, files, labels, size, batch, threads, device_id, seed):
    # type: (Any, List[str], List[int], int, int, int, Any, int) -> Any
    """DALI's training pipeline for one rank (``device_id`` None: CPU operators only)."""
    from nvidia.dali import fn, types

    on_gpu = device_id is not None
    mean = [255.0 * m for m in imagefolder.IMAGENET_MEAN]
    std = [255.0 * s for s in imagefolder.IMAGENET_STD]

    @dali.pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed,
                       prefetch_queue_depth=PREFETCH_QUEUE_DEPTH)
    def training():
        # type: () -> Any
        jpegs, classes = fn.readers.file(files=files, labels=labels, shard_id=rank(),
                                         num_shards=world_size(), random_shuffle=True,
                                         name=READER)
        images = fn.decoders.image(jpegs, device="mixed" if on_gpu else "cpu",
                                   output_type=types.RGB)
        images = fn.random_resized_crop(images, size=[size, size],
                                        random_area=list(imagefolder.SCALE),
                                        random_aspect_ratio=list(imagefolder.RATIO),
                                        num_attempts=10, interp_type=types.INTERP_LINEAR)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=mean, std=std,
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, (classes.gpu() if on_gpu else classes)

    return training()


class DaliFeed(object):
    """An endless stream of (images, labels) batches on the device, from a DALI pipeline.

    ``next()`` is what a step calls: the iterator's next batch; at the end of an epoch the
    iterator is reset (the reader goes on to its next pass) and the epoch count rises.
    """

    def __init__(self, case, size, batch, device, seed, memory_format="contiguous"):
        # type: (Dict[str, Any], int, int, torch.device, int, str) -> None
        dali = import_dali()
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        root = case["data"]
        manifest, samples = imagefolder.open_checked(root)
        per_process = shard_size(len(samples), rank(), world_size())
        if per_process < batch:
            raise UnsupportedError(
                "data: %d images per process give no full batch of %d; make a larger dataset "
                "or use a smaller batch" % (per_process, batch))
        threads, requested = loader_workers(case)
        # one seeded order shared by every rank (so the shards stay disjoint), so that even a
        # first pass over a class-sorted folder is mixed beyond the reader's shuffle buffer
        order = list(samples)
        random.Random(seed).shuffle(order)
        low, high = shard_bounds(len(order), rank(), world_size())
        on_gpu = device.type == "cuda"
        device_id = (device.index if device.index is not None
                     else torch.cuda.current_device()) if on_gpu else None
        self.device = device
        self.channels_last = memory_format == "channels_last"
        self.pipeline = build_pipeline(dali, [path for path, _ in order],
                                       [label for _, label in order], size, batch, threads,
                                       device_id, seed * 1000003 + rank() + 1)
        try:  # the iterator runs the pipeline for its first batch already
            self.iterator = DALIGenericIterator([self.pipeline], ["images", "labels"],
                                                reader_name=READER, auto_reset=False,
                                                last_batch_policy=LastBatchPolicy.DROP)
        except RuntimeError as error:
            raise one_line(error, root)
        self.epoch = 0
        self.fetched = 0
        self.root = root
        self.info = imagefolder.feed_info(root, manifest, len(samples), per_process,
                                          per_process // batch, threads, requested)
        self.info.update({
            "loader": "dali",
            "pipeline": "NVIDIA DALI %s: DALIGenericIterator" % getattr(dali, "__version__", "?"),
            "dali_mode": "GPU (device_id %d)" % device_id if on_gpu else
                         "CPU-only (device_id None)",
            "num_threads": threads,
            "prefetch_queue_depth": PREFETCH_QUEUE_DEPTH,
            "drop_last": True,
            "last_batch_policy": "DROP",
            "shuffle": "files in a seeded order, then fn.readers.file random_shuffle",
            "sharding": "shard_id %d of num_shards %d" % (rank(), world_size()),
            # the reader starts on its own shard (stick_to_shard off: the next one each epoch)
            "shard": imagefolder.shard_info(root, [path for path, _ in order[low:high]]),
            "decoder": "fn.decoders.image, device %s" % ("mixed (nvJPEG)" if on_gpu else "cpu"),
            "augmentation": imagefolder.describe(size) + "; DALI fn.random_resized_crop and "
                            "fn.crop_mirror_normalize",
            "to_device": ("decoded and augmented on the GPU" if on_gpu
                          else "none (the model runs on the CPU)"),
            "batches_fetched": 0,
            "epochs_started": 0,
        })

    def next(self):
        # type: () -> Tuple[torch.Tensor, torch.Tensor]
        try:
            batch = _take(self.iterator, self.root)
        except StopIteration:
            self.iterator.reset()
            self.epoch += 1
            batch = _take(self.iterator, self.root)
        self.info["epochs_started"] = self.epoch + 1
        self.fetched += 1
        self.info["batches_fetched"] = self.fetched
        images, labels = batch[0]["images"], batch[0]["labels"]
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.reshape(-1).long()
        return images.to(self.device), labels.to(self.device)


def _take(iterator, root):
    # type: (Any, str) -> Any
    try:
        return next(iterator)
    except StopIteration:
        raise
    except RuntimeError as error:
        raise one_line(error, root)


# DALI's framing of an operator's failure: the lines that say nothing about the cause
NOISE = ("Critical error in pipeline:", "Current pipeline object is no longer valid.",
         "which was used in the pipeline definition", "encountered:", "File ")


def one_line(error, root):
    # type: (RuntimeError, str) -> RuntimeError
    """DALI reports a failed sample in many lines around a Python traceback of the pipeline's
    definition (and without the file's name): keep the operator and the cause, on one line, where
    the result's error shows them."""
    lines = [line.strip() for line in str(error).splitlines()]
    code = {i + 1 for i, line in enumerate(lines) if line.startswith("File ")}  # source lines
    kept = [line.rstrip(",") for i, line in enumerate(lines)
            if line and i not in code and not line.startswith(NOISE)]
    if not kept:
        return error
    return RuntimeError("DALI: %s (reading %s)" % ("; ".join(kept), root))
