"""Resource sampling of a running worker tree: CPU, memory, disk, network and GPUs.

The Dell EMC study profiled CPU, memory, network and storage beside throughput to tell a GPU-bound
job from one starved by its input pipeline; dlperf records the same, per repeat, at no cost to
the measurement (one sample every ``interval`` seconds from a harness thread).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil

from dlperf.host import hoststate, timeline

try:  # NVML is only useful where NVIDIA's driver is present
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a declared dependency
    pynvml = None


def _loopback(name: str) -> bool:
    return name == "lo" or name.startswith("lo:")


def network_counters() -> dict[str, Any]:
    """Bytes each network interface has sent and received so far, loopback left out: a job's
    traffic between its own processes on one host is not the network's."""
    return {name: counters for name, counters in psutil.net_io_counters(pernic=True).items()
            if not _loopback(name)}


class _Total:
    """The interfaces' counters summed, as the one net_io_counters() would give without
    loopback."""

    def __init__(self, nics: dict[str, Any]) -> None:
        self.nics = nics
        self.bytes_recv = sum(c.bytes_recv for c in nics.values())
        self.bytes_sent = sum(c.bytes_sent for c in nics.values())


def _network() -> _Total:
    return _Total(network_counters())


def _gpu_handles() -> list[Any]:
    if pynvml is None:
        return []
    try:
        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i)
                for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return []


class Monitor:
    """Samples the process ``pid`` and its children until stopped."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._cpu: list[float] = []
        self._rss_peak = 0
        self._gpu_util: list[float] = []
        self._gpu_mem_peak = 0
        self._procs: dict[int, psutil.Process] = {}
        self._start_time = 0.0
        self._io0: Any = None
        self._net0: Any = None
        self._gpus: list[Any] = []
        self._t0 = 0.0
        self._end_s: float | None = None
        self._columns: dict[str, list[Any]] = {}
        self._last: tuple[float, Any, Any, Any] | None = None  # when, cpu times, disk, net
        self._gpu_missing: set[tuple[int, str]] = set()

    def __enter__(self) -> "Monitor":
        self._start_time = time.monotonic()
        self._t0 = time.time()
        self._io0 = psutil.disk_io_counters()
        self._net0 = _network()
        self._last = (self._start_time, psutil.cpu_times(), self._io0, self._net0)
        self._gpus = _gpu_handles()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_s = time.time() - self._t0  # the watched process has exited (or been killed)
        self._stop.set()
        self._thread.join()

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            members = [root] + root.children(recursive=True)
        except psutil.Error:
            return []
        # keep Process objects between samples so cpu_percent measures the interval
        alive = {}
        for proc in members:
            alive[proc.pid] = self._procs.get(proc.pid, proc)
        self._procs = alive
        return list(alive.values())

    def _sample(self) -> None:
        cpu, rss = 0.0, 0
        for proc in self._tree():
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
        self._cpu.append(cpu / 100.0 / (psutil.cpu_count() or 1))
        self._rss_peak = max(self._rss_peak, rss)
        point = self._host_point(cpu, rss)
        for index, handle in enumerate(self._gpus):
            gpu = self._gpu_point(index, handle)
            if gpu.get("util_pct") is not None:
                self._gpu_util.append(gpu["util_pct"])
            if gpu.get("mem_used_bytes") is not None:
                self._gpu_mem_peak = max(self._gpu_mem_peak, int(gpu["mem_used_bytes"]))
            point.update({f"gpu{index}_{name}": value for name, value in gpu.items()})
        self._record(point)

    def _host_point(self, tree_cpu: float, rss: int) -> dict[str, Any]:
        """The tree's CPU against the rest of the host's and the hypervisor's steal (CPU time
        given to other guests; not the host's own work, so not in the rest), and host
        disk/network rates, over the interval since the previous sample (percentages of the
        whole machine)."""
        now, times, disk, net = (time.monotonic(), psutil.cpu_times(),
                                 psutil.disk_io_counters(), _network())
        then, times0, disk0, net0 = self._last or (now, times, disk, net)
        self._last = (now, times, disk, net)
        elapsed = max(now - then, 1e-9)
        total = hoststate.total_seconds(times) - hoststate.total_seconds(times0)
        idle = (times.idle + getattr(times, "iowait", 0.0)) - (
            times0.idle + getattr(times0, "iowait", 0.0))
        host_pct = 100.0 * (total - idle) / total if total > 0 else 0.0
        tree_pct = tree_cpu / (psutil.cpu_count() or 1)
        steal_pct = (100.0 * max(times.steal - times0.steal, 0.0) / total
                     if total > 0 and hasattr(times, "steal") else None)

        def rate(before: Any, after: Any, field: str) -> float | None:
            if before is None or after is None:
                return None
            return max(getattr(after, field) - getattr(before, field), 0) / elapsed

        return {"t": time.time() - self._t0 - elapsed / 2.0, "n": 1,  # the interval's midpoint
                "cpu_tree_pct": tree_pct,
                "cpu_rest_pct": max(host_pct - tree_pct - (steal_pct or 0.0), 0.0),
                "cpu_steal_pct": steal_pct,
                "rss_bytes": rss,
                "disk_read_bytes_s": rate(disk0, disk, "read_bytes"),
                "disk_write_bytes_s": rate(disk0, disk, "write_bytes"),
                "net_rx_bytes_s": rate(net0, net, "bytes_recv"),
                "net_tx_bytes_s": rate(net0, net, "bytes_sent")}

    def _nvml(self, index: int, name: str, query: Any) -> Any:
        """One NVML query, None where the device or driver lacks it (and not asked again)."""
        if (index, name) in self._gpu_missing:
            return None
        try:
            return query()
        except pynvml.NVMLError_NotSupported:
            self._gpu_missing.add((index, name))
        except (pynvml.NVMLError_FunctionNotFound, AttributeError):
            self._gpu_missing.add((index, name))
        except pynvml.NVMLError:
            pass
        return None

    def _gpu_point(self, index: int, handle: Any) -> dict[str, Any]:
        """One GPU now (NVML): utilisation %, memory used, power (W), SM clock (MHz), PCIe rx/tx
        bytes/s (NVML samples them over 20 ms) and the current clock-event (throttle) mask."""
        nv = pynvml

        def throttle() -> int:
            try:  # nvidia-ml-py 12.535+ / driver 535+; older drivers have the throttle name
                return int(nv.nvmlDeviceGetCurrentClocksEventReasons(handle))
            except (nv.NVMLError_FunctionNotFound, AttributeError):
                return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

        util = self._nvml(index, "util", lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        used = self._nvml(index, "mem", lambda: nv.nvmlDeviceGetMemoryInfo(handle).used)
        power = self._nvml(index, "power", lambda: nv.nvmlDeviceGetPowerUsage(handle))  # mW
        clock = self._nvml(index, "sm_clock",
                           lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))
        rx = self._nvml(index, "pcie_rx",  # KB/s
                        lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES))
        tx = self._nvml(index, "pcie_tx",
                        lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_TX_BYTES))
        return {"util_pct": None if util is None else float(util),
                "mem_used_bytes": None if used is None else int(used),
                "power_w": None if power is None else power / 1000.0,
                "sm_clock_mhz": None if clock is None else float(clock),
                "pcie_rx_bytes_s": None if rx is None else rx * 1024.0,
                "pcie_tx_bytes_s": None if tx is None else tx * 1024.0,
                "throttle_reasons": self._nvml(index, "throttle", throttle)}

    def _record(self, point: dict[str, Any]) -> None:
        """Append one sample as columns (a GPU column first seen late is padded with None);
        past the raw cap, neighbours merge pairwise so a long repeat stays bounded."""
        length = len(self._columns.get("t", []))
        for name in point:
            self._columns.setdefault(name, [None] * length)
        for name, values in self._columns.items():
            values.append(point.get(name))
        if len(self._columns["t"]) > timeline.RAW_CAP:
            self._columns = timeline.merge_pairs(self._columns)

    def _loop(self) -> None:
        self._tree()  # prime cpu_percent
        while not self._stop.wait(self.interval):
            self._sample()

    def timeline(self) -> dict[str, Any]:
        """The samples so far: ``t`` is each interval's midpoint in seconds after ``t0`` (wall
        clock, like the worker's phase marks); ``n`` the raw samples a point stands for;
        ``end_s`` when the watch ended (the process's exit), so the last phase ends there even
        when no sample fell after its start."""
        return {"t0": self._t0, "interval_s": self.interval, "end_s": self._end_s,
                "columns": {name: list(values) for name, values in self._columns.items()}}

    def summary(self) -> dict[str, Any]:
        """Means over the repeat's lifetime; rates in MB/s (10^6 bytes)."""
        elapsed = max(time.monotonic() - self._start_time, 1e-9)
        io1, net1 = psutil.disk_io_counters(), _network()
        samples = self._cpu[1:] or self._cpu  # the first interval includes process start-up

        def rate(before: Any, after: Any, field: str) -> float | None:
            if before is None or after is None:
                return None
            return (getattr(after, field) - getattr(before, field)) / elapsed / 1e6

        return {
            "cpu_util_mean": sum(samples) / len(samples) if samples else None,
            "cpu_util_max": max(samples) if samples else None,
            "rss_peak_bytes": self._rss_peak or None,
            "disk_read_mb_s": rate(self._io0, io1, "read_bytes"),
            "disk_write_mb_s": rate(self._io0, io1, "write_bytes"),
            "net_rx_mb_s": rate(self._net0, net1, "bytes_recv"),
            "net_tx_mb_s": rate(self._net0, net1, "bytes_sent"),
            # what each interface carried over the repeat (bytes), loopback left out
            "net_by_interface": {
                name: {"rx_bytes": after.bytes_recv - self._net0.nics[name].bytes_recv,
                       "tx_bytes": after.bytes_sent - self._net0.nics[name].bytes_sent}
                for name, after in net1.nics.items() if name in self._net0.nics
                and (after.bytes_recv, after.bytes_sent) != (self._net0.nics[name].bytes_recv,
                                                             self._net0.nics[name].bytes_sent)},
            "gpu_util_mean": (sum(self._gpu_util) / len(self._gpu_util)
                              if self._gpu_util else None),
            "gpu_mem_peak_bytes": self._gpu_mem_peak or None,
            "samples": len(self._cpu),
        }
