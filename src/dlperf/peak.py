"""Measured peak FLOP/s per precision and memory bandwidth, so results can report MFU.

Vendor datasheet peaks are rarely reached and unknown for many CPUs; a large matrix multiply in
the precision the model computes in is the honest ceiling for "model FLOP utilisation". Probes
are slow-ish (seconds) and machine-specific, so they are cached per machine in a JSON file and
only re-measured by ``dlperf sysinfo --probe``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlperf import sysinfo

# which probe bounds which case precision (int8 has no matmul probe yet)
PRECISION_DTYPE = {"fp32": "float32", "tf32": "tf32", "amp-bf16": "bfloat16", "bf16": "bfloat16",
                   "amp-fp16": "float16", "fp16": "float16"}


def cache_path() -> Path:
    base = os.environ.get("DLPERF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dlperf")
    return Path(base) / "peaks.json"


def machine_id(env: dict[str, Any]) -> str:
    """Same host, CPU and GPUs -> same probe results."""
    key = json.dumps([env.get("hostname"), env["cpu"]["model"], env["cpu"]["logical_cores"],
                      [g["name"] for g in env.get("gpus", [])]])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _best_rate(run: Any, flops: float, repeats: int, budget_s: float = 3.0) -> float:
    """Best of up to ``repeats`` timed runs after a warm-up, within about ``budget_s``.

    The budget keeps a slow path (fp16 on a CPU without native fp16 maths) from taking minutes.
    """
    start = time.perf_counter()
    run()  # warm-up: allocation, kernel selection
    best = time.perf_counter() - start
    deadline = time.perf_counter() + budget_s
    for _ in range(repeats):
        if time.perf_counter() > deadline:
            break
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return flops / best


def matmul_peaks(size: int = 1024, repeats: int = 10) -> dict[str, float]:
    """Best-of-N square matmul FLOP/s per dtype, with torch on its default device if present."""
    flops = 2.0 * size ** 3
    try:
        import torch
    except ImportError:
        a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
        return {"float32": _best_rate(lambda: a @ a, flops, repeats)}
    device = "cuda" if torch.cuda.is_available() else "cpu"
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
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    cached = load_all()
    cached[machine_id(env)] = result
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cached, indent=2))
    tmp.replace(path)
    return result


def load_all() -> dict[str, Any]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def cached(env: dict[str, Any]) -> dict[str, Any] | None:
    """The last probe of this machine, or None when it was never probed."""
    return load_all().get(machine_id(env))


def peak_for(precision: str, env: dict[str, Any]) -> float | None:
    """The measured matmul ceiling for a case's precision on this machine, if probed."""
    peaks = cached(env)
    dtype = PRECISION_DTYPE.get(precision)
    if not peaks or dtype is None:
        return None
    return peaks["flops_per_s"].get(dtype)
