"""The report's "Where the time goes": per section, one row per profiled result with its
categories in ms/step, the findings under it, and the roofline chart of every result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlperf.explain import findings
from dlperf.report import varies
from dlperf.report.palette import MARKERS, Palette
from dlperf.report.ratios import Ratio
from dlperf.report.tables import Cell, Table
from dlperf.results.codec import read_result
from dlperf.results.model import Profile, Result, ResultLike
from dlperf.worker.profile import CATEGORIES, UNATTRIBUTED

COLUMNS = CATEGORIES + (UNATTRIBUTED,)


def _profile(result: Result) -> Profile:
    """The profile of a result :func:`profiled` kept."""
    assert result.profile is not None
    return result.profile


def profiled(results: Sequence[ResultLike]) -> list[Result]:
    return [r for r in map(read_result, results) if r.status == "ok"
            and r.profile and r.profile.categories]


def table(results: Sequence[ResultLike]) -> Table | None:
    """Categories (ms/step of the profiled step) per profiled result; the categories no result
    spent time in are left out, so the table fits a page."""
    shown = profiled(results)
    if not shown:
        return None
    used = [name for name in COLUMNS
            if any(_profile(r).categories.get(name, 0.0) > 0 for r in shown)]
    out = Table("Where the time goes (ms per profiled step)",
                ["case", "device", *used, "step", "coverage", "profiler"],
                ["l", "l", *["r"] * len(used), "r", "r", "l"])
    for result in shown:
        block = _profile(result)
        tool = block.tool
        out.rows.append([Cell(result.label), Cell(result.device),
                         *[Cell(f"{block.categories.get(name, 0.0) * 1e3:.2f}")
                           for name in used],
                         Cell(f"{(block.step_s or 0.0) * 1e3:.2f}"),
                         Cell("-" if block.coverage is None else f"{block.coverage:.0%}"),
                         Cell(f"{tool.get('name', '?')} {tool.get('version', '')}".strip())])
    return out


def unavailable(results: Sequence[ResultLike]) -> list[str]:
    """One line per result whose profile was asked for and could not be taken, with why."""
    lines = []
    for result in map(read_result, results):
        block = result.profile
        if block and block.why_not and not block.categories:
            lines.append(f"{result.label}: no profile: {block.why_not}")
    return lines


def comparison_lines(compared: list[Ratio]) -> list[str]:
    """The section's comparisons whose two sides were profiled, each with its ratio, interval
    and verdict and why in words (nothing is said of a comparison without profiles)."""
    return [ratio.sentence() for ratio in compared if ratio.reasons]


def finding_lines(results: Sequence[ResultLike]) -> list[str]:
    """Every finding of the section's results, each result's in turn."""
    lines = []
    for typed in map(read_result, results):
        if typed.status == "ok":
            lines += [finding.text for finding in findings.of_result(typed)]
    return lines


@dataclass(frozen=True)
class Placed:
    """A result under a roof: its roofline's figures, every one known."""

    result: Result
    intensity: float
    ridge: float
    of_roof: float
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    roof_flops_per_s: float


def _placed(result: Result) -> Placed | None:
    roof = result.roofline
    if result.status != "ok" or roof is None:
        return None
    figures = (roof.intensity, roof.ridge, roof.of_roof, roof.peak_flops_per_s,
               roof.bandwidth_bytes_per_s, roof.roof_flops_per_s)
    if any(value is None for value in figures):
        return None
    return Placed(result, *figures)  # type: ignore[arg-type]


def roofline_points(results: Sequence[ResultLike]) -> list[Placed]:
    """Results placed under a roof: probed, achieved, and below the probe (``of_roof`` set;
    a probe the step beat has no verdict to draw)."""
    return [p for p in map(_placed, map(read_result, results)) if p is not None]


def roofline_figure(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Achieved FLOP/s against the estimated intensity, under each machine's roofs (its probed
    GEMM peak for the precision, and copy bandwidth x intensity); log-log, a labelled tick at
    every decade, each point in its framework's (or precision's) colour, named in the legend
    below by what tells it from the others."""
    shown = roofline_points(results)
    if not shown:
        return None
    from dlperf.report.plots import WIDTH, _png, decades, plt

    figure, axes = plt.subplots(figsize=(WIDTH, 4.6))
    lows = [p.intensity for p in shown]
    span = [min(lows + [p.ridge for p in shown]) / 4, max(lows + [p.ridge for p in shown]) * 4]
    roofs = {}
    for point in shown:
        roofs[(point.peak_flops_per_s, point.bandwidth_bytes_per_s)] = point
    heights = []
    for (peak, bandwidth), roof in roofs.items():
        xs = [span[0], roof.ridge, span[1]]
        ys = [min(peak, x * bandwidth) / 1e9 for x in xs]
        heights += ys
        axes.plot(xs, ys, color="0.4", linewidth=1)
        axes.annotate(f"{peak / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.0f} GB/s", (xs[-1], ys[-1]),
                      fontsize=8, ha="right", va="bottom", color="0.3")
    names = point_names([p.result for p in shown])
    styles = palette.styles({names[i]: point.result for i, point in enumerate(shown)})
    for index, point in enumerate(shown):
        per_roof = point.of_roof * point.roof_flops_per_s  # achieved, per GPU or node
        heights.append(per_roof / 1e9)
        colour, number = styles[names[index]]
        axes.scatter([point.intensity], [per_roof / 1e9], s=36, color=colour,
                     marker=MARKERS[number % len(MARKERS)],
                     label=f"{names[index]} ({point.of_roof:.0%} of roof)")
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


def point_names(results: Sequence[ResultLike]) -> list[str]:
    """Each point's name: the values of what varies among the points (``fp32``,
    ``tensorflow``), or its label where nothing does; unique, so each has its legend entry."""
    typed = [read_result(r) for r in results]
    along = varies.varying(typed)
    names = [" ".join(axis.describe(r) for axis in along) or r.label for r in typed]
    return [name if names.count(name) == 1 else f"{name} ({r.label})"
            for name, r in zip(names, typed)]
