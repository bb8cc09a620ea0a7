"""Typed views of a stored result, its per-repeat records and its ranks' figures.

Readers used to walk the stored JSON themselves (``result.get("throughput") or {}``...) and
each filled in what older rows lacked in its own way. These objects are built by one reader
(:mod:`dlperf.results.codec`), which has already made an old row look like a new one, so a
consumer reads attributes and never guesses. Each keeps the object it was read from
(``raw``): the stored format does not change, and fields no consumer has a type for yet stay
reachable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Throughput:
    """The summary of the successful repeats' throughputs (:func:`dlperf.stats.summarize`)."""

    median: float | None
    mean: float | None
    min: float | None
    max: float | None
    cv: float | None
    iqr: float | None
    ci95: tuple[float, float] | None
    n: int
    repeats: tuple[float, ...]


@dataclass(frozen=True)
class RankFigures:
    """One rank's own figures over the successful repeats (:func:`dlperf.result.rank_figures`)."""

    rank: int
    host: str | None
    local_rank: int | None
    threads: int | None
    cpus: Any
    throughput: tuple[float, ...]
    window_s: tuple[float | None, ...]
    first_step_s: tuple[float | None, ...]
    build_s: tuple[float | None, ...]
    allreduce_s: tuple[float | None, ...]
    slowest_in: int
    peak_host_bytes: int
    throughput_median: float | None


@dataclass(frozen=True)
class RankRecord:
    """What one rank reported for one repeat (the worker's record, as the runner keeps it)."""

    rank: int
    status: str
    window_s: float | None
    window_samples: int | None
    peak_host_bytes: int | None
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Repeat:
    """One repeat's record: the job-level figures (:func:`dlperf.result.merge_ranks`), its
    status and its ranks' own records."""

    repeat: int | None
    status: str
    error: str | None
    throughput: float | None
    window_s: float | None
    params: int | None
    ranks: tuple[RankRecord, ...]
    raw: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Profile:
    """A result's profile block (:mod:`dlperf.worker.profile`): where the profiled step's time
    went, by category; no categories where the profiler was unavailable or failed."""

    categories: Mapping[str, float]
    step_s: float | None
    measured_step_s: float | None
    overhead: float | None
    unmapped: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any]
    #: the share of the measured step the profiled operators cover
    coverage: float | None
    #: the profiler that took it (``name``, ``version``; empty when not recorded)
    tool: Mapping[str, Any]
    #: why a profile asked for was not taken (its ``unavailable`` or ``error``), else None
    why_not: str | None


@dataclass(frozen=True)
class Flops:
    """A result's arithmetic (:func:`dlperf.result.flops_block`): per sample, achieved per
    second, and the share of the device's peak (MFU); None where not known."""

    per_sample: float | None
    achieved_per_s: float | None
    mfu: float | None


@dataclass(frozen=True)
class Roofline:
    """A result's roofline estimate (:mod:`dlperf.explain.roofline`)."""

    intensity: float | None
    ridge: float | None
    bound: str | None
    of_roof: float | None
    roof_note: str | None
    #: the probed GEMM peak and copy bandwidth the roof is drawn from, and the roof's height
    #: at the result's intensity (per GPU or node)
    peak_flops_per_s: float | None
    bandwidth_bytes_per_s: float | None
    roof_flops_per_s: float | None


@dataclass(frozen=True)
class Result:
    """One stored result (DESIGN.md's JSON contract), any schema version dlperf wrote, as the
    current version reads it."""

    raw: Mapping[str, Any]
    run_id: int | None
    case_key: str | None
    label: str
    #: the stored case, with every case field added since at the value it had before
    case: Mapping[str, Any]
    status: str
    error: str | None
    #: the resolved device (``cpu``, ``cuda:0 NVIDIA H100 80GB HBM3``; derived for old rows)
    device: str
    params: int | None
    throughput: Throughput | None
    ranks: tuple[RankFigures, ...]
    launch: Mapping[str, Any] | None
    #: the emulated hosts it ran on (a run's own, else its launch facts'), or None
    emulated_hosts: Mapping[str, Any] | None
    environment_name: str
    framework_version: str | None
    run_label: str | None
    speedup: float | None
    scaling_efficiency: float | None
    speedup_baseline: Mapping[str, Any] | None
    speedup_note: str | None
    profile: Profile | None
    roofline: Roofline | None
    #: the CPU's instruction-set flags as the host recorded them (empty when not recorded)
    cpu_flags: frozenset[str]
    #: what the throughput counts (``samples/s`` where a row does not say)
    unit: str
    #: an inference result's latency of one batch by statistic (``mean``, ``p50``...), ms;
    #: empty for a training result
    latency_ms: Mapping[str, Any]
    #: the mean time of one iteration, ms (None where not recorded)
    iteration_ms: float | None
    #: the peak host and device memory of the run (its ``memory`` block), bytes
    peak_host_bytes: int | None
    peak_device_bytes: int | None
    #: the batch of one step over every device (None where not recorded)
    global_batch: int | None
    #: the arithmetic it did (``flops`` block: per sample, achieved per second, MFU), or None
    flops: Flops | None
    #: what the run warned about, in the words it stored
    warnings: tuple[str, ...]
    #: the batch size that ran out of memory before this one ran (a sweep's fallback), or None
    fallback_from_batch_size: int | None
    #: the tune configuration the case's settings came from (``config``: ``best``...) and its
    #: study, None for the framework's defaults
    config_which: str | None
    config_study: Any
    #: the host and worker facts as recorded (``env``: cpu, gpus, git, worker...; empty if none)
    env: Mapping[str, Any]
    #: the resource timeline block (:mod:`dlperf.host.timeline`: ``median``, ``summary``...),
    #: empty where none was recorded
    timeline: Mapping[str, Any]

    @property
    def devices(self) -> int:
        """The devices of the whole job: per node times nodes."""
        return int(self.case.get("devices") or 1) * int(self.case.get("nnodes") or 1)

    @property
    def launcher(self) -> str:
        return str(self.case.get("launcher") or "native")

    @property
    def median(self) -> float | None:
        """The median throughput of a successful result; None for a failed one."""
        if self.status != "ok" or self.throughput is None:
            return None
        return self.throughput.median


#: what a reader of results takes: a typed result, or a result object as stored (a decoded
#: ``result_json``, a result file), which it reads through :func:`dlperf.results.codec.read_result`
ResultLike = Result | Mapping[str, Any]
