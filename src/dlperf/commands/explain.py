"""``dlperf explain A [B]``: where a profiled result's step time goes, by category, and with two
results where the difference between them comes from, in numbers and in words.

Each side is what ``dlperf compare`` reads (a result JSON file, a run id or ``run:ID`` in
``--db``); ``--case ID`` names one stored run. The results must have been measured with
``--profile``.
"""

from __future__ import annotations

import argparse
from typing import Any

from dlperf import display
from dlperf.commands import HELP
from dlperf.commands.compare import resolve
from dlperf.errors import UsageError
from dlperf.explain import findings
from dlperf.explain.diff import ORDER, differ
from dlperf.report import reading
from dlperf.store import DEFAULT_DB


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("explain", help=HELP["explain"])
    parser.add_argument("results", nargs="*", metavar="RESULT",
                        help="one or two results: a JSON file (dlperf run --json), or a run id "
                             "in --db")
    parser.add_argument("--case", metavar="ID", help="a stored run id in --db (as RESULT)")
    parser.add_argument("--db", default=DEFAULT_DB,
                        help=f"results database for run ids (default {DEFAULT_DB})")
    return parser


def one_result(spec: str, which: str, db: str) -> dict[str, Any]:
    """The one profiled result ``spec`` names; one line naming what is wrong otherwise."""
    items = resolve(spec, which, db)
    if len(items) != 1:
        raise UsageError(f"{which}: {spec} holds {len(items)} results; name one (a run id, or "
                         f"a file with one result)")
    result = items[0]
    block = result.get("profile")
    if not isinstance(block, dict):
        raise UsageError(f"{which}: {result.get('label', spec)} has no profile; measure it with "
                         f"`dlperf run ... --profile`")
    if not block.get("categories"):
        why = block.get("unavailable") or block.get("error") or "no categories"
        raise UsageError(f"{which}: {result.get('label', spec)}: its profile has no "
                         f"categories: {why}")
    if not isinstance(block["categories"], dict) or not _number(block.get("step_s")):
        raise UsageError(f"{which}: {spec}: profile.categories must be an object and "
                         f"profile.step_s a positive number")
    why = reading.problem(result, reading.PROFILED)
    if why:
        raise UsageError(f"{which}: {spec}: {why}; explain reads the profile block `dlperf run "
                         f"--profile` records")
    return result


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def main(args: argparse.Namespace) -> int:
    specs = list(args.results) + ([args.case] if args.case else [])
    if not 1 <= len(specs) <= 2:
        raise UsageError("results: name one result (where its time goes) or two (why one is "
                         "faster), as files or run ids; --case ID names a stored run")
    sides = [one_result(spec, which, args.db)
             for spec, which in zip(specs, ("A", "B") if len(specs) == 2 else ("RESULT",))]
    if len(sides) == 2:
        models = [(s.get("case") or {}).get("model") for s in sides]
        if models[0] != models[1]:
            raise UsageError(f"B: {sides[1].get('label')} is {models[1]}, A is {models[0]}: "
                             f"explain compares results of one model")
        show_pair(*sides)
    else:
        show_one(sides[0])
    return 0


def show_one(result: dict[str, Any]) -> None:
    """A result's categories, its top operators, its roofline and what they say."""
    block = result["profile"]
    step = block["step_s"]
    table = display.new_table(
        f"where the time goes: {result.get('label')} ({block['tool'].get('name')} "
        f"{block['tool'].get('version')}, {block.get('steps')} profiled steps)",
        (("category", "left"), ("ms/step", "right"), ("share", "right"),
         ("ops/step", "right")))
    counts = block.get("counts") or {}
    for name in ORDER:
        seconds = block["categories"].get(name, 0.0)
        table.add_row(name, f"{seconds * 1e3:.2f}", display.percent(seconds / step),
                      "-" if name not in counts else f"{counts[name]:g}")
    table.add_row("step (profiled)", f"{step * 1e3:.2f}", "100%", "")
    display.out.print(table)
    show_facts(result)
    top_ops(result)
    show_findings(findings.of_result(result))


def show_facts(result: dict[str, Any]) -> None:
    block = result["profile"]
    overhead = block.get("overhead")
    display.out.print(
        f"coverage {display.percent(block.get('coverage'))} of the profiled step attributed to "
        f"operators; measured step {block['measured_step_s'] * 1e3:.2f} ms, profiling overhead "
        f"{'-' if overhead is None else f'{overhead:+.0%}'}"
        + (f"; trace: {block['trace']['path']}" if (block.get("trace") or {}).get("path")
           else ""), highlight=False, markup=False)
    note = (block.get("tool") or {}).get("note")
    if note:  # what the profiled steps did differently from the window (MXNet's bulking)
        display.out.print(f"profiled steps: {note}", highlight=False, markup=False)
    roof = result.get("roofline") or {}
    if roof.get("intensity"):
        reach = roof.get("of_roof")
        display.out.print(
            f"roofline: {roof['intensity']:.2f} FLOP/byte (estimated), ridge "
            f"{'-' if roof.get('ridge') is None else format(roof['ridge'], '.2f')}, "
            f"{roof.get('bound') or 'bound unknown'}-bound, "
            f"{'-' if reach is None else display.percent(reach)} of the roof "
            f"({roof.get('bandwidth_source') or 'bandwidth unknown'})")


def top_ops(result: dict[str, Any], limit: int = 10) -> None:
    block = result["profile"]
    table = display.new_table(f"top operators: {result.get('label')}",
                              (("operator", "left"), ("category", "left"),
                               ("ms/step", "right"), ("calls/step", "right")))
    for op in (block.get("top_ops") or [])[:limit]:
        table.add_row(str(op["name"]), str(op["category"]), f"{op['s_per_step'] * 1e3:.2f}",
                      f"{op['calls_per_step']:g}")
    display.out.print(table)


def show_pair(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Both results' categories, each difference and its share of the whole, the operators
    that moved, and the findings."""
    diff = differ(a["profile"], b["profile"])
    table = display.new_table(
        f"B against A, largest contribution first — A: {a.get('label')}; B: {b.get('label')}",
        (("category", "left"), ("A ms/step", "right"), ("B ms/step", "right"),
         ("B - A ms", "right"), ("share of difference", "right")))
    for row in diff.rows:
        share = diff.share(row)
        table.add_row(row.category, f"{row.a * 1e3:.2f}", f"{row.b * 1e3:.2f}",
                      f"{row.delta * 1e3:+.2f}", "-" if share is None else f"{share:+.0%}")
    table.add_row("step (profiled)", f"{diff.a_step_s * 1e3:.2f}", f"{diff.b_step_s * 1e3:.2f}",
                  f"{diff.delta * 1e3:+.2f}", "100%" if diff.delta else "-")
    display.out.print(table)
    if diff.moved:
        moved = display.new_table("operators that moved (named alike in both)",
                                  (("operator", "left"), ("category", "left"),
                                   ("A ms/step", "right"), ("B ms/step", "right")))
        for op in diff.moved:
            moved.add_row(str(op["name"]), str(op["category"]), f"{op['a_s'] * 1e3:.2f}",
                          f"{op['b_s'] * 1e3:.2f}")
        display.out.print(moved)
    else:
        for side in (a, b):
            top_ops(side, limit=5)
    show_findings(findings.of_pair(a, b) + findings.of_result(a) + findings.of_result(b))


def show_findings(found: list[findings.Finding]) -> None:
    if not found:
        display.out.print("findings: none of the rules fired (no category stands out)")
        return
    display.out.print("findings:")
    for finding in found:
        display.out.print(f"  - {finding.text}")
