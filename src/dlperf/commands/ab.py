"""``dlperf ab --pairs N -- run A-FLAGS -- run B-FLAGS``: an interleaved A/B comparison."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, outputs
from dlperf.commands import HELP
from dlperf.errors import UsageError
from dlperf.numbers import finite_float
from dlperf.studies import ab


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "ab", help=HELP["ab"],
        description="Each side is a dlperf measuring command: `-- run FLAGS` or `-- external "
                    "FLAGS -- COMMAND`. The sides run one repeat at a time, A B, B A, A B, ...; "
                    "the ratio of medians B/A gets a bootstrap 95% interval over pairs. Prefer "
                    "this to `compare --fail-on-regression` whenever both sides can run now: "
                    "compare reads results measured at different times.")
    # defaults: ab.DEFAULT_PAIRS and ab.DEFAULT_THRESHOLD (docs/calibration.md)
    parser.add_argument("--pairs", type=pairs_count, default=ab.DEFAULT_PAIRS,
                        help=f"A/B pairs (default {ab.DEFAULT_PAIRS}), or auto: until the "
                             f"verdict is settled either way (at least {ab.AUTO_MIN_PAIRS}, "
                             f"at most {ab.AUTO_PAIRS})")
    parser.add_argument("--threshold", type=finite_float, default=ab.DEFAULT_THRESHOLD * 100,
                        metavar="PERCENT",
                        help=f"ratios within this are 'same' (default "
                             f"{ab.DEFAULT_THRESHOLD * 100:g})")
    parser.add_argument("--json", type=Path, help="write the comparison to this file")
    parser.add_argument("sides", nargs=argparse.REMAINDER, metavar="-- run A -- run B")
    return parser


def pairs_count(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of pairs, or auto") from None


def devices_text(summary: dict[str, Any]) -> str:
    """``A on cpu, B on cpu``; sides on different devices say so (the ratio is then the
    devices' as much as the code's)."""
    a = ", ".join(summary["a"]["devices"]) or "?"
    b = ", ".join(summary["b"]["devices"]) or "?"
    text = f"A on {a}, B on {b}"
    return text if a == b else text + ": different devices"


def main(args: argparse.Namespace) -> int:
    auto = args.pairs == "auto"
    if auto:
        args.pairs = ab.AUTO_PAIRS
    if not 2 <= args.pairs <= 1000:
        raise UsageError(f"--pairs: {args.pairs} must be between 2 and 1000, or auto")
    if not (math.isfinite(args.threshold) and 0 <= args.threshold < 100):
        raise UsageError(f"--threshold: {args.threshold!r} must be a percentage in [0, 100)")
    tokens = list(args.sides)
    if tokens[:1] != ["--"]:
        tokens = ["--"] + tokens  # argparse may have eaten the first separator
    sides = ab.split_sides(tokens)
    outputs.check_writable("--json", args.json)  # fails now, not after the run

    def say(turn: ab.Turn) -> None:
        what = (f"{turn.throughput:,.2f}" if turn.throughput is not None
                else f"{turn.status}: {turn.error}")
        display.err.print(Text(f"pair {turn.pair + 1}/{args.pairs} {turn.side}: {what}"))

    result = ab.compare(sides, args.pairs, args.threshold / 100.0, say, auto=auto)
    summary = result.summary()
    summary["sides"] = {"A": sides[0], "B": sides[1]}
    table = Table(title="dlperf ab: interleaved, fresh processes")
    for column in ("side", "command", "device", "median", "values"):
        table.add_column(column, overflow="fold")
    for name, side in (("A", "a"), ("B", "b")):
        values = summary[side]["values"]
        table.add_row(name, Text(" ".join(summary["sides"][name])),
                      Text(", ".join(summary[side]["devices"]) or "-"),
                      f"{summary[side]['median']:,.2f}" if values else "-",
                      Text(", ".join(f"{v:,.2f}" for v in values)))
    display.out.print(table)
    if summary["ratio"] is not None:
        ci = summary["ci95"]
        ci_text = f" (95% CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else " (too few pairs for a CI)"
        display.out.print(Text(f"B/A = {summary['ratio']:.3f}{ci_text} over {summary['pairs']} "
                               f"pairs: {summary['verdict']} ({devices_text(summary)})"))
    if summary["verdict"] == ab.INCONCLUSIVE:
        display.warn(f"inconclusive: {summary['why_inconclusive']}")
    policy = summary.get("pairs_policy")
    if policy and not policy["settled"]:
        display.warn(f"--pairs auto: not settled after {policy['taken']} pairs (the most): the "
                     f"ratio's interval still straddles the ±{args.threshold:g}% threshold")
    for failed in summary.get("failed", []):
        display.out.print(Text(f"side {failed['side']} failed in pair {failed['pair']}: "
                               f"{failed['status']}: {failed['error']}"))
    if args.json:
        outputs.write_json(args.json, summary)
    return 1 if summary.get("failed") else 0
