"""TensorFlow 2's real input pipeline: a dataset folder read, decoded, augmented and batched by
``tf.data``.

``data`` a dataset directory (``dlperf data make-images``) replaces the synthetic batch held on
the device: every step takes the next batch of a ``tf.data`` pipeline built from the folder's
file list (:mod:`dlperf.data.imagefolder`)::

    (path, label) -> [shard per worker] -> shuffle (seeded, reshuffled every epoch)
      -> take (a whole number of batches per epoch) -> repeat -> enumerate
      -> map(read_file, decode_jpeg, augmentation; num_parallel_calls) -> batch(drop_remainder)
      -> prefetch(AUTOTUNE)

The augmentation is the ImageNet training recipe of the other backends written in TF ops: a
random resized crop (``stateless_sample_distorted_bounding_box`` with area 0.08-1 and aspect
ratio 3/4-4/3, 10 tries, else the whole image), bilinear resize to the model's size, a random
horizontal flip, /255 and the ImageNet mean/std. Its random numbers are stateless, seeded by
(seed, rank, the element's place in the stream), so a parallel map is still repeatable. NHWC,
TensorFlow's own layout. Taking a whole number of batches per epoch before ``repeat`` drops the
last partial batch of every epoch, as the torch DataLoader's ``drop_last`` does, so batch k of
the stream belongs to epoch k // batches_per_epoch exactly (the harness relies on it).

A file that is not a whole JPEG (no start-of-image marker, or no end-of-image marker near its
end: a truncated file) fails the step with its path in the message, through a
``tf.debugging.Assert`` ahead of the decoder.

With several workers (MultiWorkerMirroredStrategy) each worker reads its own shard of the files
(``Dataset.shard(workers, worker)`` before the shuffle), given to the strategy by
``distribute_datasets_from_function``, which hands each local replica its own batch; tf.data's
auto-sharding is off, the shard being explicit. Every worker takes the same whole number of
batches per epoch, from files // workers: the strided shards of a folder that does not divide
evenly differ by one file, and a worker with the longer one would otherwise run longer epochs
than its peers. ``info["shard"]`` records the worker's shard (a count and an additive
fingerprint, :func:`dlperf.data.imagefolder.shard_info`), so a job shows that its workers
read disjoint shards covering the folder.

The strategy's iterator is never freed (:func:`_kept_to_the_end`): destroying a distributed
iterator (a ``MultiDeviceIterator``) blocked for 0 to 60 s while its tf.data thread waited out a
timer (TensorFlow 2.21, two CPU workers), and that came after every rank's result, at the
interpreter's exit, once per repeat. The process ends soon after; its exit frees the memory.
"""

import ctypes
from typing import Any, Dict, Optional

import tensorflow as tf

from dlperf.backends.common import CollectiveRanks
from dlperf.backends.tensorflow import cluster
from dlperf.data import imagefolder
from dlperf.worker.workload import PipelineOnlyWorkload, UnsupportedError

EOI_WINDOW = 16  # bytes at the end of a file searched for the JPEG end-of-image marker
MAX_ATTEMPTS = 10  # torchvision's RandomResizedCrop tries, then the whole image
AUGMENTATION = ("RandomResizedCrop({size}) as tf.image.stateless_sample_distorted_bounding_box"
                "(area_range=(0.08, 1.0), aspect_ratio_range=(3/4, 4/3), 10 attempts, else the "
                "whole image), bilinear tf.image.resize, horizontal flip p=0.5, /255, normalise "
                "with ImageNet mean {mean} and std {std}")


def _augment(seed, size):
    # type: (int, int) -> Any
    """The map function: (index, (path, label)) -> (float32 (size, size, 3) image, label)."""
    mean = tf.constant(imagefolder.IMAGENET_MEAN, tf.float32)
    std = tf.constant(imagefolder.IMAGENET_STD, tf.float32)
    no_boxes = tf.zeros([1, 0, 4], tf.float32)

    def load(index, sample):
        path, label = sample
        data = tf.io.read_file(path)
        length = tf.strings.length(data)
        tail = tf.strings.substr(data, tf.maximum(length - EOI_WINDOW, 0),
                                 tf.minimum(length, EOI_WINDOW))
        whole = tf.logical_and(tf.io.is_jpeg(data), _has_eoi(tail))
        check = tf.debugging.Assert(whole, [tf.strings.join([
            "data: not a whole JPEG (truncated or foreign file): ", path])], summarize=1)
        with tf.control_dependencies([check]):
            image = tf.io.decode_jpeg(data, channels=3)
        element = tf.stack([tf.cast(seed, tf.int64), index])
        crop_seed, flip_seed = tf.unstack(
            tf.random.experimental.stateless_split(element, num=2))
        begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=no_boxes, seed=crop_seed, min_object_covered=0.0,
            aspect_ratio_range=imagefolder.RATIO, area_range=imagefolder.SCALE,
            max_attempts=MAX_ATTEMPTS, use_image_if_no_bounding_boxes=True)
        image = tf.slice(image, begin, extent)
        image = tf.image.resize(image, [size, size], method="bilinear")
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        image = (image / 255.0 - mean) / std
        return tf.ensure_shape(image, [size, size, 3]), label

    return load


def _kept_to_the_end(iterator):
    # type: (Any) -> Any
    """``iterator`` with one reference more that nothing drops, so that neither a garbage
    collection nor the interpreter's exit runs its destructor (see the module's doc)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(iterator))
    return iterator


def _has_eoi(tail):
    # type: (Any) -> Any
    """Whether the bytes ``tail`` contain the end-of-image marker FF D9."""
    pairs = [tf.equal(tf.strings.substr(tail, i, 2), b"\xff\xd9") for i in range(EOI_WINDOW - 1)]
    return tf.reduce_any(tf.stack(pairs))


class Feed(object):
    """An endless stream of {"images", "labels"} batches.

    ``next()`` is what a step calls: the next batch of this process (with a strategy, one per
    local replica, as a distributed value). ``info`` holds the pipeline's settings and counters;
    it is the dict the result's ``data`` block is built from.
    """

    def __init__(self, case, size, batch, seed, strategy=None, local=1):
        # type: (Dict[str, Any], int, int, int, Optional[Any], int) -> None
        root = case["data"]
        manifest = imagefolder.read_manifest(root)
        classes, samples = imagefolder.check_against_manifest(root, manifest)
        rank, world = cluster.job()
        requested = case.get("loader_workers")
        # 0 (torch's "decode in the main process") is one decoding call at a time here
        parallel = tf.data.AUTOTUNE if requested is None else max(1, int(requested))
        self.strategy = strategy
        # every worker the same epoch: the shorter strided shard sets it (DistributedSampler's
        # drop_last); a worker with one file more leaves a different one out every epoch
        self.per_process = len(samples) // world
        self.process_batch = batch * local
        self.batches_per_epoch = self.per_process // self.process_batch
        if self.batches_per_epoch < 1:
            raise UnsupportedError(
                "data: %d images per process give no full batch of %d; make a larger dataset "
                "or use a smaller batch" % (self.per_process, self.process_batch))
        paths = [path for path, _ in samples]
        labels = [label for _, label in samples]

        def pipeline(workers, worker):
            # type: (int, int) -> Any
            load = _augment(seed * 1000003 + worker, size)
            files = tf.data.Dataset.from_tensor_slices(
                (tf.constant(paths, tf.string), tf.constant(labels, tf.int32)))
            if workers > 1:
                files = files.shard(workers, worker)
            # the files Dataset.shard(workers, worker) keeps: every workers-th from worker on
            self.shard = imagefolder.shard_info(root, paths[worker::workers])
            stream = (files.shuffle(self.shard["files"], seed=seed,
                                    reshuffle_each_iteration=True)
                      .take(self.batches_per_epoch * self.process_batch)
                      .repeat()
                      .enumerate()
                      .map(load, num_parallel_calls=parallel)
                      .map(lambda image, label: {"images": image, "labels": label})
                      .batch(batch, drop_remainder=True)
                      .prefetch(tf.data.AUTOTUNE))
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF)
            options.deterministic = True
            return stream.with_options(options)

        if strategy is None:
            self.dataset = pipeline(world, rank)
            self._iterator = iter(self.dataset)
        else:
            def from_context(context):
                return pipeline(context.num_input_pipelines, context.input_pipeline_id)
            self.dataset = strategy.distribute_datasets_from_function(from_context)
            self._iterator = _kept_to_the_end(iter(self.dataset))
        self.fetched = 0
        self.info = imagefolder.feed_info(
            root, manifest, len(samples), self.per_process, self.batches_per_epoch,
            None if requested is None else int(requested), requested)
        self.info.update({
            "num_parallel_calls": "tf.data.AUTOTUNE" if requested is None else parallel,
            "prefetch": "tf.data.AUTOTUNE",
            "drop_last": True,
            "shuffle": "Dataset.shuffle(buffer %d, seed %d), reshuffled every epoch"
                       % (self.shard["files"], seed),
            "shard": self.shard,
            "sharding": ("Dataset.shard(%d, %d) before the shuffle" % (world, rank)
                         if world > 1 else None),
            "pipeline": "tf.data",
            "decoder": "tf.io.decode_jpeg (TensorFlow %s)" % tf.__version__,
            "augmentation": AUGMENTATION.format(size=size, mean=imagefolder.IMAGENET_MEAN,
                                                std=imagefolder.IMAGENET_STD),
            "layout": "NHWC",
            "batches_fetched": 0,
            "epochs_started": 0,
        })

    def next(self):
        # type: () -> Any
        try:
            batch = next(self._iterator)
        except tf.errors.InvalidArgumentError as error:
            raise imagefolder.DatasetError(_pipeline_message(error))
        self.fetched += 1
        self.info["batches_fetched"] = self.fetched
        self.info["epochs_started"] = (self.fetched - 1) // self.batches_per_epoch + 1
        return batch


def _pipeline_message(error):
    # type: (Any) -> str
    """The pipeline's own words, on one line: a failed Assert's data (the file) first."""
    text = str(getattr(error, "message", error))
    marker = "data: not a whole JPEG"
    if marker in text:
        start = text.index(marker)
        end = text.find("]", start)
        return text[start:end if end > 0 else None].strip()
    first = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "data: the tf.data pipeline failed: " + (first[0] if first else type(error).__name__)


class DataOnlyWorkload(CollectiveRanks, PipelineOnlyWorkload):
    """``--data-only`` in tensorflow: see :class:`PipelineOnlyWorkload`. With several workers the
    loop's barrier and warm-up vote go through the strategy's collectives (``collectives``),
    as a training step's would; each worker's feed reads its own shard."""

    def __init__(self, feed, device, batch, info, collectives=None):
        # type: (Feed, str, int, Dict[str, Any], Any) -> None
        super(DataOnlyWorkload, self).__init__(feed, device, batch, info)
        self._collectives = collectives

    def step(self):
        # type: () -> Any
        batch = self.feed.next()
        with tf.device(self.device):  # on a GPU: the host-to-device copy a step would make
            self._last = tf.identity(batch["images"])
        return self._last

    def sync(self):
        # type: () -> None
        if self._last is not None:
            self._last.numpy()

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(tf.reduce_mean(handle).numpy())

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if not self.device.startswith("/GPU"):
            return None
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])

    def reset_device_peak(self):
        # type: () -> bool
        if not self.device.startswith("/GPU"):
            return False
        tf.config.experimental.reset_memory_stats("GPU:0")
        return True


def data_only(case, knobs, batch, device, seed, info, collectives=None):
    # type: (Dict[str, Any], Dict[str, int], int, str, int, Dict[str, Any], Any) -> DataOnlyWorkload
    """The pipeline alone; ``collectives`` (dlperf.backends.tensorflow.distribute) with several
    workers, one replica each."""
    feed = Feed(case, knobs["image_size"], batch, seed)
    info.update({"model": None, "task": "data-only", "data": feed.info, "layout": "NHWC"})
    return DataOnlyWorkload(feed, device, batch, info, collectives)
