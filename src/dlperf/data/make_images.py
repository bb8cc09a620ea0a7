"""``dlperf data make-images``: a seeded JPEG folder shaped like ImageNet's training set.

Real input pipelines are measured on files, not on a tensor made once on the device, so dlperf
makes its own: ``OUT/train/<class>/<class>_<n>.JPEG`` plus a manifest (:data:`MANIFEST`) with the
counts, size, seed, JPEG quality, total bytes and a digest of every file. The pictures are smooth
random fields at several scales plus grain, so they compress (and decode) like photographs rather
than like flat colour or white noise; image ``i`` depends only on ``(seed, i)``, so the same
command makes the same bytes whatever ``--jobs`` is. The manifest is written last: a folder cut
short has none and is refused by ``dlperf run --data``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from dlperf.data.imagefolder import FORMAT, MANIFEST, SPLIT

VERSION = 1
GENERATOR = ("smooth random fields at 1/100, 1/25 and 1/5 of the image (bicubic) plus grain, "
             "seeded per image by (seed, index)")
MAX_SIDE = 8192


class ImageSetError(ValueError):
    """Bad input for an image set; the message names the flag. The command turns it into a usage
    error (this package stays free of harness imports)."""


@dataclasses.dataclass(frozen=True)
class ImageSet:
    """What to make: ``count`` images of ``width`` x ``height`` spread over ``classes``."""

    count: int
    width: int
    height: int
    classes: int
    seed: int = 0
    quality: int = 90

    def __post_init__(self) -> None:
        for field in ("count", "classes"):
            if getattr(self, field) < 1:
                raise ImageSetError(f"--{field}: {getattr(self, field)} must be >= 1")
        if self.classes > self.count:
            raise ImageSetError(f"--classes: {self.classes} classes need at least as many images "
                             f"(--count {self.count})")
        if not (8 <= self.width <= MAX_SIDE and 8 <= self.height <= MAX_SIDE):
            raise ImageSetError(f"--size: {self.width}x{self.height} must be between 8 and "
                             f"{MAX_SIDE} pixels on each side")
        if self.seed < 0:
            raise ImageSetError(f"--seed: {self.seed} must be >= 0")
        if not 1 <= self.quality <= 95:
            raise ImageSetError(f"--quality: {self.quality} must be in 1..95 (Pillow's JPEG range)")

    def class_name(self, label: int) -> str:
        """WordNet-id-like folder names (n00000000, ...), sorted in label order."""
        return f"n{label:08d}"

    def placement(self, index: int) -> tuple[int, int]:
        """(class, number within the class) of image ``index``: round-robin over the classes,
        so every class holds count // classes images and the first count % classes one more."""
        return index % self.classes, index // self.classes

    def relative_path(self, index: int) -> str:
        label, number = self.placement(index)
        name = self.class_name(label)
        return f"{SPLIT}/{name}/{name}_{number}.JPEG"


def parse_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` (e.g. 500x375, ImageNet's most common shape)."""
    width, sep, height = text.lower().partition("x")
    if not sep or not width.strip().isdigit() or not height.strip().isdigit():
        raise ImageSetError(f"--size: {text!r} must be WIDTHxHEIGHT in pixels, e.g. 500x375")
    return int(width), int(height)


def picture(spec: ImageSet, index: int) -> np.ndarray:
    """Image ``index`` as uint8 (height, width, 3): coarse colour fields, mid-scale structure,
    fine texture and grain, as a photograph has detail at every scale."""
    from PIL import Image

    rng = np.random.default_rng([spec.seed, index])
    w, h = spec.width, spec.height
    out = np.zeros((h, w, 3), dtype=np.float32)
    for divisor, weight in ((100, 0.6), (25, 0.3), (5, 0.2)):
        cells = (max(2, round(w / divisor)), max(2, round(h / divisor)))
        field = rng.integers(0, 256, size=(cells[1], cells[0], 3), dtype=np.uint8)
        smooth = Image.fromarray(field, "RGB").resize((w, h), Image.BICUBIC)
        out += weight * (np.asarray(smooth, dtype=np.float32) - 128.0)
    out += 128.0 + rng.normal(0.0, 6.0, size=(h, w, 1)).astype(np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def encode(spec: ImageSet, index: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(picture(spec, index), "RGB").save(buffer, format="JPEG",
                                                      quality=spec.quality)
    return buffer.getvalue()


def _write_range(spec: ImageSet, out: str, indices: range) -> list[tuple[int, int, str]]:
    """Write images ``indices``; (index, bytes, sha256) of each."""
    written = []
    for index in indices:
        data = encode(spec, index)
        path = os.path.join(out, spec.relative_path(index))
        with open(path, "wb") as handle:
            handle.write(data)
        written.append((index, len(data), hashlib.sha256(data).hexdigest()))
    return written


def check_target(out: Path, force: bool) -> None:
    """A new or empty directory, or any directory with --force; never a file."""
    if out.exists() and not out.is_dir():
        raise ImageSetError(f"OUT: {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ImageSetError(f"OUT: {out} is not empty; pass --force to replace its {SPLIT}/ "
                         f"folder and {MANIFEST}")


def chunks(count: int, parts: int) -> Iterable[range]:
    size = max(1, -(-count // parts))
    return (range(start, min(start + size, count)) for start in range(0, count, size))


def make_images(out: Path, spec: ImageSet, force: bool = False, jobs: int = 1,
                progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Write the folder and its manifest; return the manifest."""
    check_target(out, force)
    try:
        import PIL
    except ImportError:
        raise ImageSetError("Pillow is not installed in dlperf's environment; run `make setup` "
                         "(or pip install Pillow)") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)  # a folder being rewritten is not a dataset
        if (out / SPLIT).exists():
            shutil.rmtree(out / SPLIT)
        for label in range(spec.classes):
            (out / SPLIT / spec.class_name(label)).mkdir(parents=True)
    except OSError as error:
        raise ImageSetError(f"OUT: cannot write {out}: {error.strerror or error}") from None
    pieces = list(chunks(spec.count, max(1, jobs) * 8))
    written: list[tuple[int, int, str]] = []
    if jobs <= 1:
        for piece in pieces:
            written += _write_range(spec, str(out), piece)
            if progress:
                progress(len(written))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for done in pool.map(_write_range, [spec] * len(pieces), [str(out)] * len(pieces),
                                 pieces):
                written += done
                if progress:
                    progress(len(written))
    written.sort()
    digest = hashlib.sha256()
    for index, _, sha in written:
        digest.update(f"{spec.relative_path(index)} {sha}\n".encode())
    per_class = [spec.count // spec.classes + (label < spec.count % spec.classes)
                 for label in range(spec.classes)]
    manifest = {
        "format": FORMAT, "version": VERSION, "layout": "imagenet", "split": SPLIT,
        "count": spec.count, "classes": spec.classes,
        "per_class": {"min": min(per_class), "max": max(per_class)},
        "width": spec.width, "height": spec.height, "seed": spec.seed,
        "quality": spec.quality, "total_bytes": sum(size for _, size, _ in written),
        "digest": digest.hexdigest(), "generator": GENERATOR,
        "pillow": PIL.__version__,
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)
    return manifest
