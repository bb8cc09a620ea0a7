"""Measured peak FLOP/s per precision and memory bandwidth, so results can report MFU.

Vendor datasheet peaks are rarely reached and unknown for many CPUs; a large matrix multiply in
the precision the model computes in is the honest ceiling for "model FLOP utilisation". Probes
are slow-ish (seconds) and machine-specific, so they are cached per machine in a JSON file: the
first measuring command on a machine runs them once (:func:`ensure`), ``dlperf sysinfo --probe``
re-measures. On GPUs the NVIDIA datasheet's dense peak is recorded beside the measured one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.host import sysinfo

# which probe bounds which case precision
PRECISION_DTYPE = {"fp32": "float32", "tf32": "tf32", "amp-bf16": "bfloat16", "bf16": "bfloat16",
                   "amp-fp16": "float16", "fp16": "float16", "int8": "int8"}
CPU_SIZE, GPU_SIZE = 1024, 8192  # a GPU needs a large GEMM to reach its tensor-core peak

# NVIDIA datasheet peaks without sparsity (FLOP/s; int8 in OP/s), by a part of the NVML name
# (or a study's hardware line): recorded beside the measured GEMM so a reader sees both. The
# longest matching key wins, so "Tesla V100-PCIE-16GB" is the PCIe card, not the SXM2 one.
DATASHEET = {
    "H200": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12, "float16": 989.4e12,
             "int8": 1978.9e12},
    "H100 80GB HBM3": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12,
                       "float16": 989.4e12, "int8": 1978.9e12},  # SXM5
    "H100 PCIe": {"float32": 51e12, "tf32": 378e12, "bfloat16": 756e12, "float16": 756e12,
                  "int8": 1513e12},
    "A100": {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12,
             "int8": 624e12},
    # no bf16, tf32 or int8 tensor cores on a V100
    "V100": {"float32": 15.7e12, "float16": 125e12},  # SXM2
    "V100 PCIe": {"float32": 14e12, "float16": 112e12},
    "V100S": {"float32": 16.4e12, "float16": 130e12},  # V100S PCIe
    "T4": {"float32": 8.1e12, "float16": 65e12, "int8": 130e12},
}


def _words(name: str) -> str:
    """``Tesla V100-PCIE-16GB`` and ``V100 PCIe`` alike: lower case, separators as spaces."""
    return re.sub(r"[\s_-]+", " ", name.lower()).strip()


def datasheet(gpu_name: str) -> dict[str, float] | None:
    """The datasheet peaks of the longest key found in the name as whole words (so ``V100``
    is not ``V100S``, and ``Tesla V100-PCIE-16GB`` is the PCIe card)."""
    name = _words(gpu_name)
    matches = [key for key in DATASHEET
               if re.search(r"(?<![a-z0-9])" + re.escape(_words(key)) + r"(?![a-z0-9])", name)]
    if not matches:
        return None
    return dict(DATASHEET[max(matches, key=len)])


def cache_path() -> Path:
    base = os.environ.get("DLPERF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dlperf")
    return Path(base) / "peaks.json"


def machine_id(env: dict[str, Any]) -> str:
    """Same host, CPU and GPUs -> same probe results. A process held to some of the CPUs
    (``taskset``, a container's cpuset) probes their peak, not the machine's: it is kept under
    a key of its own, so it neither stands for the whole machine nor is replaced by it."""
    cpu = env["cpu"]
    parts = [env.get("hostname"), cpu["model"], cpu["logical_cores"],
             [g["name"] for g in env.get("gpus", [])]]
    allowed = sysinfo.held_to(cpu)
    if allowed:
        parts.append({"allowed_cores": allowed})
    key = json.dumps(parts)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _best_rate(run: Any, flops: float, repeats: int, budget_s: float = 3.0) -> float:
    """Best of up to ``repeats`` timed runs after a warm-up, within about ``budget_s``, the
    warm-up included.

    The budget keeps a slow path (fp16 on a CPU without native fp16 maths) from taking minutes:
    when the warm-up alone used it up, that one run is the rate (a 1024-wide fp16 GEMM takes
    ~7 s on a 2-core CPU, next to which allocation and kernel selection are nothing).
    """
    start = time.perf_counter()
    deadline = start + budget_s
    run()  # warm-up: allocation, kernel selection
    best = time.perf_counter() - start
    for _ in range(repeats):
        if time.perf_counter() > deadline:
            break
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return flops / best


def matmul_peaks(size: int | None = None, repeats: int = 10) -> dict[str, float]:
    """Best-of-N square matmul FLOP/s per dtype (int8: OP/s of an int8 x int8 -> int32 GEMM),
    with torch on its default device if present."""
    try:
        import torch
    except ImportError:
        size = size or CPU_SIZE
        m = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
        return {"float32": _best_rate(lambda: m @ m, 2.0 * size ** 3, repeats)}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or (GPU_SIZE if device == "cuda" else CPU_SIZE)
    flops = 2.0 * size ** 3
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    peaks = {}
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    for name, dtype in dtypes.items():
        try:
            a = torch.randn(size, size, device=device).to(dtype)

            def run() -> None:
                torch.mm(a, a)
                sync()

            peaks[name] = _best_rate(run, flops, repeats)
        except RuntimeError:
            continue
    try:  # int8 GEMM with int32 accumulation, what int8 inference kernels run
        q = torch.randint(-128, 128, (size, size), dtype=torch.int8, device=device)
        peaks["int8"] = _best_rate(lambda: (torch._int_mm(q, q), sync()), flops, repeats)
    except (RuntimeError, AttributeError):
        pass
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(size, size, device=device)
        peaks["tf32"] = _best_rate(lambda: (torch.mm(a, a), sync()), flops, repeats)
        torch.backends.cuda.matmul.allow_tf32 = False
    return peaks


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Host memory bandwidth in bytes/s from a large array copy (read + write counted)."""
    src = np.ones(megabytes * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    return _best_rate(lambda: np.copyto(dst, src), 2.0 * src.nbytes, repeats)


def probe(env: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure, cache and return this machine's peaks."""
    env = env or sysinfo.capture()
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {"flops_per_s": matmul_peaks(), "host_copy_bytes_per_s": copy_bandwidth(),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_average": loadavg}
    gpus = env.get("gpus") or []
    sheet = datasheet(str(gpus[0].get("name", ""))) if gpus else None
    if sheet:
        result["datasheet_flops_per_s"] = sheet
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    cached = load_all()
    cached[machine_id(env)] = result
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=2))
    tmp.replace(path)
    return result


def busier_than_now(found: dict[str, Any], load_now: float | None,
                    cpus: int | None = None) -> bool:
    """Whether the cached probe ``found`` ran on an oversubscribed host (its 1-minute load
    average above twice the CPU count) that is busier than now by more than a whole machine's
    worth of work: then its peaks are too low and every MFU over them too high, and a probe now
    is better. Smaller differences (a test suite's phases) keep the probe."""
    then = found.get("load_average")
    cpus = cpus or os.cpu_count() or 1
    return (then is not None and load_now is not None and then > 2 * cpus
            and then > load_now + cpus)


def ensure(env: dict[str, Any], say: Any = None) -> dict[str, Any]:
    """This machine's peaks: the cached probe, else a probe now (once per machine, and again
    when the cached one ran on a busier host than this one is now), so MFU is never missing
    for want of a command the user did not know to run, nor inflated by a probe that other
    work slowed."""
    found = cached(env)
    load_now = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if found is not None and "int8" in found.get("flops_per_s", {}):
        if not busier_than_now(found, load_now):
            return found
        if say:
            say(f"re-probing this machine's matmul peaks: the cached probe ran at load average "
                f"{found['load_average']:.1f}, now {load_now:.1f} (dlperf sysinfo --probe "
                f"re-measures)")
        return probe(env)
    if say:
        say("probing this machine's matmul peaks once, for MFU (dlperf sysinfo --probe "
            "re-measures)")
    return probe(env)


def load_all() -> dict[str, Any]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def cached(env: dict[str, Any]) -> dict[str, Any] | None:
    """The last probe of this machine, or None when it was never probed."""
    return load_all().get(machine_id(env))


# reduced float precisions: a framework may always compute them in fp32 instead (XLA on a CPU
# without bf16 units upcasts bf16 dots), so fp32's ceiling also bounds them
REDUCED_FLOATS = ("bfloat16", "float16")


def ceiling(precision: str, env: dict[str, Any]) -> tuple[float, str] | None:
    """The measured matmul ceiling for a case's precision on this machine, if probed, and the
    dtype of the probe it comes from.

    For bf16 and fp16 it is the faster of that dtype's GEMM and fp32's: on a CPU whose bf16
    GEMM is emulated (slower than fp32), a framework that computes its bf16 in fp32 would
    otherwise report an MFU near or above 100% of a ceiling it never needed.
    """
    peaks = cached(env)
    dtype = PRECISION_DTYPE.get(precision)
    if not peaks or dtype is None:
        return None
    rates = peaks["flops_per_s"]
    candidates = [d for d in ((dtype, "float32") if dtype in REDUCED_FLOATS else (dtype,))
                  if rates.get(d)]
    if not candidates:
        return None
    best = max(candidates, key=lambda d: rates[d])
    return rates[best], best
