"""The report's inference figures: latency percentiles vs batch size, throughput vs latency.

Why both: a batch sweep trades latency for throughput, and the tail (p99) grows faster than the
median; NVIDIA's inference tables are read the same way. Latencies are those ``dlperf infer``
stored (``latency_ms``: one batch, all repeats' iterations pooled). Server-scenario probes are
left out (their latency includes queueing at an offered rate). Matplotlib setup (Agg, mathtext
off so labels stay data) comes from :mod:`dlperf.report.plots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.report import inference
from dlperf.report.palette import MARKERS, Palette
from dlperf.report.plots import WIDTH, _log2_axis, _median, _png, _series_name, plt
from dlperf.report.tables import precision_rank
from dlperf.results.codec import read_result
from dlperf.results.model import Result, ResultLike

STYLES = {"p50": "o-", "p90": "s--", "p99": "^:"}


def _measured(results: Sequence[ResultLike]) -> list[Result]:
    return [r for r in map(read_result, results) if inference.is_inference(r)
            and r.latency_ms.get("p50") is not None and r.median]


def _series(results: Sequence[ResultLike]) -> dict[str, list[Result]]:
    """Per framework, mode, precision and device count: results by batch size."""
    series: dict[str, list[Result]] = {}
    for result in _measured(results):
        series.setdefault(_series_name(result, "precision", "devices"), []).append(result)
    for members in series.values():
        members.sort(key=lambda r: int(r.case.get("batch_size") or 0))
    return dict(sorted(series.items(), key=lambda item: (
        precision_rank(str(item[1][0].case["precision"])), item[0])))


def latency_percentiles(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """p50, p90 and p99 latency against batch size, in the report's colours (a marker per
    series of one colour), the percentile as the line's style."""
    series = _series(results)
    if not series:
        return None
    styles = palette.styles({name: members[0] for name, members in series.items()})
    figure, axes = plt.subplots(figsize=(WIDTH, 4.4))
    sizes = []
    for name, members in series.items():
        colour, number = styles[name]
        batches = [int(r.case["batch_size"]) for r in members]
        sizes += batches
        for percentile in inference.PERCENTILES:
            values = [r.latency_ms.get(percentile) for r in members]
            points = [(b, v) for b, v in zip(batches, values) if v is not None]
            if points:
                axes.plot([b for b, _ in points], [v for _, v in points], STYLES[percentile],
                          color=colour, marker=MARKERS[number % len(MARKERS)],
                          label=f"{name} {percentile}")
    _log2_axis(axes, sizes)
    axes.set_yscale("log")
    axes.set_xlabel("batch size (samples per query)")
    axes.set_ylabel("latency of one batch (ms)")
    axes.set_title("Latency percentiles vs batch size (solid p50, dashed p90, dotted p99)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, ncol=2)
    return _png(figure)


def throughput_latency(results: Sequence[ResultLike], palette: Palette) -> bytes | None:
    """Throughput against p99 latency, a line per precision through its batch sizes (labelled):
    the best precision is the one up and to the left."""
    series = _series(results)
    if not series:
        return None
    styles = palette.styles({name: members[0] for name, members in series.items()})
    figure, axes = plt.subplots(figsize=(WIDTH, 4.4))
    for name, members in series.items():
        points: list[tuple[float, float, int]] = [
            (r.latency_ms["p99"], _median(r), r.case["batch_size"]) for r in members
            if r.latency_ms.get("p99") is not None]
        if not points:
            continue
        color, number = styles[name]
        axes.plot([p[0] for p in points], [p[1] for p in points], "-", color=color,
                  marker=MARKERS[number % len(MARKERS)], label=name)
        for latency, throughput, batch in points:
            axes.annotate(f"bsz {batch}", (latency, throughput), textcoords="offset points",
                          xytext=(4, 4), fontsize=7, color=color)
    axes.set_xscale("log")
    axes.set_xlabel("p99 latency of one batch (ms)")
    axes.set_ylabel(f"throughput ({_measured(results)[0].unit}, median)")
    axes.set_title("Throughput vs p99 latency per precision (points: batch sizes)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return _png(figure)


FIGURES = (
    ("Latency percentiles vs batch size", latency_percentiles),
    ("Throughput vs latency per precision", throughput_latency),
)


def figures(results: Sequence[ResultLike]) -> tuple[tuple[str, Any], ...]:
    """The inference figures for a section holding inference results; none for training."""
    return FIGURES if any(inference.is_inference(r) for r in results) else ()
