"""Validate `dlperf project` on this machine, against what was measured: the error per case, in
a table.

Across emulated hosts: each 2-host case of a link-rate sweep (sweeps/link-rates.yaml, run with
`dlperf sweep ... --emulate-hosts`) projected from its framework's 1-process result, the overlap
taken from the same engine's unshaped 2-host result.

    python benchmarks/projection_validation.py --db link-rates.db [--json v.json] [--markdown v.md]

On one host (`--one-host`, sweeps/projection-one-host.yaml): each framework's 2-process case at
the larger batch projected from its 1-process case at that batch, the overlap and the
multi-process overhead from its 2-process case at the smaller batch (set against its own
1-process case), the link between the processes the framework's stored all-reduce model (`dlperf
collectives --nproc 2` into the same database) or else that smaller-batch case's own gradient
probe.

    python benchmarks/projection_validation.py --db one-host.db --one-host

The links between the hosts: the framework's measured all-reduce model over that link where
`dlperf collectives --emulate-hosts 2 --link RATE` stored one in the same database, else the
slower of the link's rate as given (what tbf lets through) and the framework's own all-reduce
path as the unshaped result's gradient probe measured it (its bus bandwidth: a framework whose
ring moves 2 Gbit/s gains nothing from a 10 Gbit/s link). An unshaped case is the source of
the overlap, the multi-process overhead and the path's rate, so it is not validated (it would be
its own answer).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlperf import scaling
from dlperf.host import emulated
from dlperf.store import Store

BUCKET_MB = {"native": None, "horovod": 64}


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


def project(db: Path, start: dict[str, Any], target: dict[str, Any],
            overlap: dict[str, Any]) -> dict[str, Any]:
    case = target["case"]
    link = case.get("link") or ""
    engine = case.get("launcher") or "native"
    inter = f"measured:{link}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        base = [sys.executable, "-m", "dlperf.cli", "project", str(start["run_id"]), "--db",
                str(db), "--devices-per-node", "1", "--nnodes", str(case["nnodes"]),
                "--intra", "1000gbit", "--overlap-from", str(overlap["run_id"]), "--no-store",
                "--json", str(out)]
        if BUCKET_MB[engine]:
            base += ["--bucket-mb", str(BUCKET_MB[engine])]
        proc = subprocess.run([*base, "--inter", inter], capture_output=True, text=True)
        how = f"measured model over {link}"
        if proc.returncode == 2 and "no collective model" in proc.stderr:
            given = emulated.parse_rate(link, "link") or 0
            path = scaling.allreduce_bus_bandwidth(overlap)
            rate = f"{link}@0us"
            how = f"given: {link}"
            if path is not None and path * 8 < given:
                rate = f"{path * 8 / 1e6:.0f}mbit@0us"
                how = f"its path unshaped: {path * 8 / 1e9:.2g} Gbit/s (< {link})"
            proc = subprocess.run([*base, "--inter", rate], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"dlperf project failed for {target['label']}: {proc.stderr}")
        made = json.loads(out.read_text())
    return validated(target, made, engine, link, how)


def project_one_host(db: Path, start: dict[str, Any], target: dict[str, Any],
                     source: dict[str, Any]) -> dict[str, Any]:
    """The 2-process ``target`` from the 1-process ``start`` at its batch, the overlap and the
    overhead from ``source`` (2 processes at another batch)."""
    case = target["case"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        base = [sys.executable, "-m", "dlperf.cli", "project", str(start["run_id"]), "--db",
                str(db), "--devices-per-node", str(case["devices"]), "--nnodes", "1",
                "--overlap-from", str(source["run_id"]), "--no-store", "--json", str(out)]
        proc = subprocess.run([*base, "--intra", "measured"], capture_output=True, text=True)
        how = "its stored all-reduce model"
        if proc.returncode == 2 and "no collective model" in proc.stderr:
            path = scaling.allreduce_bus_bandwidth(source)
            if path is None:
                raise SystemExit(f"{source['label']}: no all-reduce probe and no stored model")
            how = f"its probe at batch {source['case']['batch_size']}: " \
                  f"{path * 8 / 1e9:.2g} Gbit/s"
            proc = subprocess.run([*base, "--intra", f"{path * 8 / 1e6:.0f}mbit@0us"],
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"dlperf project failed for {target['label']}: {proc.stderr}")
        made = json.loads(out.read_text())
    return validated(target, made, "native", "one host", how)


def one_host_rows(db: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def at(framework: str, devices: int, batch: int) -> dict[str, Any] | None:
        return next((r for r in reversed(found) if r["case"]["framework"] == framework
                     and scaling.total_devices(r["case"]) == devices
                     and r["case"]["batch_size"] == batch), None)

    rows = []
    for framework in dict.fromkeys(r["case"]["framework"] for r in found):
        batches = sorted({r["case"]["batch_size"] for r in found
                          if r["case"]["framework"] == framework})
        if len(batches) < 2:
            print(f"{framework}: one batch size only; left out", file=sys.stderr)
            continue
        small, large = batches[0], batches[-1]
        start, target = at(framework, 1, large), at(framework, 2, large)
        source = at(framework, 2, small)
        if start is None or target is None or source is None or at(framework, 1, small) is None:
            print(f"{framework}: a 1- or 2-process case is missing; left out", file=sys.stderr)
            continue
        rows.append(project_one_host(db, start, target, source))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--sweep", default=None,
                        help="the sweep's name (default link-rates, or projection-one-host "
                             "with --one-host)")
    parser.add_argument("--one-host", action="store_true",
                        help="2 processes of one host (sweeps/projection-one-host.yaml)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    sweep = args.sweep or ("projection-one-host" if args.one_host else "link-rates")
    found = results(args.db, sweep)
    rows = one_host_rows(args.db, found) if args.one_host else []
    for result in [] if args.one_host else found:
        case = result["case"]
        if int(case.get("nnodes") or 1) < 2 or not case.get("link"):
            continue
        engine = case.get("launcher") or "native"
        start = next((r for r in found if scaling.total_devices(r["case"]) == 1
                      and scaling.config(r) == scaling.config(result)
                      and (r["case"].get("launcher") or "native") == "native"), None)
        overlap = next((r for r in found if r["case"].get("nnodes") == case["nnodes"]
                        and not r["case"].get("link") and scaling.config(r) == scaling.config(result)
                        and (r["case"].get("launcher") or "native") == engine), None)
        if start is None or overlap is None:
            print(f"{result['label']}: no 1-process or unshaped result beside it; left out",
                  file=sys.stderr)
            continue
        rows.append(project(args.db, start, result, overlap))
    lines = ["| framework | engine | link | measured (samples/s) | projected (interval) | error "
             "| inside | links | overlap | overhead |",
             "|---|---|---|---:|---:|---:|---|---|---:|---:|"]
    for row in rows:
        p = row["projected"]
        overlap = row["overlap"]["value"]
        lines.append(f"| {row['framework']} | {row['engine']} | {row['link']} | "
                     f"{row['measured']:.2f} | {p['value']:.2f} ({p['low']:.2f}–{p['high']:.2f}) "
                     f"| {row['error']:+.1%} | {'yes' if row['inside'] else 'no'} | "
                     f"{row['links']} | {'—' if overlap is None else f'{overlap:.0%}'} | "
                     f"{row['overlap'].get('overhead', 0):.0%} |")
    text = "\n".join(lines)
    print(text)
    if rows:
        errors = sorted(abs(r["error"]) for r in rows)
        print(f"\n{len(rows)} cases: median |error| {errors[len(errors) // 2]:.1%}, "
              f"largest {errors[-1]:.1%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
