"""``dlperf collectives``: all-reduce, all-gather, reduce-scatter and broadcast over a range of
message sizes through a framework's own collective path, on 2+ processes of this host or across
(emulated) hosts; printed as nccl-tests prints them, stored, and fitted by the latency-bandwidth
model a projection reads (:mod:`dlperf.collective_model`). ``--show`` lists the stored models."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dlperf import collective_model, display, outputs, session, stats
from dlperf.commands import HELP
from dlperf.commands._flags import (add_db_argument, add_emulation_arguments,
                                    add_environment_arguments, add_rendezvous_arguments,
                                    add_timeout_argument, environment_fields, link_from_args,
                                    nnodes_from_args, integer, rendezvous_from_args)
from dlperf.envs import selection
from dlperf.errors import UsageError
from dlperf.host import measurelock
from dlperf.launchers import emulated, launch, registry
from dlperf.spec import frameworks
from dlperf.store import Store
from dlperf.studies import collectives as study

DEFAULT_OPS = ("allreduce", "allgather", "broadcast")
DEFAULT_SIZES = "4K:64M"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("collectives", help=HELP["collectives"])
    parser.add_argument("--framework", default="torch", choices=frameworks(),
                        help="whose collectives (default torch)")
    parser.add_argument("--path", default=None,
                        help="the framework's collective path (torch: gloo, nccl, horovod, "
                             "horovod-mpi; docs/collectives.md lists every framework's); "
                             "default: its first CPU path")
    parser.add_argument("--nproc", type=integer, default=2,
                        help="processes per node (default 2)")
    parser.add_argument("--nnodes", type=integer, default=None,
                        help="nodes (default 1, --emulate-hosts, or the Slurm step's)")
    parser.add_argument("--ops", default=None, metavar="OP,OP",
                        help="operations: allreduce, allgather, reducescatter, broadcast, "
                             f"pushpull (default {','.join(DEFAULT_OPS)}, those of them the "
                             "path has; a path with none of them: all of its own)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, metavar="A:B|A,B,...",
                        help="message sizes in bytes (K, M, G: powers of 1024): A:B every "
                             f"doubling from A to B, or a list (default {DEFAULT_SIZES})")
    parser.add_argument("--iters", type=integer, default=20,
                        help="timed iterations per operation and size (default 20)")
    parser.add_argument("--warmup", type=integer, default=5,
                        help="untimed iterations before them (default 5)")
    parser.add_argument("--threads-per-process", type=integer, dest="threads",
                        help="CPU threads of each process, and as many CPUs, which it is pinned "
                             "to (default: the node's cores divided among its processes)")
    add_timeout_argument(parser, 900.0, "seconds the whole job may take (default 900)")
    add_environment_arguments(parser)
    add_rendezvous_arguments(parser)
    add_emulation_arguments(parser)
    add_db_argument(parser)
    parser.add_argument("--json", type=Path, help="also write the measurement to this file")
    parser.add_argument("--show", action="store_true",
                        help="list the models stored in --db instead of measuring")
    measurelock.add_argument(parser)
    # --emulate-hosts writes each node's command line from the parsed flags with it
    parser.set_defaults(collectives_parser=parser)
    return parser


def request_from_args(args: argparse.Namespace) -> study.Request:
    """The job the flags ask for; UsageError (one line naming the flag) when they cannot."""
    path = study.path_named(args.framework, args.path)
    wanted = args.ops or ",".join(op for op in DEFAULT_OPS if op in path.ops) or ",".join(
        path.ops)
    fields = environment_fields(args)
    if args.timeout_s <= 0:
        raise UsageError(f"--timeout: {args.timeout_s!r} must be seconds > 0")
    return study.Request(
        framework=args.framework, path=path, ops=study.parse_ops(wanted, path, args.framework),
        sizes=study.parse_sizes(args.sizes), iters=args.iters, warmup=args.warmup,
        nproc=args.nproc, nnodes=nnodes_from_args(args), env=fields["env"],
        threads=args.threads, link=link_from_args(args), timeout_s=args.timeout_s,
        label=fields["run_label"])


def main(args: argparse.Namespace) -> int:
    if args.show:
        return show_models(args.db)
    request = request_from_args(args)
    outputs.check_writable("--json", args.json)
    selection.case_python(request.framework, request.env)  # installed, or one line saying how
    if args.emulate_hosts is not None:
        return emulated.run(args, args.collectives_parser, [request.case()])
    rendezvous = rendezvous_from_args(args, request.case())
    launcher = registry.launcher_for(request.case(), rendezvous)
    if isinstance(launcher, launch.MultiLauncher) and not launcher.is_master(request.case()):
        return peer(request, launcher, args.json)
    with session.measuring(args.db, wait=not args.no_wait, probe_peaks=False) as opened:
        result = study.run_job(request, launcher)
        if result["status"] == "ok":
            rows = study.rows(request, result)
            result["run"] = opened.store.add_collectives(rows)
            fitted = [model for model in collective_model.models(opened.store)
                      if model.run == result["run"]]
    measured = {"framework": request.framework, "path": request.path.name,
                "nproc": request.nproc, "nnodes": request.nnodes, "link": request.link or None,
                "status": result["status"], "error": result.get("error"),
                "run": result.get("run"), "host": result.get("host"),
                "facts": result.get("facts"), "launch": result.get("launch")}
    if result["status"] != "ok":
        display.warn(f"{result['status']}: {result['error']}")
        write(args.json, measured)
        return 1
    measured["rows"] = [json_row(row) for row in rows]
    measured["models"] = [model_json(model) for model in fitted]
    show_rows(rows, request)
    show_fits(fitted)
    write(args.json, measured)
    return 0


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row as the table shows it, for --json: its summary and, where the worker took
    it, its CPU per iteration (``cpu_us``, the busiest rank's median), not its raw times."""
    out = {name: row[name] for name in row if name not in ("times", "detail")}
    cpu = study.cpu_us(row)
    return out if cpu is None else {**out, "cpu_us": cpu}


def write(path: Path | None, payload: dict[str, Any]) -> None:
    if path:
        outputs.write_json(path, payload)


def peer(request: study.Request, launcher: launch.MultiLauncher, json_path: Path | None) -> int:
    """A node other than node 0: its ranks take part; node 0 stores the measurement."""
    rdzv = launcher.rendezvous
    display.err.print(f"node {rdzv.node_rank} of {request.nnodes}; node 0 at {rdzv.endpoint} "
                      f"stores the measurement")
    result = study.run_job(request, launcher)
    marker = {"status": result["status"], "error": result.get("error"),
              "node_rank": rdzv.node_rank, "stored_by": f"node 0 ({rdzv.master_addr})"}
    if result["status"] == "ok":
        display.out.print(f"node {rdzv.node_rank}: ok; node 0 stores the measurement")
    else:
        display.warn(f"node {rdzv.node_rank}: {result['status']}: {result['error']}")
    write(json_path, marker)
    return 0 if result["status"] == "ok" else 1


def show_rows(rows: list[dict[str, Any]], request: study.Request) -> None:
    """One table per operation, as nccl-tests prints: size, elements, time, algbw, busbw; then
    the CPU a call cost the busiest rank's process (median), and that per byte of the message."""
    ranks = request.nproc * request.nnodes
    for op in request.ops:
        title = (f"{request.framework} {request.path.name} {op}, {ranks} ranks "
                 f"({request.nproc}x{request.nnodes})"
                 + (f", link {request.link}" if request.link else "")
                 + f": slowest rank, {request.iters} iterations")
        table = display.new_table(title, [
            ("size", "right"), ("bytes", "right"), ("count", "right"), ("time us", "right"),
            ("p10-p90 us", "right"), ("algbw GB/s", "right"), ("busbw GB/s", "right"),
            ("CPU us", "right"), ("CPU ns/B", "right")])
        for row in (row for row in rows if row["op"] == op):
            cpu = study.cpu_us(row)
            table.add_row(display.human_bytes(row["bytes"]), str(row["bytes"]),
                          str(row["bytes"] // 4), f"{row['time_us']:.1f}",
                          f"{row['time_p10_us']:.1f}-{row['time_p90_us']:.1f}",
                          f"{row['algbw_gbs']:.3f}", f"{row['busbw_gbs']:.3f}",
                          "-" if cpu is None else f"{cpu:.1f}",
                          "-" if cpu is None or not row["bytes"]
                          else f"{cpu * 1e3 / row['bytes']:.3f}")
        display.out.print(table)


def fit_line(model: collective_model.Model) -> str:
    """One line: the fitted latency and bus bandwidth, and how far the fit is from the
    measured medians."""
    busbw = model.busbw_gbs
    bandwidth = (f"bus bandwidth {busbw:.3f} GB/s (algbw 1/beta {busbw / model.factor:.3f} "
                 f"GB/s, factor {model.factor:g})" if busbw is not None
                 else "no bandwidth term (the times do not grow with size)")
    return (f"{model.key.op}: t(m) = alpha + m x beta, alpha {model.alpha_us:.1f} us, "
            f"{bandwidth}; fit error median {model.fit.median_error:.1%}, max "
            f"{model.fit.max_error:.1%} over {len(model.sizes)} sizes"
            + (f" ({display.human_bytes(model.sizes[0])} and up: the keys its servers split)"
               if model.key.op == "pushpull" and model.split else ""))


def largest_calls(model: collective_model.Model) -> collective_model.CallSpread | None:
    """How surely the calls at the largest sizes (those a large transfer is priced from) pin
    their median (:meth:`dlperf.collective_model.Model.calls_at`)."""
    return model.calls_at(max(model.sizes)) if model.sizes else None


def calls_warning(model: collective_model.Model) -> str | None:
    """One line where the calls at the largest sizes leave their median open by more than the
    noisy-result threshold either side; None where they agree."""
    spread = largest_calls(model)
    if spread is None or spread.half_width <= stats.CV_WARN:
        return None
    return (f"{model.key.op}: calls spread: {spread.text()}; a projection priced here carries "
            f"it, and more calls (--iters) narrow it")


def show_fits(models: list[collective_model.Model]) -> None:
    for model in models:
        display.out.print(fit_line(model), soft_wrap=True)
        warning = calls_warning(model)
        if warning:
            display.warn(warning)


def model_json(model: collective_model.Model) -> dict[str, Any]:
    spread = largest_calls(model)
    return {"key": vars(model.key), "run": model.run, "alpha_us": model.alpha_us,
            "beta_s_per_byte": model.fit.beta_s, "busbw_gbs": model.busbw_gbs,
            "bus_factor": model.factor, "median_error": model.fit.median_error,
            "max_error": model.fit.max_error, "sizes": list(model.sizes), "host": model.host,
            "emulated": model.emulated, "device": model.device,
            "framework_version": model.framework_version, "measured_at": model.measured_at,
            "calls_at_largest": vars(spread) if spread else None}


def show_models(db: str) -> int:
    """--show: every stored key's model, from its newest run."""
    with Store(db, readonly=True) as store:
        found = collective_model.models(store)
    if not found:
        display.out.print(f"no collectives stored in {db}; measure some with `dlperf "
                          f"collectives`")
        return 0
    table = display.new_table(f"collective models in {db} (t = alpha + m x beta, the newest run "
                              f"of each)", [
        ("framework", "left"), ("path", "left"), ("op", "left"), ("ranks", "right"),
        ("link", "left"), ("env", "left"), ("run", "right"), ("sizes", "left"),
        ("alpha us", "right"), ("busbw GB/s", "right"), ("error med/max", "right"),
        ("largest sizes' median, 95 %", "right"), ("host", "left"), ("measured", "left")])
    for model in found:
        key = model.key
        spread = largest_calls(model)
        table.add_row(key.framework, key.path, key.op, f"{key.nproc}x{key.nnodes}",
                      key.link or "-", key.env or "-", str(model.run),
                      f"{display.human_bytes(model.sizes[0])}-"
                      f"{display.human_bytes(model.sizes[-1])}",
                      f"{model.alpha_us:.1f}", display.number(model.busbw_gbs, 3),
                      f"{model.fit.median_error:.1%}/{model.fit.max_error:.1%}",
                      "-" if spread is None else f"{spread.low:+.1%}/{spread.high:+.1%}",
                      model.host + (" (emulated)" if model.emulated else ""),
                      model.measured_at)
    display.out.print(table)
    return 0
