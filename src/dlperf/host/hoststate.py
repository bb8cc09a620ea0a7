"""The host's state around each repeat: was anything else competing for the machine?

A number measured while another process burned a core is not the machine's number. Every
repeat records the load average before and after, the CPU time other processes used while it
ran (the worker tree and this harness excluded), the CPU time the hypervisor gave to other
guests (steal) and the CPUs' I/O wait over the same interval, the CPU frequency, throttling
counters (thermal on the CPU, clock-event reasons on NVIDIA GPUs) and memory pressure; a repeat
whose neighbours used more than ``COMPETING_SHARE`` of the machine is flagged with their names.
On a VM, steal is the neighbour no process list shows: a flagged spread names it from
``STEAL_NOTE``, and a repeat that lost more than ``STEAL_SHARE`` to it is flagged on its own.
``wait_for_quiet`` is ``--require-quiet``: it waits (bounded) for an idle host before a repeat.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dlperf.host import emulated

COMPETING_SHARE = 0.05  # of the machine's CPU time during the repeat
# Steal (CPU time the hypervisor ran other guests on our cores), as a share of the machine.
# From STEAL_NOTE a noisy or unsteady result names the steal of the repeats it concerns: a
# CPU-bound worker on every core slows by about the stolen share, so 2 % is the smallest steal
# that explains a good part of a deviation the 5 % spread flags start at, and at 100 clock ticks
# a second per CPU it is dozens of ticks over any repeat, far above the counter's rounding.
# Above STEAL_SHARE a repeat is flagged even when its figure is steady, like a competing
# process: a steady figure can be steadily low.
STEAL_NOTE = 0.02
STEAL_SHARE = COMPETING_SHARE
QUIET_BUSY = 0.10  # --require-quiet: whole-machine CPU use below this ...
QUIET_FOR_S = 3.0  # ... for this long
SAMPLE_S = 1.0


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def cpu_mhz() -> float | None:
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError):
        return None
    return round(freq.current, 1) if freq else None


def thermal_throttle_events() -> int | None:
    """Sum of the kernel's per-CPU thermal throttle counters (x86), None where absent."""
    paths = glob.glob("/sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count")
    if not paths:
        return None
    total = 0
    for path in paths:
        try:
            total += int(Path(path).read_text().strip())
        except (OSError, ValueError):
            continue
    return total


def pressure(resource: str) -> float | None:
    """The kernel's pressure-stall 'some avg10' for cpu/memory (percent of time stalled)."""
    try:
        first = Path(f"/proc/pressure/{resource}").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    for part in first.split():
        if part.startswith("avg10="):
            return float(part.split("=", 1)[1])
    return None


def gpu_throttle_reasons() -> list[dict[str, Any]] | None:
    """Per GPU: NVML's current clock-event (throttle) reasons, by name; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: nothing to report
        return None
    names = {getattr(pynvml, n): n.replace("nvmlClocksThrottleReason", "").replace(
        "nvmlClocksEventReason", "") for n in dir(pynvml)
        if n.startswith(("nvmlClocksThrottleReason", "nvmlClocksEventReason"))
        and not n.endswith(("None", "All", "Unknown"))}
    out = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mask = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            out.append({"gpu": index, "reasons": sorted({name for bit, name in names.items()
                                                         if isinstance(bit, int) and bit
                                                         and mask & bit})})
    except pynvml.NVMLError:
        return out or None
    return out


def snapshot() -> dict[str, Any]:
    """What can change under a benchmark, at one moment."""
    memory = psutil.virtual_memory()
    return {
        "time": time.time(),
        "load_average": load_average(),
        "cpu_mhz": cpu_mhz(),
        "thermal_throttle_events": thermal_throttle_events(),
        "memory_available_bytes": int(memory.available),
        "swap_used_bytes": int(psutil.swap_memory().used),
        "cpu_pressure_avg10": pressure("cpu"),
        "memory_pressure_avg10": pressure("memory"),
        "gpu_throttle": gpu_throttle_reasons(),
    }


def cpu_times() -> Any:
    """The machine's cumulative CPU times (psutil, /proc/stat on Linux); None if unreadable."""
    try:
        return psutil.cpu_times()
    except (OSError, RuntimeError):
        return None


def total_seconds(times: Any) -> float:
    """Every CPU second the counters account for; guest time is already inside user (Linux)."""
    return float(sum(getattr(times, f) for f in times._fields
                     if f not in ("guest", "guest_nice")))


def time_shares(before: Any, after: Any, capacity_s: float) -> dict[str, float | None]:
    """Steal and I/O-wait seconds between two ``cpu_times()`` as shares of ``capacity_s``
    (elapsed x CPUs, the denominator of ``other_cpu_share``); None where the platform has no
    such counter (steal is Linux's, iowait Linux's and some BSDs')."""
    out: dict[str, float | None] = {}
    for name in ("steal", "iowait"):
        seconds = None
        if before is not None and after is not None and hasattr(after, name):
            seconds = max(getattr(after, name) - getattr(before, name), 0.0)
        if name == "steal":
            out["steal_s"] = None if seconds is None else round(seconds, 3)
        out[f"{name}_share"] = (None if seconds is None else
                                round(min(seconds / max(capacity_s, 1e-9), 1.0), 4))
    return out


def steal_since_boot() -> float | None:
    """The share of all CPU time since boot that the hypervisor gave to other guests."""
    times = cpu_times()
    if times is None or not hasattr(times, "steal"):
        return None
    total = total_seconds(times)
    return times.steal / total if total > 0 else None


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


@dataclass
class OtherProcesses:
    """CPU seconds used by every process outside ``exclude`` between ``start`` and ``stop``,
    and the machine's steal and I/O wait over the same interval."""

    exclude: set[int] = field(default_factory=set)
    _before: dict[int, tuple[str, float]] = field(default_factory=dict)
    _began: float = 0.0
    _times: Any = None

    def _scan(self, tree_root: int | None) -> dict[int, tuple[str, float]]:
        skip = set(self.exclude) | {os.getpid()}
        if tree_root is not None:
            try:
                skip |= {tree_root} | {c.pid for c in
                                       psutil.Process(tree_root).children(recursive=True)}
            except psutil.Error:
                pass
        out = {}
        job = emulated.job_namespaces()  # on an emulated host: the job's other hosts
        for proc in psutil.process_iter(["name"]):
            if proc.pid in skip or job and _net_namespace(proc.pid) in job:
                continue
            try:
                out[proc.pid] = (proc.info["name"] or "?", _cpu_seconds(proc))
            except psutil.Error:
                continue
        return out

    def start(self, tree_root: int | None = None) -> None:
        self._began = time.monotonic()
        self._times = cpu_times()
        self._before = self._scan(tree_root)

    def stop(self, tree_root: int | None = None) -> dict[str, Any]:
        """Others' CPU use over the interval: total share of the machine and the top three;
        the steal and iowait shares beside it."""
        times = cpu_times()
        elapsed = max(time.monotonic() - self._began, 1e-9)
        capacity = elapsed * (psutil.cpu_count() or 1)
        used: dict[str, float] = {}
        for pid, (name, seconds) in self._scan(tree_root).items():
            before = self._before.get(pid, (name, 0.0))[1]  # a process born meanwhile: all of it
            delta = seconds - before
            if delta > 0:
                used[name] = used.get(name, 0.0) + delta
        total = sum(used.values())
        top = sorted(((n, s) for n, s in used.items() if s / capacity >= 0.005),
                 key=lambda kv: -kv[1])[:3]
        return {
            "other_cpu_s": round(total, 3),
            "other_cpu_share": round(total / capacity, 4),
            "top": [{"name": n, "cpu_s": round(s, 3), "share": round(s / capacity, 4)}
                    for n, s in top],
            "seconds": round(elapsed, 3),
            **time_shares(self._times, times, capacity),
        }


def _net_namespace(pid: int) -> tuple[int, int] | None:
    try:
        info = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return info.st_dev, info.st_ino


def competing(state: dict[str, Any]) -> str | None:
    """A warning line when other processes took a noticeable share of the machine."""
    others = state.get("others") or {}
    if (others.get("other_cpu_share") or 0.0) <= COMPETING_SHARE:
        return None
    names = ", ".join(f"{t['name']} {t['share']:.0%}" for t in others.get("top", []))
    return (f"competed with other processes for {others['other_cpu_share']:.0%} of the "
            f"machine's CPU time ({names})")


def repeat_steal(record: dict[str, Any]) -> float | None:
    """The steal that could have moved a repeat's figure: the mean over its timed window where
    the monitor sampled it, else the share over the whole repeat (host state)."""
    window = ((record.get("timeline") or {}).get("window_means") or {}).get("cpu_steal_pct")
    if window is not None:
        return float(window) / 100.0
    share = ((record.get("host") or {}).get("others") or {}).get("steal_share")
    return None if share is None else float(share)


def stolen(records: list[dict[str, Any]]) -> str | None:
    """The clause a noisy or unsteady warning gains when the hypervisor took at least
    ``STEAL_NOTE`` of the machine during the repeats it concerns (repeat records, as stored)."""
    named = sorted(((share, record["repeat"]) for record in records
                    if (share := repeat_steal(record)) is not None and share >= STEAL_NOTE),
                   key=lambda pair: (-pair[0], pair[1]))
    if not named:
        return None
    parts = [f"{share:.1%}{' of the CPU (steal)' if index == 0 else ''} during repeat "
             f"{number + 1}" for index, (share, number) in enumerate(named[:3])]
    if len(named) > 3:
        parts.append(f"{STEAL_NOTE:.0%} or more in {len(named) - 3} more repeat(s)")
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return (f"the hypervisor took {listed}: a neighbour on the physical host, not dlperf or a "
            f"process here, moved the number (a shared VM: ask for dedicated cores or measure "
            f"on bare metal)")


def steal_line(record: dict[str, Any]) -> str | None:
    """A warning line for one repeat that lost more than ``STEAL_SHARE`` of the machine to the
    hypervisor, steady or not: a CPU-bound figure is low by about that much."""
    share = repeat_steal(record)
    if share is None or share <= STEAL_SHARE:
        return None
    return (f"the hypervisor took {share:.1%} of the machine's CPU time (steal): a neighbour on "
            f"the physical host; a CPU-bound figure is low by about as much (a shared VM: ask "
            f"for dedicated cores or measure on bare metal)")


def machine_busy(interval: float = SAMPLE_S) -> float:
    """Whole-machine CPU use over ``interval`` (0..1)."""
    return psutil.cpu_percent(interval=interval) / 100.0


def wait_for_quiet(limit_s: float, busy_below: float = QUIET_BUSY,
                   quiet_for_s: float = QUIET_FOR_S) -> tuple[bool, str]:
    """Wait until the machine has been below ``busy_below`` CPU use for ``quiet_for_s``;
    (True, how long it took) or (False, the reason) after ``limit_s``."""
    start = time.monotonic()
    quiet_since: float | None = None
    last = 0.0
    while True:
        last = machine_busy()
        now = time.monotonic()
        if last < busy_below:
            quiet_since = quiet_since if quiet_since is not None else now - SAMPLE_S
            if now - quiet_since >= quiet_for_s:
                return True, f"quiet after {now - start:.0f} s"
        else:
            quiet_since = None
        if now - start >= limit_s:
            top = busiest()
            return False, (f"the host never became quiet within {limit_s:g} s (--require-quiet):"
                           f" CPU {last:.0%} busy, busiest {top}")


def busiest(n: int = 3, interval: float = 0.5) -> str:
    """The processes using the most CPU right now, e.g. "stress 98%, python3 12%"."""
    procs = list(psutil.process_iter(["name"]))
    for proc in procs:
        try:
            proc.cpu_percent(None)  # primes the per-process counter
        except psutil.Error:
            pass
    time.sleep(interval)
    usage = []
    for proc in procs:
        try:
            usage.append((proc.cpu_percent(None), proc.info["name"] or "?"))
        except psutil.Error:
            continue
    usage.sort(reverse=True)
    return ", ".join(f"{name} {pct:.0f}%" for pct, name in usage[:n] if pct > 0) or "none"
