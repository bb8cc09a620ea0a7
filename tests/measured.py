"""What a real run's result must hold beyond a positive throughput, from the fields it has.

A wrong count of samples, steps or time still gives a positive number; these do not hold for it:
each repeat's throughput times its window's seconds is a whole number of global batches (the
window's steps), as many as the case asked (more only under ``--min-duration``); the step time
is the batch over the throughput; every repeat asked is there; and a training run's loss is
finite and moved between its first step and the window's last."""

from __future__ import annotations

import math
from typing import Any

import pytest


def window_steps(result: dict[str, Any]) -> list[float]:
    """Per repeat, the steps its throughput and window time imply (a whole number if right)."""
    batch = result["global_batch"]
    return [samples_per_s * window_s / batch for samples_per_s, window_s
            in zip(result["throughput"]["repeats"], result["timings"]["window_s"])]


def check_measured(result: dict[str, Any]) -> None:
    """Fail, naming the field, where ``result`` (a run's JSON) is not a consistent measurement
    of the case it records."""
    case = result["case"]
    assert result["status"] == "ok", result.get("error")
    throughput = result["throughput"]
    repeats = throughput["repeats"]
    assert len(repeats) == result["repeats_done"] == len(result["timings"]["window_s"]), result
    if isinstance(case["repeats"], int):
        assert len(repeats) == case["repeats"], (repeats, case["repeats"])
    assert result["global_batch"] == case["batch_size"] * case["devices"] * case["nnodes"]
    assert all(math.isfinite(v) and v > 0 for v in repeats), repeats
    assert min(repeats) <= throughput["median"] <= max(repeats), throughput
    for steps in window_steps(result):
        assert steps == pytest.approx(round(steps), abs=1e-6), (
            f"throughput x window_s / global_batch = {steps}: not a whole number of steps")
        if case["min_duration_s"]:
            assert round(steps) >= case["steps"], (steps, case["steps"])
        else:
            assert round(steps) == case["steps"], (steps, case["steps"])
    if result.get("iteration_ms") is not None:
        assert result["iteration_ms"] == pytest.approx(
            1000.0 * result["global_batch"] / throughput["median"], rel=1e-6)
    if case["task"] == "train" and not case.get("data_only"):
        first, last = result["loss"]["first"], result["loss"]["last"]
        assert len(first) == len(last) == len(repeats), result["loss"]
        assert all(math.isfinite(v) for v in first + last), result["loss"]
        assert any(a != b for a, b in zip(first, last)), f"the loss never moved: {result['loss']}"


PERCENTILES = ("p50", "p90", "p95", "p99", "p99_9")


def check_latency(result: dict, batch: int) -> None:
    """Percentiles ordered, mean inside the range, and throughput consistent with latencies."""
    assert result["status"] == "ok", result["error"]
    latency = result["latency_ms"]
    values = [latency[p] for p in PERCENTILES]
    assert values == sorted(values)
    assert latency["min"] <= latency["p50"] and latency["p99_9"] <= latency["max"]
    assert latency["min"] <= latency["mean"] <= latency["max"]
    assert "linear" in latency["method"]
    repeats = result["throughput"]["repeats"]
    assert len(latency["repeats"]["mean"]) == len(repeats)
    for throughput, mean_ms in zip(repeats, latency["repeats"]["mean"]):
        # every iteration is synchronised, so the window is the sum of the latencies
        assert throughput == pytest.approx(batch / (mean_ms / 1000.0), rel=0.02)
