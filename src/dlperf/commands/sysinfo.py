"""``dlperf sysinfo``: the machine, its libraries and thread settings, as results record them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from dlperf import display
from dlperf.commands import HELP
from dlperf.host import peak, sysinfo


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("sysinfo", help=HELP["sysinfo"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--probe", action="store_true",
                        help="measure peak matmul FLOP/s per precision and memory bandwidth "
                             "(cached; results then report MFU)")
    return parser


def torch_threads() -> dict[str, Any]:
    """Torch's own view of its thread pools, when torch is in this environment."""
    try:
        import torch
    except ImportError:
        return {}
    return {"torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "torch_cuda": torch.cuda.is_available()}


def main(args: argparse.Namespace) -> int:
    info = sysinfo.capture()
    info["torch"] = torch_threads()
    info["peaks"] = peak.probe(info) if args.probe else peak.cached(info)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    table = Table(title="dlperf sysinfo", show_header=False)
    table.add_column("what")
    table.add_column("value")
    cpu = info["cpu"]
    allowed = sysinfo.held_to(cpu)
    table.add_row("CPU", f"{cpu['model']} ({cpu['arch']}), {cpu['physical_cores']} cores / "
                         f"{cpu['logical_cores']} threads"
                         + (f", this process may use {allowed} of them" if allowed else ""))
    table.add_row("CPU extensions", ", ".join(cpu["flags"]) or "-")
    table.add_row("memory", display.human_bytes(info["memory_bytes"]))
    gpus = info["gpus"]
    table.add_row("GPUs", "; ".join(f"{g['name']} {display.human_bytes(g['memory_bytes'])} "
                                    f"(driver {g['driver']})" for g in gpus) or "none")
    table.add_row("OS", info["platform"])
    table.add_row("Python", info["python"])
    for name, version in info["libraries"].items():
        table.add_row(name, version or "not installed")
    for name, value in info["torch"].items():
        table.add_row(name, str(value))
    table.add_row("thread variables", ", ".join(f"{k}={v}" for k, v in
                                                info["thread_variables"].items()) or "none set")
    peaks = info["peaks"]
    if peaks:
        for dtype, rate in peaks["flops_per_s"].items():
            table.add_row(f"peak {dtype} matmul", f"{rate / 1e12:.2f} TFLOP/s")
        table.add_row("host copy bandwidth", f"{peaks['host_copy_bytes_per_s'] / 1e9:.1f} GB/s")
        table.add_row("probed", f"{peaks['measured_at']} (load average {peaks['load_average']})")
    else:
        table.add_row("peak FLOP/s", "not measured: run `dlperf sysinfo --probe`")
    git = info["git"]
    table.add_row("git", f"{git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}"
                  if git else "not a git checkout")
    display.out.print(table)
    return 0
