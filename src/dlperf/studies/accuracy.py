"""``dlperf accuracy``: is a lower precision still right? fp32 vs int8 (and bf16/fp16) top-1/top-5.

The Dell EMC study measured the top-1/top-5 loss of TensorRT INT8 against FP32 on ImageNet.
No ImageNet is available offline, so by default each model is trained briefly (a fixed, seeded
recipe) on a real data set that ships inside scikit-learn — the 1,797 handwritten digits, 8x8
grey, 10 classes — upscaled to the model's input size, split into a training and a held-out
part (stratified, seeded). The trained weights are cached (``$DLPERF_CACHE/accuracy``, default
``~/.cache/dlperf/accuracy``), keyed by model, knobs, seed, data and recipe. Every precision of
every engine is then scored on the held-out part; INT8 is calibrated on training images only.

``--data PATH`` replaces the digits by an ImageNet-style folder (one sub-folder of images per
class, read with PIL, resized and centre-cropped the ImageNet way): with ``--weights FILE`` (a
PyTorch state dict in torchvision's parameter names, e.g. torchvision's own ImageNet weights)
the whole folder is evaluated, less a calibration slice; without, the folder is split and the
model trained on it like the digits. Nothing is ever downloaded.

The harness prepares the data (scikit-learn, PIL and numpy live here) as uint8 arrays; one
worker process per model (``python -m dlperf.worker.accuracy``) trains and evaluates.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlperf import envs, models, runner
from dlperf.errors import UsageError
from dlperf.launchers import launch
from dlperf.numbers import check_seconds
from dlperf.spec import PRECISIONS
from dlperf.worker.cache import private_dir

FRAMEWORKS = ("torch", "onnxruntime")
#: Bump when the training code changes what a recipe produces: cached weights are then retrained.
#: 2: batch-norm statistics re-estimated with the final weights after training.
TRAINING_VERSION = 2
DATA_VERSION = 1
DIGITS_TEST_FRACTION = 0.3
FOLDER_TEST_FRACTION = 0.2
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".tif", ".tiff", ".webp", ".gif")
#: ImageNet's channel statistics: the normalisation torchvision's weights expect.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_RATIO = 256 / 224  # resize the shorter side to this x image_size, then centre-crop
DEFAULT_TIMEOUT_S = 3600.0


@dataclass
class Recipe:
    """How a model is trained for the accuracy check: AdamW, a linear warm-up, cosine decay.

    AdamW because a few epochs must suffice on a loaded CPU: with it GoogLeNet reaches ~96% on
    the held-out digits in two epochs, where SGD with momentum was still near 40%.
    """

    epochs: int = 3
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adamw"
    momentum: float = 0.9  # SGD only
    weight_decay: float = 0.05
    warmup_epochs: float = 0.5
    clip_grad_norm: float | None = None


def default_recipe(model: str) -> Recipe:
    """Networks with batch norm: lr 1e-3, 3 epochs; VGG and AlexNet (none): lr 3e-4, 4 epochs
    (1e-3 leaves AlexNet at chance)."""
    if model.startswith(("vgg", "alexnet")):
        return Recipe(lr=3e-4, epochs=4)
    return Recipe()


def default_image_size(model: str) -> int:
    """Small for speed: 32, or the next power of two the network takes (AlexNet: 64)."""
    smallest = models.smallest_image_size(model)
    return max(32, 1 << (smallest - 1).bit_length())


@dataclass
class Options:
    """Everything one ``dlperf accuracy`` invocation asked for."""

    models: list[str]
    precisions: list[str] = field(default_factory=lambda: ["fp32", "int8"])
    frameworks: list[str] = field(default_factory=lambda: ["torch"])
    image_size: int | None = None  # None: default_image_size(model)
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    seed: int = 0
    data: Path | None = None
    weights: Path | None = None
    limit_per_class: int | None = None
    calibration_samples: int = 256
    calibration_batch: int = 32
    eval_batch: int = 64
    retrain: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: str = "cpu"


def validate(options: Options) -> None:
    """Bad input as one line naming the field and what is allowed (UsageError, exit 2)."""
    allowed = [n for n in models.names() if models.get(n).kind == "vision"]
    if not options.models:
        raise UsageError("--model: give at least one of: " + ", ".join(allowed))
    for name in options.models:
        if name not in allowed:
            raise UsageError(f"--model: {name!r} is not an image classifier of the catalogue; "
                             f"allowed: {', '.join(allowed)}")
    for precision in options.precisions:
        if precision not in PRECISIONS:
            raise UsageError(f"--precisions: unknown {precision!r}; allowed: "
                             f"{', '.join(PRECISIONS)}")
    for framework in options.frameworks:
        if framework not in FRAMEWORKS:
            raise UsageError(f"--frameworks: unknown {framework!r}; allowed: "
                             f"{', '.join(FRAMEWORKS)}")
    for name, value in (("--epochs", options.epochs), ("--batch-size", options.batch_size),
                        ("--limit-per-class", options.limit_per_class),
                        ("--calibration-samples", options.calibration_samples),
                        ("--calibration-batch", options.calibration_batch),
                        ("--eval-batch", options.eval_batch)):
        if value is not None and value < 1:
            raise UsageError(f"{name}: must be at least 1, got {value}")
    if options.lr is not None and not (options.lr > 0 and math.isfinite(options.lr)):
        raise UsageError(f"--lr: must be a positive number, got {options.lr}")
    check_seconds("--timeout", options.timeout_s)
    if options.image_size is not None:
        for name in options.models:
            try:
                models.resolve_knobs(name, {"image_size": options.image_size})
            except ValueError as error:
                raise UsageError(f"--image-size: {error}") from None
    if options.weights is not None:
        if options.data is None:
            raise UsageError("--weights: needs --data (the folder those weights classify); the "
                             "digits are always trained here")
        if not options.weights.is_file():
            raise UsageError(f"--weights: no such file {options.weights}")
    if options.data is not None and not options.data.is_dir():
        raise UsageError(f"--data: {options.data} is not a directory (expected one sub-folder "
                         "of images per class, ImageNet validation style)")


# ------------------------------------------------------------------------------------------ data


def _bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out x n_in) bilinear interpolation weights, half-pixel centres (like PIL/torch)."""
    scale = n_in / n_out
    centres = (np.arange(n_out) + 0.5) * scale - 0.5
    centres = np.clip(centres, 0, n_in - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, n_in - 1)
    frac = centres - low
    matrix = np.zeros((n_out, n_in))
    matrix[np.arange(n_out), low] += 1 - frac
    matrix[np.arange(n_out), high] += frac
    return matrix


def _write_split(directory: Path, name: str, images: np.ndarray, labels: np.ndarray) -> None:
    np.save(directory / f"{name}_images.npy", np.ascontiguousarray(images, dtype=np.uint8))
    np.save(directory / f"{name}_labels.npy", np.asarray(labels, dtype=np.int64))


def _channel_stats(images: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel mean and std (as fractions of 255) of uint8 NCHW training images."""
    values = images.astype(np.float64) / 255.0
    mean = values.mean(axis=(0, 2, 3))
    std = np.maximum(values.std(axis=(0, 2, 3)), 1e-3)
    return [float(v) for v in mean], [float(v) for v in std]


def prepare_digits(directory: Path, image_size: int, seed: int) -> dict[str, Any]:
    """scikit-learn's digits, upscaled (bilinear) to ``image_size``, grey in 3 channels, split."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise UsageError("the digits data set needs scikit-learn: pip install -e '.[accuracy]'"
                         ) from None
    digits = load_digits()
    grey = digits.images / 16.0  # 0..16 -> 0..1
    resize = _bilinear_matrix(grey.shape[1], image_size)
    up = np.einsum("ij,njk,lk->nil", resize, grey, resize)
    images = np.repeat(np.rint(np.clip(up, 0, 1) * 255).astype(np.uint8)[:, None], 3, axis=1)
    train_idx, test_idx = train_test_split(np.arange(len(images)),
                                           test_size=DIGITS_TEST_FRACTION, random_state=seed,
                                           stratify=digits.target)
    _write_split(directory, "train", images[train_idx], digits.target[train_idx])
    _write_split(directory, "test", images[test_idx], digits.target[test_idx])
    mean, std = _channel_stats(images[train_idx])
    return {"source": "scikit-learn digits (load_digits), 8x8 grey upscaled bilinearly",
            "classes": [str(c) for c in digits.target_names], "mean": mean, "std": std,
            "split": f"stratified {1 - DIGITS_TEST_FRACTION:.0%} train / "
                     f"{DIGITS_TEST_FRACTION:.0%} held out, seed {seed}"}


def _folder_files(root: Path, limit: int | None) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise UsageError(f"--data: {root} has {len(classes)} class sub-folder(s); an "
                         "ImageNet-style folder has one sub-folder of images per class (>= 2)")
    files: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        found = sorted(p for p in (root / name).rglob("*")
                       if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not found:
            raise UsageError(f"--data: class folder {root / name} holds no images "
                             f"({', '.join(IMAGE_SUFFIXES)})")
        files += [(p, label) for p in found[:limit]]
    return classes, files


def _load_image(path: Path, image_size: int) -> np.ndarray:
    """RGB, shorter side resized to image_size x 256/224, centre crop: ImageNet evaluation."""
    from PIL import Image

    with Image.open(path) as opened:
        image = opened.convert("RGB")
        width, height = image.size
        short = max(image_size, int(round(image_size * RESIZE_RATIO)))
        scale = short / min(width, height)
        image = image.resize((max(short, round(width * scale)), max(short, round(height * scale))),
                             Image.Resampling.BILINEAR)
        width, height = image.size
        left, top = (width - image_size) // 2, (height - image_size) // 2
        image = image.crop((left, top, left + image_size, top + image_size))
        return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


def prepare_folder(root: Path, directory: Path, image_size: int, seed: int, pretrained: bool,
                   limit: int | None, calibration_samples: int) -> dict[str, Any]:
    """An ImageNet-style folder as uint8 arrays, split into training (or calibration) and test.

    With pretrained weights only a calibration slice is held back from evaluation (the
    "training" split then serves INT8 calibration alone); otherwise a stratified split.
    """
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise UsageError("--data needs Pillow to read images: pip install Pillow") from None
    classes, files = _folder_files(root, limit)
    labels = np.array([label for _, label in files], dtype=np.int64)
    rng = np.random.RandomState(seed)
    if pretrained:
        count = min(calibration_samples, max(1, len(files) // 5))
        train_idx = np.sort(rng.choice(len(files), size=count, replace=False))
        test_idx = np.setdiff1d(np.arange(len(files)), train_idx)
        split = (f"{len(test_idx)} images evaluated; {len(train_idx)} others (seed {seed}) "
                 "held back for INT8 calibration")
    else:
        train_list: list[int] = []
        test_list: list[int] = []
        for label in range(len(classes)):
            members = rng.permutation(np.flatnonzero(labels == label))
            cut = max(1, int(round(len(members) * FOLDER_TEST_FRACTION)))
            if len(members) < 2:
                raise UsageError(f"--data: class {classes[label]!r} has {len(members)} image; "
                                 "training and held-out splits need at least 2 per class")
            test_list += list(members[:cut])
            train_list += list(members[cut:])
        train_idx, test_idx = np.sort(train_list), np.sort(test_list)
        split = (f"stratified {1 - FOLDER_TEST_FRACTION:.0%} train / "
                 f"{FOLDER_TEST_FRACTION:.0%} held out, seed {seed}")
    for name, index in (("train", train_idx), ("test", test_idx)):
        out = np.lib.format.open_memmap(directory / f"{name}_images.npy", mode="w+",
                                        dtype=np.uint8,
                                        shape=(len(index), 3, image_size, image_size))
        for row, i in enumerate(index):
            path = files[i][0]
            try:
                out[row] = _load_image(path, image_size)
            except Exception as error:
                raise UsageError(f"--data: cannot read image {path}: {error}") from None
        out.flush()
        del out
        np.save(directory / f"{name}_labels.npy", labels[index])
    if pretrained:
        mean, std = list(IMAGENET_MEAN), list(IMAGENET_STD)
    else:
        mean, std = _channel_stats(np.load(directory / "train_images.npy", mmap_mode="r"))
    return {"source": f"image folder {root}", "classes": classes, "mean": mean, "std": std,
            "split": split, "images": len(files),
            "limit_per_class": limit, "normalisation": "ImageNet" if pretrained else "train split"}


def _folder_fingerprint(root: Path, limit: int | None) -> str:
    """Names, sizes and times of the files used: a changed folder retrains."""
    _, files = _folder_files(root, limit)
    sha = hashlib.sha256()
    for path, label in files:
        stat = path.stat()
        sha.update(f"{path.relative_to(root)}|{label}|{stat.st_size}|{stat.st_mtime_ns}\n"
                   .encode())
    return sha.hexdigest()[:16]


# ----------------------------------------------------------------------------------------- cache


def cache_root() -> Path:
    root = os.environ.get("DLPERF_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "dlperf")
    return Path(root) / "accuracy"


def weights_identity(model: str, knobs: dict[str, int], seed: int, recipe: Recipe,
                     data_identity: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes the trained weights."""
    return {"model": model, "knobs": knobs, "seed": seed, "recipe": asdict(recipe),
            "data": data_identity, "training_version": TRAINING_VERSION}


def weights_path(identity: dict[str, Any]) -> Path:
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return cache_root() / f"{identity['model']}-{digest}.pt"


# ---------------------------------------------------------------------------------------- run


def _recipe(options: Options, model: str) -> Recipe:
    recipe = default_recipe(model)
    if options.epochs is not None:
        recipe.epochs = options.epochs
    if options.batch_size is not None:
        recipe.batch_size = options.batch_size
    if options.lr is not None:
        recipe.lr = options.lr
    return recipe


def _num_classes(options: Options) -> int:
    if options.data is None:
        return 10
    classes, _ = _folder_files(options.data, options.limit_per_class)
    return len(classes)


def plan(options: Options, model: str) -> dict[str, Any]:
    """The worker request for one model (without the data directory)."""
    size = options.image_size or default_image_size(model)
    knobs = models.resolve_knobs(model, {"image_size": size,
                                         "num_classes": _num_classes(options)})
    recipe = _recipe(options, model)
    if options.data is None:
        data_identity: dict[str, Any] = {"name": "sklearn-digits",
                                          "test_fraction": DIGITS_TEST_FRACTION,
                                          "split_seed": options.seed, "version": DATA_VERSION}
    else:
        data_identity = {"name": "folder", "path": str(options.data.resolve()),
                         "fingerprint": _folder_fingerprint(options.data,
                                                            options.limit_per_class),
                         "test_fraction": FOLDER_TEST_FRACTION, "split_seed": options.seed,
                         "version": DATA_VERSION}
    identity = weights_identity(model, knobs, options.seed, recipe, data_identity)
    return {"model": model, "knobs": knobs, "seed": options.seed, "recipe": asdict(recipe),
            "frameworks": list(options.frameworks), "precisions": list(options.precisions),
            "weights_path": str(weights_path(identity)),
            "user_weights": str(options.weights.resolve()) if options.weights else None,
            "retrain": options.retrain, "calibration_samples": options.calibration_samples,
            "calibration_batch": options.calibration_batch, "eval_batch": options.eval_batch,
            "device": options.device, "data_identity": data_identity}


def prepare_data(options: Options, request: dict[str, Any], directory: Path) -> None:
    size = request["knobs"]["image_size"]
    if options.data is None:
        meta = prepare_digits(directory, size, options.seed)
    else:
        meta = prepare_folder(options.data, directory, size, options.seed,
                              options.weights is not None, options.limit_per_class,
                              options.calibration_samples)
    meta["image_size"] = size
    (directory / "meta.json").write_text(json.dumps(meta))


def _failed(request: dict[str, Any], status: str, message: str) -> dict[str, Any]:
    return {"model": request["model"], "knobs": request["knobs"], "status": status,
            "error": message, "training": None, "cells": []}


def run_model(options: Options, model: str) -> dict[str, Any]:
    """Prepare the data, run one worker for ``model``, and return what it reported."""
    request = plan(options, model)
    private_dir(str(Path(request["weights_path"]).parent))
    with tempfile.TemporaryDirectory(prefix="dlperf-accuracy-") as tmp:
        work = Path(tmp)
        data_dir = work / "data"
        data_dir.mkdir()
        start = time.monotonic()
        prepare_data(options, request, data_dir)
        request["data_dir"] = str(data_dir)
        request_file, out_file, log_file = (work / "request.json", work / "result.json",
                                            work / "worker.log")
        request_file.write_text(json.dumps(request))
        argv = [envs.interpreter("torch"), "-m", "dlperf.worker.accuracy",
                "--request", str(request_file), "--out", str(out_file)]
        outcome = runner.execute(launch.Launch(argv), log_file, options.timeout_s)
        if outcome.timed_out:
            result = _failed(request, "timeout",
                             f"worker still running after {options.timeout_s:g} s; "
                             f"log tail:\n{outcome.log_tail}")
        elif out_file.exists():
            result = json.loads(out_file.read_text())
        elif outcome.returncode is not None and outcome.returncode < 0:
            status, message = runner.signal_failure(outcome.returncode, outcome.log_tail)
            result = _failed(request, status, f"{message}; log tail:\n{outcome.log_tail}")
        else:
            result = _failed(request, "crash", f"worker exited {outcome.returncode} without a "
                                               f"result; log tail:\n{outcome.log_tail}")
        if result.get("status") != "ok" and outcome.log_tail:
            result.setdefault("log_tail", outcome.log_tail)
    result["request"] = {k: v for k, v in request.items() if k != "data_dir"}
    result["wall_s"] = time.monotonic() - start
    return result


# ----------------------------------------------------------------------------------------- rows


def _cell_device(cell: dict[str, Any] | None) -> str:
    """Where a cell's engine evaluated (its ``engine`` facts' ``device``); "-" for a cell that
    failed before saying, or one stored before the device was recorded."""
    return str(((cell or {}).get("engine") or {}).get("device") or "-")


def row_device(row: dict[str, Any]) -> str:
    """A table row's device: its own, or, for a row read from the store (whose columns predate
    it), from the engine facts of its cells in the stored detail; "-" where none says."""
    if row.get("device"):
        return str(row["device"])
    cells = (row.get("detail") or {}).get("cells") or []
    mine = [c for c in cells if c.get("precision") == row.get("precision")] or cells
    return _cell_device(mine[0]) if mine else "-"


def comparison_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The study's table: per model, engine and lower precision, fp32 vs it and the difference.

    A run of fp32 alone gives one row per engine with the fp32 figures only.
    """
    rows: list[dict[str, Any]] = []
    for result in results:
        base = {"model": result["model"], "image_size": result["knobs"]["image_size"]}
        if result.get("status") != "ok":
            rows.append(dict(base, framework="-", precision="-", status=result.get("status"),
                             error=result.get("error")))
            continue
        by_engine: dict[str, list[dict[str, Any]]] = {}
        for cell in result["cells"]:
            by_engine.setdefault(cell["framework"], []).append(cell)
        for framework, cells in by_engine.items():
            fp32 = next((c for c in cells if c["precision"] == "fp32"), None)
            others: list[dict[str, Any] | None] = [
                c for c in cells if c["precision"] != "fp32"] or [None]
            for cell in others:
                row = dict(base, framework=framework,
                           precision=cell["precision"] if cell else "fp32",
                           samples=(fp32 or cell or {}).get("samples"),
                           device=_cell_device(cell or fp32))
                # fp32's cell when it ran ok
                ok32 = fp32 if fp32 is not None and fp32["status"] == "ok" else None
                row["fp32_top1"] = ok32["top1"] if ok32 is not None else None
                row["fp32_top5"] = ok32["top5"] if ok32 is not None else None
                if cell is None:
                    row.update(status=fp32["status"] if fp32 else "crash",
                               error=fp32.get("error") if fp32 else None)
                    rows.append(row)
                    continue
                row.update(status=cell["status"], error=cell.get("error"))
                if cell["status"] == "ok":
                    row["top1"], row["top5"] = cell["top1"], cell["top5"]
                    row["changed_top1"] = cell.get("changed_top1")
                    if ok32 is not None:
                        row["diff_top1"] = cell["top1"] - ok32["top1"]
                        row["diff_top5"] = cell["top5"] - ok32["top5"]
                elif ok32 is None:
                    row["status"] = fp32["status"] if fp32 else cell["status"]
                rows.append(row)
    return rows


# ----------------------------------------------------------------------------------- storing


def dataset_identity(result: dict[str, Any]) -> dict[str, Any]:
    """What was scored: the data set's identity (name, split, folder fingerprint) and size."""
    request = result.get("request") or {}
    data = result.get("data") or {}
    return dict(request.get("data_identity") or {}, test_samples=data.get("test_samples"),
                image_size=(result.get("knobs") or {}).get("image_size"))


def row_key(result: dict[str, Any], row: dict[str, Any]) -> str:
    """Rows with the same key scored the same question (model, engine, precision, data, recipe,
    seed): the newest one is shown, and ``compare`` matches two databases' rows by it."""
    request = result.get("request") or {}
    weights = request.get("user_weights")
    identity = {"model": row["model"], "framework": row.get("framework"),
                "precision": row.get("precision"), "knobs": result.get("knobs"),
                "data": request.get("data_identity"), "seed": request.get("seed"),
                "recipe": None if weights else request.get("recipe"),
                "weights": Path(weights).name if weights else None,
                "calibration_samples": request.get("calibration_samples")}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def row_detail(result: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The row's context: knobs, recipe, training record and its two cells (engine facts)."""
    request = result.get("request") or {}
    training = {k: v for k, v in (result.get("training") or {}).items() if k != "epochs"}
    cells = [c for c in result.get("cells") or []
             if c.get("framework") == row.get("framework")
             and c.get("precision") in ("fp32", row.get("precision"))]
    return {"row": row, "knobs": result.get("knobs"), "seed": request.get("seed"),
            "recipe": request.get("recipe"), "training": training, "cells": cells,
            "calibration_samples": request.get("calibration_samples")}


def store_result(store: Any, result: dict[str, Any], env: dict[str, Any]) -> list[int]:
    """Every table row of one model's result into ``store`` (a :class:`dlperf.store.Store`)."""
    return [store.add_accuracy(row_key(result, row), row, dataset_identity(result),
                               row_detail(result, row), env)
            for row in comparison_rows([result])]
