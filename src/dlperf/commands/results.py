"""``dlperf results``: the stored results, newest last, as the same table ``run`` prints."""

from __future__ import annotations

import argparse
from typing import Any

from dlperf import display, numbers
from dlperf.commands import HELP
from dlperf.store import DEFAULT_DB, Store


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("results", help=HELP["results"])
    parser.add_argument("--db", default=DEFAULT_DB)
    parser.add_argument("--last", type=int, default=20, help="how many (default 20)")
    parser.add_argument("--json", action="store_true", help="print result objects as JSON")
    return parser


def main(args: argparse.Namespace) -> int:
    with Store(args.db, readonly=True) as store:
        results = store.results()[-args.last:] if args.last > 0 else store.results()
    if args.json:
        print(numbers.dumps(results, indent=2))
    else:
        display.results_table(results, title=f"{args.db}: {len(results)} result(s)")
    return 0
