"""``dlperf reproduce STUDY``: one of the studies dlperf was built from, in one command: its
matrix measured as a crash-safe sweep, then its published tables laid out with the measured
figure beside each published one (:mod:`dlperf.studies.reproduce`,
:mod:`dlperf.report.reproduction`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dlperf import display, outputs
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument
from dlperf.commands.sweep import dry_run, execute, runnable
from dlperf.errors import UsageError
from dlperf.host import measurelock, sysinfo
from dlperf.launchers import slurm_launch
from dlperf.store import Store
from dlperf.studies import reproduce

SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}
# a refusal is the study's answer for that cell (shown with its reason), not a failed run
EXPECTED = ("ok", "unsupported")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("reproduce", help=HELP["reproduce"])
    parser.add_argument("study", metavar="STUDY", help=f"one of {', '.join(reproduce.STUDIES)}")
    parser.add_argument("--scale", default="cpu", metavar="SCALE",
                        help="cpu (default): what this machine runs whole, from "
                             "sweeps/reproduce-STUDY.yaml; published: the study's own GPUs, "
                             "nodes and batch sizes")
    add_db_argument(parser)
    parser.add_argument("-o", "--output", type=Path, metavar="REPORT",
                        help="write the report to REPORT.md or REPORT.html (default: Markdown "
                             "on stdout)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cases and an estimated time; measure nothing (at "
                             "--scale published too, with what this machine lacks)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="finish a stopped reproduction, keeping every stored repeat (all "
                           "stored: only the report is written)")
    mode.add_argument("--force", action="store_true",
                      help="measure every case again (older runs stay in the database)")
    parser.add_argument("--framework", metavar="NAME[,NAME]",
                        help="measure only these frameworks' rows (the others are laid out "
                             "with their published values)")
    parser.add_argument("--tiny", action="store_true",
                        help="a smoke run: every case at the smallest shapes, one short "
                             "repeat, stored as the sweep reproduce-STUDY-tiny (its numbers "
                             "mean nothing; the tests use it)")
    parser.add_argument("--sweep", type=Path, metavar="FILE",
                        help="the CPU scale's cases from FILE instead of "
                             "sweeps/reproduce-STUDY.yaml")
    measurelock.add_argument(parser)
    return parser


def output_format(path: Path | None) -> str:
    if path is None:
        return "md"
    if path.suffix.lower() not in SUFFIXES:
        raise UsageError(f"-o: {path} must end in .md or .html (the report's format)")
    return SUFFIXES[path.suffix.lower()]


def main(args: argparse.Namespace) -> int:
    study = reproduce.get(args.study)
    fmt = output_format(args.output)
    outputs.check_writable("-o", args.output)
    only = [name.strip() for name in (args.framework or "").split(",") if name.strip()]
    plan = reproduce.plan(study, args.scale, args.sweep, only, args.tiny)
    db = Path(args.db)
    if args.scale == "published":
        fitted = slurm_launch.fit(plan.sweep.cases, os.environ)
        nodes = fitted.allocation.nnodes if fitted.allocation else 1
        lacks = reproduce.lacking(plan.sweep.cases, len(sysinfo.gpus()), nodes, fitted.why_not)
        if args.dry_run:
            dry_run(plan.sweep, db, args.resume, args.force)
            if lacks:
                display.warn(f"this machine cannot run them: they need {lacks}")
            return 0
        if lacks:
            raise UsageError(f"--scale published: study {study.name} needs {lacks}: run "
                             f"--scale cpu here, list its cases with --dry-run, or run this "
                             f"command where the study's hardware is")
    sweep, fitted = runnable(plan.sweep, skip_multinode=False)
    if args.dry_run:
        dry_run(sweep, db, args.resume, args.force, fitted)
        display.out.print(f"report: {len(study.tables)} published table(s): "
                          f"{', '.join(study.tables)}", highlight=False)
        return 0
    mode = "resume" if args.resume else "force" if args.force else "new"
    outcome = execute(sweep, fitted, db, mode, wait=not args.no_wait)
    if outcome.interrupted:
        display.out.print("interrupted: finished repeats are stored; run again with --resume")
        raise KeyboardInterrupt
    text = report(plan, db, fmt)
    if args.output is None:
        sys.stdout.write(text)
    else:
        outputs.write_text("-o", args.output, text)
        print(f"wrote {args.output} ({fmt})", file=sys.stderr)
    failed = [r for r in outcome.results if r.get("status") not in EXPECTED]
    return 1 if failed else 0


def report(plan: reproduce.Plan, db: Path, fmt: str) -> str:
    """The reproduction report from what the database holds of the plan's sweep."""
    from dlperf.report import reproduction, results

    with Store(db, readonly=True) as store:
        found = results.load(store, plan.sweep.name)
    mine = [r for r in found if r.get("case_key") in plan.all_keys]
    built = reproduction.build(plan, results.with_scaling(mine),
                               f"sweep {plan.sweep.name} in {db}")
    return reproduction.to_markdown(built) if fmt == "md" else reproduction.to_html(built)
