"""``dlperf gate``: did the candidate (a label, a version, an environment, or result files)
get slower than the baseline? Exit 1 on a significant slowdown beyond the threshold, 0 when
there is none, 2 on bad input: a step a CI job can run after measuring.

For each experiment (a case whatever its environment and label: :mod:`dlperf.history.series`)
present on both sides, the side's results are compared: from their stored repeats, pooled (a
one-sided Mann-Whitney test that the candidate's repeats are lower), or with ``--remeasure``
by measuring both again, interleaved in fresh processes (``dlperf ab``: a ratio and its
bootstrap interval over pairs). A failing case prints the commands that reproduce both sides.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.text import Text

from dlperf import display, outputs
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument
from dlperf.commands.compare import threshold
from dlperf.errors import UsageError
from dlperf.history import reproduce, series
from dlperf.report import reading
from dlperf.report.compare import stored_case
from dlperf.store import Store
from dlperf.stats import TESTS, repeats_needed, shift_p, unreachable
from dlperf.studies import ab

SELECTORS = ("label", "version", "env")
# gate's one-sided level. docs/calibration.md: on A/A splits of real repeats gate raised 4.5 %
# (Welch, 3 a side), 4.0 % (Welch, 5) and 5.1 % (Mann-Whitney, 5; within 2000 draws' ±1 point
# of 5 %) false alarms at this level, and Mann-Whitney with 3 a side never decides
# ("inconclusive"): no default moved
ALPHA = 0.05
# --max-slowdown's default: with ALPHA it gave the false alarms above (docs/calibration.md)
MAX_SLOWDOWN = 0.03


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "gate", help=HELP["gate"],
        description="SIDE is label=TEXT, version=X (the framework version), env=NAME "
                    "(jax==0.9.2, python:/path, or a framework's pinned name) or a result JSON "
                    "file. Each experiment on both sides is compared on its results' pooled "
                    "repeats (a one-sided test, alpha 0.05), or re-measured interleaved "
                    "with --remeasure. Exit 1 on a significant slowdown beyond --max-slowdown, "
                    "0 otherwise (an inconclusive case, too few repeats to decide, included: "
                    "it says why), 2 on bad input.")
    add_db_argument(parser)
    parser.add_argument("--baseline", required=True, metavar="SIDE")
    parser.add_argument("--candidate", required=True, metavar="SIDE")
    parser.add_argument("--max-slowdown", type=threshold, default=MAX_SLOWDOWN,
                        metavar="PERCENT",
                        help=f"fail only beyond this slowdown (default {MAX_SLOWDOWN * 100:g}%%)")
    parser.add_argument("--test", choices=TESTS, default="mannwhitney",
                        help="one-sided test on the stored repeats (default mannwhitney; welch "
                             "can decide with 3 repeats a side, Mann-Whitney needs 4)")
    parser.add_argument("--remeasure", action="store_true",
                        help="measure both sides again, interleaved (dlperf ab), instead of "
                             "testing the stored repeats")
    # ab's default pairs (docs/calibration.md has its verdict's false alarms)
    parser.add_argument("--pairs", type=int, default=ab.DEFAULT_PAIRS,
                        help=f"with --remeasure (default {ab.DEFAULT_PAIRS})")
    parser.add_argument("--json", type=Path, help="write the verdicts here (for a CI job)")
    return parser


def side_points(text: str, flag: str, everything: list[series.Point] | None,
                db: str) -> list[series.Point]:
    """The results a SIDE names."""
    name, sep, value = text.partition("=")
    if sep and name in SELECTORS:
        if everything is None:
            raise UsageError(f"{flag}: {text} selects from a database and {db} does not exist")
        field = {"label": "label", "version": "version", "env": "environment"}[name]
        chosen = [p for p in everything if getattr(p, field) == value]
        if not chosen:
            seen = sorted({str(getattr(p, field)) for p in everything if getattr(p, field)})
            raise UsageError(f"{flag}: no successful result in {db} has {name} {value!r}; "
                             f"there are: {', '.join(seen[:12]) or 'none'}")
        return readable(chosen)
    path = Path(text)
    if not path.is_file():
        raise UsageError(f"{flag}: {text!r} is neither {'=X, '.join(SELECTORS)}=X nor a result "
                         f"JSON file")
    try:
        loaded = reading.parse_json(path.read_bytes())
    except (OSError, ValueError) as error:
        raise UsageError(f"{flag}: {path} is not a result JSON file ({error})") from None
    items = loaded if isinstance(loaded, list) else [loaded]
    out = []
    for number, item in enumerate(items, 1):
        where = f"{flag}: {path} item {number}"
        if isinstance(item, dict) and ("case" not in item or "throughput" not in item):
            raise UsageError(f"{where} is not a dlperf result")
        found = series.point({"id": item.get("run_id") or 0 if isinstance(item, dict) else 0,
                              "finished_at": "", "started_at": ""}, item, where)
        if found is not None:
            out.append(found)
    if not out:
        raise UsageError(f"{flag}: {path} holds no successful result")
    return readable(out)


def readable(points: list[series.Point]) -> list[series.Point]:
    """``points``, each of whose case reads as a case (the experiment it is compared in, the
    command that measures it again); else one line naming the field and where it was read."""
    for p in points:
        try:
            reading.case_of(dict(stored_case(p.result)))
        except UsageError as error:
            raise UsageError(f"{p.where}: {error}") from None
    return points


@dataclass(frozen=True)
class Side:
    """One side's results of one experiment: their repeats pooled, the latest as its face."""

    points: tuple[series.Point, ...]

    @property
    def latest(self) -> series.Point:
        return self.points[-1]

    @property
    def repeats(self) -> list[float]:
        return [v for p in self.points for v in p.repeats]

    @property
    def median(self) -> float:
        return float(np.median(self.repeats))

    @property
    def runs(self) -> list[int]:
        return [p.run_id for p in self.points]


def by_experiment(points: list[series.Point]) -> dict[str, Side]:
    grouped: dict[str, list[series.Point]] = {}
    for p in series.ordered(points, "time"):
        grouped.setdefault(series.experiment_of(p.result), []).append(p)
    return {key: Side(tuple(found)) for key, found in grouped.items()}


def slower_p(base: list[float], cand: list[float], test: str) -> tuple[float | None, str | None]:
    """One-sided p that the candidate's repeats are lower, or why the test cannot decide."""
    short = unreachable(test, len(base), len(cand), ALPHA, sides=1)
    if short:
        other = "" if test == "welch" else "--test welch or "
        return None, (f"{short}; measure {repeats_needed(test, ALPHA, sides=1)} repeats a "
                      f"side, or use {other}--remeasure")
    return shift_p(cand, base, test, alternative="less")


def repeats_verdict(base: list[float], cand: list[float], ratio: float, limit: float,
                    test: str) -> tuple[str, float | None, str | None]:
    """gate's verdict on stored repeats: ``slower`` when the one-sided test says the candidate's
    repeats are lower (p < ALPHA) and its median is more than ``limit`` below; ``pass``;
    ``inconclusive`` when the test cannot decide. (verdict, p, why not)."""
    p_value, why_not = slower_p(base, cand, test)
    if p_value is None:
        return "inconclusive", None, why_not
    return ("slower" if p_value < ALPHA and ratio < 1.0 - limit else "pass"), p_value, None


def stored_verdict(base: Side, cand: Side, limit: float, test: str) -> dict[str, Any]:
    ratio = cand.median / base.median
    verdict, p_value, why_not = repeats_verdict(base.repeats, cand.repeats, ratio, limit, test)
    name = {"mannwhitney": "Mann-Whitney", "welch": "Welch's t"}[test]
    return {"ratio": ratio, "p_value": p_value, "ci95": None, "verdict": verdict,
            "why_inconclusive": why_not,
            "how": f"stored repeats ({len(base.repeats)} of {len(base.points)} results and "
                   f"{len(cand.repeats)} of {len(cand.points)}), one-sided {name}"}


def remeasured_verdict(base: Side, cand: Side, limit: float, pairs: int) -> dict[str, Any]:
    sides = [reproduce.run_flags(dict(stored_case(base.latest.result)))[1:],
             reproduce.run_flags(dict(stored_case(cand.latest.result)))[1:]]
    result = ab.compare([["run", *s] for s in sides], pairs, limit,
                        say=lambda turn: display.err.print(Text(
                            f"  pair {turn.pair + 1}/{pairs} {turn.side}: "
                            f"{turn.throughput if turn.throughput is not None else turn.status}")))
    summary = result.summary()
    if summary.get("failed") or summary["ratio"] is None:
        return {"ratio": None, "p_value": None, "ci95": None, "verdict": "failed",
                "how": f"dlperf ab, {pairs} pairs: a side failed"}
    # ab's own verdict with --max-slowdown as its threshold: "slower" only below 1 - limit with
    # the interval below 1 over enough pairs to trust it, else "inconclusive" (ab.verdict)
    found = {"slower": "slower", ab.INCONCLUSIVE: "inconclusive"}.get(summary["verdict"], "pass")
    out = {"ratio": summary["ratio"], "p_value": None, "ci95": summary["ci95"],
           "verdict": found,
           "how": f"re-measured interleaved (dlperf ab, {summary['pairs']} pairs)"}
    if found == "inconclusive":
        out["why_inconclusive"] = summary["why_inconclusive"]
    return out


def command(side: Side) -> str:
    """The `dlperf run` line that measures the side's latest result again, its repeats too."""
    case = dict(stored_case(side.latest.result))  # as stored: what ran, not today's defaults
    try:
        return reproduce.command_line(case, case.get("repeats") or len(side.latest.repeats))
    except UsageError as error:
        raise UsageError(f"{side.latest.where}: {error}") from None


def main(args: argparse.Namespace) -> int:
    if args.remeasure and not 2 <= args.pairs <= 1000:
        raise UsageError(f"--pairs: {args.pairs} must be between 2 and 1000")
    outputs.check_writable("--json", args.json)
    everything = None
    if Path(args.db).exists():
        with Store(args.db, readonly=True) as store:
            everything = series.all_points(store)
    base_points = side_points(args.baseline, "--baseline", everything, args.db)
    planted = [p for p in base_points if p.result.case["plant_slowdown"]]
    if planted:
        raise UsageError(f"--baseline: {planted[0].result.label} carries a planted "
                         f"slowdown (calibration only); it is never a baseline")
    base = by_experiment(base_points)
    cand = by_experiment(side_points(args.candidate, "--candidate", everything, args.db))
    common = [key for key in cand if key in base]
    alone = [side.latest.result.label for key, side in cand.items()
             if key not in base]
    if not common:
        raise UsageError(f"--baseline: no experiment of the candidate ({len(cand)}) has a "
                         f"baseline result ({len(base)} experiments): nothing to compare")
    rows = []
    for key in common:
        b, c = base[key], cand[key]
        shared = sorted(set(b.runs) & set(c.runs) - {0})
        if shared:
            raise UsageError(f"--candidate: run {shared[0]} is on both sides; choose sides that "
                             f"differ")
        commands = {"baseline_command": command(b), "candidate_command": command(c)}
        found = (remeasured_verdict(b, c, args.max_slowdown, args.pairs) if args.remeasure
                 else stored_verdict(b, c, args.max_slowdown, args.test))
        found.update(case=c.latest.result.label, experiment=key,
                     baseline_runs=b.runs, candidate_runs=c.runs, baseline_median=b.median,
                     candidate_median=c.median, **commands)
        rows.append(found)
    show(rows, args)
    for label in alone:
        display.warn(f"{label}: no baseline result, not compared")
    failed = [r for r in rows if r["verdict"] in ("slower", "failed")]
    if args.json:
        outputs.write_json(args.json, {"baseline": args.baseline, "candidate": args.candidate,
                                       "max_slowdown": args.max_slowdown,
                                       "passed": not failed, "cases": rows,
                                       "not_compared": alone})
    return 1 if failed else 0


def show(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    table = display.new_table(
        f"gate: {args.candidate} against {args.baseline} (fail beyond "
        f"{args.max_slowdown:.0%} slower)",
        (("case", "left"), ("baseline", "right"), ("candidate", "right"), ("ratio", "right"),
         ("p / 95% CI", "right"), ("verdict", "left")))
    for r in rows:
        sure = (f"p={r['p_value']:.2g}" if r["p_value"] is not None else
                f"{r['ci95'][0]:.3f}–{r['ci95'][1]:.3f}" if r["ci95"] else "-")
        style = {"slower": "red", "failed": "red", "pass": "green"}.get(r["verdict"], "yellow")
        table.add_row(Text(str(r["case"])), display.number(r["baseline_median"]),
                      display.number(r["candidate_median"]),
                      f"{r['ratio']:.3f}" if r["ratio"] is not None else "-", sure,
                      Text(r["verdict"], style=style))
    display.out.print(table)
    for r in rows:
        if r["verdict"] in ("slower", "failed"):
            display.out.print(Text(f"{r['case']}: {r['verdict']} ({r['how']}); reproduce with\n"
                                   f"  baseline:  {r['baseline_command']}\n"
                                   f"  candidate: {r['candidate_command']}"), soft_wrap=True)
        elif r["verdict"] == "inconclusive":
            display.warn(f"{r['case']}: inconclusive: {r['why_inconclusive']}")
