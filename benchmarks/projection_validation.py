"""Validate `dlperf project` on this machine, against what was measured: the error per case, in
a table.

Across emulated hosts: each shaped 2-host case of a link-rate sweep (sweeps/link-rates.yaml,
run with `dlperf sweep ... --emulate-hosts`) projected from its framework's 1-process result,
leaving out every result at the target's own rate: the multi-process overhead from the same
engine's unshaped 2-host result (its all-reduce is short), the overlap window from its shaped
result at the fastest other rate whose step shows part of its all-reduce exposed past the window
(else the slowest other rate; ``--window-from`` chooses another rule, to compare: WINDOW_RULES).

    python benchmarks/projection_validation.py --db link-rates.db [--json v.json] [--markdown v.md]

From a node: where the database holds the configuration on one node of as many processes as
each target host has (2 emulated hosts of 2 processes beside 1 node of 2, measured on one CPU
as each emulated host has one: benchmarks/data/from-node-2x2-xeon-2026-12-04/measure.sh), each
2-host case is projected from that node instead, as `dlperf project` projects a node's result
to more nodes of as many devices; the overhead and window as above, from the 2-host cases of
as many processes a host.

On one host (`--one-host`, sweeps/projection-one-host.yaml): each framework's 2-process case at
the largest batch projected from its 1-process case at that batch, the overlap window from its
2-process case at the next smaller batch (set against its own 1-process case), the multi-process
overhead fitted as a fixed time plus a share through the 2-process cases at that batch and the
one below it where both batches are stored with their 1-process cases (else, as an older
database holds two batch sizes only, from the window's case alone: a share, its fixed-time
reading beside it; the table's overhead column says which), the link between the processes the
framework's stored all-reduce model (`dlperf collectives --nproc 2` into the same database) or
else the window's case's own gradient probe.

    python benchmarks/projection_validation.py --db one-host.db --one-host

A data folder's stored results (`dlperf results --json`, benchmarks/data/*/results.json) stand in
for the database they came from (`--results FILE` instead of `--db`: loaded into a temporary one,
under the sweep's name, with the folder's `collectives.json` where it keeps the `dlperf
collectives` runs its measured links came from), so every table there can be made again from git
alone; a folder without that file falls back to the wire and path, or the probe.

    python benchmarks/projection_validation.py --results benchmarks/data/DIR/results.json [--one-host]

The links between the hosts: the framework's measured all-reduce model over that link where
`dlperf collectives --emulate-hosts 2 --link RATE` stored one in the same database, else the
wire and the framework's own path together (dlperf.projection.links.path_and_wire_s): the wire is
the gradient's bytes at the shaped rate's TCP payload share (dlperf.host.emulated.PAYLOAD_SHARE),
the path the unshaped result's all-reduce probe (a framework whose ring moves 2 Gbit/s gains
nothing from a 10 Gbit/s link), and the share of the path in series with the wire read from
the probe of the shaped result at another rate whose wire time is nearest the path's (where
the two differ most). An unshaped case is the source of the overhead and the path, so it is not
validated (it would be its own answer).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from dlperf import cli, scaling, spec
from dlperf.host import emulated
from dlperf.projection.error import median_abs
from dlperf.projection.links import RING, link_bytes, path_and_wire_s
from dlperf.worker.collectives import bus_factor
from dlperf.store import Store


#: beside a data folder's results.json, its `dlperf collectives` runs (a list of each run's
#: rows, as `Store.collectives` reads them), where the validation used a measured link
COLLECTIVES = "collectives.json"


def refuse(line: str) -> NoReturn:
    """Bad input: its one line on stderr, exit 2 (the project's rule for it)."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


def load(stored: Path, db: Path, sweep: str) -> None:
    """Stored results (a JSON list, `dlperf results --json`) into a new database ``db``, each a
    run of ``sweep`` in the file's order; each takes its new run id (its old one is dropped).
    The folder's :data:`COLLECTIVES`, where it has one, goes in beside them."""
    try:
        found = json.loads(stored.read_text())
    except (OSError, ValueError) as error:
        refuse(f"--results: {stored}: not a JSON list of results ({error})")
    if not isinstance(found, list) or not all(isinstance(r, dict) and "case" in r
                                              for r in found):
        refuse(f"--results: {stored}: not a JSON list of results")
    models = stored.parent / COLLECTIVES
    runs = json.loads(models.read_text()) if models.is_file() else []
    with Store(db) as store:
        for result in found:
            result = {k: v for k, v in result.items() if k != "run_id"}
            run = store.start_run(str(result.get("case_key") or ""), str(result.get("label")),
                                  result["case"], result.get("env") or {}, sweep=sweep)
            store.finish_run(run, result)
        for rows in runs:  # each `dlperf collectives` run's rows, as measured
            store.add_collectives(rows)


def results(db: Path, sweep: str | None) -> list[dict[str, Any]]:
    with Store(db, readonly=True) as store:
        rows = store.runs("result_json IS NOT NULL AND status = 'ok'" +
                          (" AND sweep = ?" if sweep else ""), (sweep,) if sweep else ())
        out = []
        for row in rows:
            result = store.decode(row)
            result.setdefault("run_id", row["id"])
            out.append(result)
    return out


def validated(target: dict[str, Any], made: dict[str, Any], engine: str, link: str,
        how: str) -> dict[str, Any]:
    """One validated case: what was measured beside the projection of its one target."""
    point = made["points"][0]["throughput"]
    measured = float(target["throughput"]["median"])
    return {"framework": target["case"]["framework"], "engine": engine, "link": link,
            "measured": measured, "projected": point,
            "error": point["value"] / measured - 1,
            "inside": point["low"] <= measured <= point["high"],
            "links": how, "overlap": made["model"]["overlap"]}


def window_text(row: dict[str, Any]) -> str:
    """The overlap window in ms and where it was read (the share of that result's all-reduce
    it is, for an older projection without a window)."""
    overlap = row["overlap"]
    if overlap["value"] is None:
        return "—"
    if overlap.get("window_s") is None:
        return f"{overlap['value']:.0%}"
    if overlap.get("whole_step"):  # a parameter server's, across nodes: read from nothing
        return f"whole step ({overlap['window_s'] * 1e3:.0f} ms)"
    where = f" (from {row['window_from']})" if row.get("window_from") else ""
    return f"{overlap['window_s'] * 1e3:.0f} ms{where}"


def overhead_text(overlap: dict[str, Any], batches: list[int] | None = None) -> str:
    """The overhead's share of the step, and its reading as a fixed time where it differs; or,
    fitted, its fixed time plus its share; and (``batches``, on one host) the batch sizes it
    was read at: one, or the two of the fit."""
    at = f" (batch {'+'.join(map(str, batches))})" if batches else ""
    if overlap.get("overhead_s") is not None:
        return f"{overlap['overhead_s'] * 1e3:.0f} ms + {overlap.get('overhead', 0):.0%} fit{at}"
    text = f"{overlap.get('overhead', 0):.0%}"
    if overlap.get("overhead_fixed") is not None and overlap.get("overhead"):
        text += f" ({overlap['overhead_fixed']:.0%} fixed)"
    return text + at


def sent_bytes(result: dict[str, Any]) -> float:
    """The gradient all-reduce's bytes over each host's link in a ring (nccl-tests' bus
    bytes)."""
    ranks = scaling.total_devices(result["case"])
    return 4 * int(result["model"]["params"]) * bus_factor("allreduce", ranks)


def wire_share(result: dict[str, Any]) -> float:
    """What the result's engine puts on the wire as a share of a ring's bytes (its backend's
    declaration, dlperf.worker.support.Wire; Horovod's ring)."""
    case = result["case"]
    return spec.wire_of(case["framework"], case.get("launcher"), "cpu").share


def exchange_share(result: dict[str, Any], devices: int, nodes: int) -> float:
    """A ring-counted bus bandwidth (a probe's, or bytes over a time) as a link for the result's
    engine at ``devices`` x ``nodes``: what its exchange puts on a link over a ring's (1 for a
    ring; for a parameter server, d on one node against the ring's 2(d-1)/d)."""
    case = result["case"]
    exchange = spec.wire_of(case["framework"], case.get("launcher"), "cpu").exchange
    return (link_bytes(exchange, devices, nodes)
            / link_bytes(RING, devices, nodes))


def wire_s(result: dict[str, Any], bits: float) -> float:
    """The gradient all-reduce's time on the wire at the TCP payload a link shaped to ``bits``
    per second carries: the engine's own bytes (a ring's times its wire share)."""
    return sent_bytes(result) * wire_share(result) / (bits / 8 * emulated.PAYLOAD_SHARE)


#: how the validation chooses the shaped result the overlap window is read from (``--window-from``;
#: docs/projection.md, "Which rate the window is read from"): of the engine's shaped results at
#: other rates than the target's, the fastest whose step shows part of its all-reduce exposed
#: (:func:`dlperf.scaling.shows_exposed`, the rule `dlperf project` follows where no
#: source is named; a source that hid the whole of it bounds the window from below only),
#: else the slowest (the default: a window is read as the all-reduce less what the step shows of
#: it, so the shorter the source's all-reduce, the fewer seconds its error is); the slowest (its
#: all-reduce the longest, the most exposed: the rule until 2026-12-04), the nearest in rate
#: (ties to the faster), or the fastest
WINDOW_RULES = ("exposed", "slowest", "nearest", "fastest")
DEFAULT_WINDOW_RULE = "exposed"


def window_candidates(target: dict[str, Any], shaped: list[dict[str, Any]],
                      rule: str = DEFAULT_WINDOW_RULE) -> list[dict[str, Any]]:
    """The same engine's shaped results at other rates than ``target``'s, in the order ``rule``
    (:data:`WINDOW_RULES`) tries them: the first is the source, but under "exposed", which goes
    from the fastest and takes the first whose window leaves part of its all-reduce exposed."""
    others = [r for r in shaped if scaling.link_bits(r) != scaling.link_bits(target)]
    fastest_first = sorted(others, key=lambda r: -(scaling.link_bits(r) or 0))
    if rule in ("fastest", "exposed"):
        return fastest_first
    if rule == "nearest":
        own = scaling.link_bits(target) or 1
        return sorted(fastest_first,
                      key=lambda r: round(abs(math.log((scaling.link_bits(r) or 1) / own)), 6))
    return fastest_first[::-1]


def serial_source(target: dict[str, Any], shaped: list[dict[str, Any]],
                  path_s: float) -> dict[str, Any] | None:
    """Of the same engine's shaped results at other rates than ``target``'s with an all-reduce
    probe, the one whose wire time is nearest the path's: there the path's share in series with
    the wire changes the all-reduce most (over a much slower wire it is lost in the wire's
    own error)."""
    others = [r for r in shaped if scaling.link_bits(r) != scaling.link_bits(target)
              and scaling.allreduce_seconds(r) is not None]
    return min(others, default=None,
               key=lambda r: abs(math.log(wire_s(r, scaling.link_bits(r) or 1) / path_s)))


def links_of(target: dict[str, Any], unshaped: dict[str, Any],
             shaped: list[dict[str, Any]]) -> tuple[str, str]:
    """The ``--inter`` of a target without a measured model over its link: the wire and the
    unshaped result's path together, the path's serial share from another rate's result; and
    how, in words."""
    bits = scaling.link_bits(target) or 0
    wire = wire_s(target, bits)
    path = scaling.allreduce_seconds(unshaped)
    if path is None:
        return f"{bits * emulated.PAYLOAD_SHARE / 1e6:.0f}mbit@0us", \
            f"the wire: {target['case']['link']} (no path probe)"
    source = serial_source(target, shaped, path)
    serial = 0.0
    if source is not None:
        probed = scaling.allreduce_seconds(source) or 0.0
        serial = scaling.serial_share(
            probed, wire_s(source, scaling.link_bits(source) or 1), path)
    seconds = path_and_wire_s(wire, path, serial)
    # the combined time as a rate of its bytes on the wire: `dlperf project` puts the engine's
    # share of a ring's bytes on a link given as a rate, as its exchange moves them (a
    # parameter server's, one worker a host: a ring's bytes on each link)
    case = target["case"]
    rate = (sent_bytes(target) * wire_share(target) * 8 / seconds
            * exchange_share(target, int(case.get("devices") or 1), int(case["nnodes"])))
    how = (f"wire {wire * 1e3:.0f} ms + path {path * 1e3:.0f} ms x {serial:.0%} in series "
           f"({'from ' + source['case']['link'] if source else 'no other rate'})")
    return f"{rate / 1e6:.0f}mbit@0us", how


def start_of(target: dict[str, Any], found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a 2-host ``target`` is projected from: its configuration's one node of as many
    processes where one was measured (the check from a node: its processes' loss within the
    node is measured, the nodes added), else its 1-process result (the framework's own
    engine: a Horovod target is projected from it)."""
    same = [r for r in found if scaling.config(r) == scaling.config(target)
            and (r["case"].get("launcher") or "native") == "native"]
    devices = int(target["case"].get("devices") or 1)
    node = next((r for r in same if int(r["case"].get("nnodes") or 1) == 1
                 and int(r["case"].get("devices") or 1) == devices > 1), None)
    return node or next((r for r in same if scaling.total_devices(r["case"]) == 1), None)


def project(db: Path, start: dict[str, Any], target: dict[str, Any], unshaped: dict[str, Any],
            shaped: list[dict[str, Any]], rule: str = DEFAULT_WINDOW_RULE) -> dict[str, Any]:
    """The shaped 2-host ``target`` from ``start`` (1 process, or a node of as many processes
    as each of the target's hosts, :func:`start_of`): the overhead from
    ``unshaped``, the window from the same engine's shaped results as ``rule`` chooses
    (:func:`window_candidates`; with none, both from ``unshaped``)."""
    candidates = window_candidates(target, shaped, rule)
    if rule == "exposed" and candidates:
        for window in candidates:
            row = project_from(db, start, target, unshaped, shaped, window)
            if scaling.shows_exposed(row["overlap"]):
                return row
        return row  # none exposed: the slowest's, tried last
    return project_from(db, start, target, unshaped, shaped, next(iter(candidates), None))


def dlperf_project(argv: list[str]) -> tuple[int, str]:
    """`dlperf project ARGV` as the command line runs it (``dlperf.cli.main``), in this
    process: its exit code and what it wrote to stderr (stdout is dropped: the projection is
    read from its ``--json``). A table makes 8-40 projections; a fresh interpreter for each paid
    a third of a second of imports every time, most of the table's CPU time. The signal handlers
    ``main`` installs are put back after."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            code = cli.main(["project", *argv])
    except SystemExit as stop:  # argparse refusing a flag: the status a process exits with
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:  # a message: the interpreter prints it and exits 1
            code = 1
            stderr.write(f"{stop.code}\n")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return code, stderr.getvalue()


def project_from(db: Path, start: dict[str, Any], target: dict[str, Any],
                 unshaped: dict[str, Any], shaped: list[dict[str, Any]],
                 window: dict[str, Any] | None) -> dict[str, Any]:
    """The shaped 2-host ``target`` from ``start``, its window read from ``window`` (None: both
    window and overhead from ``unshaped``; ``shaped`` for the links where none was measured)."""
    case = target["case"]
    link = case.get("link") or ""
    engine = case.get("launcher") or "native"
    sources = (["--overlap-from", str(window["run_id"]), "--overhead-from",
                str(unshaped["run_id"])] if window is not None
               else ["--overlap-from", str(unshaped["run_id"])])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        base = [str(start["run_id"]), "--db", str(db), "--devices-per-node",
                str(case.get("devices") or 1), "--nnodes", str(case["nnodes"]),
                "--intra", "1000gbit", *sources, "--no-store", "--json", str(out)]
        base += ["--launcher", engine]  # its packing: the engine's declaration
        code, stderr = dlperf_project([*base, "--inter", f"measured:{link}"])
        how = f"measured model over {link}"
        if code == 2 and "no collective model" in stderr:
            rate, how = links_of(target, unshaped, shaped)
            code, stderr = dlperf_project([*base, "--inter", rate])
        if code != 0:
            raise SystemExit(f"dlperf project failed for {target['label']}: {stderr}")
        made = json.loads(out.read_text())
    row = validated(target, made, engine, link, how)
    row["window_from"] = window["case"]["link"] if window is not None else "unshaped"
    return row


def project_one_host(db: Path, start: dict[str, Any], target: dict[str, Any],
                     source: dict[str, Any], fit: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """The 2-process ``target`` from the 1-process ``start`` at its batch, the overlap and the
    overhead from ``source`` (2 processes at another batch); with ``fit`` (2 processes at a
    third batch) the overhead fitted through ``fit`` and ``source``."""
    case = target["case"]
    fitting = ["--overhead-from", str(fit["run_id"]), "--overhead-from",
               str(source["run_id"])] if fit is not None else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        base = [str(start["run_id"]), "--db", str(db), "--devices-per-node",
                str(case["devices"]), "--nnodes", "1", "--overlap-from", str(source["run_id"]),
                *fitting, "--no-store", "--json", str(out)]
        code, stderr = dlperf_project([*base, "--intra", "measured"])
        how = "its stored all-reduce model"
        if code == 2 and "no collective model" in stderr:
            path = scaling.allreduce_bus_bandwidth(source)
            if path is None:
                raise SystemExit(f"{source['label']}: no all-reduce probe and no stored model")
            how = f"its probe at batch {source['case']['batch_size']}: " \
                  f"{path * 8 / 1e9:.2g} Gbit/s"
            # the probe's bus bandwidth counts a ring's bytes; as a link given as a rate it
            # carries the engine's own (`dlperf project` puts its wire share on it), as its
            # exchange moves them (a parameter server's takes d times a message a link where
            # a ring's takes 2(d-1)/d: the same probe time either way)
            line = path * wire_share(source) * exchange_share(source, int(case["devices"]), 1)
            code, stderr = dlperf_project([*base, "--intra", f"{line * 8 / 1e6:.0f}mbit@0us"])
        if code != 0:
            raise SystemExit(f"dlperf project failed for {target['label']}: {stderr}")
        made = json.loads(out.read_text())
    row = validated(target, made, "native", "one host", how)
    row["overhead_from"] = sorted(r["case"]["batch_size"] for r in (fit, source)
                                  if r is not None)
    return row


def one_host_sources(found: list[dict[str, Any]], framework: str) -> dict[str, Any] | None:
    """The results a framework's one-host check reads: the 1- and 2-process cases at its
    largest batch (start, target), the 2-process case at the next smaller batch (the window's
    and the overhead's source) and, where the batch below that is stored on 1 and 2 processes,
    its 2-process case (the overhead's second batch: ``fit``, else None); None where a needed
    case is missing."""
    def at(devices: int, batch: int) -> dict[str, Any] | None:
        return next((r for r in reversed(found) if r["case"]["framework"] == framework
                     and scaling.total_devices(r["case"]) == devices
                     and r["case"]["batch_size"] == batch), None)

    batches = sorted({r["case"]["batch_size"] for r in found
                      if r["case"]["framework"] == framework})
    if len(batches) < 2:
        return None
    large, window = batches[-1], batches[-2]
    chosen = {"start": at(1, large), "target": at(2, large), "source": at(2, window)}
    if any(v is None for v in chosen.values()) or at(1, window) is None:
        return None
    below = batches[-3] if len(batches) > 2 else None
    fit = at(2, below) if below is not None and at(1, below) is not None else None
    return {**chosen, "fit": fit}


def one_host_rows(db: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for framework in dict.fromkeys(r["case"]["framework"] for r in found):
        chosen = one_host_sources(found, framework)
        if chosen is None:
            print(f"{framework}: one batch size only, or a 1- or 2-process case is missing; "
                  f"left out", file=sys.stderr)
            continue
        rows.append(project_one_host(db, **chosen))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--db", type=Path)
    given.add_argument("--results", type=Path,
                       help="a data folder's results.json instead of its database")
    parser.add_argument("--sweep", default=None,
                        help="the sweep's name (default link-rates, or projection-one-host "
                             "with --one-host)")
    parser.add_argument("--one-host", action="store_true",
                        help="2 processes of one host (sweeps/projection-one-host.yaml)")
    parser.add_argument("--window-from", choices=WINDOW_RULES, default=DEFAULT_WINDOW_RULE,
                        help="which other rate's result the overlap window is read from "
                             "(default: the fastest that shows part of its all-reduce "
                             "exposed; docs/projection.md)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    sweep = args.sweep or ("projection-one-host" if args.one_host else "link-rates")
    with tempfile.TemporaryDirectory() as tmp:
        if args.results is not None:
            args.db = Path(tmp) / "results.db"
            load(args.results, args.db, sweep)
        return validate(args, sweep)


def validate(args: argparse.Namespace, sweep: str) -> int:
    """The table of ``sweep``'s results in ``args.db``, printed and written as asked."""
    found = results(args.db, sweep)
    rows = one_host_rows(args.db, found) if args.one_host else []
    for result in [] if args.one_host else found:
        case = result["case"]
        if int(case.get("nnodes") or 1) < 2 or not case.get("link"):
            continue
        engine = case.get("launcher") or "native"
        start = start_of(result, found)
        same = [r for r in found if r["case"].get("nnodes") == case["nnodes"]
                and r["case"].get("devices") == case.get("devices")
                and scaling.config(r) == scaling.config(result)
                and (r["case"].get("launcher") or "native") == engine]
        unshaped = next((r for r in same if not r["case"].get("link")), None)
        if start is None or unshaped is None:
            print(f"{result['label']}: no 1-process or unshaped result beside it; left out",
                  file=sys.stderr)
            continue
        rows.append(project(args.db, start, result, unshaped,
                            [r for r in same if r["case"].get("link")], args.window_from))
    lines = ["| framework | engine | link | measured (samples/s) | projected (interval) | error "
             "| inside | links | overlap window | overhead |",
             "|---|---|---|---:|---:|---:|---|---|---:|---:|"]
    for row in rows:
        p = row["projected"]
        lines.append(f"| {row['framework']} | {row['engine']} | {row['link']} | "
                     f"{row['measured']:.2f} | {p['value']:.2f} ({p['low']:.2f}–{p['high']:.2f}) "
                     f"| {row['error']:+.1%} | {'yes' if row['inside'] else 'no'} | "
                     f"{row['links']} | {window_text(row)} | "
                     f"{overhead_text(row['overlap'], row.get('overhead_from'))} |")
    text = "\n".join(lines)
    print(text)
    if rows:
        errors = [r["error"] for r in rows]
        print(f"\n{len(rows)} cases: median |error| {median_abs(errors):.1%}, "
              f"largest {max(abs(e) for e in errors):.1%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
