"""Tiny labelled image folders for the accuracy tests (tests/studies/test_accuracy*.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def coloured_image_folder(root: Path, classes: int = 3, per_class: int = 6,
                          size: int = 40) -> None:
    """An ImageFolder of PNGs under ``root``: ``classes`` folders named as ImageNet's synsets
    (n00000000...), each image noise with its class's colour channel saturated, so a network
    can tell the classes apart within a few epochs."""
    from PIL import Image

    rng = np.random.RandomState(0)
    for label in range(classes):
        folder = root / f"n{label:08d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.randint(0, 255, size=(size, size + 7, 3), dtype=np.uint8)
            pixels[..., label] = 255  # a colour per class
            Image.fromarray(pixels).save(folder / f"img{i}.png")
