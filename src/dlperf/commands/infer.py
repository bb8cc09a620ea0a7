"""``dlperf infer``: inference batch sweeps (offline, single-stream) and the server scenario."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, models, outputs, session
from dlperf.commands import HELP
from dlperf.commands._flags import (add_db_argument, add_environment_arguments,
                                    add_knob_arguments, add_profile_arguments,
                                    add_timeout_argument, environment_fields,
                                    profile_steps_from_args,
                                    add_warmup_arguments, knobs_from_args, integer)
from dlperf.envs import selection
from dlperf.errors import UsageError
from dlperf.host import measurelock
from dlperf.numbers import finite_float
from dlperf.spec import DEVICES, PRECISIONS, SCENARIOS, Case, frameworks
from dlperf.studies import infer, server

SERVER_FLAGS = ("target_latency_ms", "rate", "min_queries", "probes")


def int_list(text: str) -> list[int]:
    """'1,8,32' -> [1, 8, 32]; every value an integer >= 1."""
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not an integer; give batch sizes like 1,8,32") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is not allowed; batch sizes are >= 1")
        values.append(value)
    return values


def precision_list(text: str) -> list[str]:
    values = [item.strip() for item in text.split(",") if item.strip()]
    for value in values:
        if value not in PRECISIONS:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(PRECISIONS)}")
    if not values:
        raise argparse.ArgumentTypeError("give at least one precision")
    return values


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "infer", help=HELP["infer"],
        description="Inference throughput and latency (mean, p50, p90, p95, p99, p99.9 in ms; "
                    "numpy 'linear' percentiles over all repeats' iterations pooled) per batch "
                    "size, and the speedup over fp32 at the same batch size. The server scenario "
                    "finds the highest Poisson query rate whose p99 stays under a bound.")
    parser.add_argument("--framework", required=True, choices=frameworks())
    parser.add_argument("--model", required=True, choices=models.names())
    parser.add_argument("--precision", "--precisions", dest="precisions", type=precision_list,
                        default=["fp32"], metavar="P[,P...]",
                        help=f"one or more of {', '.join(PRECISIONS)} (default fp32)")
    parser.add_argument("--batch-sizes", "--batch-size", dest="batch_sizes", type=int_list,
                        metavar="B[,B...]",
                        help="batch sizes to sweep (default 1,8,32; single-stream and server: 1)")
    parser.add_argument("--scenario", default="offline", choices=SCENARIOS,
                        help="offline (batch sweep, default), single-stream (one sample per "
                             "query), server (Poisson arrivals, p99 bound)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile / XLA, as the framework offers")
    parser.add_argument("--device", default="auto", choices=DEVICES)
    add_knob_arguments(parser, partial_fc=False)
    add_warmup_arguments(parser, step="iteration")
    parser.add_argument("--steps", type=integer, default=100,
                        help="at least this many measured iterations (default 100)")
    parser.add_argument("--min-duration", type=finite_float, dest="min_duration_s", metavar="SECONDS",
                        help="and at least this long (default 0; server: "
                             f"{server.DEFAULT_MIN_DURATION_S:g} s of arrivals)")
    parser.add_argument("--repeats", type=integer, default=7,
                        help="fresh worker processes per batch size (default 7; server: each "
                             "probe is one)")
    parser.add_argument("--seed", type=integer, default=0,
                        help="weights, data and the Poisson arrivals")
    add_timeout_argument(parser, 1800.0, "seconds one repeat may take (default 1800)")
    add_profile_arguments(parser, step="iteration")
    add_environment_arguments(parser)
    group = parser.add_argument_group("server scenario")
    group.add_argument("--target-latency-ms", type=positive_float,
                       help="the p99 bound (required for --scenario server)")
    group.add_argument("--rate", type=positive_float, metavar="QPS",
                       help="offer this one rate instead of searching")
    group.add_argument("--min-queries", type=integer,
                       help=f"a valid probe serves at least this many (default "
                            f"{server.DEFAULT_MIN_QUERIES})")
    group.add_argument("--probes", type=integer,
                       help=f"bisection probes of the search (default {server.DEFAULT_PROBES})")
    add_db_argument(parser)
    parser.add_argument("--json", type=Path,
                        help="write the results as a JSON list (one per batch size / probe)")
    measurelock.add_argument(parser)
    return parser


def base_case(args: argparse.Namespace, batch_size: int) -> Case:
    knobs = knobs_from_args(args)
    min_duration = args.min_duration_s
    if min_duration is None:
        min_duration = server.DEFAULT_MIN_DURATION_S if args.scenario == "server" else 0.0
    return Case(framework=args.framework, model=args.model, task="infer",
                batch_size=batch_size, precision=args.precisions[0], compile=args.compile,
                device=args.device, knobs=knobs, warmup_steps=args.warmup_steps,
                warmup_max_steps=args.warmup_max_steps, steps=args.steps, repeats=args.repeats,
                seed=args.seed, timeout_s=args.timeout_s,
                scenario="offline" if args.scenario == "server" else args.scenario,
                min_duration_s=float(min_duration), profile_steps=profile_steps_from_args(args),
                **environment_fields(args))


def check_args(args: argparse.Namespace) -> None:
    """Flag combinations the parser cannot see; one line each."""
    if args.min_duration_s is not None and args.min_duration_s < 0:
        raise UsageError(f"--min-duration: {args.min_duration_s:g} must be >= 0")
    if args.scenario != "server":
        given = [f"--{name.replace('_', '-')}" for name in SERVER_FLAGS
                 if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{given[0]}: only for --scenario server")
        return
    if args.target_latency_ms is None:
        raise UsageError("--target-latency-ms: the server scenario needs a p99 bound in ms")
    if args.batch_sizes and len(args.batch_sizes) > 1:
        raise UsageError("--batch-sizes: the server scenario takes one query size, got "
                         + ",".join(map(str, args.batch_sizes)))
    if len(args.precisions) > 1:
        raise UsageError("--precision: the server scenario takes one precision")


def main(args: argparse.Namespace) -> int:
    check_args(args)
    outputs.check_writable("--json", args.json)
    if args.batch_sizes is None:
        args.batch_sizes = [1] if args.scenario in ("single-stream", "server") else [1, 8, 32]
    base = base_case(args, args.batch_sizes[0])
    selection.case_python(base.framework, base.env)  # one line, nothing stored, if it cannot run
    if args.scenario == "server":
        return main_server(args, base)
    cases = infer.sweep_cases(base, args.batch_sizes, args.precisions)
    with session.measuring(args.db, wait=not args.no_wait) as opened:
        try:
            results = infer.run_sweep(cases, opened.store, opened.env,
                                      progress=display.progress)
        except infer.SweepInterrupted as stop:
            show_sweep(stop.results)
            if args.json:
                outputs.write_json(args.json, stop.results)
            raise KeyboardInterrupt from None
    show_sweep(results)
    if args.json:
        outputs.write_json(args.json, results)
    return 0 if all(r["status"] == "ok" for r in results) else 1


def _title(result: dict[str, Any]) -> str:
    case = result["case"]
    knobs = ", ".join(f"{k} {v}" for k, v in case["knobs"].items()
                      if v != models.get(case["model"]).defaults.get(k))
    scenario = case.get("scenario", "offline")
    return (f"{infer.engine(case, result)} · {case['model']}{f' ({knobs})' if knobs else ''} · "
            f"inference, {scenario} · {case['device']}")


def show_sweep(results: list[dict[str, Any]]) -> None:
    if not results:
        return
    table = Table(title=_title(results[0]), caption="latency of one batch, ms; percentiles: "
                  "numpy 'linear' over all repeats' iterations pooled; throughput: median over "
                  "repeats")
    for column in infer.TABLE_COLUMNS:
        table.add_column(column, justify="left" if column in ("Precision", "Status") else "right")
    for row in infer.table_rows(results):
        cells: list[str | Text] = list(row)
        if row[-1] != "ok":
            cells[-1] = Text(row[-1], style="red")
        table.add_row(*cells)
    display.out.print(table)
    for result in results:
        label = result.get("label")
        if result["status"] != "ok":
            display.warn(f"{label}: {result['error']}")
        for warning in result.get("warnings") or []:
            display.warn(f"{label}: {warning}")


def main_server(args: argparse.Namespace, base: Case) -> int:
    settings = server.Settings(
        target_latency_ms=args.target_latency_ms,
        min_queries=args.min_queries or server.DEFAULT_MIN_QUERIES,
        min_duration_s=base.min_duration_s,
        probes=args.probes or server.DEFAULT_PROBES,
        rate_qps=args.rate)
    server.probe_case(base, settings, args.rate or 1.0)  # SpecError now for a bad server field
    with session.measuring(args.db, wait=not args.no_wait) as opened:
        try:
            outcome = server.run(base, settings, opened.store, opened.env,
                                 progress=display.progress)
        except server.SearchInterrupted as stop:
            show_server(stop.outcome)
            if args.json:
                outputs.write_json(args.json, stop.outcome.probes)
            raise KeyboardInterrupt from None
    show_server(outcome)
    if args.json:
        outputs.write_json(args.json, outcome.probes)
    failed = [r for r in outcome.probes + ([outcome.capacity] if outcome.capacity else [])
              if r["status"] != "ok"]
    return 1 if failed else 0


def show_server(outcome: server.RateSearch) -> None:
    target = outcome.settings.target_latency_ms
    if outcome.capacity is not None:
        latency = outcome.capacity.get("latency_ms") or {}
        if latency:
            display.out.print(
                f"unloaded (queries back to back): mean {latency['mean']:.2f} ms, p99 "
                f"{latency['p99']:.2f} ms -> capacity about {outcome.capacity_qps or 0:.3g} "
                f"queries/s")
    if outcome.probes:
        first = outcome.probes[0]
        table = Table(title=f"{_title(first).replace('offline', 'server')} · p99 bound "
                            f"{target:g} ms",
                      caption="latency from each query's scheduled (Poisson) arrival, ms; "
                              "valid = at least the minimum queries and duration, not stopped "
                              "early")
        for column in ("Rate (q/s)", "Achieved (q/s)", "Queries", "Duration (s)", "Busy", "p50",
                       "p90", "p95", "p99", "p99.9", f"p99 <= {target:g} ms", "Valid", "Status"):
            table.add_column(column, justify="left" if column in ("Status",) else "right")
        for result in outcome.probes:
            srv = result.get("server") or {}
            latency = result.get("latency_ms") or {}
            achieved = srv.get("achieved_qps")
            busy = srv.get("busy_fraction")
            table.add_row(
                f"{result['case']['server']['rate_qps']:g}",
                "-" if achieved is None else f"{achieved:.3g}",
                "-" if not srv else f"{srv['completed']}/{srv['scheduled']}",
                "-" if not srv else f"{srv['span_s']:.1f}",
                "-" if busy is None else f"{busy:.0%}",
                *(infer._ms(latency, k) for k in ("p50", "p90", "p95", "p99", "p99_9")),
                display.line(("yes", "green") if srv.get("meets_target") else ("no", "red"),
                             " (peak)" if srv.get("peak") else ""),
                "-" if not srv else ("yes" if srv.get("valid") else
                                     "no: stopped early" if srv.get("early_stop") else "no"),
                Text(result["status"], style="" if result["status"] == "ok" else "red"))
        display.out.print(table)
        for result in outcome.probes:
            if result["status"] != "ok":
                display.warn(f"{result['label']}: {result['error']}")
    if outcome.peak is not None:
        peak = outcome.peak
        latency, srv = peak["latency_ms"], peak["server"]
        display.out.print(display.line(
            (f"peak rate with p99 <= {target:g} ms: {srv['rate_qps']:g} queries/s", "bold"),
            f" (p50 {latency['p50']:.2f}, p90 {latency['p90']:.2f}, p99 {latency['p99']:.2f} ms; "
            f"{srv['completed']} queries over {srv['span_s']:.1f} s; "
            f"{'valid' if srv['valid'] else 'NOT valid'})"))
    if outcome.note:
        display.warn(outcome.note)
