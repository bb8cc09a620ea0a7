"""``dlperf reference [list|show ID]``: the seed studies' published tables, stored as data with
their provenance; a table shown as published (units, footnotes, source)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table as RichTable
from rich.text import Text

from dlperf import display, reference
from dlperf.commands import HELP
from dlperf.errors import UsageError
from dlperf.reference import render

FORMATS = ("table", "json", "md")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("reference", help=HELP["reference"])
    parser.add_argument("action", nargs="?", choices=("list", "show"), default="list",
                        help="list (default): every table; show ID: one table as published")
    parser.add_argument("id", nargs="?", metavar="ID", help="with show: the table's id, as "
                        "`dlperf reference` lists it")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default, for a terminal), json or md (Markdown)")
    parser.add_argument("--dir", type=Path, metavar="DIR",
                        help="read the reference files (*.yaml) in DIR instead of the shipped "
                             "ones, e.g. to check a new file against the schema")
    return parser


def main(args: argparse.Namespace) -> int:
    tables = reference.load(args.dir)
    if args.action == "list":
        if args.id is not None:
            raise UsageError(f"list takes no ID (got {args.id!r}); to show one: dlperf "
                             f"reference show ID")
        return _list(tables, args.format)
    if args.id is None:
        raise UsageError("show: which table? ID is one of " + ", ".join(t.id for t in tables))
    return _show(reference.table(args.id, args.dir), args.format)


def _list(tables: tuple[reference.Table, ...], fmt: str) -> int:
    rows = render.listing(tables)
    if fmt == "json":
        print(json.dumps(rows, indent=2))
        return 0
    head = ["id", "study", "what", "rows"]
    cells = [[r["id"], f"{r['study']} ({r['date']})", r["what"], str(r["rows"])] for r in rows]
    if fmt == "md":
        print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
        print("\n".join("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                        for row in cells))
        return 0
    table = RichTable(title=f"published reference tables ({len(rows)}): dlperf reference show ID")
    for name in head:
        table.add_column(name, overflow="fold", no_wrap=name == "id")
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    display.out.print(table)
    return 0


def _show(table: reference.Table, fmt: str) -> int:
    if fmt == "json":
        print(json.dumps(render.as_dict(table), indent=2))
        return 0
    if fmt == "md":
        print(render.markdown(table), end="")
        return 0
    shown = RichTable(title=f"{table.title}\n{table.id}")
    for name in render.header(table):
        shown.add_column(name, overflow="fold")
    for row in table.rows:
        shown.add_row(*(Text(c) for c in render.row_cells(table, row)))
    display.out.print(shown)
    for mark, text in table.footnotes.items():
        display.out.print(Text(f"[{mark}] {text}"))
    for line in render.column_marks(table):
        display.out.print(Text(line))
    for name, text in render.provenance(table):
        display.out.print(display.line((f"{name}: ", "bold"), text))
    return 0
