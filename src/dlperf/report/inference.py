"""Inference results against their fp32 twins: speedups a report computes from stored results.

Stored ``dlperf infer`` results do not carry their speedup (it is attached after storing, from
the invocation or the database), so the report recomputes it the same way: the fp32 twin is the
result whose case differs only in precision (``dlperf.studies.infer.fp32_twin``), looked up among the
results the report shows, on the same resolved device (a GPU result is never a CPU one's twin).
A latency speedup is fp32's latency at a percentile over this
precision's at the same percentile (> 1: faster), so each percentile of the tail gets its own.
"""

from __future__ import annotations

from typing import Any

from dlperf.result import device_of
from dlperf.spec import Case, SpecError
from dlperf.studies.infer import BASELINE, fp32_twin

PERCENTILES = ("p50", "p90", "p99")


def is_inference(result: dict[str, Any]) -> bool:
    """A batch-sweep inference result (server-scenario probes measure queueing, not batches)."""
    case = result.get("case") or {}
    return case.get("task") == "infer" and case.get("scenario", "offline") != "server"


def _key(case: dict[str, Any], twin: bool = False) -> str | None:
    try:
        parsed = Case.from_dict(case)
        return (fp32_twin(parsed) if twin else parsed).key()
    except (SpecError, TypeError, ValueError):  # a case this dlperf cannot rebuild: no twin
        return None


def fp32_index(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Successful fp32 inference results by case key (the newest wins)."""
    index: dict[str, dict[str, Any]] = {}
    for result in results:
        if is_inference(result) and result.get("status") == "ok" \
                and result["case"].get("precision") == BASELINE:
            key = _key(result["case"])
            if key is not None:
                index[f"{key} {device_of(result)}"] = result
    return index


def baseline(result: dict[str, Any], index: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    if not is_inference(result) or result.get("status") != "ok":
        return None
    key = _key(result["case"], twin=True)
    return None if key is None else index.get(f"{key} {device_of(result)}")


def throughput_speedup(result: dict[str, Any],
                       index: dict[str, dict[str, Any]]) -> float | None:
    """Throughput median over the fp32 twin's; None without a twin."""
    base = baseline(result, index)
    mine = (result.get("throughput") or {}).get("median")
    theirs = ((base or {}).get("throughput") or {}).get("median")
    return mine / theirs if mine and theirs else None


def latency_speedups(result: dict[str, Any],
                     index: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Per percentile: the fp32 twin's latency over this result's (None where either lacks it)."""
    base = (baseline(result, index) or {}).get("latency_ms") or {}
    mine = result.get("latency_ms") or {}
    return {p: (base[p] / mine[p] if base.get(p) and mine.get(p) else None)
            for p in PERCENTILES}
