"""How surely a path's calls pin its price: each all-reduce run over a shaped link in a data
folder's collectives.json, size by size, its calls as multiples of the time the link's rate
takes to carry the message (a ring of 2 sends each rank's whole message once), their median,
the 95 % interval of that median (the bootstrap every measured figure uses, and
`collective_model.Model.calls_at`) over every call and over the first five (what the
link-rate sweeps measure), and the busiest rank's CPU time over its wall time.

A computation from git alone; nothing is measured. docs/projection.md, "How surely a link is
priced", quotes its table.

    python benchmarks/call_spread.py FOLDER [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from dlperf import outputs, stats
from dlperf.errors import UsageError
from dlperf.host import emulated

FIRST = 5  # the calls a size the link-rate sweeps took (--iters 5)


def interval_text(calls: list[float]) -> str:
    """The median's 95 % interval relative to it, ``-31.4%/+0.8%``."""
    median = float(np.median(calls))
    low, high = stats.bootstrap_ci(calls) or (median, median)
    return f"{low / median - 1:+.1%}/{high / median - 1:+.1%}"


def rows_of(folder: Path) -> list[list[str]]:
    """One row per (run, size) of ``folder``'s shaped all-reduce runs."""
    out = []
    for run in json.loads((folder / "collectives.json").read_text()):
        for row in run:
            bits = emulated.parse_rate(row.get("link"))
            if row["op"] != "allreduce" or not bits or len(row["times"]) < 2:
                continue
            calls = [float(t) for t in row["times"]]
            wire = row["bytes"] / (bits / 8)
            multiples = sorted(t / wire for t in calls)
            cpu = (row.get("detail") or {}).get("cpu_us")
            out.append([row["framework"], row["link"], f"{row['bytes'] / 2**20:g}",
                        str(len(calls)), " ".join(f"{m:.2f}" for m in multiples),
                        f"{float(np.median(calls)) / wire:.2f}", interval_text(calls),
                        interval_text(calls[:FIRST]),
                        f"{cpu / row['time_us']:.2f}" if cpu else "not taken"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    try:
        outputs.check_writable("--markdown", args.markdown)
        if not (args.folder / "collectives.json").is_file():
            raise UsageError(f"FOLDER: {args.folder} holds no collectives.json")
        rows = rows_of(args.folder)
    except UsageError as error:
        print(f"call_spread.py: error: {error}", file=sys.stderr)
        return 2
    lines = ["| framework | link | MiB | calls | each call / the rate's time | median | "
             "its 95 % interval | of the first 5 | CPU / wall |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines)
    outputs.show_markdown(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
