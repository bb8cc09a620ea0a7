"""``dlperf system show|check``: is this host fit to measure, and what would make it fitter?"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display
from dlperf.commands import HELP
from dlperf.host import system


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("system", help=HELP["system"])
    parser.add_argument("action", choices=("show", "check"))
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    return parser


STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def main(args: argparse.Namespace) -> int:
    found = system.findings()
    fit = system.fit(found)
    if args.json:
        print(json.dumps({"fit": fit, "findings": [f.to_dict() for f in found]}, indent=2))
    else:
        table = Table(title="benchmark host: what disturbs measurements here")
        for column in ("setting", "value", "", "effect", "fix"):
            table.add_column(column, overflow="fold")
        for f in found:  # every cell is data: Text, never markup
            table.add_row(Text(f.name), Text(f.value), Text(f.level, style=STYLES[f.level]),
                          Text(f.effect), Text(f.fix))
        display.out.print(table)
        verdict = "fit to measure" if fit else "NOT fit to measure: fix the failed findings"
        display.out.print(Text(verdict, style="green" if fit else "bold red"))
    return 0 if args.action == "show" or fit else 1
