"""The server scenario (MLPerf LoadGen's idea): the highest query rate whose p99 latency stays
under a bound.

A *probe* offers a seeded Poisson stream of queries at one rate to a fresh worker (a normal
:class:`~dlperf.spec.Case` with ``scenario="server"``, measured by :func:`dlperf.runner.run_case`
and stored). The worker serves queries in arrival order and measures each latency from the
query's **scheduled** arrival, so a system that falls behind pays for the queue it builds (see
:func:`dlperf.worker.loop.serve`). A probe *meets the bound* when it finished, its p99 (numpy
'linear' interpolation) is <= the target, and it was *valid*: it served at least
``min_queries`` queries over at least ``min_duration_s`` seconds without stopping early (the
worker stops as soon as more queries missed the bound than p99 allows).

The search: one unloaded run (queries back to back) estimates the capacity, 1 / mean latency;
no rate above it can keep a queue stable. Then bisection between 0 and that capacity, ``probes``
times; the peak is the highest rate that met the bound. Each probe is one fresh process (one
repeat): the search itself is the repetition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dlperf import runner
from dlperf.spec import Case
from dlperf.store import Store

DEFAULT_MIN_QUERIES = 500
DEFAULT_MIN_DURATION_S = 10.0
DEFAULT_PROBES = 6
CAPACITY_STEPS = 30  # unloaded iterations that estimate the capacity


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the user asked the server scenario for."""

    target_latency_ms: float
    min_queries: int = DEFAULT_MIN_QUERIES
    min_duration_s: float = DEFAULT_MIN_DURATION_S
    probes: int = DEFAULT_PROBES
    rate_qps: float | None = None  # one probe at this rate instead of a search


@dataclasses.dataclass
class RateSearch:
    """The server scenario's search for the highest rate that meets the bound, finished or
    stopped."""

    settings: Settings
    capacity: dict[str, Any] | None = None  # the unloaded run's result
    capacity_qps: float | None = None
    probes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    peak: dict[str, Any] | None = None
    note: str | None = None


class SearchInterrupted(Exception):
    """Ctrl-C arrived during the search; what was found so far travels with it."""

    def __init__(self, outcome: RateSearch) -> None:
        super().__init__("interrupted")
        self.outcome = outcome


def tidy_rate(rate: float) -> float:
    """Three significant digits: rates people can read and cases whose labels stay short."""
    return float(f"{rate:.3g}")


def probe_case(base: Case, settings: Settings, rate_qps: float) -> Case:
    return dataclasses.replace(
        base, scenario="server", repeats=1, min_duration_s=settings.min_duration_s,
        server={"rate_qps": rate_qps, "target_latency_ms": settings.target_latency_ms,
                "min_queries": settings.min_queries})


def capacity_case(base: Case) -> Case:
    """Queries back to back, no arrivals: the unloaded latency and the capacity it implies."""
    return dataclasses.replace(base, scenario="offline", repeats=1, min_duration_s=0.0,
                               server={}, steps=max(base.steps, CAPACITY_STEPS))


def meets_bound(result: dict[str, Any]) -> bool:
    """Finished, valid (long enough, not stopped early) and p99 within the target."""
    server = result.get("server") or {}
    latency = result.get("latency_ms") or {}
    return (result.get("status") == "ok" and bool(server.get("valid"))
            and latency.get("p99") is not None
            and latency["p99"] <= server["target_latency_ms"])


def annotate(result: dict[str, Any]) -> None:
    if result.get("server") is not None:
        result["server"]["meets_target"] = meets_bound(result)
        result["server"].setdefault("peak", False)


Measure = Callable[[Case], dict[str, Any]]


def search(base: Case, settings: Settings, measure: Measure) -> RateSearch:
    """Find the highest rate meeting the bound; ``measure(case)`` runs and returns one result."""
    outcome = RateSearch(settings)
    try:
        if settings.rate_qps is not None:
            _probe(outcome, base, settings, settings.rate_qps, measure)
        else:
            _bisect(outcome, base, settings, measure)
    except runner.Interrupted as stop:
        if stop.result.get("server") is not None or stop.result["case"]["scenario"] == "server":
            outcome.probes.append(stop.result)
        _finish(outcome)
        raise SearchInterrupted(outcome) from None
    _finish(outcome)
    return outcome


def _probe(outcome: RateSearch, base: Case, settings: Settings, rate: float,
           measure: Measure) -> dict[str, Any]:
    result = measure(probe_case(base, settings, rate))
    annotate(result)
    outcome.probes.append(result)
    return result


def _bisect(outcome: RateSearch, base: Case, settings: Settings, measure: Measure) -> None:
    unloaded = measure(capacity_case(base))
    outcome.capacity = unloaded
    latency = unloaded.get("latency_ms") or {}
    if unloaded.get("status") != "ok" or not latency.get("mean"):
        outcome.note = f"the unloaded run failed ({unloaded.get('status')}): {unloaded.get('error')}"
        return
    capacity = 1000.0 / latency["mean"]
    outcome.capacity_qps = capacity
    if latency["p99"] > settings.target_latency_ms:
        outcome.note = (f"no rate can meet p99 <= {settings.target_latency_ms:g} ms: one query "
                        f"at a time already has p99 {latency['p99']:.1f} ms")
        return
    low, high = 0.0, capacity
    tried: set[float] = set()
    for _ in range(settings.probes):
        rate = tidy_rate((low + high) / 2.0)
        if rate in tried or rate <= 0:
            break
        tried.add(rate)
        result = _probe(outcome, base, settings, rate, measure)
        if result.get("status") != "ok":
            outcome.note = (f"probe at {rate:g} queries/s failed ({result.get('status')}): "
                            f"{result.get('error')}")
            return
        if result["server"]["meets_target"]:
            low = rate
        else:
            high = rate


def _finish(outcome: RateSearch) -> None:
    passing = [r for r in outcome.probes if r.get("server") and r["server"].get("meets_target")]
    if passing:
        outcome.peak = max(passing, key=lambda r: r["server"]["rate_qps"])
        outcome.peak["server"]["peak"] = True
    elif outcome.probes and outcome.note is None:
        lowest = min(r["case"]["server"]["rate_qps"] for r in outcome.probes)
        outcome.note = (f"no probed rate met p99 <= {outcome.settings.target_latency_ms:g} ms "
                        f"(lowest tried: {lowest:g} queries/s)")


def run(base: Case, settings: Settings, store: Store | None, env: dict[str, Any],
        progress: Callable[[Case], Any] | None = None) -> RateSearch:
    """:func:`search` with each probe measured by the runner and stored."""

    def measure(case: Case) -> dict[str, Any]:
        if progress is None:
            return runner.run_case(case, store=store, env=env)
        with progress(case) as on_repeat:
            return runner.run_case(case, store=store, env=env, on_repeat=on_repeat)

    return search(base, settings, measure)
