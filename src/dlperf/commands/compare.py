"""``dlperf compare BASELINE CANDIDATE``: what got faster or slower, with significance.

Each side is a result JSON file (one object or a list), a results database file, a run id or a
sweep name in ``--db`` (``run:ID`` and ``sweep:NAME`` say which explicitly).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from dlperf import display, outputs
from dlperf.commands import HELP
from dlperf.errors import UsageError
from dlperf.numbers import finite_float
from dlperf.report import reading
from dlperf.report import results as stored
from dlperf.report.compare import DEFAULT_THRESHOLD, VERDICTS
from dlperf.stats import DEFAULT_ALPHA, TESTS
from dlperf.store import DEFAULT_DB, Store

if TYPE_CHECKING:
    from dlperf.report.accuracy import RowComparison
    from dlperf.report.compare import Comparison
    from dlperf.results.model import Result

SQLITE_MAGIC = b"SQLite format 3\x00"
VERDICT_STYLE = {"faster": "green", "slower": "red", "failed": "red", "fixed": "green",
                 "same": "", "inconclusive": "yellow", "only in baseline": "yellow",
                 "only in candidate": "yellow",
                 "better": "green", "worse": "red"}  # the last two: accuracy rows


def threshold(text: str) -> float:
    """``5%`` or ``5``: both mean 5 percent (a bare number is a percentage too)."""
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5%, got {text!r}") from None
    if not 0 <= number < 100:
        raise argparse.ArgumentTypeError(f"must be between 0% and 100%, got {text!r}")
    return number / 100.0


def points(text: str) -> float:
    """A top-1 change in percentage points: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 100):
        raise argparse.ArgumentTypeError(f"expected percentage points between 0 and 100, got "
                                         f"{text!r}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("compare", help=HELP["compare"])
    parser.add_argument("baseline", help="result JSON file, database file, run id or sweep name")
    parser.add_argument("candidate", help="result JSON file, database file, run id or sweep name")
    parser.add_argument("--db", default=DEFAULT_DB, help="database for run ids and sweep names")
    # defaults: docs/calibration.md (their false alarms on A/A splits of real repeats)
    parser.add_argument("--threshold", type=threshold, default=DEFAULT_THRESHOLD,
                        help=f"smallest change that counts, e.g. 5%% (default "
                             f"{DEFAULT_THRESHOLD * 100:g}%%)")
    parser.add_argument("--test", choices=TESTS, default="mannwhitney",
                        help="test on the per-repeat values (default mannwhitney; it needs 4 "
                             "repeats a side to reach p < 0.05, welch 2: with fewer a change "
                             "beyond the threshold is 'inconclusive')")
    parser.add_argument("--alpha", type=finite_float, default=DEFAULT_ALPHA,
                        help=f"significance level (default {DEFAULT_ALPHA})")
    parser.add_argument("--accuracy-threshold", type=points, default=1.0, metavar="POINTS",
                        help="stored accuracy rows (databases): a top-1 drop of more than this "
                             "many points is a regression (default 1.0)")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a case got slower beyond the threshold or failed, or "
                             "an accuracy row lost more top-1 than --accuracy-threshold "
                             "(an 'inconclusive' case exits 0, as in dlperf gate, and says "
                             "why)")
    parser.add_argument("--across-devices", action="store_true",
                        help="compare cases whose sides ran on different devices (cpu and a GPU, "
                             "two GPU models); refused without it")
    parser.add_argument("--json", type=Path, help="also write the comparison as JSON")
    return parser


def _from_file(path: Path, which: str) -> list[dict[str, Any]]:
    with open(path, "rb") as handle:
        head = handle.read(len(SQLITE_MAGIC))
    if head == SQLITE_MAGIC:
        with Store(path, readonly=True, flag=which) as store:
            return stored.load(store)
    try:
        data = reading.parse_json(path.read_bytes())
    except ValueError as error:
        raise UsageError(f"{which}: {path} is neither a result JSON file nor a dlperf database "
                         f"({error})") from None
    items = data if isinstance(data, list) else [data]
    if not items:
        raise UsageError(f"{which}: {path} holds an empty list; it needs dlperf result objects")
    return items


def check_shape(items: list[Any], which: str, source: str) -> list[dict[str, Any]]:
    """Every item a result object compare can read; else one line naming the first bad one."""
    for index, item in enumerate(items):
        problem = reading.result_problem(item)
        if problem:
            where = f"run {item.get('run_id')}" if isinstance(item, dict) and item.get(
                "run_id") is not None else f"item {index}"
            raise UsageError(f"{which}: {source}: {where} {problem}; compare reads dlperf "
                             f"result objects (dlperf run --json, dlperf results --json)")
    return items


def resolve(spec: str, which: str, db: str) -> list[dict[str, Any]]:
    """The results one side names."""
    path = Path(spec)
    if path.is_file():
        return check_shape(_from_file(path, which), which, str(path))
    return check_shape(_from_db(spec, which, db), which, db)


def _from_db(spec: str, which: str, db: str) -> list[dict[str, Any]]:
    match = re.fullmatch(r"(?:run:)?(\d+)", spec)
    kind, name = ("run", match.group(1)) if match else (
        ("sweep", spec[len("sweep:"):]) if spec.startswith("sweep:") else ("any", spec))
    if not Path(db).exists():
        raise UsageError(f"{which}: {spec!r} is not a file, and there is no database {db} to "
                         f"look it up in (--db)")
    with Store(db, readonly=True) as store:
        if kind == "run":
            rows = list(store.runs("id=? AND result_json IS NOT NULL", (int(name),)))
            if not rows:
                raise UsageError(f"{which}: no finished run with id {name} in {db}")
            result = store.decode(rows[0])
            result.setdefault("run_id", rows[0]["id"])
            return [result]
        if name in store.sweeps():
            return stored.load(store, name)
        known = ", ".join(store.sweeps()) or "none"
        raise UsageError(f"{which}: {spec!r} is not a file, a run id or a sweep in {db} "
                         f"(sweeps: {known})")


def accuracy_rows(spec: str, which: str) -> list[dict[str, Any]]:
    """Stored `dlperf accuracy` rows of a side that is a database file (none otherwise)."""
    path = Path(spec)
    if not path.is_file():
        return []
    with open(path, "rb") as handle:
        if handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            return []
    with Store(path, readonly=True, flag=which) as store:
        return store.accuracy()


def print_accuracy(rows: "list[RowComparison]", threshold_points: float) -> None:
    table = display.new_table(
        f"accuracy rows (top-1; regression: a drop of more than {threshold_points:g} points)",
        (("model engine precision", "left"), ("baseline top-1", "right"),
         ("candidate top-1", "right"), ("change (points)", "right"),
         ("Δ vs fp32: baseline → candidate", "right"), ("verdict", "left")))

    def top1(row: dict[str, Any] | None) -> str:
        from dlperf.report.accuracy import measured_top1

        value = measured_top1(row)
        return (row or {}).get("status", "—") if value is None else f"{value:.2f}%"

    def diff(row: dict[str, Any] | None) -> str:
        value = (row or {}).get("diff_top1")
        return "—" if value is None else f"{value:+.2f}"

    for item in rows:
        table.add_row(item.label, top1(item.baseline), top1(item.candidate),
                      "—" if item.change is None else f"{item.change:+.2f}",
                      f"{diff(item.baseline)} → {diff(item.candidate)}",
                      Text(item.verdict, style=VERDICT_STYLE.get(item.verdict, "")))
    display.out.print(table)
    for item in rows:
        for note in item.notes:
            display.warn(f"{item.label}: {note}")


def _value(value: float | None) -> str:
    return display.number(value)


def _side(result: Result | None) -> str:
    """A side's median, or its status where it did not succeed (``—`` where it has no result)."""
    if result is None:
        return "—"
    if result.status != "ok":
        return result.status
    return _value(result.throughput.median if result.throughput else None)


def print_comparison(result: "Comparison", base_name: str, cand_name: str) -> None:
    table = display.new_table(
        f"{base_name} → {cand_name} (threshold {result.threshold:.0%}, {result.test}, "
        f"alpha {result.alpha:g})",
        (("case", "left"), ("device", "left"), ("baseline (median)", "right"),
         ("candidate (median)", "right"),
         ("change", "right"), ("significance", "left"), ("verdict", "left")))
    notes = []
    for item in result.cases:
        style = VERDICT_STYLE.get(item.verdict, "")
        verdict = Text(item.verdict, style=style)
        table.add_row(
            item.label, Text(item.device_text()), _side(item.baseline), _side(item.candidate),
            "—" if item.ratio is None else f"{item.ratio - 1:+.1%}",
            item.test.brief() if item.test else "—", verdict)
        notes += [f"{item.label}: {note}" for note in item.notes]
    display.out.print(table)
    for item in result.cases:
        if item.differs:
            display.out.print(Text(f"different cases, compared as asked: "
                                   f"{'; '.join(item.differs)}"))
    for item in result.across_devices:
        base, cand = item.devices
        display.out.print(Text(f"different devices, compared as asked (--across-devices): "
                               f"{item.label}: baseline on {base}, candidate on {cand}"))
    for note in notes:
        display.warn(note)
    mean = result.geometric_mean
    summary = (f"geometric mean of candidate/baseline over {len(result.ratios)} case(s): "
               + ("—" if mean is None else f"{mean:.3f} ({mean - 1:+.1%})"))
    counts = ", ".join(f"{result.count(v)} {v}" for v in VERDICTS if result.count(v))
    display.out.print(f"{summary}; {counts}", highlight=False)


def check_devices(result: "Comparison", across: bool) -> None:
    """One line, exit 2, when a case's two sides ran on different devices and ``--across-devices``
    was not given: a CPU figure against a GPU one is no regression and no speedup of the code."""
    mixed = result.across_devices
    if mixed and not across:
        base, cand = mixed[0].devices
        more = f" (and {len(mixed) - 1} more case(s))" if len(mixed) > 1 else ""
        raise UsageError(f"BASELINE/CANDIDATE: {mixed[0].label} ran on {base} in the baseline "
                         f"and on {cand} in the candidate{more}; pass --across-devices to "
                         f"compare results from different devices")


def main(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha: {args.alpha} must be between 0 and 1")
    outputs.check_writable("--json", args.json)
    from dlperf.report.accuracy import compare_rows
    from dlperf.report.compare import compare

    baseline = resolve(args.baseline, "BASELINE", args.db)
    candidate = resolve(args.candidate, "CANDIDATE", args.db)
    result = compare(baseline, candidate, args.threshold, args.alpha, args.test)
    check_devices(result, args.across_devices)
    mean = result.geometric_mean
    if mean is not None and not math.isfinite(mean):  # shape checks make this unreachable
        raise UsageError(f"BASELINE/CANDIDATE: the geometric mean came out {mean}; a stored "
                         f"throughput is not a usable number")
    scored = compare_rows(accuracy_rows(args.baseline, "BASELINE"),
                          accuracy_rows(args.candidate, "CANDIDATE"), args.accuracy_threshold)
    if result.cases or not scored:
        print_comparison(result, args.baseline, args.candidate)
    if scored:
        print_accuracy(scored, args.accuracy_threshold)
    if args.json:
        payload = result.to_dict()
        payload["accuracy"] = {"threshold_points": args.accuracy_threshold,
                               "rows": [item.to_dict() for item in scored]}
        outputs.write_json(args.json, payload)
    worse = [item for item in scored if item.regressed]
    if args.fail_on_regression and (result.regressions or worse):
        if result.regressions:
            display.out.print(display.line((f"{len(result.regressions)} regression(s) beyond "
                                            f"{result.threshold:.0%}", "red")))
        if worse:
            display.out.print(display.line((f"{len(worse)} accuracy regression(s): top-1 down "
                                            f"more than {args.accuracy_threshold:g} points or "
                                            "failed", "red")))
        return 1
    return 0
