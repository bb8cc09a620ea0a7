"""CSV (one row per case, every case field and statistic) and JSON (the result contract) export.

The CSV's ``device`` is the device the case ran on (``cpu``, ``cuda:0 NVIDIA H100 ...``: the
result's resolved device), ``device_requested`` what ``--device`` asked for (``auto``)."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf import numbers
from dlperf.host import timeline
from dlperf.results.codec import read_result, to_dict
from dlperf.results.model import Result, ResultLike
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


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def stored_case(result: Result) -> Mapping[str, Any]:
    """The case as the row holds it: a field the row was stored before is an empty cell here,
    not the value the reader fills in (:attr:`Result.case`)."""
    return _object(result.raw.get("case"))


def timings(result: Result) -> Mapping[str, Any]:
    """The per-repeat phase times (``timings``: build, first step, warm-up, window, wall), the
    CSV's alone."""
    return _object(result.raw.get("timings"))


def sweep(result: Result) -> Any:
    """The sweep a loaded result's run belonged to (:func:`dlperf.report.results.load` adds it
    beside the stored result)."""
    return result.raw.get("sweep")


def row(result: ResultLike, knobs: list[str]) -> dict[str, Any]:
    typed = read_result(result)
    case = stored_case(typed)
    tp = typed.throughput
    flops = typed.flops
    ci = tp.ci95 if tp and tp.ci95 else (None, None)
    out: dict[str, Any] = {
        "run_id": typed.run_id, "sweep": sweep(typed), "case_key": typed.case_key,
        "label": typed.label, "status": typed.status,
        "error": typed.error, "source": (typed.case.get("external") or {}).get("name") or "dlperf",
    }
    out["device"] = typed.device if case else None
    out["device_requested"] = case.get("device")
    out.update({name: cell_value(case.get(name)) for name in CASE_COLUMNS})
    out.update({f"knob_{name}": (typed.case["knobs"] or {}).get(name) for name in knobs})
    out["global_batch"] = typed.global_batch
    out["unit"] = typed.unit
    out.update({f"throughput_{name}": getattr(tp, name) if tp else None
                for name in STAT_COLUMNS})
    out["throughput_ci95_low"], out["throughput_ci95_high"] = ci[0], ci[1]
    out["throughput_repeats"] = ";".join(repr(v) for v in tp.repeats) if tp else ""
    out["speedup"] = typed.speedup
    out["scaling_efficiency"] = typed.scaling_efficiency
    out["params"] = typed.params
    out["flops_per_sample"] = flops.per_sample if flops else None
    out["achieved_flops_per_s"] = flops.achieved_per_s if flops else None
    out["mfu"] = flops.mfu if flops else None
    out["peak_host_bytes"] = typed.peak_host_bytes
    out["peak_device_bytes"] = typed.peak_device_bytes
    out.update({f"{name}_median": median_or_none(timings(typed).get(name))
                for name in TIMING_COLUMNS})
    out.update({f"latency_{name}_ms": typed.latency_ms.get(name) for name in LATENCY_COLUMNS})
    out.update(timeline.flat_window_means(dict(typed.timeline)))
    out["fallback_from_batch_size"] = typed.fallback_from_batch_size
    # the tune configuration the case's settings came from (--config best, config: best)
    out["config"] = typed.config_which
    out["config_study"] = typed.config_study
    out["warnings"] = " | ".join(typed.warnings)
    out["git_commit"] = _object(typed.env.get("git")).get("commit")
    return out


def to_csv(results: Sequence[ResultLike]) -> str:
    typed = [read_result(r) for r in results]
    knobs = sorted({k for r in typed for k in (r.case["knobs"] or {})})
    rows = [row(r, knobs) for r in typed]
    header = list(row({}, knobs))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for item in rows:
        writer.writerow({k: csv_cell(v) for k, v in item.items()})
    return buffer.getvalue()


def to_json(results: Sequence[ResultLike]) -> str:
    """The results as the JSON contract has them (:func:`dlperf.results.codec.to_dict`)."""
    return numbers.dumps([to_dict(r) for r in results], indent=2)
