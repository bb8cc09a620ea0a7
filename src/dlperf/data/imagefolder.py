"""An ImageNet-style JPEG folder and the standard ImageNet training augmentation, by hand.

Shared by every backend that reads real images (standard library, numpy and Pillow only; valid
Python 3.7): the folder's manifest and file list, and the per-image transform torchvision's
ImageNet recipe applies (``RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3))``,
``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize(mean, std)``), written out because
torchvision is not installable beside every torch build, and so that every framework decodes
and augments the same way. The folder is ``ROOT/train/<class>/<file>.JPEG`` with ``ROOT/<MANIFEST>``
(written by ``dlperf data make-images``).
"""

import hashlib
import json
import math
import os
import random
from typing import Any, Dict, Iterable, List, Tuple

import numpy as np

MANIFEST = "dlperf-dataset.json"
FORMAT = "dlperf-images"
SPLIT = "train"
EXTENSIONS = (".jpeg", ".jpg")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
AUGMENTATION = ("RandomResizedCrop({size}, scale=(0.08, 1.0), ratio=(3/4, 4/3), bilinear), "
                "horizontal flip p=0.5, /255, normalise with ImageNet mean {mean} and std {std}")


Range = Tuple[float, float]


class DatasetError(ValueError):
    """The folder is not a dataset dlperf can read; the message says why in one line."""


def read_manifest(root):
    # type: (str) -> Dict[str, Any]
    """The manifest of the dataset at ``root``; DatasetError when it is missing or malformed."""
    path = os.path.join(root, MANIFEST)
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise DatasetError("{} has no {} (make a dataset with `dlperf data make-images`)"
                           .format(root, MANIFEST))
    except (OSError, ValueError) as error:
        raise DatasetError("{}: unreadable manifest: {}".format(path, error))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DatasetError("{}: not a {} manifest".format(path, FORMAT))
    for field in ("count", "classes", "width", "height"):
        value = manifest.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DatasetError("{}: field {} must be an integer >= 1, got {!r}"
                               .format(path, field, value))
    return manifest


def list_samples(root):
    # type: (str) -> Tuple[List[str], List[Tuple[str, int]]]
    """Class names (sorted sub-folders of ``root/train``) and every (path, label), sorted."""
    split = os.path.join(root, SPLIT)
    try:
        classes = sorted(entry.name for entry in os.scandir(split) if entry.is_dir())
    except OSError as error:
        raise DatasetError("{}: {}".format(split, error.strerror or error))
    samples = []  # type: List[Tuple[str, int]]
    for label, name in enumerate(classes):
        folder = os.path.join(split, name)
        files = sorted(entry.name for entry in os.scandir(folder)
                       if entry.is_file() and entry.name.lower().endswith(EXTENSIONS))
        samples.extend((os.path.join(folder, f), label) for f in files)
    return classes, samples


def check_against_manifest(root, manifest):
    # type: (str, Dict[str, Any]) -> Tuple[List[str], List[Tuple[str, int]]]
    """The folder's classes and samples, refusing a folder that no longer matches its manifest
    (files added or removed since it was made would silently change the measurement)."""
    classes, samples = list_samples(root)
    if len(classes) != manifest["classes"] or len(samples) != manifest["count"]:
        raise DatasetError("{}: {} images in {} classes on disk, the manifest says {} in {}"
                           .format(root, len(samples), len(classes), manifest["count"],
                                   manifest["classes"]))
    return classes, samples


def open_checked(root):
    # type: (str) -> Tuple[Dict[str, Any], List[Tuple[str, int]]]
    """The manifest and every (path, label) of the dataset at ``root``, the files on disk checked
    against the manifest: what a pipeline reads before its first batch."""
    manifest = read_manifest(root)
    _, samples = check_against_manifest(root, manifest)
    return manifest, samples


def crop_box(width, height, rng, scale=SCALE, ratio=RATIO):
    # type: (int, int, random.Random, Range, Range) -> Tuple[int, int, int, int]
    """(left, top, crop width, crop height) of a RandomResizedCrop: torchvision's rule.

    Up to 10 tries of an area fraction uniform in ``scale`` and an aspect ratio log-uniform in
    ``ratio`` that fits the image; otherwise the whole image, centre-cropped to the nearest
    allowed aspect ratio.
    """
    area = float(width * height)
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return left, top, w, h
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def _pil():
    # type: () -> Any
    from PIL import Image
    return Image


def train_sample(path, size, rng):
    # type: (str, int, random.Random) -> np.ndarray
    """Decode one JPEG with Pillow and apply the ImageNet training augmentation: a float32
    (3, size, size) array, normalised with the ImageNet mean and std."""
    image_module = _pil()
    with image_module.open(path) as image:
        image = image.convert("RGB")
        left, top, w, h = crop_box(image.width, image.height, rng)
        # crop and resize in one pass (Pillow's box argument), as torchvision's resized_crop
        image = image.resize((size, size), image_module.BILINEAR,
                             box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        flip = getattr(image_module, "Transpose", image_module).FLIP_LEFT_RIGHT
        image = image.transpose(flip)
    pixels = np.asarray(image, dtype=np.float32) * np.float32(1.0 / 255.0)
    pixels = (pixels - _MEAN) / _STD
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def read_sample(path, size, rng):
    # type: (str, int, random.Random) -> np.ndarray
    """:func:`train_sample`, a file it cannot decode (truncated, not a JPEG) raised as a
    DatasetError that names the file. A missing Pillow still raises ImportError, for the
    backend to say which environment lacks it."""
    try:
        return train_sample(path, size, rng)
    except (OSError, ValueError) as error:
        text = str(error)
        raise DatasetError(text if path in text else "{}: {}".format(path, text))


class AugmentedSamples(object):
    """A folder's (path, label) pairs as a map-style dataset: each read decodes the image and
    augments it afresh (:func:`read_sample`), drawing from ``rng``, which each loader worker
    reseeds with its own stream. A framework's dataset class adds how a sample is returned."""

    def __init__(self, samples, size, seed):
        # type: (List[Tuple[str, int]], int, int) -> None
        self.samples = samples
        self.size = size
        self.rng = random.Random(seed)

    def __len__(self):
        # type: () -> int
        return len(self.samples)

    def read(self, index):
        # type: (int) -> Tuple[np.ndarray, int]
        """(float32 (3, size, size) pixels, class index) of sample ``index``."""
        path, label = self.samples[index]
        return read_sample(path, self.size, self.rng), label


_MEAN = np.asarray(IMAGENET_MEAN, dtype=np.float32)
_STD = np.asarray(IMAGENET_STD, dtype=np.float32)


def describe(size):
    # type: (int) -> str
    return AUGMENTATION.format(size=size, mean=IMAGENET_MEAN, std=IMAGENET_STD)


def pillow_version():
    # type: () -> str
    import PIL
    return str(getattr(PIL, "__version__", "unknown"))


def decoder():
    # type: () -> str
    """The decoder a result records: Pillow and its version, or that it is not installed."""
    try:
        return "Pillow " + pillow_version()
    except ImportError:
        return "Pillow (not installed)"


MANIFEST_FIELDS = ("count", "classes", "width", "height", "seed", "quality", "total_bytes",
                   "digest")


def feed_info(root, manifest, images, per_process, batches_per_epoch, workers, requested):
    # type: (str, Dict[str, Any], int, int, int, Any, Any) -> Dict[str, Any]
    """The keys every framework's pipeline puts first in the result's ``data`` block: which
    dataset, how it is split per process and batch, and how many loader workers were asked for
    (``requested``: None = the pipeline's default) and run (``workers``)."""
    return {
        "path": root,
        "manifest": {k: manifest.get(k) for k in MANIFEST_FIELDS},
        "images": images,
        "images_per_process": per_process,
        "batches_per_epoch": batches_per_epoch,
        "loader_workers": workers,
        "loader_workers_default": requested is None,
    }


def shard_info(root, paths, epoch=0):
    # type: (str, Iterable[str], int) -> Dict[str, Any]
    """The files one process is given in an ``epoch`` (before the last partial batch is
    dropped), as a count and a fingerprint that adds up across processes: the sum modulo 2**64
    of each file's SHA-1 (its first 8 bytes, big-endian) of its path under ``ROOT/train``, "/"
    separated. The ranks' sum equals the folder's own exactly when their shards are disjoint and
    cover it, which a result can show without listing a million paths (about 1 s per million
    files, at build time)."""
    prefix = len(os.path.join(root, SPLIT)) + 1
    total, count = 0, 0
    for path in paths:
        name = path[prefix:].replace(os.sep, "/")
        total += int(hashlib.sha1(name.encode("utf-8")).hexdigest()[:16], 16)
        count += 1
    return {"epoch": epoch, "files": count, "fingerprint": "%016x" % (total % 2 ** 64)}
