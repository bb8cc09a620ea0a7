"""How well a stored `dlperf collectives` run prices one all-reduce of the whole gradient: every
2-host result (one process a host, a shaped link) in a data folder that keeps its link's
collectives (collectives.json), its ranks' probe (one fp32 buffer of the parameters, reduced
after each repeat's window) against three prices of that buffer from the same link's run: the
fit over every size, the fit over the sizes near the buffer (collective_model.Model.near, what
`dlperf project` uses for an engine that sends one pack), and the largest size's cost a byte.

A computation from git alone; nothing is measured. docs/projection.md, "The sizes a message is
priced from", quotes its medians.

    python benchmarks/probe_pricing.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlperf import collective_model as cm
from dlperf import scaling
from dlperf.projection_error import median_abs
from dlperf.result import read_result

DATA = Path(__file__).resolve().parent / "data"
PRICES = ("every size", "near", "largest size")


def priced(rows: list[dict], nbytes: int) -> tuple[float, float, float]:
    """One ``nbytes`` all-reduce's seconds under each of :data:`PRICES`, from one run's rows."""
    rows = sorted(rows, key=lambda row: row["bytes"])
    key = cm.key_of(rows[0])
    model = cm.Model(key, 0, cm.fit([r["bytes"] for r in rows], [r["time_us"] / 1e6 for r in rows]),
                     tuple(r["bytes"] for r in rows), "", True, "cpu", "", None,
                     times=tuple(r["time_us"] / 1e6 for r in rows))
    largest = rows[-1]
    return (model.seconds(nbytes), model.near(nbytes).seconds(nbytes),
            largest["time_us"] / 1e6 * nbytes / largest["bytes"])


def cases() -> list[tuple[str, str, str, float, tuple[float, float, float]]]:
    """(folder, framework, link, probe seconds, the prices) for every such result."""
    found = []
    for folder in sorted(DATA.iterdir()):
        results, runs = folder / "results.json", folder / "collectives.json"
        if not (results.is_file() and runs.is_file()):
            continue
        stored = json.loads(runs.read_text())
        for result in json.loads(results.read_text()):
            typed = read_result(result)
            hosts = scaling.emulated_hosts(result) or {}
            probe = scaling.allreduce_seconds(result)
            link = hosts.get("link")
            if typed.devices != 2 or probe is None or not link or not typed.params:
                continue
            framework = result["case"]["framework"]
            same = [rows for rows in stored if rows and rows[0]["framework"] == framework
                    and rows[0]["link"] == link and rows[0]["op"] == "allreduce"
                    and rows[0]["nproc"] == 1]
            if same:
                found.append((folder.name, framework, link, probe,
                              priced(same[-1], 4 * int(typed.params))))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    found = cases()
    lines = ["| folder | framework | link | probe (s) | " + " | ".join(PRICES) + " |",
             "|---|---|---|---:|" + "---:|" * len(PRICES)]
    for folder, framework, link, probe, prices in found:
        lines.append(f"| {folder} | {framework} | {link} | {probe:.3f} | "
                     + " | ".join(f"{p / probe - 1:+.1%}" for p in prices) + " |")
    lines += ["", "| price | results | median abs error |", "|---|---:|---:|"]
    for index, name in enumerate(PRICES):
        errors = [prices[index] / probe - 1 for *_, probe, prices in found]
        lines.append(f"| {name} | {len(errors)} | {median_abs(errors):.1%} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
