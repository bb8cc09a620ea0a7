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

try:  # NVML is only useful where NVIDIA's driver is present
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a declared dependency
    pynvml = None


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

    def __enter__(self) -> "Monitor":
        self._start_time = time.monotonic()
        self._io0 = psutil.disk_io_counters()
        self._net0 = psutil.net_io_counters()
        self._gpus = _gpu_handles()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
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
        for handle in self._gpus:
            try:
                self._gpu_util.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
                self._gpu_mem_peak = max(self._gpu_mem_peak, int(used))
            except pynvml.NVMLError:
                continue

    def _loop(self) -> None:
        self._tree()  # prime cpu_percent
        while not self._stop.wait(self.interval):
            self._sample()

    def summary(self) -> dict[str, Any]:
        """Means over the repeat's lifetime; rates in MB/s (10^6 bytes)."""
        elapsed = max(time.monotonic() - self._start_time, 1e-9)
        io1, net1 = psutil.disk_io_counters(), psutil.net_io_counters()
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
            "gpu_util_mean": (sum(self._gpu_util) / len(self._gpu_util)
                              if self._gpu_util else None),
            "gpu_mem_peak_bytes": self._gpu_mem_peak or None,
            "samples": len(self._cpu),
        }
