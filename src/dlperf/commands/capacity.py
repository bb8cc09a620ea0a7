"""``dlperf capacity``: the largest batch size (or knob) that fits, or a table over sizes."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, outputs, session
from dlperf.envs import selection
from dlperf.commands import HELP
from dlperf.commands._flags import add_case_arguments, add_db_argument, case_from_args, integer
from dlperf.errors import UsageError
from dlperf.host import measurelock
from dlperf.studies import capacity


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "capacity", help=HELP["capacity"])
    add_case_arguments(parser)
    parser.set_defaults(repeats=1, steps=capacity.PROBE_STEPS,
                        warmup_steps=capacity.PROBE_WARMUP)
    parser.add_argument("--param", required=True,
                        help="batch_size or an integer knob of the model (see `dlperf models`)")
    parser.add_argument("--from", dest="start", default=None, metavar="N",
                        help="first size probed (default: the case's own value); K/M/G allowed")
    parser.add_argument("--to", dest="stop", default=None, metavar="N",
                        help="never probe above this size; with --table, the last size")
    parser.add_argument("--resolution", type=integer, default=None,
                        help="stop bisecting when the bounds are this close (default: 5%% of "
                             "the largest size that ran, at least 1)")
    parser.add_argument("--memory-limit", default=None, metavar="SIZE",
                        help="host memory each worker may use, e.g. 8GiB (RLIMIT_DATA on "
                             "the worker); default: the machine's")
    parser.add_argument("--table", action="store_true",
                        help="probe --from, x2, ... --to without searching: a table of "
                             "throughput, latency per iteration and peak memory per size")
    add_db_argument(parser)
    parser.add_argument("--json", type=Path, help="also write the probes and answer here")
    measurelock.add_argument(parser)
    return parser


def build_search(args: argparse.Namespace) -> capacity.Search:
    case = case_from_args(args)
    capacity.check_param(case, args.param)
    current = case.batch_size if args.param == "batch_size" else case.knobs[args.param]
    start = capacity.parse_count(args.start, "--from") if args.start else int(current)
    stop = capacity.parse_count(args.stop, "--to") if args.stop else None
    if stop is not None and stop < start:
        raise UsageError(f"--to: {stop} must be at least --from ({start})")
    if args.table and stop is None:
        raise UsageError("--to: needed with --table (the last size of the table)")
    limit = capacity.parse_bytes(args.memory_limit) if args.memory_limit else None
    search = capacity.Search(case=case, param=args.param, start=start, stop=stop,
                             resolution=args.resolution, memory_limit_bytes=limit)
    search.with_value(start)  # a knob value the model refuses is a usage error now, not a probe
    return search


def say(message: str) -> None:
    display.out.print(display.line(message))


def show_probe(found: capacity.Probe) -> None:
    what = "ok" if found.status == "ok" else f"{found.status}: {found.error}"
    say(f"  {found.value}: {what}")


def table(search: capacity.Search) -> Table:
    out = Table(title=f"{search.case.framework} {search.case.model}: {search.param}"
                      + (f" under {display.human_bytes(search.memory_limit_bytes)}"
                         if search.memory_limit_bytes else ""))
    for name in ("value", "status", "samples/s", "latency / iteration", "peak host mem",
                 "peak device mem"):
        out.add_column(name, justify="left" if name == "status" else "right")
    for found in sorted(search.probes, key=lambda p: p.value):
        out.add_row(str(found.value), Text(found.status), display.number(found.throughput),
                    f"{found.latency_s * 1000:.1f} ms" if found.latency_s else "-",
                    display.human_bytes(found.peak_host_bytes),
                    display.human_bytes(found.peak_device_bytes))
    return out


def main(args: argparse.Namespace) -> int:
    search = build_search(args)
    outputs.check_writable("--json", args.json)
    selection.case_python(search.case.framework, search.case.env)
    answer: dict[str, Any] = {"param": search.param, "case": search.case.to_dict(),
                              "memory_limit_bytes": search.memory_limit_bytes}
    code = 0
    with session.measuring(args.db, wait=not args.no_wait, probe_peaks=False) as opened:
        say(f"probing {search.param} of {search.case.label()} (each probe: a fresh "
            f"worker, {search.case.steps} steps, stored in {args.db})")
        try:
            if args.table:
                assert search.stop is not None  # build_search refuses --table without --to
                for value in capacity.series(search.start, search.stop):
                    capacity.probe(search, value, opened.store, opened.env, show_probe)
            else:
                low, high = capacity.largest(search, opened.store, opened.env, show_probe)
                answer.update(largest=low, smallest_failing=high)
        except capacity.Stopped as stop:
            answer.update(stopped=str(stop))
            code = 1
        except KeyboardInterrupt:
            display.out.print(table(search))
            raise
    display.out.print(table(search))
    if "stopped" in answer:
        display.warn(f"search stopped: {answer['stopped']} (only out-of-memory bounds a "
                     f"capacity search)")
    elif not args.table:
        low, high = answer["largest"], answer["smallest_failing"]
        if low is None:
            say(f"nothing fits: {search.param}={high} already runs out of memory")
            code = 1
        elif high is None:
            say(f"largest {search.param}: at least {low} (no probe ran out of memory"
                         f"{' up to --to' if search.stop else ''})")
        else:
            say(f"largest {search.param} that fits: {low} ({high} runs out of memory; "
                         f"resolution {search.step_within(low)})")
    answer["probes"] = [dataclasses.asdict(p) for p in search.probes]
    if args.json:
        outputs.write_json(args.json, answer)
    return code
