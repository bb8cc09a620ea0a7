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
import tempfile
from pathlib import Path

from dlperf import collective_model as cm
from dlperf import outputs, scaling
from dlperf.errors import UsageError
from dlperf.projection.error import median_abs
from dlperf.result import read_result
from dlperf.store import Store

DATA = Path(__file__).resolve().parent / "data"
PRICES = ("every size", "near", "largest size")


def link_models(runs: list[list[dict]]) -> dict[cm.Key, cm.Model]:
    """Each key's model from a folder's stored `dlperf collectives` runs, as `dlperf project`
    reads them (through a store: the newest run of a key)."""
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "c.db") as store:
        for rows in runs:
            store.add_collectives(rows)
        return {model.key: model for model in cm.models(store)}


def priced(model: cm.Model, nbytes: int) -> tuple[float, float, float]:
    """One ``nbytes`` all-reduce's seconds under each of :data:`PRICES`."""
    return (model.seconds(nbytes), model.near(nbytes).seconds(nbytes),
            model.times[-1] * nbytes / model.sizes[-1])


def cases() -> list[tuple[str, str, str, float, tuple[float, float, float]]]:
    """(folder, framework, link, probe seconds, the prices) for every such result."""
    found = []
    for folder in sorted(DATA.iterdir()):
        results, runs = folder / "results.json", folder / "collectives.json"
        if not (results.is_file() and runs.is_file()):
            continue
        models = link_models(json.loads(runs.read_text()))
        for result in json.loads(results.read_text()):
            typed = read_result(result)
            hosts = scaling.emulated_hosts(result) or {}
            probe = scaling.allreduce_seconds(result)
            link = hosts.get("link")
            if typed.devices != 2 or probe is None or not link or not typed.params:
                continue
            framework = result["case"]["framework"]
            same = [model for key, model in models.items() if key.framework == framework
                    and key.link == link and key.op == "allreduce" and key.nproc == 1]
            if same:
                found.append((folder.name, framework, link, probe,
                              priced(same[-1], 4 * int(typed.params))))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    try:
        outputs.check_writable("--markdown", args.markdown)
    except UsageError as error:
        print(f"probe_pricing.py: error: {error}", file=sys.stderr)
        return 2
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
    outputs.show_markdown(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
