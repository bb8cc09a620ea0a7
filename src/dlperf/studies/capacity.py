"""``dlperf capacity``: the largest value of one integer parameter that still runs.

DLPerf reports maximum batch sizes (224, 196, ...) and the largest class count that fits;
halving on OOM never finds them. The search here: probe the start value, grow geometrically
(x2) until the first out-of-memory probe, then bisect between the last size that ran and the
first that did not until they are within the resolution. Every probe is a fresh worker with a
short window, stored like any run (sweep ``capacity``), so throughput, latency per iteration and
peak memory are known at each probed size. Only ``oom`` bounds the search; any other failure
stops it with that probe's status and message, because a crash says nothing about capacity.

``table`` mode probes a geometric series between two sizes without searching (DLPerf's Wide &
Deep table: latency and memory vs vocabulary size).

A memory limit for a host (CPU) run is enforced on each worker with ``RLIMIT_DATA`` (the data
segment: heap and private anonymous mappings, where frameworks' host tensors live; unlike
``RLIMIT_AS`` it does not count reserved address space or shared libraries), set by the worker
itself before the framework is imported. Under that limit a worker killed by SIGSEGV, SIGBUS or
SIGABRT counts as out of memory (native code that does not check a refused allocation dies that
way: XLA's CPU runtime does), with the signal and the peak memory seen in its message.
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import runner
from dlperf.errors import UsageError
from dlperf.launchers import launch
from dlperf.launchers.launch import Launcher
from dlperf.spec import Case, SpecError
from dlperf.store import Store
from dlperf.worker.limits import VARIABLE as MEMORY_LIMIT_VARIABLE

SWEEP_NAME = "capacity"
PROBE_WARMUP = 2  # a probe's short window: enough to allocate everything a step needs
PROBE_STEPS = 3
GROWTH = 2
MAX_PROBES = 40
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?B?)?\s*", re.I)


def parse_count(text: str, flag: str) -> int:
    """``3.2M`` -> 3200000, ``512`` -> 512, ``64K`` -> 64000 (decimal suffixes)."""
    found = _SIZE.fullmatch(text)
    if not found or found.group(3):
        raise UsageError(f"{flag}: {text!r} must be a positive integer, optionally with K, M or G "
                         f"(e.g. 3.2M)")
    unit = found.group(2).upper()
    value = float(found.group(1)) * 1000 ** ("KMGT".find(unit) + 1 if unit else 0)
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise UsageError(f"{flag}: {text!r} must be a positive integer")
    return int(value)


def parse_bytes(text: str, flag: str = "--memory-limit") -> int:
    """``8GiB`` / ``8G`` (binary units: memory sizes are) -> bytes; at least 64 MiB."""
    found = _SIZE.fullmatch(text)
    if not found:
        raise UsageError(f"{flag}: {text!r} must be a size such as 8GiB, 512MiB or 8G")
    unit = found.group(2).upper()
    value = float(found.group(1)) * 1024 ** ("KMGT".find(unit) + 1 if unit else 0)
    if not (math.isfinite(value) and 64 * 2**20 <= value <= 2**50):
        raise UsageError(f"{flag}: {text!r} must be between 64MiB and 1PiB")
    return int(value)


@dataclass
class Probe:
    """One probed size and what its run gave."""

    value: int
    status: str
    error: str | None
    throughput: float | None  # samples/s (median of the probe's repeats)
    latency_s: float | None  # seconds per iteration (global batch / throughput)
    peak_host_bytes: int | None
    peak_device_bytes: int | None
    run_id: int | None

    @classmethod
    def from_result(cls, value: int, result: dict[str, Any]) -> Probe:
        rate = (result.get("throughput") or {}).get("median")
        memory = result.get("memory") or {}
        return cls(value=value, status=result["status"], error=result.get("error"),
                   throughput=rate,
                   latency_s=result["iteration_ms"] / 1000.0 if result.get("iteration_ms")
                   else None,
                   peak_host_bytes=memory.get("peak_host_bytes"),
                   peak_device_bytes=memory.get("peak_device_bytes"),
                   run_id=result.get("run_id"))


@dataclass
class Search:
    """The question: which parameter, from where, how finely, under which limit."""

    case: Case
    param: str  # "batch_size" or a knob name
    start: int
    stop: int | None = None  # never probe above this
    resolution: int | None = None  # None: 5% of the largest size that ran (at least 1)
    memory_limit_bytes: int | None = None
    # how each probe is launched (a sweep's own, e.g. a Slurm step); None: registry.launcher_for
    launcher: Callable[[Case], Launcher] | None = None
    probes: list[Probe] = field(default_factory=list)
    # stored with every probe (the result's launch facts), so a report can tell searches apart
    search_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def with_value(self, value: int) -> Case:
        if self.param == "batch_size":
            return dataclasses.replace(self.case, batch_size=value)
        return dataclasses.replace(self.case, knobs={**self.case.knobs, self.param: value})

    def step_within(self, low: int) -> int:
        return self.resolution or max(1, int(low * 0.05))


def check_param(case: Case, param: str) -> None:
    if param != "batch_size" and not isinstance(case.knobs.get(param), int):
        ints = sorted(k for k, v in case.knobs.items() if isinstance(v, int) and
                      not isinstance(v, bool))
        raise UsageError(f"--param: {param!r} is not an integer parameter of {case.model}; "
                         f"allowed: batch_size, {', '.join(ints)}")


def limited(base: Launcher, limit_bytes: int | None,
            search: Search | None = None) -> Launcher:
    """``base`` with the memory limit handed to every worker, and recorded in the launch facts
    with the search the probe belongs to (its id and the parameter it varies)."""
    if limit_bytes is None and search is None:
        return base

    def launcher(case: Case, case_file: Path, out_dir: Path) -> launch.Launch:
        spec = base(case, case_file, out_dir)
        if limit_bytes is not None:
            spec.env[MEMORY_LIMIT_VARIABLE] = str(limit_bytes)
            spec.facts["memory_limit_bytes"] = limit_bytes
        if search is not None:
            spec.facts["capacity"] = {"search": search.search_id, "param": search.param}
        return spec

    return launcher


def probe(search: Search, value: int, store: Store | None, env: dict[str, Any],
          on_probe: Callable[[Probe], None] | None = None) -> Probe:
    try:
        case = search.with_value(value)
    except SpecError as error:  # the model's own range ends here (e.g. seq_len > max_positions)
        raise Stopped(Probe(value, "refused", str(error), None, None, None, None, None)) from None
    base = search.launcher(case) if search.launcher else runner.default_launcher(case)
    launcher = limited(base, search.memory_limit_bytes, search)
    result = runner.run_case(case, store=store, launcher=launcher, env=env, sweep=SWEEP_NAME)
    found = Probe.from_result(value, result)
    search.probes.append(found)
    if on_probe:
        on_probe(found)
    return found


class Stopped(Exception):
    """A probe failed for a reason other than memory: the search cannot conclude."""

    def __init__(self, found: Probe) -> None:
        super().__init__(f"probe {found.value}: {found.status}: {found.error}")
        self.probe = found


def _attempt(search: Search, store: Store | None, env: dict[str, Any],
             on_probe: Callable[[Probe], None] | None) -> Callable[[int], bool]:
    """A probe as a yes/no question: did it fit? (Stopped for anything but ok or oom.)"""
    def attempt(value: int) -> bool:
        if len(search.probes) >= MAX_PROBES:
            raise UsageError(f"capacity: stopped after {MAX_PROBES} probes")
        found = probe(search, value, store, env, on_probe)
        if found.status == "ok":
            return True
        if found.status == "oom":
            return False
        raise Stopped(found)
    return attempt


def _bisect(search: Search, low: int, high: int, attempt: Callable[[int], bool]
            ) -> tuple[int, int]:
    while high - low > search.step_within(low):
        middle = (low + high) // 2
        if attempt(middle):
            low = middle
        else:
            high = middle
    return low, high


def largest(search: Search, store: Store | None, env: dict[str, Any],
            on_probe: Callable[[Probe], None] | None = None) -> tuple[int | None, int | None]:
    """(largest value that ran, smallest that ran out of memory), either None if not found:
    grow x2 from the start to the first out-of-memory probe, then bisect."""
    attempt = _attempt(search, store, env, on_probe)
    low, value = None, search.start
    while attempt(value):
        low = value
        if search.stop is not None and value >= search.stop:
            return low, None
        value = value * GROWTH if search.stop is None else min(value * GROWTH, search.stop)
    if low is None:
        return None, value  # even the start does not fit
    return _bisect(search, low, value, attempt)


def largest_below(search: Search, failing: int, store: Store | None, env: dict[str, Any],
                  on_probe: Callable[[Probe], None] | None = None
                  ) -> tuple[int | None, int]:
    """The same answer when ``failing`` is known to run out of memory (a sweep's ``on_oom:
    search``): halve until a size fits, then bisect up to the smallest known failure."""
    attempt = _attempt(search, store, env, on_probe)
    high, value = failing, failing // GROWTH
    while value >= 1:
        if attempt(value):
            return _bisect(search, value, high, attempt)
        high, value = value, value // GROWTH
    return None, high


def series(start: int, stop: int, growth: int = GROWTH) -> list[int]:
    """start, start*growth, ... up to stop, and stop itself."""
    values = [start]
    while values[-1] * growth < stop:
        values.append(values[-1] * growth)
    if values[-1] != stop:
        values.append(stop)
    return values
