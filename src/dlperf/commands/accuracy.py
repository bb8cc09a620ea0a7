"""``dlperf accuracy``: fp32 vs int8 (and bf16/fp16) top-1/top-5 of the catalogue's CNNs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, models, outputs, session
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument, add_timeout_argument, integer
from dlperf.host import measurelock
from dlperf.numbers import finite_float
from dlperf.store import DEFAULT_DB, Store
from dlperf.studies import accuracy


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    vision = [n for n in models.names() if models.get(n).kind == "vision"]
    parser = sub.add_parser(
        "accuracy", help=HELP["accuracy"],
        description="Train each model briefly on scikit-learn's handwritten digits (upscaled; "
                    "weights cached), or use --data with an ImageNet-style folder, then score "
                    "fp32 and each lower precision on the held-out images. INT8 is calibrated "
                    "on training images only.")
    parser.add_argument("--model", "--models", dest="models", type=_names, required=True,
                        metavar="NAMES",
                        help=f"comma-separated, or 'all': {', '.join(vision)}")
    parser.add_argument("--precisions", type=_names, default=["fp32", "int8"],
                        help="comma-separated (default fp32,int8; fp32 is always the baseline)")
    parser.add_argument("--frameworks", type=_names, default=["torch"],
                        help=f"engines: {', '.join(accuracy.FRAMEWORKS)} (default torch)")
    parser.add_argument("--image-size", type=integer,
                        help="input size (default: 32, or the next power of two the model "
                             "takes: AlexNet 64)")
    parser.add_argument("--epochs", type=integer,
                        help="training epochs (default 3; VGG/AlexNet 4)")
    parser.add_argument("--batch-size", type=integer, help="training batch (default 32)")
    parser.add_argument("--lr", type=finite_float,
                        help="peak AdamW learning rate (default 1e-3; VGG/AlexNet 3e-4)")
    parser.add_argument("--seed", type=integer, default=0, help="weights, split and calibration")
    parser.add_argument("--data", type=Path,
                        help="ImageNet-style folder (one sub-folder of images per class) "
                             "instead of the digits")
    parser.add_argument("--weights", type=Path,
                        help="with --data: a PyTorch state dict to evaluate instead of "
                             "training (torchvision parameter names)")
    parser.add_argument("--limit-per-class", type=integer,
                        help="with --data: at most this many images of each class")
    parser.add_argument("--calibration-samples", type=integer, default=256,
                        help="training images INT8 calibration sees (default 256)")
    parser.add_argument("--retrain", action="store_true",
                        help="train again even when cached weights exist")
    add_timeout_argument(parser, accuracy.DEFAULT_TIMEOUT_S, "seconds per model (default 3600)",
                         dest="timeout")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="write every model's result (cells, training, request) as JSON")
    add_db_argument(parser, f"results database the rows are stored in (default {DEFAULT_DB})")
    measurelock.add_argument(parser)
    return parser


def options_from(args: argparse.Namespace) -> accuracy.Options:
    names = args.models
    if names == ["all"]:
        names = [n for n in models.names() if models.get(n).kind == "vision"]
    precisions = list(dict.fromkeys(["fp32"] + list(args.precisions)))
    return accuracy.Options(
        models=list(dict.fromkeys(names)), precisions=precisions,
        frameworks=list(dict.fromkeys(args.frameworks)), image_size=args.image_size,
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
        data=args.data, weights=args.weights, limit_per_class=args.limit_per_class,
        calibration_samples=args.calibration_samples, retrain=args.retrain,
        timeout_s=args.timeout)


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def table(rows: list[dict[str, Any]], title: str) -> Table:
    """The study's table: model | fp32 top-1 | int8 top-1 | difference (and top-5)."""
    table = Table(title=title)
    for column in ("model", "engine", "device", "precision", "fp32 top-1", "top-1", "difference",
                   "fp32 top-5", "top-5", "difference", "changed top-1", "held out"):
        table.add_column(column, no_wrap=column in ("model", "engine"))
    for row in rows:
        device = accuracy.row_device(row)
        if row["status"] != "ok":
            table.add_row(row["model"], row["framework"], device, row["precision"],
                          _pct(row.get("fp32_top1")),
                          Text(row["status"], style="red"), "", "", "", "", "", "")
            continue
        if row["precision"] == "fp32":
            table.add_row(row["model"], row["framework"], device, "fp32",
                          _pct(row["fp32_top1"]),
                          "", "", _pct(row["fp32_top5"]), "", "", "", str(row["samples"]))
            continue
        table.add_row(row["model"], row["framework"], device, row["precision"],
                      _pct(row["fp32_top1"]),
                      _pct(row.get("top1")), _points(row.get("diff_top1")),
                      _pct(row["fp32_top5"]), _pct(row.get("top5")),
                      _points(row.get("diff_top5")),
                      "-" if row.get("changed_top1") is None else str(row["changed_top1"]),
                      str(row["samples"]))
    return table


def _measure_model(options: Any, name: str, store: Store,
                   env: dict[str, Any]) -> dict[str, Any]:
    """Train (or load) one model and score it in every engine and precision."""
    request = accuracy.plan(options, name)
    display.err.print(display.line(
        (name, "bold"), f" image {request['knobs']['image_size']}: "
        f"{'evaluating your weights' if options.weights else 'training'} "
        f"({request['recipe']['epochs']} epochs unless cached), then "
        f"{', '.join(options.frameworks)} x {', '.join(options.precisions)}"))
    result = accuracy.run_model(options, name)
    training = result.get("training") or {}
    if training:
        display.err.print(f"  weights: {'cached' if training.get('cached') else 'trained'}"
                          f" ({training.get('source')}"
                          + (f", {training['train_s']:.0f} s" if "train_s" in training
                             else "") + ")")
    if result.get("status") != "ok":
        display.err.print(display.line("  ", (str(result.get("status")), "red"),
                                       f": {result.get('error')}"))
    for cell in result.get("cells", []):
        if cell["status"] != "ok":
            display.err.print(display.line(f"  {cell['framework']} {cell['precision']}: ",
                                           (cell["status"], "yellow"), f": {cell['error']}"))
    accuracy.store_result(store, result, env)  # each model's rows as soon as it is scored
    return result


def main(args: argparse.Namespace) -> int:
    options = options_from(args)
    accuracy.validate(options)
    outputs.check_writable("--json", args.json)
    # the database is checked before waiting for the machine or training anything
    with session.measuring(args.db, wait=not args.no_wait, probe_peaks=False,
                           db_first=True) as opened:
        env = opened.env  # also written to --json
        results = [_measure_model(options, name, opened.store, env) for name in options.models]
    rows = accuracy.comparison_rows(results)
    source = ("scikit-learn digits (10 classes, held-out 30%)" if options.data is None
              else f"{options.data}")
    display.out.print(table(rows, f"Accuracy: fp32 vs lower precision — {source}"))
    display.out.print("differences in points (lower precision minus fp32); 'changed top-1' = "
                      "held-out images whose top-1 answer differs from fp32's")
    if args.json is not None:
        payload = {"schema": 1, "kind": "accuracy", "rows": rows, "results": results,
                   "env": env}
        outputs.write_json(args.json, payload, default=str)
    display.err.print(f"stored {len(rows)} row(s) in {args.db}")
    failed = any(r["status"] not in ("ok", "unsupported") for r in rows)
    return 1 if failed else 0
