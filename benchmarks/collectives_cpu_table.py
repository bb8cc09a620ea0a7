"""The CPU each collective path costs, as docs/collectives.md tabulates it: from a data folder's
``collectives.json`` (the stored rows of `dlperf collectives` runs, a list a run), per run (its
all-reduce, or MXNet's push-pull, where it measured several operations) the
bus bandwidth at the sizes from ``--from`` up (their median), the largest size's time and CPU,
and the range of the CPU a byte and of the CPU's share of the time over those sizes.

A computation from git alone; nothing is measured.

    python benchmarks/collectives_cpu_table.py benchmarks/data/collectives-cpu-every-path-xeon-2026-12-05
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from dlperf.studies import collectives as study

#: the smallest size the table reads (16 MiB: past the latency, near ResNet-50's messages)
FROM_BYTES = 16 * 2 ** 20
HEADER = ("| framework | path | busbw GB/s | largest: time, CPU (ms) | CPU ns/B | CPU / time |\n"
          "|---|---|---:|---:|---:|---:|")


#: the operation a run's line describes, the first of these the run measured: what a training
#: step's gradients go through (MXNet's kvstore has only its push-pull)
GRADIENT_OPS = ("allreduce", "pushpull")


def gradient_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's rows of its gradient operation: a run of several operations (`dlperf collectives`
    measures all-reduce, all-gather and broadcast by default) is read as its all-reduce only,
    not as their mixture."""
    ops = {r["op"] for r in rows}
    op = next((name for name in GRADIENT_OPS if name in ops), None)
    if op is None:
        raise SystemExit(f"run {rows[0]['run']}: no all-reduce or push-pull among "
                         f"{', '.join(sorted(ops))}")
    return [r for r in rows if r["op"] == op]


def row(rows: list[dict[str, Any]], from_bytes: int = FROM_BYTES) -> str:
    """One run's line of the table (its gradient operation's rows with CPU taken, at
    ``from_bytes`` and up)."""
    big = sorted((r for r in gradient_rows(rows) if r["bytes"] >= from_bytes),
                 key=lambda r: r["bytes"])
    cpu = [study.cpu_us(r) for r in big]
    if not big or None in cpu:
        raise SystemExit(f"run {rows[0]['run']}: no CPU taken at {from_bytes} bytes and up")
    per_byte = [c * 1e3 / r["bytes"] for c, r in zip(cpu, big)]
    share = [c / r["time_us"] for c, r in zip(cpu, big)]
    busbw = statistics.median(r["busbw_gbs"] for r in big)
    last = big[-1]
    return (f"| {last['framework']} | {last['path']} | {busbw:.3f} | "
            f"{last['time_us'] / 1e3:.1f}, {cpu[-1] / 1e3:.1f} | "
            f"{min(per_byte):.2f}-{max(per_byte):.2f} | {min(share):.2f}-{max(share):.2f} |")


def table(folder: Path, from_bytes: int = FROM_BYTES) -> str:
    runs = json.loads((folder / "collectives.json").read_text())
    return "\n".join([HEADER, *(row(rows, from_bytes) for rows in runs)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--from", dest="from_bytes", type=int, default=FROM_BYTES,
                        help="the smallest size read, in bytes (default 16 MiB)")
    args = parser.parse_args()
    print(table(args.folder, args.from_bytes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
