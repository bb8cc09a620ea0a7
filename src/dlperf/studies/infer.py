"""Inference batch sweeps: throughput and latency percentiles per batch size, and the speedup of
each precision over fp32 at the same batch size.

Each (precision, batch size) is an ordinary :class:`~dlperf.spec.Case` with ``task="infer"``,
measured by :func:`dlperf.runner.run_case` (a fresh worker per repeat, stored as it goes). The
worker's loop runs in latency mode for inference: every iteration is synchronised, so each one's
latency is real, and throughput is the samples in the window over the window's time.

Latency percentiles (``latency_ms``): numpy's 'linear' interpolation (Hyndman-Fan type 7) over
the iterations of **all repeats pooled**; see :func:`dlperf.stats.latency_ms`. Latency is that
of one batch (one query), in milliseconds.

Speedup over fp32: throughput median of a case over that of its fp32 twin (same everything but
the precision) — from the same invocation when it measured fp32, else the latest successful
result with the twin's case key in the database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from dlperf import runner
from dlperf.spec import Case
from dlperf.store import Store

BASELINE = "fp32"


class SweepInterrupted(Exception):
    """Ctrl-C arrived during a sweep; the results so far travel with it."""

    def __init__(self, results: list[dict[str, Any]]) -> None:
        super().__init__("interrupted")
        self.results = results


def sweep_cases(base: Case, batch_sizes: Sequence[int], precisions: Sequence[str]) -> list[Case]:
    """One case per precision and batch size; fp32 first so later rows find their baseline."""
    order = sorted(dict.fromkeys(precisions), key=lambda p: p != BASELINE)
    return [dataclasses.replace(base, precision=precision, batch_size=batch)
            for precision in order for batch in dict.fromkeys(batch_sizes)]


def fp32_twin(case: Case) -> Case:
    return dataclasses.replace(case, precision=BASELINE)


def stored_baseline(store: Store | None, case: Case) -> dict[str, Any] | None:
    """The latest successful stored result of ``case``'s fp32 twin, if any."""
    if store is None:
        return None
    found = store.results("case_key = ? AND status = 'ok' AND result_json IS NOT NULL",
                          (fp32_twin(case).key(),))
    return found[-1] if found else None


def speedup(result: dict[str, Any], baseline: dict[str, Any] | None,
            source: str) -> dict[str, Any] | None:
    """Throughput median over the baseline's; None when either has none."""
    if result.get("status") != "ok" or baseline is None or baseline.get("status") != "ok":
        return None
    mine, base = result["throughput"]["median"], baseline["throughput"]["median"]
    if not mine or not base:
        return None
    return {"value": mine / base, "baseline_throughput": base,
            "baseline_run_id": baseline.get("run_id"), "source": source}


def attach_speedups(results: list[dict[str, Any]], store: Store | None) -> None:
    """Fill ``speedup_vs_fp32`` in each result (None with no fp32 baseline to compare with)."""
    here = {Case.from_dict(r["case"]).key(): r for r in results
            if r["case"]["precision"] == BASELINE}
    for result in results:
        case = Case.from_dict(result["case"])
        if case.precision == BASELINE:
            result["speedup_vs_fp32"] = speedup(result, result, "itself")
            continue
        twin = here.get(fp32_twin(case).key())
        if twin is not None and twin.get("status") == "ok":
            result["speedup_vs_fp32"] = speedup(result, twin, "this invocation")
        else:
            result["speedup_vs_fp32"] = speedup(result, stored_baseline(store, case), "database")


def run_sweep(cases: Sequence[Case], store: Store | None, env: dict[str, Any],
              progress: Callable[[Case], Any] | None = None) -> list[dict[str, Any]]:
    """Measure every case in order; a failed case is a result and never stops the sweep.

    ``progress(case)`` returns a context manager yielding the per-repeat callback. On Ctrl-C,
    :class:`SweepInterrupted` carries the results so far (the partial one last).
    """
    results: list[dict[str, Any]] = []
    for case in cases:
        try:
            if progress is None:
                result = runner.run_case(case, store=store, env=env)
            else:
                with progress(case) as on_repeat:
                    result = runner.run_case(case, store=store, env=env, on_repeat=on_repeat)
        except runner.Interrupted as stop:
            results.append(stop.result)
            attach_speedups(results, store)
            raise SweepInterrupted(results) from None
        results.append(result)
    attach_speedups(results, store)
    return results


def engine(case: dict[str, Any], result: dict[str, Any] | None = None) -> str:
    """How a person names what ran: 'torch eager', 'torch compile', 'onnxruntime (CPU)'..."""
    name = case["framework"]
    if name == "onnxruntime":
        info = ((result or {}).get("env") or {}).get("worker", {}).get("framework") or {}
        providers = info.get("providers") or []
        short = [p.replace("ExecutionProvider", "") for p in providers[:1]]
        return f"onnxruntime ({short[0]})" if short else "onnxruntime"
    return f"{name} {'compile' if case.get('compile') else 'eager'}"


def _ms(latency: dict[str, Any] | None, key: str) -> str:
    value = (latency or {}).get(key)
    return "-" if value is None else f"{value:,.2f}"


def speedup_text(result: dict[str, Any]) -> str:
    if result.get("status") != "ok":
        return "-"
    found = result.get("speedup_vs_fp32")
    if result["case"]["precision"] == BASELINE:
        return "1.00x (baseline)"
    if not found:
        return "no fp32 baseline"
    where = "" if found["source"] == "this invocation" else f" (db run {found['baseline_run_id']})"
    return f"{found['value']:.2f}x{where}"


TABLE_COLUMNS = ("Batch", "Precision", "Throughput (samples/s)", "Avg latency (ms)", "p50",
                 "p90", "p95", "p99", "p99.9", "CV", "Speedup vs fp32", "Status")


def table_rows(results: Sequence[dict[str, Any]]) -> list[list[str]]:
    """NVIDIA-style rows: batch, throughput (median over repeats), latency percentiles (ms,
    pooled), speedup over fp32 at the same batch size, status."""
    rows = []
    for result in results:
        case, tp = result["case"], result.get("throughput") or {}
        latency = result.get("latency_ms") if result.get("status") == "ok" else None
        cv = tp.get("cv")
        rows.append([str(case["batch_size"]), case["precision"],
                     "-" if not tp.get("median") else f"{tp['median']:,.1f}",
                     _ms(latency, "mean"), _ms(latency, "p50"), _ms(latency, "p90"),
                     _ms(latency, "p95"), _ms(latency, "p99"), _ms(latency, "p99_9"),
                     "-" if cv is None else f"{cv:.1%}", speedup_text(result),
                     result.get("status", "?")])
    return rows
