"""CSV (one row per case, every case field and statistic) and JSON (the result contract) export.

The CSV's ``device`` is the device the case ran on (``cpu``, ``cuda:0 NVIDIA H100 ...``: the
result's resolved device), ``device_requested`` what ``--device`` asked for (``auto``)."""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

from dlperf import numbers
from dlperf.host import timeline
from dlperf.result import device_of
from dlperf.spec import Case
from dlperf.stats import median_or_none

# every case field as the case holds it (empty where a row was stored before it existed), in
# the order dlperf.spec.Case declares them; the knobs get a column each and the requested device
# its own name, beside the resolved one
CASE_COLUMNS = tuple(f.name for f in dataclasses.fields(Case) if f.name not in ("knobs", "device"))
STAT_COLUMNS = ("median", "mean", "min", "max", "iqr", "cv", "n")
TIMING_COLUMNS = ("build_s", "first_step_s", "warmup_s", "window_s", "wall_s")
LATENCY_COLUMNS = ("mean", "p50", "p90", "p95", "p99")
# A spreadsheet runs a cell starting with one of these as a formula; labels and errors are data.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """The value as a CSV cell: None empty, numbers as they are, formula-like text defused."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def cell_value(value: Any) -> Any:
    """A case value as one cell: a mapping (the server scenario's settings) as compact JSON."""
    if isinstance(value, dict):
        return numbers.dumps(value, sort_keys=True, separators=(",", ":")) if value else None
    return value


def row(result: dict[str, Any], knobs: list[str]) -> dict[str, Any]:
    case = result.get("case") or {}
    tp = result.get("throughput") or {}
    flops = result.get("flops") or {}
    memory = result.get("memory") or {}
    timings = result.get("timings") or {}
    latency = result.get("latency_ms") or {}
    ci = tp.get("ci95") or [None, None]
    out: dict[str, Any] = {
        "run_id": result.get("run_id"), "sweep": result.get("sweep"),
        "case_key": result.get("case_key"), "label": result.get("label"),
        "status": result.get("status"), "error": result.get("error"),
        "source": (case.get("external") or {}).get("name") or "dlperf",
    }
    out["device"] = device_of(result) if case else None
    out["device_requested"] = case.get("device")
    out.update({name: cell_value(case.get(name)) for name in CASE_COLUMNS})
    out.update({f"knob_{name}": (case.get("knobs") or {}).get(name) for name in knobs})
    out["global_batch"] = result.get("global_batch")
    out["unit"] = result.get("unit")
    out.update({f"throughput_{name}": tp.get(name) for name in STAT_COLUMNS})
    out["throughput_ci95_low"], out["throughput_ci95_high"] = ci[0], ci[1]
    out["throughput_repeats"] = ";".join(repr(v) for v in tp.get("repeats") or [])
    out["speedup"] = result.get("speedup")
    out["scaling_efficiency"] = result.get("scaling_efficiency")
    out["params"] = (result.get("model") or {}).get("params")
    out["flops_per_sample"] = flops.get("per_sample")
    out["achieved_flops_per_s"] = flops.get("achieved_per_s")
    out["mfu"] = flops.get("mfu")
    out["peak_host_bytes"] = memory.get("peak_host_bytes")
    out["peak_device_bytes"] = memory.get("peak_device_bytes")
    out.update({f"{name}_median": median_or_none(timings.get(name)) for name in TIMING_COLUMNS})
    out.update({f"latency_{name}_ms": latency.get(name) for name in LATENCY_COLUMNS})
    out.update(timeline.flat_window_means(result.get("timeline")))
    out["fallback_from_batch_size"] = (result.get("fallback") or {}).get("from_batch_size")
    # the tune configuration the case's settings came from (--config best, config: best)
    out["config"] = (result.get("config") or {}).get("which")
    out["config_study"] = (result.get("config") or {}).get("study")
    out["warnings"] = " | ".join(result.get("warnings") or [])
    out["git_commit"] = ((result.get("env") or {}).get("git") or {}).get("commit")
    return out


def to_csv(results: list[dict[str, Any]]) -> str:
    knobs = sorted({k for r in results for k in ((r.get("case") or {}).get("knobs") or {})})
    rows = [row(r, knobs) for r in results]
    header = list(row({}, knobs))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for item in rows:
        writer.writerow({k: csv_cell(v) for k, v in item.items()})
    return buffer.getvalue()


def to_json(results: list[dict[str, Any]]) -> str:
    return numbers.dumps(results, indent=2)
