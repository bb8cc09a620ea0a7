"""``dlperf history``: one experiment's results in order, and where its level changed.

The series is every successful result of one experiment (a case whatever its environment and
label: :mod:`dlperf.history.series`), ordered by time, label or framework version; each row is a
result's median and 95 % interval, and the change points (:mod:`dlperf.history.changepoints`)
say where the level moved, from what to what, and how surely.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.text import Text

from dlperf import display, outputs
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument, integer
from dlperf.errors import UsageError
from dlperf.history import changepoints, series
from dlperf.spec import PRECISIONS, TASKS
from dlperf.store import Store


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "history", help=HELP["history"],
        description="The results of one experiment (a case in any environment, with any label) "
                    "in order, each with its median and 95%% interval, and the change points "
                    "found in them (ruptures' PELT on the medians, each confirmed by a "
                    "Mann-Whitney test on the repeats).")
    add_db_argument(parser)
    parser.add_argument("--case", metavar="KEY|RUN_ID",
                        help="a case key (`dlperf results --json`) or a run id of the experiment")
    parser.add_argument("--framework")
    parser.add_argument("--model")
    parser.add_argument("--task", choices=TASKS)
    parser.add_argument("--precision", choices=PRECISIONS)
    parser.add_argument("--batch-size", type=integer)
    parser.add_argument("--order", choices=series.ORDERS, default="time",
                        help="time (default), label (as text) or framework version")
    parser.add_argument("--json", type=Path, help="write the series and its change points here")
    return parser


def select(args: argparse.Namespace, store: Store) -> list[series.Point]:
    filters = {name: getattr(args, name) for name in series.FILTERS}
    if args.case and any(v is not None for v in filters.values()):
        raise UsageError("--case: give either --case or the filters (--framework, --model, ...)")
    if args.case:
        return series.of_case(store, args.case.strip())
    if not (args.framework and args.model):
        raise UsageError("--case or both --framework and --model: which experiment")
    return series.matching(store, filters)


def change_dict(points: list[series.Point], c: changepoints.ChangePoint) -> dict[str, Any]:
    return {"index": c.index, "run_id": points[c.index].run_id,
            "before_median": c.before_median, "after_median": c.after_median,
            "relative_change": c.relative_change, "p_value": c.p_value,
            "before_repeats": c.before_n, "after_repeats": c.after_n,
            **({} if c.confirmed else {"reason": c.reason})}


def summary(points: list[series.Point], judged: list[changepoints.ChangePoint],
            order: str) -> dict[str, Any]:
    return {"order": order, "label": points[0].result.label,
            "points": [{"run_id": p.run_id, "finished_at": p.finished_at,
                        "case_key": p.case_key, "environment": p.environment,
                        "version": p.version, "label": p.label, "median": p.median,
                        "ci95": p.ci95, "repeats": list(p.repeats)} for p in points],
            "change_points": [change_dict(points, c) for c in judged if c.confirmed],
            "rejected": [change_dict(points, c) for c in judged if not c.confirmed],
            # the penalty, alpha and smallest change are changepoints' defaults: on A/A series
            # of real repeats they confirmed no change point at all (docs/calibration.md, the
            # history rows), so none was tightened
            "method": {"detector": "ruptures PELT, l2 cost, on log medians",
                       "penalty": f"{changepoints.PENALTY_SIGMAS:g} sigma^2 ln(n)",
                       "confirmation": f"Mann-Whitney U on the repeats, p < "
                                       f"{changepoints.ALPHA:g}, change > max(3 sigma, "
                                       f"{changepoints.MIN_CHANGE:.0%})",
                       "min_results": changepoints.MIN_POINTS}}


def where(p: series.Point) -> str:
    return p.label or p.version or p.finished_at[:19]


def show(points: list[series.Point], judged: list[changepoints.ChangePoint]) -> None:
    found = [c for c in judged if c.confirmed]
    marks = {c.index: c for c in found}
    unit = points[0].result.unit
    table = display.new_table(f"history: {points[0].result.label} ({len(points)} results)",
                              (("#", "right"), ("run", "right"), ("finished", "left"),
                               ("environment", "left"), ("version", "left"), ("label", "left"),
                               (f"{unit} (median)", "right"), ("95% CI", "right"),
                               ("n", "right"), ("change", "left")))
    for index, p in enumerate(points):
        change = marks.get(index)
        table.add_row(str(index + 1), str(p.run_id), p.finished_at[:19], Text(p.environment),
                      Text(p.version or "-"), Text(p.label or "-"), display.number(p.median),
                      f"{display.number(p.ci95[0])}–{display.number(p.ci95[1])}"
                      if p.ci95 else "-", str(len(p.repeats)),
                      Text(f"{change.relative_change:+.1%} here" if change else ""))
    display.out.print(table)
    if len(points) < changepoints.MIN_POINTS:
        display.out.print(f"no change-point search: {len(points)} results, it needs at least "
                          f"{changepoints.MIN_POINTS}", highlight=False)
        return
    if not found:
        display.out.print("no change point: " + ("none of PELT's candidates is confirmed by the "
                                                 "repeats" if judged else
                                                 "the series is level within its noise"),
                          highlight=False)
    for c in found:
        at = points[c.index]
        display.out.print(Text(
            f"change point before #{c.index + 1} (run {at.run_id}, {where(at)}): "
            f"{display.number(c.before_median)} -> "
            f"{display.number(c.after_median)} {unit} ({c.relative_change:+.1%}), "
            f"Mann-Whitney p = {c.p_value:.2g} over {c.before_n} and {c.after_n} repeats"))
    for c in judged:
        if not c.confirmed:
            at = points[c.index]
            display.out.print(Text(
                f"not a change point: before #{c.index + 1} (run {at.run_id}, {where(at)}), "
                f"{c.relative_change:+.1%}: {c.reason}", style="dim"))


def main(args: argparse.Namespace) -> int:
    outputs.check_writable("--json", args.json)
    with Store(args.db, readonly=True) as store:
        points = series.ordered(select(args, store), args.order)
    if len(points) < 2:
        raise UsageError(f"history: the experiment has {len(points)} successful result in "
                         f"{args.db}; a history needs at least 2")
    judged = changepoints.evaluate([p.median for p in points], [p.repeats for p in points])
    show(points, judged)
    if args.json:
        outputs.write_json(args.json, summary(points, judged, args.order))
    return 0
