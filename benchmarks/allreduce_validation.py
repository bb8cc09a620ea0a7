"""The all-reduce term of `dlperf project` across nodes of several processes, against what was
measured: each engine's collective (MXNet's push and pull) on 2 emulated hosts of 2 processes,
projected from the same path measured on 2 hosts of 1 process (the link between the nodes) and
on 1 node of 2 (the link inside a node), size by size; and what each host's link carried, against
the multiple of the message the model puts on it (dlperf.projection.links.link_bytes times the
engine's declared wire share).

The emulated-hosts check of the whole step (projection_validation.py) has one process a host,
where a ring through every process and a hierarchical all-reduce send the same bytes; at 2
processes a host they part (1.5 against 1.0 times the message a link), so this check is what
tells them apart. Every run is a `dlperf collectives --json` file in the folder (its rows, its
fits, and with --emulate-hosts each host's interface counters):

    dlperf collectives --framework F --path P --ops OP --nproc 2 --sizes 1M:16M --iters 5
        --warmup 1 --threads-per-process 1 --json F-P-1x2.json
    dlperf collectives ... --emulate-hosts 2 --nproc 1 --link 1gbit --json F-P-2x1-1gbit.json
    dlperf collectives ... --emulate-hosts 2 --nproc 2 --link 1gbit --json F-P-2x2-1gbit.json

    python benchmarks/allreduce_validation.py --folder benchmarks/data/DIR [--markdown FILE]

The "hierarchical" column is what the model before 2026-12-04 projected (a ring inside each
node, then between the nodes 2(N-1)/N of the message through each NIC), kept beside it so that
the change is read off the same runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlperf import collective_model as cm
from dlperf import spec
from dlperf.projection.links import PARAMETER_SERVER, Link, allreduce_s, link_bytes, link_of_model
from dlperf.studies import collectives as paths


@dataclass(frozen=True)
class Row:
    """One engine's check: its link counters and its all-reduce sizes."""

    engine: str
    link: str
    share_1: float  # each host's link bytes over the messages' at 2 x 1
    share_2: float  # the same at 2 x 2
    model_share: float  # what the model puts on a link at 2 x 2
    hierarchical_share: float  # what the model before put there
    sizes: tuple[tuple[int, float, float, float], ...]  # (bytes, measured, flat, hierarchical) s

    def errors(self, column: int) -> list[float]:
        return [size[column] / size[1] - 1 for size in self.sizes]

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "link": self.link, "share_2x1": self.share_1,
                "share_2x2": self.share_2, "model_share": self.model_share,
                "hierarchical_share": self.hierarchical_share,
                "sizes": [{"bytes": b, "measured_s": m, "projected_s": f, "hierarchical_s": h}
                          for b, m, f, h in self.sizes]}


def model_of(run: dict[str, Any]) -> cm.Model:
    (stored,) = run["models"]
    key = cm.Key(**stored["key"])
    fit = cm.Fit(stored["alpha_us"] / 1e6, stored["beta_s_per_byte"], stored["median_error"],
                 stored["max_error"])
    return cm.Model(key, stored["run"], fit, tuple(stored["sizes"]), stored["host"],
                    stored["emulated"], stored["device"], stored["measured_at"],
                    stored.get("framework_version"))


def link_share(run: dict[str, Any]) -> float:
    """The mean of the hosts' sent bytes over the bytes of every message the job sent (each
    size's warm-up and timed iterations)."""
    messages = sum(row["bytes"] * (row["iters"] + row["warmup"]) for row in run["rows"])
    hosts = run["emulated_hosts"]["hosts"]
    return statistics.mean(host["tx_bytes"] for host in hosts) / messages


def hierarchical_s(nbytes: float, intra: Link, inter: Link,
                   per_node: int, nodes: int) -> float:
    """The model before 2026-12-04: a ring inside each node, then each process's 1/d shard
    between the nodes, 2(N-1)/N of the message through each NIC."""
    inside = 2 * ((per_node - 1) * intra.latency
                  + (per_node - 1) / per_node * nbytes / intra.bandwidth)
    between = 2 * (nodes - 1) * inter.latency + 2 * (nodes - 1) / nodes * nbytes / inter.bandwidth
    return inside + between


def check(runs: list[dict[str, Any]]) -> list[Row]:
    found: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for run in runs:
        if run.get("status") not in (None, "ok") or not run.get("models"):
            raise SystemExit(f"a run failed or has no fit: {run.get('framework')} "
                             f"{run.get('path')} {run.get('error')}")
        shape = f"{run['nnodes']}x{run['nproc']}"
        link = run["link"] or ""
        found.setdefault((run["framework"], run["path"], link if run["nnodes"] > 1 else ""),
                         {})[shape] = run
    rows = []
    for (framework, path, link), shapes in sorted(found.items()):
        if not link:
            continue
        inside = found.get((framework, path, ""), {}).get("1x2")
        if inside is None or "2x1" not in shapes or "2x2" not in shapes:
            raise SystemExit(f"{framework} {path} over {link}: needs its 1x2, 2x1 and 2x2 runs")
        wire = spec.wire_of(framework, paths.path_named(framework, path).launcher, "cpu")
        target = shapes["2x2"]
        per_node, nodes = target["nproc"], target["nnodes"]
        intra = link_of_model(model_of(inside))
        inter = link_of_model(model_of(shapes["2x1"]))
        sizes = []
        for row in sorted(target["rows"], key=lambda r: r["bytes"]):
            m = row["bytes"]
            flat = allreduce_s(m, 1, per_node, nodes, intra, inter, wire.exchange)
            before = (flat if wire.exchange == PARAMETER_SERVER
                      else hierarchical_s(m, intra, inter, per_node, nodes))
            sizes.append((m, row["time_us"] / 1e6, flat, before))
        model_share = link_bytes(wire.exchange, per_node, nodes)
        hierarchical_share = (model_share if wire.exchange == PARAMETER_SERVER
                              else 2 * (nodes - 1) / nodes)  # the NIC's, before
        rows.append(Row(f"{framework} {path}", link, link_share(shapes["2x1"]),
                        link_share(target), model_share * wire.share,
                        hierarchical_share * wire.share, tuple(sizes)))
    return rows


def load(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def pct(value: float) -> str:
    return f"{value:+.1%}".replace("-", "−")


def markdown(rows: list[Row]) -> str:
    lines = ["| engine | link | link bytes 2x1 | 2x2 measured | 2x2 model (before) | 16 MiB "
             "measured ms | projected ms (before) | error (before) | median \\|error\\| of 5 "
             "sizes (before) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        m, measured, flat, before = row.sizes[-1]
        flat_errors, before_errors = row.errors(2), row.errors(3)
        lines.append(
            f"| {row.engine} | {row.link} | {row.share_1:.2f} | {row.share_2:.2f} | "
            f"{row.model_share:.2f} ({row.hierarchical_share:.2f}) | {measured * 1e3:.1f} | "
            f"{flat * 1e3:.1f} ({before * 1e3:.1f}) | {pct(flat / measured - 1)} "
            f"({pct(before / measured - 1)}) | "
            f"{statistics.median(abs(e) for e in flat_errors):.1%} "
            f"({statistics.median(abs(e) for e in before_errors):.1%}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = check(load(args.folder))
    text = markdown(rows)
    sys.stdout.write(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps([row.as_dict() for row in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
