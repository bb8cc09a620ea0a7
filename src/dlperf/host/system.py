"""``dlperf system``: what on this host disturbs benchmarks, and what to do about it.

pyperf's ``system`` idea for deep-learning hosts. Each :class:`Finding` names a setting, its
value here, whether it is fine for measuring (``ok``), worth knowing (``warn``) or makes the
host unfit (``fail``), the effect on numbers, and the command that fixes it. Nothing is changed:
the commands are printed, never run.
"""

from __future__ import annotations

import glob
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from dlperf.host import hoststate

BUSY_FAIL = 0.10  # the machine's CPU used by others during the check
MEMORY_FAIL = 0.10  # available memory below this share of the total
CPU_SAMPLE_S = 2.0
# The hypervisor's steal over the check's sample: above a competing process's flag (5 %) the
# host is unfit, as it would flag every repeat; from 2 % (now or since boot) worth knowing.
STEAL_FAIL = hoststate.STEAL_SHARE
STEAL_WARN = hoststate.STEAL_NOTE


@dataclass
class Finding:
    name: str
    value: str
    level: str  # ok | warn | fail
    effect: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def governor() -> Finding:
    values = sorted({_read(p) or "?" for p in
                     glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")})
    if not values:
        return Finding("cpu governor", "not exposed (VM or no cpufreq driver)", "ok",
                       "frequency scaling is the hypervisor's; CPU MHz is recorded per repeat")
    level = "ok" if values == ["performance"] else "warn"
    return Finding("cpu governor", ", ".join(values), level,
                   "" if level == "ok" else "clocks ramp with load: the first steps of a repeat "
                   "run slower and step times drift",
                   "" if level == "ok" else "sudo cpupower frequency-set -g performance")


def turbo() -> Finding:
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo is None and boost is None:
        return Finding("turbo/boost", "not exposed", "ok")
    on = (no_turbo == "0") if no_turbo is not None else (boost == "1")
    return Finding("turbo/boost", "on" if on else "off", "warn" if on else "ok",
                   "turbo clocks depend on temperature and on how many cores are busy: "
                   "the same case runs at different speeds" if on else "",
                   ("echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo"
                    if no_turbo is not None else
                    "echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost") if on else "")


def smt() -> Finding:
    active = _read("/sys/devices/system/cpu/smt/active")
    if active is None:
        return Finding("SMT (hyper-threading)", "not exposed", "ok")
    on = active == "1"
    return Finding("SMT (hyper-threading)", "on" if on else "off", "warn" if on else "ok",
                   "two threads of one core compete for its units: pin one worker thread per "
                   "physical core (--threads-per-process)" if on else "",
                   "echo off | sudo tee /sys/devices/system/cpu/smt/control" if on else "")


def aslr() -> Finding:
    value = _read("/proc/sys/kernel/randomize_va_space")
    if value is None:
        return Finding("ASLR", "not exposed", "ok")
    return Finding("ASLR", {"0": "off", "1": "partial", "2": "full"}.get(value, value), "ok",
                   "address layout varies between fresh processes; dlperf's repeats are fresh "
                   "processes, so this variance is inside the reported spread",
                   "" if value == "0" else "sudo sysctl kernel.randomize_va_space=0  "
                   "(only to test whether layout matters; it weakens security)")


def transparent_hugepages() -> Finding:
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if text is None:
        return Finding("transparent huge pages", "not exposed", "ok")
    mode = text.split("[", 1)[1].split("]", 1)[0] if "[" in text else text
    level = "warn" if mode == "always" else "ok"
    return Finding("transparent huge pages", mode, level,
                   "khugepaged compacts memory in the background while a repeat runs: "
                   "occasional slow steps" if level == "warn" else "",
                   "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"
                   if level == "warn" else "")


DAMON_ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_RECLAIM = "/sys/module/damon_reclaim/parameters"


def _damon_pageout_ages(admin: str = DAMON_ADMIN) -> list[float]:
    """Seconds of idleness after which each running kdamond's ``pageout`` scheme writes
    memory out (its scheme's minimum age in aggregation intervals, times the interval)."""
    ages = []
    for kdamond in sorted(glob.glob(f"{admin}/[0-9]*")):
        if _read(f"{kdamond}/state") != "on":
            continue
        for context in sorted(glob.glob(f"{kdamond}/contexts/[0-9]*")):
            aggr_us = _read(f"{context}/monitoring_attrs/intervals/aggr_us")
            for scheme in sorted(glob.glob(f"{context}/schemes/[0-9]*")):
                age = _read(f"{scheme}/access_pattern/age/min")
                if _read(f"{scheme}/action") == "pageout" and age and aggr_us:
                    ages.append(int(age) * int(aggr_us) / 1e6)
    return ages


def proactive_reclaim(admin: str = DAMON_ADMIN, module: str = DAMON_RECLAIM) -> Finding:
    """The kernel's DAMON writing out memory idle for a while (cloud VMs run it to hand
    memory back): a fresh process's libraries, idle since the last repeat, are read from disk
    again. dlperf skips start-up and warm-up, so the timed window is not touched; the first
    steps, start-up and wall time are."""
    ages = [f"{age:.0f} s" for age in _damon_pageout_ages(admin)]
    fixes = [f"echo off | sudo tee {admin}/<N>/state"] if ages else []
    if _read(f"{module}/enabled") == "Y":
        min_age_us = _read(f"{module}/min_age")
        ages.append(f"{int(min_age_us) / 1e6:.0f} s" if min_age_us else "its default age")
        fixes.append(f"echo N | sudo tee {module}/enabled")
    if not ages:
        exposed = Path(admin).exists() or Path(module).exists()
        return Finding("proactive reclaim (DAMON)", "off" if exposed else "not exposed", "ok")
    return Finding("proactive reclaim (DAMON)", "pageout of memory idle for " + ", ".join(ages),
                   "warn",
                   "libraries and data idle that long are written out of memory and read from "
                   "disk again: slower start-up, first steps and data loading in fresh-process "
                   "repeats (the timed window is not affected)",
                   "; ".join(fixes) + " (the VM's owner may rely on it to hand memory back)")


def isolated_cpus() -> Finding:
    value = _read("/sys/devices/system/cpu/isolated") or ""
    return Finding("isolated CPUs", value or "none", "ok",
                   "" if value else "the scheduler may place anything on the benchmark's "
                   "cores; --require-quiet and the per-repeat host state catch neighbours",
                   "" if value else "boot with isolcpus=<list> and taskset the run onto them")


def numa() -> Finding:
    nodes = sorted(glob.glob("/sys/devices/system/node/node[0-9]*"))
    layout = [f"{Path(n).name}: cpus {_read(n + '/cpulist') or '?'}" for n in nodes]
    level = "warn" if len(nodes) > 1 else "ok"
    return Finding("NUMA layout", "; ".join(layout) or "not exposed", level,
                   "memory on the far node is slower: a worker that migrates between nodes "
                   "varies run to run" if level == "warn" else "",
                   "numactl --cpunodebind=0 --membind=0 dlperf run ..." if level == "warn" else "")


def sample(sample_s: float = CPU_SAMPLE_S) -> dict[str, Any]:
    """One look at the machine over ``sample_s``: other processes' CPU and, over the same
    interval, the hypervisor's steal (both findings read it; the check pays the wait once)."""
    others = hoststate.OtherProcesses()
    others.start()
    time.sleep(sample_s)
    return others.stop()


def busy_processes(used: dict[str, Any]) -> Finding:
    share = used["other_cpu_share"]
    names = ", ".join(f"{t['name']} {t['share']:.0%}" for t in used["top"]) or "none"
    level = "fail" if share > BUSY_FAIL else "ok"
    return Finding("other busy processes", f"{share:.0%} of the CPU ({names})", level,
                   "another process takes CPU time from the benchmark: tens of percent on "
                   "a small machine" if level == "fail" else "",
                   "stop them, or measure with dlperf run --require-quiet" if level == "fail"
                   else "")


def _share(value: float | None) -> str:
    return "?" if value is None else f"{value:.1%}"


def steal(now: float | None, sample_s: float, since_boot: float | None) -> Finding:
    """The hypervisor's steal over the sample (``now``) and since boot, as shares of the
    machine: above ``STEAL_FAIL`` now the host is unfit (a neighbour as large as a competing
    process, and no process here to stop); from ``STEAL_WARN`` now or since boot, worth knowing."""
    if now is None and since_boot is None:
        return Finding("CPU steal (hypervisor)", "not exposed (no steal counter)", "ok")
    value = f"{_share(now)} over {sample_s:g} s now; {_share(since_boot)} since boot"
    level = ("fail" if (now or 0.0) > STEAL_FAIL else
             "warn" if max(now or 0.0, since_boot or 0.0) >= STEAL_WARN else "ok")
    return Finding("CPU steal (hypervisor)", value, level,
                   "" if level == "ok" else "a shared VM: the hypervisor runs other guests on "
                   "these cores, and a repeat loses that CPU time in bursts no process list "
                   "shows (recorded per repeat as steal; a noisy result names it)",
                   "" if level == "ok" else "ask for dedicated cores (a dedicated host, an "
                   "instance type without CPU overcommit) or measure on bare metal; meanwhile "
                   "compare setups interleaved (dlperf ab)")


def load() -> Finding:
    values = hoststate.load_average()
    cores = psutil.cpu_count() or 1
    if values is None:
        return Finding("load average", "not exposed", "ok")
    level = "warn" if values[0] > 0.5 * cores else "ok"
    return Finding("load average", " ".join(f"{v:.2f}" for v in values) + f" ({cores} CPUs)",
                   level, "recently busy: check the busy processes" if level == "warn" else "")


def memory() -> Finding:
    mem = psutil.virtual_memory()
    share = mem.available / mem.total if mem.total else 1.0
    level = "fail" if share < MEMORY_FAIL else "ok"
    return Finding("available memory", f"{mem.available / 2**30:.1f} of "
                   f"{mem.total / 2**30:.1f} GiB", level,
                   "the page cache and swap will take part in the timings" if level == "fail"
                   else "", "free memory before measuring" if level == "fail" else "")


def thermal() -> Finding:
    events = hoststate.thermal_throttle_events()
    if events is None:
        return Finding("CPU thermal throttling", "counters not exposed", "ok")
    return Finding("CPU thermal throttling", f"{events} events since boot",
                   "warn" if events else "ok",
                   "the CPU has slowed itself down for heat; a run while it does is slower"
                   if events else "", "improve cooling; watch the per-repeat counters" if events
                   else "")


def gpu_findings() -> list[Finding]:
    """Per NVIDIA GPU: persistence, clocks, power cap, ECC, MIG, throttling, other processes."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return [Finding("NVIDIA GPUs", "none (no driver)", "ok")]
    out = []
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        tag = f"GPU {index}"

        def get(fn: Any, *args: Any) -> Any:
            try:
                return fn(handle, *args)
            except pynvml.NVMLError:
                return None

        persistence = get(pynvml.nvmlDeviceGetPersistenceMode)
        out.append(Finding(f"{tag} persistence mode", "on" if persistence else "off",
                           "ok" if persistence else "warn",
                           "" if persistence else "the driver unloads between processes: each "
                           "fresh worker pays GPU initialisation", "" if persistence else
                           f"sudo nvidia-smi -i {index} -pm 1"))
        app = get(pynvml.nvmlDeviceGetApplicationsClock, pynvml.NVML_CLOCK_SM)
        top = get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM)
        out.append(Finding(f"{tag} application SM clock", f"{app} of {top} MHz",
                           "ok" if app == top else "warn",
                           "" if app == top else "clocks below the maximum: lower throughput",
                           "" if app == top else f"sudo nvidia-smi -i {index} -rac"))
        limit, default = (get(pynvml.nvmlDeviceGetPowerManagementLimit),
                          get(pynvml.nvmlDeviceGetPowerManagementDefaultLimit))
        capped = limit is not None and default is not None and limit < default
        out.append(Finding(f"{tag} power cap", f"{(limit or 0) / 1000:.0f} W (default "
                           f"{(default or 0) / 1000:.0f} W)", "warn" if capped else "ok",
                           "a lowered power cap throttles clocks under load" if capped else "",
                           f"sudo nvidia-smi -i {index} -pl {(default or 0) / 1000:.0f}"
                           if capped else ""))
        ecc = get(pynvml.nvmlDeviceGetEccMode)
        out.append(Finding(f"{tag} ECC", "on" if ecc and ecc[0] else "off/unsupported", "ok",
                           "ECC costs a few percent of memory bandwidth; record it with results"))
        mig = get(pynvml.nvmlDeviceGetMigMode)
        mig_on = bool(mig and mig[0])
        out.append(Finding(f"{tag} MIG", "on" if mig_on else "off", "warn" if mig_on else "ok",
                           "the GPU is partitioned: a benchmark sees one slice" if mig_on else ""))
        reasons = (hoststate.gpu_throttle_reasons() or [{}])[index].get("reasons", []) \
            if index < len(hoststate.gpu_throttle_reasons() or []) else []
        slowing = [r for r in reasons if r not in ("GpuIdle", "ApplicationsClocksSetting")]
        out.append(Finding(f"{tag} throttle reasons", ", ".join(reasons) or "none",
                           "fail" if slowing else "ok",
                           "the GPU is slowing down now (power, thermal or sync boost)"
                           if slowing else "", "find the cause in nvidia-smi -q -d PERFORMANCE"
                           if slowing else ""))
        procs = get(pynvml.nvmlDeviceGetComputeRunningProcesses) or []
        out.append(Finding(f"{tag} other processes", str(len(procs)),
                           "fail" if procs else "ok",
                           "another process uses this GPU" if procs else "",
                           f"nvidia-smi -i {index} (and stop them)" if procs else ""))
    return out


def findings(sample_s: float = CPU_SAMPLE_S) -> list[Finding]:
    used = sample(sample_s)
    return [governor(), turbo(), smt(), aslr(), transparent_hugepages(), proactive_reclaim(),
            isolated_cpus(), numa(),
            thermal(), memory(), load(), busy_processes(used),
            steal(used.get("steal_share"), sample_s, hoststate.steal_since_boot())
            ] + gpu_findings()


def fit(found: list[Finding]) -> bool:
    """Fit to measure: nothing at level fail."""
    return all(f.level != "fail" for f in found)
