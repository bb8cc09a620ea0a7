"""The report's figures, drawn with matplotlib (no display needed) and returned as PNG bytes.

Each function returns None when the results hold nothing for that figure to show (e.g. no
configuration measured on more than one device count), and the report leaves it out. Every
figure takes the report's :class:`~dlperf.report.palette.Palette`: a framework (or precision)
is one colour in all of them.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
# labels are data (framework and external names): a "$" must not start mathtext and fail a report
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib import ticker  # noqa: E402

from dlperf.scaling import config as scaling_config  # noqa: E402
from dlperf.history.series import experiment_of  # noqa: E402
from dlperf.report import varies  # noqa: E402
from dlperf.report.palette import HATCHES, LINESTYLES, MARKERS, Palette  # noqa: E402
from dlperf.report.tables import engine, precision_rank, row_key, variant_of  # noqa: E402
from dlperf.results.codec import read_result  # noqa: E402
from dlperf.results.model import ResultLike, Throughput  # noqa: E402

DPI = 100
WIDTH = 7.5
SPREAD_BAND_PERCENT = 5.0


def _ok(results: Sequence[ResultLike]) -> list[ResultLike]:
    return [r for r in results if read_result(r).median is not None]


def _figures(result: ResultLike) -> Throughput:
    """The throughput summary of a result :func:`_ok` kept."""
    summary = read_result(result).throughput
    assert summary is not None
    return summary


def _median(result: ResultLike) -> float:
    """The median throughput of a result :func:`_ok` kept."""
    value = read_result(result).median
    assert value is not None
    return value


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _log2_axis(axes: Any, values: list[int]) -> None:
    """A base-2 log axis labelled with the values themselves (1, 2, 4, … not 2^0, 2^1, …)."""
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted(set(values)))
    axes.xaxis.set_major_formatter(ticker.ScalarFormatter())
    axes.xaxis.set_minor_formatter(ticker.NullFormatter())


def decades(axes: Any, which: str, values: list[float]) -> None:
    """A log axis (``which``: ``x`` or ``y``) over whole decades, a labelled tick at every one:
    a range inside one decade would otherwise show one label, or none."""
    low = 10.0 ** math.floor(math.log10(min(values)))
    high = 10.0 ** math.ceil(math.log10(max(values)))
    if high <= low:
        high = low * 10
    (axes.set_xlim if which == "x" else axes.set_ylim)(low, high)
    axis = axes.xaxis if which == "x" else axes.yaxis
    axis.set_major_locator(ticker.LogLocator(base=10.0, numticks=30))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(ticker.LogLocator(base=10.0, subs=tuple(range(2, 10)), numticks=30))
    axis.set_minor_formatter(ticker.NullFormatter())


def _line_chart(figure: Any, axes: Any, xlabel: str, ylabel: str, title: str) -> bytes:
    """The finish every line chart shares: labels, title, grid and legend; the PNG."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return _png(figure)


def _unit(results: Sequence[ResultLike]) -> str:
    return read_result(results[0]).unit if results else "samples/s"


def _series_name(result: ResultLike, *fields: str) -> str:
    """A line's name: framework, mode, engine, the device it ran on (a CPU and a GPU line of one
    case are two lines), then ``fields`` of the case."""
    typed = read_result(result)
    case = typed.case
    parts = [case.get("framework", "?"), variant_of(result)]
    if engine(case) != "native":  # Horovod's line beside the framework's own
        parts.append(engine(case))
    parts.append(f"[{typed.device}]")
    for name in fields:
        value = case.get(name)
        parts.append(f"bsz {value}" if name == "batch_size" else
                     f"{value} dev" if name == "devices" else str(value))
    return " ".join(parts)


def _line(styles: dict[str, tuple[str, int]], name: str) -> dict[str, Any]:
    """A line's colour (the palette's), marker and line style (its number within the colour)."""
    colour, index = styles[name]
    return {"color": colour, "marker": MARKERS[index % len(MARKERS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)]}


def scaling(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Throughput against device count per configuration, with the ideal-scaling line."""
    series: dict[str, dict[int, float]] = {}
    first: dict[str, ResultLike] = {}
    for result in _ok(results):
        name = _series_name(result, "precision", "batch_size")
        series.setdefault(name, {})[read_result(result).devices] = _median(result)
        first.setdefault(name, result)
    series = {name: points for name, points in series.items() if len(points) > 1}
    if not series:
        return None
    styles = palette.styles({name: first[name] for name in series})
    figure, axes = plt.subplots(figsize=(WIDTH, 4.2))
    for name, points in sorted(series.items()):
        devices = sorted(points)
        style = _line(styles, name)
        axes.plot(devices, [points[d] for d in devices], label=name, **style)
        if 1 in points:
            axes.plot(devices, [points[1] * d for d in devices], "--", color=style["color"],
                      alpha=0.5, label=f"{name}: ideal")
    _log2_axis(axes, [d for points in series.values() for d in points])
    return _line_chart(figure, axes, "devices (nodes × devices per node)",
                       f"throughput ({_unit(results)})",
                       "Throughput vs devices (dashed: ideal linear scaling from 1 device)")


def speedup(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Every framework's speedup over its own 1-device result against the total device count,
    one line per framework, mode, precision and batch size, with the ideal (speedup = devices).

    A speedup is measured against a 1-device baseline, so each line starts at (1, 1). Points
    across several nodes are squares, so 2 nodes x 1 device and 1 node x 2 devices stay apart."""
    series: dict[str, list[tuple[int, int, float]]] = {}
    first: dict[str, ResultLike] = {}
    for result in _ok(results):
        typed = read_result(result)
        if typed.speedup is None:
            continue
        name = _series_name(result, "precision", "batch_size")
        series.setdefault(name, []).append(
            (typed.devices, int(typed.case["nnodes"] or 1), typed.speedup))
        first.setdefault(name, result)
    series = {name: points for name, points in series.items()
              if any(devices > 1 for devices, _, _ in points)}
    if not series:
        return None
    styles = palette.styles({name: first[name] for name in series})
    figure, axes = plt.subplots(figsize=(WIDTH, 4.6))
    counts = {1}
    for name, points in sorted(series.items()):
        if not any(devices == 1 for devices, _, _ in points):
            points = [(1, 1, 1.0), *points]
        points = sorted(points)
        style = _line(styles, name)
        axes.plot([d for d, _, _ in points], [s for _, _, s in points], color=style["color"],
                  linestyle=style["linestyle"], label=name)
        for devices, nodes, value in points:
            axes.plot([devices], [value], "s" if nodes > 1 else "o", color=style["color"])
        counts.update(d for d, _, _ in points)
    top = max(counts)
    axes.plot([1, top], [1, top], "--", color="0.2", linewidth=1.2,
              label="ideal: speedup = devices")
    _log2_axis(axes, sorted(counts))
    axes.set_yscale("log", base=2)
    low = min(min(s for _, _, s in points) for points in series.values())
    axes.set_ylim(min(0.9, low * 0.9), top * 1.15)
    below = {2.0 ** k for k in range(math.floor(math.log2(low)), 0)} if low < 1 else set()
    axes.set_yticks(sorted(counts | below))
    axes.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    axes.yaxis.set_minor_formatter(ticker.NullFormatter())
    return _line_chart(figure, axes, "devices (nodes × devices per node)",
                       "speedup over 1 device",
                       "Speedup vs devices, every framework (squares: across nodes; dashed: "
                       "ideal)")


def batch_size(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Throughput against batch size per configuration; bars show min–max over repeats."""
    series: dict[str, dict[int, tuple[float, float, float]]] = {}
    first: dict[str, ResultLike] = {}
    for result in _ok(results):
        tp = _figures(result)
        name = _series_name(result, "precision", "devices")
        series.setdefault(name, {})[read_result(result).case["batch_size"]] = (
            _median(result), tp.min, tp.max)  # type: ignore[assignment]
        first.setdefault(name, result)
    if not any(len(points) > 1 for points in series.values()):
        return None
    styles = palette.styles(first)
    figure, axes = plt.subplots(figsize=(WIDTH, 4.2))
    for name, points in sorted(series.items()):
        sizes = sorted(points)
        medians = [points[b][0] for b in sizes]
        low = [points[b][0] - points[b][1] for b in sizes]
        high = [points[b][2] - points[b][0] for b in sizes]
        axes.errorbar(sizes, medians, yerr=[low, high], capsize=3, label=name,
                      **_line(styles, name))
    _log2_axis(axes, [b for points in series.values() for b in points])
    return _line_chart(figure, axes, "batch size per device",
                       f"throughput ({_unit(results)}, median)",
                       "Throughput vs batch size (error bars: min–max over repeats)")


def _series_of(result: ResultLike) -> str:
    """A bar's series: the summary row it belongs to (framework, mode, engine, version)."""
    framework, kind, _ = row_key(result)
    return f"{framework} ({kind})"


def bar_groups(results: Sequence[ResultLike]
               ) -> dict[tuple[int, str, int, int, str], dict[str, ResultLike]]:
    """The comparison figure's bars: per group (a batch, device count and device, and the
    precision where several frameworks, modes or versions are compared) its results by bar
    name (the series, or the precision where there is one series). Only groups of two bars or
    more are kept, and not those whose bars are one case in two versions or labels: the history
    figure draws those. A result is one bar in one group: never the same bars twice."""
    shown = _ok(results)
    several = len({_series_of(r) for r in shown}) > 1
    groups: dict[tuple[int, str, int, int, str], dict[str, ResultLike]] = {}
    for result in shown:
        typed = read_result(result)
        precision = str(typed.case["precision"])
        key = (precision_rank(precision) if several else 0, precision if several else "",
               int(typed.case.get("batch_size") or 0), typed.devices, typed.device)
        groups.setdefault(key, {})[_series_of(result) if several else precision] = result
    return {key: bars for key, bars in groups.items()
            if len(bars) > 1 and len({experiment_of(r) for r in bars.values()}) > 1}


def compared_title(results: Sequence[ResultLike]) -> str:
    """The comparison figure's title: what varies among its bars (``Precisions compared:
    torch (eager)``, ``Frameworks and precisions compared``)."""
    drawn = [r for bars in bar_groups(results).values() for r in bars.values()]
    along = varies.varying(drawn, (*varies.ROW, varies.PRECISIONS))
    title = f"{varies.title(along)} compared" if along else "Compared"
    series = sorted({_series_of(r) for r in drawn})
    return title + (f": {series[0]}" if len(series) == 1 else "")


def compared(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """What the section compares at one batch and device count, as bars at the median with
    min–max whiskers: every framework (and mode, version) side by side per precision, or one
    framework's precisions; coloured by the report's palette, hatched within a colour."""
    groups = bar_groups(results)
    if not groups:
        return None
    keys = sorted(groups)
    first: dict[str, ResultLike] = {}
    for key in keys:
        for name, result in groups[key].items():
            first.setdefault(name, result)
    series = sorted(first, key=lambda name: (precision_rank(
        str(read_result(first[name]).case["precision"])), name))
    styles = palette.styles(first)
    width = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(max(WIDTH, 1.0 + 0.35 * len(series) * len(keys)), 4.4))
    for index, name in enumerate(series):
        xs, heights, low, high = [], [], [], []
        for i, key in enumerate(keys):
            if name in groups[key]:
                tp = _figures(groups[key][name])
                median = _median(groups[key][name])
                repeats = tp.repeats or (median,)
                xs.append(i + (index - (len(series) - 1) / 2) * width)
                heights.append(median)
                low.append(median - min(repeats))
                high.append(max(repeats) - median)
        colour, number = styles[name]
        axes.bar(xs, heights, width=width, yerr=[low, high], capsize=2, label=name,
                 color=colour, hatch=HATCHES[number % len(HATCHES)], edgecolor="white",
                 linewidth=0)
    axes.set_xticks(range(len(keys)))
    axes.set_xticklabels([" ".join(filter(None, (p, f"bsz {b}", f"{d} dev" if d > 1 else "")))
                          + f"\n{where}" for _, p, b, d, where in keys],
                         rotation=15 if len(keys) > 3 else 0, fontsize=8)
    axes.set_ylabel(f"throughput ({_unit(results)}, median)")
    axes.set_title(f"{compared_title(results)} (whiskers: min–max over repeats)")
    axes.grid(True, axis="y", alpha=0.3)
    _legend_below(axes, len(series))
    return _png(figure)


def _legend_below(axes: Any, entries: int) -> None:
    """The legend under the plot, where it cannot cover a bar."""
    axes.legend(fontsize=8, ncol=min(3, max(1, entries)), loc="upper center",
                bbox_to_anchor=(0.5, -0.18), frameon=False)


def repeat_spread(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Every repeat of every case, as its deviation from the case's median: noise made visible."""
    cases = [r for r in _ok(results) if _figures(r).repeats]
    if not cases:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, 0.9 + 0.32 * len(cases)))
    labels = []
    for row, result in enumerate(cases):
        tp = _figures(result)
        median = _median(result)
        deviations = [100.0 * (v / median - 1.0) for v in tp.repeats]
        axes.scatter(deviations, [row] * len(deviations), s=18, alpha=0.75,
                     color=palette.colour(result))
        cv = f", CV {tp.cv:.1%}" if tp.cv is not None else ""
        labels.append(f"{read_result(result).label or '?'} ({median:,.1f}{cv})")
    widest = max((abs(100.0 * (v / _median(r) - 1.0))
                  for r in cases for v in _figures(r).repeats), default=0.0)
    limit = max(SPREAD_BAND_PERCENT * 2, widest * 1.15)
    axes.set_xlim(-limit, limit)  # the same ±5% band looks the same size in every report
    axes.axvspan(-SPREAD_BAND_PERCENT, SPREAD_BAND_PERCENT, color="0.5", alpha=0.12,
                 label=f"±{SPREAD_BAND_PERCENT:g}%")
    axes.axvline(0.0, color="0.3", linewidth=1)
    axes.legend(fontsize=7, loc="lower right")
    axes.set_yticks(range(len(cases)))
    axes.set_yticklabels(labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("repeat throughput vs the case's median (%)")
    axes.set_title("Per-repeat spread of every case")
    axes.grid(True, axis="x", alpha=0.3)
    return _png(figure)


def projected(projection: dict[str, Any], results: Sequence[ResultLike]) -> bytes | None:
    """A stored projection (`dlperf project`) beyond the measured points: the measured
    throughputs of its configuration (solid, markers) and the projection's (dashed, its interval
    shaded, and lighter that interval widened by the model's validated error), drawn apart so a
    projected figure is never read as a measured one."""
    source = projection.get("source") or {}
    start = next((r for r in map(read_result, results) if r.label == source.get("label")
                  and r.case_key == source.get("case_key")), None)
    points = sorted(projection.get("points") or [], key=lambda p: p["devices"])
    if start is None or not points:
        return None
    wanted = scaling_config(start)
    measured = sorted((r.devices, _median(r)) for r in map(read_result, _ok(results))
                      if scaling_config(r) == wanted and r.launcher == "native")
    figure, axes = plt.subplots(figsize=(WIDTH, 4.2))
    if measured:
        axes.plot([d for d, _ in measured], [t for _, t in measured], "o-", color="C0",
                  label="measured (median)")
    devices = [p["devices"] for p in points]
    axes.plot(devices, [p["throughput"]["value"] for p in points], "s--", color="C3",
              label="projected (not measured)")
    axes.fill_between(devices, [p["throughput"]["low"] for p in points],
                      [p["throughput"]["high"] for p in points], color="C3", alpha=0.15,
                      label="projection's interval (its inputs' spread)")
    if all(p.get("throughput_with_model_error") for p in points):  # stored since 2026-11-30
        axes.fill_between(devices, [p["throughput_with_model_error"]["low"] for p in points],
                          [p["throughput_with_model_error"]["high"] for p in points],
                          color="C3", alpha=0.06, label="with the model's validated error")
    _log2_axis(axes, devices + [d for d, _ in measured])
    return _line_chart(figure, axes, "devices (nodes × devices per node)",
                       f"throughput ({_unit(results)})",
                       f"Projected beyond the measured points: projection "
                       f"{projection.get('id', '?')}")
