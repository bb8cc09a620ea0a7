"""Resource timelines: the monitor's samples of one repeat, placed in the worker's phases.

A repeat's means over its whole life mix the framework import and the build with the measured
window; "where the time goes" needs the window alone, and a picture of the rest. The monitor
(``dlperf.host.monitor``) keeps one sample per interval; the worker reports the wall-clock start of
each phase (``phase_starts``); this module labels every sample with the phase its midpoint falls
in, averages the window's samples, and bounds what is stored by averaging neighbours (never across
a phase boundary, each point keeping ``n``, the raw samples it stands for).

Phases: ``startup`` (interpreter and framework import, before the build), ``build``,
``first_step``, ``warmup``, ``window``, ``teardown`` (after the window's closing barrier).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MAX_POINTS = 600  # stored per repeat; longer repeats are averaged down to this
RAW_CAP = 8 * MAX_POINTS  # held by the monitor while a repeat runs; beyond it, pairs merge
PHASES = ("startup", "build", "first_step", "warmup", "window", "teardown")
WORKER_PHASES = ("build", "first_step", "warmup", "window", "end")  # the worker's marks
THROTTLE_SUFFIX = "_throttle_reasons"  # bit masks: combined by OR, never averaged
META = ("t", "n", "phase")


def _combine(name: str, values: list[Any], weights: list[int]) -> Any:
    """One value for several neighbouring samples: OR for bit masks, else the weighted mean."""
    present = [(v, w) for v, w in zip(values, weights) if v is not None]
    if not present:
        return None
    if name.endswith(THROTTLE_SUFFIX):
        mask = 0
        for value, _ in present:
            mask |= int(value)
        return mask
    total = sum(w for _, w in present)
    return sum(v * w for v, w in present) / total


def merge_pairs(columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Halve a column set by merging neighbouring samples (the monitor's memory bound)."""
    weights = columns["n"]
    out: dict[str, list[Any]] = {name: [] for name in columns}
    for start in range(0, len(weights), 2):
        span = slice(start, start + 2)
        for name, values in columns.items():
            if name == "n":
                out[name].append(sum(weights[span]))
            else:
                out[name].append(_combine(name, values[span], weights[span]))
    return out


def phase_spans(t0: float, marks: dict[str, float] | None,
                last: float) -> list[dict[str, Any]]:
    """The phases as [start, end) seconds from the monitor's start, in order."""
    if not marks or any(marks.get(name) is None for name in WORKER_PHASES):
        return []
    edges = [0.0] + [marks[name] - t0 for name in WORKER_PHASES] + [max(last, marks["end"] - t0)]
    return [{"name": name, "start": edges[i], "end": edges[i + 1]}
            for i, name in enumerate(PHASES) if edges[i + 1] > edges[i] or name == "window"]


def _phase_of(t: float, spans: list[dict[str, Any]]) -> str | None:
    for span in spans:
        if span["start"] <= t < span["end"]:
            return str(span["name"])
    return spans[-1]["name"] if spans and t >= spans[-1]["end"] else None


def downsample(columns: dict[str, list[Any]], max_points: int = MAX_POINTS
               ) -> dict[str, list[Any]]:
    """At most ``max_points`` points: runs of neighbours averaged, never across phases."""
    count = len(columns["t"])
    phases = columns["phase"]
    runs: list[tuple[int, int]] = []
    for i in range(count):
        if runs and phases[i] == phases[runs[-1][0]]:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    if count <= max_points or max_points <= len(runs):
        return columns
    size = math.ceil(count / (max_points - len(runs)))
    out: dict[str, list[Any]] = {name: [] for name in columns}
    for first, stop in runs:
        for start in range(first, stop, size):
            span = slice(start, min(start + size, stop))
            weights = columns["n"][span]
            for name, values in columns.items():
                if name == "phase":
                    out[name].append(values[start])
                elif name == "n":
                    out[name].append(sum(weights))
                else:
                    out[name].append(_combine(name, values[span], weights))
    return out


def window_means(columns: dict[str, list[Any]]) -> dict[str, Any]:
    """Each quantity's mean over the samples inside the window (bit masks: OR), weighted by n."""
    inside = [i for i, phase in enumerate(columns["phase"]) if phase == "window"]
    weights = [columns["n"][i] for i in inside]
    means: dict[str, Any] = {"samples": sum(weights)}
    for name, values in columns.items():
        if name not in META:
            means[name] = _combine(name, [values[i] for i in inside], weights)
    return means


def for_repeat(raw: dict[str, Any] | None, marks: dict[str, float] | None,
               max_points: int = MAX_POINTS) -> dict[str, Any] | None:
    """One repeat's stored timeline: labelled, window-averaged, bounded in size."""
    if not raw or not raw.get("columns") or not raw["columns"].get("t"):
        return None
    columns = {name: list(values) for name, values in raw["columns"].items()}
    # the teardown lasts until the process exited, which may be within one sampling interval
    # of the worker's end mark: no sample after it, but the phase happened
    spans = phase_spans(raw["t0"], marks, max(columns["t"][-1], raw.get("end_s") or 0.0))
    columns["phase"] = [_phase_of(t, spans) for t in columns["t"]]
    raw_count = sum(columns["n"])
    stored = downsample(columns, max_points)
    return {"t0": raw["t0"], "interval_s": raw["interval_s"], "phases": spans,
            "raw_samples": raw_count, "points": len(stored["t"]),
            "downsampled": len(stored["t"]) < len(columns["t"]) or raw_count > len(columns["t"]),
            "window_means": window_means(columns),
            "columns": {name: _rounded(name, values) for name, values in stored.items()}}


def _rounded(name: str, values: list[Any]) -> list[Any]:
    """Stored precision: milliseconds for times, 4 significant digits for measurements."""
    if name == "t":
        return [round(v, 3) for v in values]
    if name in ("n", "phase") or name.endswith(THROTTLE_SUFFIX):
        return values
    return [None if v is None else float(f"{v:.4g}") for v in values]


def _median_index(values: list[float]) -> int:
    """The repeat at the median (the lower middle one for an even count)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(values) - 1) // 2]


def summarize(repeats: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The result's ``timeline``: every repeat's window means, their case-level mean, and the
    median-throughput repeat's samples (the report draws that one)."""
    timed = [r for r in repeats if r.get("timeline") and r.get("throughput") is not None]
    if not timed:
        return None
    per_repeat = [dict(r["timeline"]["window_means"], repeat=r.get("repeat")) for r in timed]
    names = sorted({k for m in per_repeat for k in m if k not in ("repeat", "samples")})
    summary: dict[str, Any] = {}
    for name in names:
        values = [m[name] for m in per_repeat if m.get(name) is not None]
        if name.endswith(THROTTLE_SUFFIX):
            summary[name] = _combine(name, values, [1] * len(values))
        else:
            summary[name] = float(np.mean(values)) if values else None
    chosen = timed[_median_index([r["throughput"] for r in timed])]
    return {"window_means": per_repeat, "summary": summary,
            "median_repeat": chosen.get("repeat"), "median": chosen["timeline"]}


HOST_FIELDS = ("cpu_tree_pct", "cpu_rest_pct", "cpu_steal_pct", "rss_bytes",
               "disk_read_bytes_s", "disk_write_bytes_s", "net_rx_bytes_s", "net_tx_bytes_s")
# per-GPU fields folded into one CSV column: summed over GPUs where a total means something
GPU_FIELDS = {"util_pct": "mean", "mem_used_bytes": "sum", "power_w": "sum",
              "sm_clock_mhz": "mean", "pcie_rx_bytes_s": "sum", "pcie_tx_bytes_s": "sum",
              "throttle_reasons": "or"}


def flat_window_means(block: dict[str, Any] | None) -> dict[str, Any]:
    """The case's window means as fixed columns (``window_<field>``), GPUs folded together,
    so every CSV row has the same header whatever the machine had."""
    summary = (block or {}).get("summary") or {}
    out = {f"window_{name}": summary.get(name) for name in HOST_FIELDS}
    for field, how in GPU_FIELDS.items():
        values = [v for k, v in summary.items()
                  if k.startswith("gpu") and k.split("_", 1)[-1] == field and v is not None]
        if not values:
            out[f"window_gpu_{field}"] = None
        elif how == "or":
            out[f"window_gpu_{field}"] = _combine(THROTTLE_SUFFIX, values, [1] * len(values))
        else:
            out[f"window_gpu_{field}"] = sum(values) / (len(values) if how == "mean" else 1)
    return out
