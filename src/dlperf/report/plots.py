"""The report's figures, drawn with matplotlib (no display needed) and returned as PNG bytes.

Each function returns None when the results hold nothing for that figure to show (e.g. no
configuration measured on more than one device count), so the report says so instead of
drawing an empty chart.
"""

from __future__ import annotations

import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
# labels are data (framework and external names): a "$" must not start mathtext and fail a report
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib import ticker  # noqa: E402

from dlperf.report.results import total_devices  # noqa: E402
from dlperf.report.tables import engine, precision_rank, variant, variant_of  # noqa: E402
from dlperf.result import device_of  # noqa: E402

DPI = 100
WIDTH = 7.5
SPREAD_BAND_PERCENT = 5.0


def _ok(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if r.get("status") == "ok"
            and (r.get("throughput") or {}).get("median") is not None]


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


def _line_chart(figure: Any, axes: Any, xlabel: str, ylabel: str, title: str) -> bytes:
    """The finish every line chart shares: labels, title, grid and legend; the PNG."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return _png(figure)


def _unit(results: list[dict[str, Any]]) -> str:
    return results[0].get("unit", "samples/s") if results else "samples/s"


def _series_name(result: dict[str, Any], *fields: str) -> str:
    """A line's name: framework, mode, engine, the device it ran on (a CPU and a GPU line of one
    case are two lines), then ``fields`` of the case."""
    case = result["case"]
    parts = [case.get("framework", "?"), variant_of(result)]
    if engine(case) != "native":  # Horovod's line beside the framework's own
        parts.append(engine(case))
    parts.append(f"[{device_of(result)}]")
    for name in fields:
        value = case.get(name)
        parts.append(f"bsz {value}" if name == "batch_size" else
                     f"{value} dev" if name == "devices" else str(value))
    return " ".join(parts)


def scaling(results: list[dict[str, Any]]) -> bytes | None:
    """Throughput against device count per configuration, with the ideal-scaling line."""
    series: dict[str, dict[int, float]] = {}
    for result in _ok(results):
        name = _series_name(result, "precision", "batch_size")
        series.setdefault(name, {})[total_devices(result)] = result["throughput"]["median"]
    series = {name: points for name, points in series.items() if len(points) > 1}
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, 4.2))
    for index, (name, points) in enumerate(sorted(series.items())):
        devices = sorted(points)
        color = f"C{index % 10}"
        axes.plot(devices, [points[d] for d in devices], "o-", color=color, label=name)
        if 1 in points:
            axes.plot(devices, [points[1] * d for d in devices], "--", color=color, alpha=0.5,
                      label=f"{name}: ideal")
    _log2_axis(axes, [d for points in series.values() for d in points])
    return _line_chart(figure, axes, "devices (nodes × devices per node)",
                       f"throughput ({_unit(results)})",
                       "Throughput vs devices (dashed: ideal linear scaling from 1 device)")


def speedup(results: list[dict[str, Any]]) -> bytes | None:
    """Every framework's speedup over its own 1-device result against the total device count,
    one line per framework, mode, precision and batch size, with the ideal (speedup = devices).

    A speedup is measured against a 1-device baseline, so each line starts at (1, 1). Points
    across several nodes are squares, so 2 nodes x 1 device and 1 node x 2 devices stay apart."""
    series: dict[str, list[tuple[int, int, float]]] = {}
    for result in _ok(results):
        if result.get("speedup") is None:
            continue
        name = _series_name(result, "precision", "batch_size")
        series.setdefault(name, []).append(
            (total_devices(result), int(result["case"].get("nnodes") or 1), result["speedup"]))
    series = {name: points for name, points in series.items()
              if any(devices > 1 for devices, _, _ in points)}
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, 4.6))
    counts = {1}
    for index, (name, points) in enumerate(sorted(series.items())):
        if not any(devices == 1 for devices, _, _ in points):
            points = [(1, 1, 1.0), *points]
        points = sorted(points)
        color = f"C{index % 10}"
        axes.plot([d for d, _, _ in points], [s for _, _, s in points], "-", color=color,
                  label=name)
        for devices, nodes, value in points:
            axes.plot([devices], [value], "s" if nodes > 1 else "o", color=color)
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


def batch_size(results: list[dict[str, Any]]) -> bytes | None:
    """Throughput against batch size per configuration; bars show min–max over repeats."""
    series: dict[str, dict[int, tuple[float, float, float]]] = {}
    for result in _ok(results):
        tp = result["throughput"]
        name = _series_name(result, "precision", "devices")
        series.setdefault(name, {})[result["case"]["batch_size"]] = (
            tp["median"], tp["min"], tp["max"])
    if not any(len(points) > 1 for points in series.values()):
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, 4.2))
    for name, points in sorted(series.items()):
        sizes = sorted(points)
        medians = [points[b][0] for b in sizes]
        low = [points[b][0] - points[b][1] for b in sizes]
        high = [points[b][2] - points[b][0] for b in sizes]
        axes.errorbar(sizes, medians, yerr=[low, high], fmt="o-", capsize=3, label=name)
    _log2_axis(axes, [b for points in series.values() for b in points])
    return _line_chart(figure, axes, "batch size per device",
                       f"throughput ({_unit(results)}, median)",
                       "Throughput vs batch size (error bars: min–max over repeats)")


def mode_name(label: str) -> str:
    """A mode's label without its parenthesised detail: "XLA (tf.function jit_compile=True)"
    reads "XLA", "hybridize(static_alloc=True, ...)" "hybridize" under a bar group (the summary
    table has the whole label)."""
    return label.split("(", 1)[0].split(",", 1)[0].strip() or label


def setting_groups(results: list[dict[str, Any]]) -> dict[str, dict[tuple[str, bool], float]]:
    """Median throughput per (precision, compile on) for each framework, batch and device count
    measured in more than one setting. The group's label names what compile off and on mean
    in that framework, so the legend needs only the settings (a few), not every framework's
    mode names (twenty with eight frameworks)."""
    measured: dict[tuple[str, int, int], dict[tuple[str, bool], float]] = {}
    modes: dict[tuple[str, int, int], dict[bool, str]] = {}
    for result in _ok(results):
        case = result["case"]
        key = (str(case.get("framework")) + ("" if engine(case) == "native"
                                             else f" {engine(case)}") + f" [{device_of(result)}]",
               int(case.get("batch_size") or 0), total_devices(result))
        compiled = bool(case.get("compile"))
        measured.setdefault(key, {})[(str(case.get("precision")), compiled)] = (
            result["throughput"]["median"])
        modes.setdefault(key, {})[compiled] = mode_name(variant(case))
    groups = {}
    for key, bars in measured.items():
        if len(bars) < 2:
            continue
        framework, batch, devices = key
        lines = [f"{framework} bsz {batch}" + (f" {devices} dev" if devices > 1 else "")]
        lines += [f"{'on' if c else 'off'}: {modes[key][c]}" for c in sorted(modes[key])]
        groups["\n".join(lines)] = bars
    return groups


def precision_compile(results: list[dict[str, Any]]) -> bytes | None:
    """Grouped bars: each precision × compile setting, per framework, batch and device count;
    colour for the precision, hatch for compile, the framework's mode names under its group."""
    groups = setting_groups(results)
    if not groups:
        return None
    settings = sorted({s for bars in groups.values() for s in bars},
                      key=lambda s: (precision_rank(s[0]), s))
    precisions = sorted({p for p, _ in settings}, key=precision_rank)
    names = sorted(groups)
    width = 0.8 / len(settings)
    figure, axes = plt.subplots(figsize=(max(WIDTH, 1.45 * len(names)), 4.4))
    for index, (precision, compiled) in enumerate(settings):
        xs = [i + (index - (len(settings) - 1) / 2) * width for i in range(len(names))]
        heights = [groups[name].get((precision, compiled), 0.0) for name in names]
        label = f"{precision}, compile {'on' if compiled else 'off'}"
        axes.bar(xs, heights, width=width, label=label,
                 color=f"C{precisions.index(precision) % 10}", hatch=HATCHES[1] if compiled else "",
                 edgecolor="white", linewidth=0)
    axes.set_xticks(range(len(names)))
    axes.set_xticklabels(names, fontsize=7)
    axes.set_ylabel(f"throughput ({_unit(results)}, median)")
    axes.set_title("Precision and compile settings compared (same batch and devices)", pad=24)
    axes.grid(True, axis="y", alpha=0.3)
    # above the plot: the group labels below are several lines tall
    axes.legend(fontsize=7, ncol=len(settings), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                frameon=False)
    return _png(figure)


HATCHES = ("", "//", "..", "xx", "\\\\")


def series_styles(series: list[str]) -> dict[str, tuple[str, str]]:
    """Colour by framework, hatch by mode: "torch (eager)" and "torch (torch.compile)" share
    torch's colour, so sixteen bars read as eight frameworks (the default cycle has ten colours
    and gave two frameworks the same one)."""
    names = sorted({name.split(" (", 1)[0] for name in series})
    seen: dict[str, int] = {}
    styles = {}
    for name in sorted(series):
        framework = name.split(" (", 1)[0]
        mode = seen.get(framework, 0)
        seen[framework] = mode + 1
        styles[name] = (f"C{names.index(framework) % 10}", HATCHES[mode % len(HATCHES)])
    return styles


def _legend_below(axes: Any, entries: int) -> None:
    """The legend under the plot, where it cannot cover a bar."""
    axes.legend(fontsize=7, ncol=min(3, max(1, entries)), loc="upper center",
                bbox_to_anchor=(0.5, -0.22), frameon=False)


def frameworks(results: list[dict[str, Any]]) -> bytes | None:
    """DLPerf's main figure: every framework (and mode) side by side for each precision at the
    same batch and device count, bars at the median with min–max whiskers. Nothing is left out
    for having been measured in one setting only."""
    groups: dict[tuple[int, str, int, int, str], dict[str, tuple[float, float, float]]] = {}
    for result in _ok(results):
        case, tp = result["case"], result["throughput"]
        devices = total_devices(result)
        # one bar group per device a case ran on: a CPU bar never stands beside a GPU one
        key = (precision_rank(case.get("precision", "")), str(case.get("precision")),
               int(case.get("batch_size") or 0), devices, device_of(result))
        repeats = tp.get("repeats") or [tp["median"]]
        kind = variant_of(result) + ("" if engine(case) == "native" else f", {engine(case)}")
        groups.setdefault(key, {})[f"{case.get('framework')} ({kind})"] = (
            tp["median"], min(repeats), max(repeats))
    if not groups:
        return None
    keys = sorted(groups)
    series = sorted({name for bars in groups.values() for name in bars})
    styles = series_styles(series)
    width = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(max(WIDTH, 1.0 + 0.35 * len(series) * len(keys)), 4.4))
    for index, name in enumerate(series):
        xs, heights, low, high = [], [], [], []
        for i, key in enumerate(keys):
            if name in groups[key]:
                median, lo, hi = groups[key][name]
                xs.append(i + (index - (len(series) - 1) / 2) * width)
                heights.append(median)
                low.append(median - lo)
                high.append(hi - median)
        color, hatch = styles[name]
        axes.bar(xs, heights, width=width, yerr=[low, high], capsize=2, label=name,
                 color=color, hatch=hatch, edgecolor="white", linewidth=0)
    axes.set_xticks(range(len(keys)))
    axes.set_xticklabels([f"{p} bsz {b}" + (f" {d} dev" if d > 1 else "") + f"\n{where}"
                          for _, p, b, d, where in keys], rotation=15, ha="right", fontsize=8)
    axes.set_ylabel(f"throughput ({_unit(results)}, median)")
    axes.set_title("Frameworks side by side (whiskers: min–max over repeats)")
    axes.grid(True, axis="y", alpha=0.3)
    _legend_below(axes, len(series))
    return _png(figure)


def repeat_spread(results: list[dict[str, Any]]) -> bytes | None:
    """Every repeat of every case, as its deviation from the case's median: noise made visible."""
    cases = [r for r in _ok(results) if r["throughput"].get("repeats")]
    if not cases:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, 0.9 + 0.32 * len(cases)))
    labels = []
    for row, result in enumerate(cases):
        tp = result["throughput"]
        deviations = [100.0 * (v / tp["median"] - 1.0) for v in tp["repeats"]]
        axes.scatter(deviations, [row] * len(deviations), s=18, alpha=0.75, color="C0")
        cv = f", CV {tp['cv']:.1%}" if tp.get("cv") is not None else ""
        labels.append(f"{result.get('label', '?')} ({tp['median']:,.1f}{cv})")
    widest = max((abs(100.0 * (v / r["throughput"]["median"] - 1.0))
                  for r in cases for v in r["throughput"]["repeats"]), default=0.0)
    limit = max(SPREAD_BAND_PERCENT * 2, widest * 1.15)
    axes.set_xlim(-limit, limit)  # the same ±5% band looks the same size in every report
    axes.axvspan(-SPREAD_BAND_PERCENT, SPREAD_BAND_PERCENT, color="C2", alpha=0.12,
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
