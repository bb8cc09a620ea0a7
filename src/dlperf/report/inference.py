"""Results against their baseline-precision twins: speedups a report computes from stored results.

Stored ``dlperf infer`` results do not carry their speedup (it is attached after storing, from
the invocation or the database), so the report recomputes it the same way: the twin is the
result whose case differs only in precision (fp32 unless the report names another baseline, as
``dlperf report --baseline-precision tf32`` does for NVIDIA's A100 tables), looked up among the
results the report shows, on the same resolved device (a GPU result is never a CPU one's twin).
A latency speedup is the twin's latency at a statistic (avg, p50 ... p99) over this precision's
at the same statistic (> 1: faster), so each statistic of the tail gets its own; a training
result's is its throughput over its twin's (AMP over FP32).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlperf.result import device_of
from dlperf.spec import Case, SpecError
from dlperf.studies.infer import BASELINE

PERCENTILES = ("p50", "p90", "p99")  # the percentiles the latency figure draws
#: the latency statistics an inference table shows (key of ``latency_ms``, heading)
STATISTICS = (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))


def is_inference(result: dict[str, Any]) -> bool:
    """A batch-sweep inference result (server-scenario probes measure queueing, not batches)."""
    case = result.get("case") or {}
    return case.get("task") == "infer" and case.get("scenario", "offline") != "server"


def _key(case: dict[str, Any], precision: str | None = None) -> str | None:
    """The case's key, or its twin's at ``precision``."""
    try:
        parsed = Case.from_dict(case)
        return (dataclasses.replace(parsed, precision=precision) if precision else parsed).key()
    except (SpecError, TypeError, ValueError):  # a case this dlperf cannot rebuild: no twin
        return None


def precision_index(results: list[dict[str, Any]], precision: str = BASELINE,
                    inference_only: bool = True) -> dict[str, dict[str, Any]]:
    """Successful results at ``precision`` (inference ones only, unless told) by case key and
    device (the newest wins): the twins the speedups divide by."""
    index: dict[str, dict[str, Any]] = {}
    for result in results:
        if (is_inference(result) or not inference_only) and result.get("status") == "ok" \
                and result["case"].get("precision") == precision:
            key = _key(result["case"])
            if key is not None:
                index[f"{key} {device_of(result)}"] = result
    return index


def fp32_index(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Successful fp32 inference results by case key (the newest wins)."""
    return precision_index(results, BASELINE)


def baseline(result: dict[str, Any], index: dict[str, dict[str, Any]],
             precision: str = BASELINE, inference_only: bool = True) -> dict[str, Any] | None:
    """The twin of ``result`` at ``precision`` in ``index`` (:func:`precision_index`)."""
    if (inference_only and not is_inference(result)) or result.get("status") != "ok":
        return None
    key = _key(result["case"], precision)
    return None if key is None else index.get(f"{key} {device_of(result)}")


def throughput_speedup(result: dict[str, Any], index: dict[str, dict[str, Any]],
                       precision: str = BASELINE, inference_only: bool = True) -> float | None:
    """Throughput median over the twin's at ``precision``; None without a twin."""
    base = baseline(result, index, precision, inference_only)
    mine = (result.get("throughput") or {}).get("median")
    theirs = ((base or {}).get("throughput") or {}).get("median")
    return mine / theirs if mine and theirs else None


def latency_speedups(result: dict[str, Any], index: dict[str, dict[str, Any]],
                     precision: str = BASELINE) -> dict[str, float | None]:
    """Per statistic (:data:`STATISTICS`): the twin's latency at ``precision`` over this
    result's (None where either lacks it)."""
    base = (baseline(result, index, precision) or {}).get("latency_ms") or {}
    mine = result.get("latency_ms") or {}
    return {key: (base[key] / mine[key] if base.get(key) and mine.get(key) else None)
            for key, _ in STATISTICS}
