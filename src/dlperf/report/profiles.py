"""The report's "Where the time goes": per section, one row per profiled result with its
categories in ms/step, the findings under it, and the roofline chart of every result."""

from __future__ import annotations

from typing import Any

from dlperf.explain import findings
from dlperf.report import varies
from dlperf.report.palette import MARKERS, Palette
from dlperf.report.ratios import Ratio
from dlperf.report.tables import Cell, Table
from dlperf.results.codec import read_result
from dlperf.worker.profile import CATEGORIES, UNATTRIBUTED

COLUMNS = CATEGORIES + (UNATTRIBUTED,)


def profiled(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r, typed in zip(results, map(read_result, results)) if typed.status == "ok"
            and typed.profile and typed.profile.categories]


def table(results: list[dict[str, Any]]) -> Table | None:
    """Categories (ms/step of the profiled step) per profiled result; the categories no result
    spent time in are left out, so the table fits a page."""
    shown = profiled(results)
    if not shown:
        return None
    used = [name for name in COLUMNS
            if any(r["profile"]["categories"].get(name, 0.0) > 0 for r in shown)]
    out = Table("Where the time goes (ms per profiled step)",
                ["case", "device", *used, "step", "coverage", "profiler"],
                ["l", "l", *["r"] * len(used), "r", "r", "l"])
    for result in shown:
        block = result["profile"]
        tool = block.get("tool") or {}
        out.rows.append([Cell(str(result.get("label"))), Cell(str(result.get("device"))),
                         *[Cell(f"{block['categories'].get(name, 0.0) * 1e3:.2f}")
                           for name in used],
                         Cell(f"{block['step_s'] * 1e3:.2f}"),
                         Cell("-" if block.get("coverage") is None
                              else f"{block['coverage']:.0%}"),
                         Cell(f"{tool.get('name', '?')} {tool.get('version', '')}".strip())])
    return out


def unavailable(results: list[dict[str, Any]]) -> list[str]:
    """One line per result whose profile was asked for and could not be taken, with why."""
    lines = []
    for result in results:
        block = result.get("profile") or {}
        why = block.get("unavailable") or block.get("error")
        if why and not block.get("categories"):
            lines.append(f"{result.get('label')}: no profile: {why}")
    return lines


def comparison_lines(compared: list[Ratio]) -> list[str]:
    """The section's comparisons whose two sides were profiled, each with its ratio, interval
    and verdict and why in words (nothing is said of a comparison without profiles)."""
    return [ratio.sentence() for ratio in compared if ratio.reasons]


def finding_lines(results: list[dict[str, Any]]) -> list[str]:
    """Every finding of the section's results, each result's in turn."""
    lines = []
    for typed in map(read_result, results):
        if typed.status == "ok":
            lines += [finding.text for finding in findings.of_result(typed)]
    return lines


#: what a point under the roof is drawn from (a stored block may lack any of them)
ROOF = ("of_roof", "intensity", "ridge", "peak_flops_per_s", "bandwidth_bytes_per_s",
        "roof_flops_per_s")


def roofline_points(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results placed under a roof: probed, achieved, and below the probe (``of_roof`` set;
    a probe the step beat has no verdict to draw)."""
    return [r for r in results if r.get("status") == "ok"
            and all((r.get("roofline") or {}).get(name) is not None for name in ROOF)]


def roofline_figure(results: list[dict[str, Any]], palette: Palette) -> bytes | None:
    """Achieved FLOP/s against the estimated intensity, under each machine's roofs (its probed
    GEMM peak for the precision, and copy bandwidth x intensity); log-log, a labelled tick at
    every decade, each point in its framework's (or precision's) colour, named in the legend
    below by what tells it from the others."""
    shown = roofline_points(results)
    if not shown:
        return None
    from dlperf.report.plots import WIDTH, _png, decades, plt

    figure, axes = plt.subplots(figsize=(WIDTH, 4.6))
    lows = [r["roofline"]["intensity"] for r in shown]
    span = [min(lows + [r["roofline"]["ridge"] for r in shown]) / 4,
            max(lows + [r["roofline"]["ridge"] for r in shown]) * 4]
    roofs = {}
    for result in shown:
        roof = result["roofline"]
        roofs[(roof["peak_flops_per_s"], roof["bandwidth_bytes_per_s"])] = roof
    heights = []
    for (peak, bandwidth), roof in roofs.items():
        xs = [span[0], roof["ridge"], span[1]]
        ys = [min(peak, x * bandwidth) / 1e9 for x in xs]
        heights += ys
        axes.plot(xs, ys, color="0.4", linewidth=1)
        axes.annotate(f"{peak / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.0f} GB/s", (xs[-1], ys[-1]),
                      fontsize=8, ha="right", va="bottom", color="0.3")
    names = point_names(shown)
    styles = palette.styles({names[i]: result for i, result in enumerate(shown)})
    for index, result in enumerate(shown):
        roof = result["roofline"]
        per_roof = roof["of_roof"] * roof["roof_flops_per_s"]  # achieved, per GPU or node
        heights.append(per_roof / 1e9)
        colour, number = styles[names[index]]
        axes.scatter([roof["intensity"]], [per_roof / 1e9], s=36, color=colour,
                     marker=MARKERS[number % len(MARKERS)],
                     label=f"{names[index]} ({roof['of_roof']:.0%} of roof)")
    axes.set_xscale("log")
    axes.set_yscale("log")
    decades(axes, "x", span)
    decades(axes, "y", heights)
    axes.set_xlabel("FLOP per byte moved (estimated)")
    axes.set_ylabel("GFLOP/s per roof (one GPU or one node)")
    axes.set_title("Roofline: achieved against this machine's probed peak and bandwidth")
    axes.grid(True, alpha=0.3, which="major")
    axes.legend(fontsize=8, ncol=min(2, len(shown)), loc="upper center",
                bbox_to_anchor=(0.5, -0.16), frameon=False)
    return _png(figure)


def point_names(results: list[dict[str, Any]]) -> list[str]:
    """Each point's name: the values of what varies among the points (``fp32``,
    ``tensorflow``), or its label where nothing does; unique, so each has its legend entry."""
    along = varies.varying(results)
    names = [" ".join(axis.describe(r) for axis in along) or str(r.get("label"))
             for r in results]
    return [name if names.count(name) == 1 else f"{name} ({r.get('label')})"
            for name, r in zip(names, results)]
