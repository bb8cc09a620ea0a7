"""Per-case resource timeline figure: CPU (the worker tree vs the rest of the host and the
hypervisor's steal), memory, disk and network over one repeat (the median one), with the
worker's phases shaded.

Drawn as a small inline SVG (text left as text, at most ``PLOT_POINTS`` points per line) so a
report with many cases stays a few megabytes; element ids matplotlib writes but nothing refers to
are dropped, so several figures can share one HTML page.
"""

from __future__ import annotations

import io
import re
from typing import Any

from dlperf.host import timeline
from dlperf.report import plots  # matplotlib set up once: Agg, mathtext off (labels are data)
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.scaling import BRIDGE_PORTS, NODE_0_LINK, links_counted, wire_share

plt = plots.plt

PLOT_POINTS = 120
SIZE = (7.5, 3.4)
PHASE_COLOURS = {"startup": "0.85", "build": "#fde2b3", "first_step": "#f7b6b6",
                 "warmup": "#fff3a8", "window": "#c9ecc9", "teardown": "0.92"}
MB = 1e6


def has_timeline(result: ResultLike) -> bool:
    typed = read_result(result)
    median = typed.timeline.get("median") or {}
    return typed.status == "ok" and bool((median.get("columns") or {}).get("t"))


def _series(columns: dict[str, list[Any]], name: str, scale: float = 1.0) -> list[float]:
    return [float("nan") if v is None else v / scale for v in columns.get(name) or []]


def _shade(axes: Any, phases: list[dict[str, Any]]) -> None:
    for span in phases:
        axes.axvspan(span["start"], span["end"], color=PHASE_COLOURS.get(span["name"], "0.9"),
                     alpha=0.7, linewidth=0, label=span["name"])


def _clean(svg: str) -> str:
    """The <svg> element alone, fit for inlining: no XML prolog, no metadata, no unused ids."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r">\s+<", "><", svg)  # indentation between elements only
    # coordinates to 1/100 pt (finer than any screen), in attribute values only: text is data
    svg = re.sub(r'="[^"]*"', lambda m: re.sub(r"(\d\.\d\d)\d+", r"\1", m.group(0)), svg)
    used = set(re.findall(r"#([A-Za-z_][\w.-]*)", svg))
    return re.sub(r' id="([^"]+)"', lambda m: m.group(0) if m.group(1) in used else "", svg)


def network_of(result: ResultLike) -> str:
    """What the network panel counts: the emulated hosts' links it saw, or the host's own."""
    counted = links_counted(result)
    if counted == BRIDGE_PORTS:
        return "every emulated host's link"
    if counted == NODE_0_LINK:
        return "node 0's link"
    return "host, loopback left out"


def figure(result: ResultLike) -> str | None:
    """The median repeat's timeline as SVG text, or None when the result has none."""
    if not has_timeline(result):
        return None
    stored = read_result(result).timeline["median"]
    columns = timeline.downsample(stored["columns"], PLOT_POINTS)
    t = columns["t"]
    gpus = sorted({name.split("_", 1)[0] for name in columns
                   if re.match(r"gpu\d+_util_pct$", name)})
    # steal: CPU time the hypervisor gave other guests (results stored before it have none)
    steal = [("hypervisor (steal)", "cpu_steal_pct", 1.0)] if "cpu_steal_pct" in columns else []
    panels = [("CPU (% of machine)", [("worker tree", "cpu_tree_pct", 1.0),
                                      ("rest of host", "cpu_rest_pct", 1.0)] + steal),
              ("memory (RSS, GB)", [("worker tree", "rss_bytes", 1e9)]),
              ("disk (MB/s, host)", [("read", "disk_read_bytes_s", MB),
                                     ("write", "disk_write_bytes_s", MB)]),
              (f"network (MB/s, {network_of(result)})", [("rx", "net_rx_bytes_s", MB),
                                                          ("tx", "net_tx_bytes_s", MB)])]
    if gpus:
        panels.append(("GPU utilisation (%)", [(gpu, f"{gpu}_util_pct", 1.0) for gpu in gpus]))
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": None, "font.size": 7,
                         "font.sans-serif": ["DejaVu Sans"]}):
        fig, grid = plt.subplots(2, 2 if len(panels) <= 4 else 3, figsize=SIZE, sharex=True)
        cells = list(grid.flat)
        for axes, (title, lines) in zip(cells, panels):
            _shade(axes, stored.get("phases") or [])
            for index, (label, name, scale) in enumerate(lines):
                axes.plot(t, _series(columns, name, scale), linewidth=1.0, color=f"C{index}",
                          label=label)
            axes.set_title(title, fontsize=7, loc="left")
            axes.margins(x=0)
            axes.set_ylim(bottom=0)
            axes.grid(True, alpha=0.3, linewidth=0.5)
            if len(lines) > 1:
                axes.legend(handles=axes.get_lines(), fontsize=6, loc="upper left",
                            frameon=False)
        for axes in cells[len(panels):]:
            axes.set_visible(False)
        for axes in cells[-2:]:
            axes.set_xlabel("seconds since the worker started", fontsize=7)
        shaded = list(cells[0].patches)
        fig.legend(handles=shaded, loc="upper center", ncol=len(shaded), fontsize=6,
                   frameon=False, title="phases", title_fontsize=6)
        # fixed margins: tight_layout would draw the figure a second time (half the cost)
        fig.subplots_adjust(left=0.07, right=0.99, top=0.8, bottom=0.13, hspace=0.45,
                            wspace=0.2)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
    return _clean(buffer.getvalue())


def caption(result: ResultLike) -> str:
    """The window means of every repeat's samples, in words (plain text; the caller escapes)."""
    block = read_result(result).timeline
    means = block.get("summary") or {}
    median = block.get("median") or {}

    def pct(name: str) -> str:
        return "—" if means.get(name) is None else f"{means[name]:.0f}%"

    def rate(name: str) -> str:
        return "—" if means.get(name) is None else f"{means[name] / MB:.2f} MB/s"

    rss = means.get("rss_bytes")
    counted = links_counted(result)
    parts = [f"CPU worker tree {pct('cpu_tree_pct')}, rest of host {pct('cpu_rest_pct')}, "
             f"hypervisor (steal) {pct('cpu_steal_pct')}",
             f"RSS {rss / 1e9:.2f} GB" if rss is not None else "RSS —",
             f"disk read {rate('disk_read_bytes_s')} / write {rate('disk_write_bytes_s')}",
             f"network rx {rate('net_rx_bytes_s')} / tx {rate('net_tx_bytes_s')}"
             + ("" if counted is None else f" over {counted}")]
    wire = wire_share(result)
    if wire is not None:
        parts.append(f"on the wire a step {wire:.2f}x a ring all-reduce's bytes a host")
    gpu = [f"{name.split('_', 1)[0]} {means[name]:.0f}%" for name in sorted(means)
           if name.endswith("_util_pct") and means[name] is not None]
    if gpu:
        parts.append("GPU utilisation " + ", ".join(gpu))
    repeat = block.get("median_repeat")
    shown = f"repeat {repeat + 1} (the median)" if isinstance(repeat, int) else "the median repeat"
    note = (f"; {median.get('raw_samples')} samples every {median.get('interval_s')} s, "
            f"averaged down to {median.get('points')} points" if median.get("downsampled") else "")
    return (f"Shown: {shown}{note}. Window means over every repeat: " + "; ".join(parts) + ".")
