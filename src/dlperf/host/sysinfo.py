"""The environment a measurement was taken in: hardware, OS, libraries, threads, code version.

A number without its environment cannot be compared or reproduced, so every result carries this.
Framework facts (version, threads as the framework sees them) come from the worker, which runs in
the framework's own environment; this module covers what the harness can see.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

from dlperf import __version__
from dlperf.worker.cpus import available_cpus
from dlperf.host import monitor

LIBRARIES = ("numpy", "scipy", "psutil", "rich", "PyYAML", "nvidia-ml-py", "torch")
# the thread settings a result records as the harness saw them (each worker records its own,
# the frameworks' variables included: dlperf.worker.__main__.THREAD_VARIABLES)
HARNESS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                            "KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_PROC_BIND",
                            "CUDA_VISIBLE_DEVICES")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The vector and matrix extensions that decide which precisions are fast."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8",
              "avx512_vnni", "avx_vnni", "fma")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [flag for flag in wanted if flag in present]
    except OSError:
        pass
    return []


def gpus() -> list[dict[str, Any]]:
    found = []
    for handle in monitor._gpu_handles():
        pynvml = monitor.pynvml
        try:
            name = pynvml.nvmlDeviceGetName(handle)
            found.append({
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            })
        except pynvml.NVMLError:
            continue
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(directory: str | Path = ".") -> dict[str, Any] | None:
    """Commit and dirtiness of the code under test (the working directory's checkout)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, text=True,
                                capture_output=True, timeout=10)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=directory, text=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def held_to(cpu: dict[str, Any]) -> int | None:
    """How many CPUs the described process could use where an affinity mask (``taskset``, a
    cpuset) held it to fewer than the machine's logical CPUs; None where it had them all."""
    allowed = cpu.get("allowed_cores")
    return allowed if allowed and allowed != cpu["logical_cores"] else None


def capture() -> dict[str, Any]:
    """Everything the harness knows about the machine and the code, as plain JSON."""
    memory = psutil.virtual_memory()
    return {
        "dlperf": __version__,
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "cpu": {
            "model": cpu_model(),
            "arch": platform.machine(),
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "allowed_cores": available_cpus(),
            "flags": cpu_flags(),
        },
        "memory_bytes": int(memory.total),
        "gpus": gpus(),
        "python": platform.python_version(),
        "libraries": library_versions(),
        "thread_variables": {k: os.environ[k] for k in HARNESS_THREAD_VARIABLES
                             if k in os.environ},
        "git": git_state(),
    }
