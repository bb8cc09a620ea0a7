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
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.spec import Case, SpecError
from dlperf.studies.infer import BASELINE

PERCENTILES = ("p50", "p90", "p99")  # the percentiles the latency figure draws
#: the latency statistics an inference table shows (key of ``latency_ms``, heading)
STATISTICS = (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))


def is_inference(result: ResultLike) -> bool:
    """A batch-sweep inference result (server-scenario probes measure queueing, not batches)."""
    case = read_result(result).case
    return case["task"] == "infer" and case["scenario"] != "server"


def _key(case: Mapping[str, Any], precision: str | None = None) -> str | None:
    """The case's key, or its twin's at ``precision``."""
    try:
        parsed = Case.from_dict(dict(case))
        return (dataclasses.replace(parsed, precision=precision) if precision else parsed).key()
    except (SpecError, TypeError, ValueError):  # a case this dlperf cannot rebuild: no twin
        return None


def precision_index(results: Sequence[ResultLike], precision: str = BASELINE,
                    inference_only: bool = True) -> dict[str, ResultLike]:
    """Successful results at ``precision`` (inference ones only, unless told) by case key and
    device (the newest wins): the twins the speedups divide by."""
    index: dict[str, ResultLike] = {}
    for result in results:
        typed = read_result(result)
        if (is_inference(typed) or not inference_only) and typed.status == "ok" \
                and typed.case["precision"] == precision:
            key = _key(typed.case)
            if key is not None:
                index[f"{key} {typed.device}"] = result
    return index


def fp32_index(results: Sequence[ResultLike]) -> dict[str, ResultLike]:
    """Successful fp32 inference results by case key (the newest wins)."""
    return precision_index(results, BASELINE)


def baseline(result: ResultLike, index: Mapping[str, ResultLike],
             precision: str = BASELINE, inference_only: bool = True) -> ResultLike | None:
    """The twin of ``result`` at ``precision`` in ``index`` (:func:`precision_index`)."""
    typed = read_result(result)
    if (inference_only and not is_inference(typed)) or typed.status != "ok":
        return None
    key = _key(typed.case, precision)
    return None if key is None else index.get(f"{key} {typed.device}")


def _summary_median(result: ResultLike | None) -> float | None:
    """The stored median throughput, whatever the status (None without one)."""
    summary = None if result is None else read_result(result).throughput
    return None if summary is None else summary.median


def throughput_speedup(result: ResultLike, index: Mapping[str, ResultLike],
                       precision: str = BASELINE, inference_only: bool = True) -> float | None:
    """Throughput median over the twin's at ``precision``; None without a twin."""
    mine = _summary_median(result)
    theirs = _summary_median(baseline(result, index, precision, inference_only))
    return mine / theirs if mine and theirs else None


def latency_speedups(result: ResultLike, index: Mapping[str, ResultLike],
                     precision: str = BASELINE) -> dict[str, float | None]:
    """Per statistic (:data:`STATISTICS`): the twin's latency at ``precision`` over this
    result's (None where either lacks it)."""
    twin = baseline(result, index, precision)
    base = {} if twin is None else read_result(twin).latency_ms
    mine = read_result(result).latency_ms
    return {key: (base[key] / mine[key] if base.get(key) and mine.get(key) else None)
            for key, _ in STATISTICS}
