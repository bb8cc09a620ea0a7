"""``dlperf external -- COMMAND``: measure somebody else's training script by its own log."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dlperf import display, outputs, runner, session
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument, add_timeout_argument
from dlperf.errors import UsageError
from dlperf.host import measurelock
from dlperf.numbers import finite_float
from dlperf.spec import PRECISIONS
from dlperf.studies.external import ExternalCase, ExternalRun


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "external", help=HELP["external"],
        description="Run COMMAND (after --) --repeats times, read its speed from its output and "
                    "store the median like any other case. Either --metric (per-step or "
                    "per-interval rate lines; harmonic mean after the warm-up lines) or "
                    "--step-regex with --samples-per-step (a step counter, timed by "
                    "--time-regex or by when each line arrived).")
    parser.add_argument("--name", required=True, help="what to call it, e.g. ngc-rn50")
    parser.add_argument("--metric", help="regex with one group: a rate, e.g. 'imgs_per_sec : ([\\d.]+)'")
    parser.add_argument("--step-regex", help="regex with one group: the step number")
    parser.add_argument("--time-regex",
                        help="regex with one group: the line's timestamp (seconds, ISO 8601 or "
                             "HH:MM:SS); default: when dlperf read the line")
    parser.add_argument("--samples-per-step", type=finite_float,
                        help="global samples per step (with --step-regex)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="rate lines (--metric) or steps (--step-regex) to skip (default 1)")
    parser.add_argument("--repeats", type=int, default=7, help="fresh runs (default 7)")
    add_timeout_argument(parser, 3600.0, "seconds one run may take (default 3600)")
    parser.add_argument("--unit", default="samples/s", help="unit of the rate (default samples/s)")
    parser.add_argument("--cwd", type=Path, help="directory to run the command in")
    described = parser.add_argument_group("what the command measures (for reports and compare)")
    described.add_argument("--framework", help="e.g. torch, or ngc-pytorch")
    described.add_argument("--model", help="e.g. resnet50")
    described.add_argument("--batch-size", type=int, help="per device")
    described.add_argument("--precision", default="fp32", choices=PRECISIONS)
    described.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False)
    described.add_argument("--devices", type=int, default=1)
    described.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--echo", action="store_true", help="show the command's output")
    add_db_argument(parser)
    parser.add_argument("--json", type=Path, help="also write the result object to this file")
    parser.add_argument("external_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the command to run, after --")
    measurelock.add_argument(parser)
    return parser


def case_from_args(args: argparse.Namespace) -> ExternalCase:
    command = list(args.external_command)
    if command and command[0] == "--":
        command = command[1:]
    if args.cwd is not None and not args.cwd.is_dir():
        raise UsageError(f"--cwd: {args.cwd} is not a directory")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size: {args.batch_size} must be >= 1")
    return ExternalCase(
        name=args.name, command=tuple(command), metric=args.metric, step_regex=args.step_regex,
        time_regex=args.time_regex, samples_per_step=args.samples_per_step, warmup=args.warmup,
        repeats=args.repeats, timeout_s=args.timeout_s, unit=args.unit,
        cwd=str(args.cwd) if args.cwd else None, framework=args.framework, model=args.model,
        batch_size=args.batch_size, precision=args.precision, compile=args.compile,
        devices=args.devices, nnodes=args.nnodes)


def main(args: argparse.Namespace) -> int:
    case = case_from_args(args)
    outputs.check_writable("--json", args.json)

    def on_repeat(record: dict[str, Any]) -> None:
        if record["status"] == "ok":
            how = (f"{len(record['rates'])} rate lines" if "rates" in record else
                   f"steps {record['steps'][0]:g}–{record['steps'][1]:g} in "
                   f"{record['window_s']:.2f} s")
            display.err.print(f"  repeat {record['repeat'] + 1}/{case.repeats}: "
                              f"{display.number(record['throughput'])} {case.unit} ({how}, "
                              f"run took {record['wall_s']:.1f} s)")
        else:
            display.err.print(display.line(f"  repeat {record['repeat'] + 1}/{case.repeats}: ",
                                           (record["status"], "red"), f": {record['error']}"))

    echo = (lambda line: display.err.print(f"    | {line}", markup=False, highlight=False)) \
        if args.echo else None
    with session.measuring(args.db, wait=not args.no_wait, probe_peaks=False) as opened:
        run = ExternalRun(case, store=opened.store, env=opened.env, on_repeat=on_repeat,
                          echo=echo)
        try:
            result = run.run()
        except runner.Interrupted as stop:
            display.results_table([stop.result])
            if args.json:
                outputs.write_json(args.json, stop.result)
            raise KeyboardInterrupt from None
    display.results_table([result])
    if args.json:
        outputs.write_json(args.json, result)
    return 0 if result["status"] == "ok" else 1
