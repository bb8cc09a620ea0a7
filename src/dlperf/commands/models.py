"""``dlperf models``: the catalogue, with parameters and FLOPs per sample at default shapes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from dlperf import display, models
from dlperf.commands import HELP


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("models", help=HELP["models"])
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    return parser


def catalogue() -> list[dict[str, Any]]:
    rows = []
    for name in models.names():
        spec = models.get(name)
        knobs = models.resolve_knobs(name, {})
        rows.append({"name": name, "kind": spec.kind, "description": spec.description,
                     "params": spec.params(knobs),
                     "train_flops_per_sample": spec.flops_per_sample(knobs, train=True),
                     "infer_flops_per_sample": spec.flops_per_sample(knobs, train=False),
                     "defaults": knobs})
    return rows


def main(args: argparse.Namespace) -> int:
    rows = catalogue()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="dlperf model catalogue")
    table.add_column("model", no_wrap=True)
    for column in ("kind", "parameters", "train GFLOP/sample", "infer GFLOP/sample",
                   "defaults"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["kind"], f"{row['params']:,}",
                      f"{row['train_flops_per_sample'] / 1e9:,.2f}",
                      f"{row['infer_flops_per_sample'] / 1e9:,.2f}",
                      ", ".join(f"{k}={v}" for k, v in row["defaults"].items()))
    display.out.print(table)
    for row in rows:
        display.out.print(display.line((row["name"], "bold"), f": {row['description']}"))
    return 0
