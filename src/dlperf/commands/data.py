"""``dlperf data make-images OUT``: a seeded ImageNet-shaped JPEG folder for ``run --data``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dlperf import display
from dlperf.commands import HELP
from dlperf.commands._flags import integer
from dlperf.data import make_images as datasets
from dlperf.errors import UsageError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("data", help=HELP["data"])
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    make = actions.add_parser(
        "make-images", help="a seeded JPEG folder shaped like ImageNet (class sub-folders) with "
                            "a manifest",
        description="Write OUT/train/<class>/<class>_<n>.JPEG and OUT/" + datasets.MANIFEST
                    + " (counts, size, seed, quality, total bytes, digest). The same arguments "
                      "make the same bytes.")
    make.add_argument("out", type=Path, metavar="OUT", help="a new or empty directory")
    make.add_argument("--count", type=integer, default=20000,
                      help="images (default 20000)")
    make.add_argument("--size", default="500x375", metavar="WxH",
                      help="pixels, width x height (default 500x375, ImageNet's commonest)")
    make.add_argument("--classes", type=integer, default=1000,
                      help="class sub-folders; images go round-robin (default 1000)")
    make.add_argument("--seed", type=integer, default=0)
    make.add_argument("--quality", type=integer, default=90,
                      help="JPEG quality, 1..95 (default 90)")
    make.add_argument("--jobs", type=integer, default=None,
                      help="processes writing images (default: min(4, cores))")
    make.add_argument("--force", action="store_true",
                      help="write into a non-empty OUT, replacing its train/ folder and manifest")
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        return make(args)
    except datasets.ImageSetError as error:
        raise UsageError(str(error)) from None


def make(args: argparse.Namespace) -> int:
    width, height = datasets.parse_size(args.size)
    spec = datasets.ImageSet(count=args.count, width=width, height=height,
                             classes=args.classes, seed=args.seed, quality=args.quality)
    jobs = args.jobs if args.jobs is not None else min(4, os.cpu_count() or 1)
    if jobs < 1:
        raise UsageError(f"--jobs: {jobs} must be >= 1")
    def progress(done: int) -> None:
        if display.err.is_terminal:
            display.err.print(f"  {done}/{spec.count} images", end="\r")

    manifest = datasets.make_images(args.out, spec, force=args.force, jobs=jobs,
                                    progress=progress)
    display.out.print(
        f"{args.out}: {manifest['count']} JPEGs of {width}x{height} in {manifest['classes']} "
        f"classes, seed {manifest['seed']}, quality {manifest['quality']}, "
        f"{manifest['total_bytes'] / 2**20:.1f} MiB; manifest {datasets.MANIFEST}")
    return 0
