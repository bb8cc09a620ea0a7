"""The short GPU check (`make gpu-check`): the GPU tests in the order a short loan of a GPU
machine should spend its minutes, and the budget that ends it.

A borrowed GPU machine is often there for a quarter of an hour, its start-up included, so the
check runs what has never run on a GPU first (ONNX Runtime's CUDA and TensorRT providers, DALI,
the device out-of-memory of `dlperf capacity`, one tiny case of each other framework's CUDA
build), then what ran before (torch's window against CUDA events, NVML), then NCCL on two GPUs,
then the whole declarations; each test that would start after the budget is spent is skipped
with the command that runs it alone. Plain functions, so the CPU suite tests them too.
"""

from __future__ import annotations

import os
import time

BUDGET_VARIABLE = "DLPERF_GPU_CHECK_S"  # seconds the check may spend; unset: no check, no order
STARTED_VARIABLE = "DLPERF_GPU_CHECK_STARTED"

# test names (without parameters) first to last; the rest after them, in file order
ORDER = ("test_onnxruntime_cuda_int8_against_fp32", "test_dali_decodes_on_the_gpu",
         "test_capacity_ends_at_a_real_device_out_of_memory", "test_cuda_smoke",
         "test_cuda_event_window_equals_the_host_synchronised_window",
         "test_nvml_columns_in_the_timeline_are_filled", "test_two_gpu_data_parallel_over_nccl",
         "test_collectives_over_nccl_on_two_gpus")


def rank(name: str) -> int:
    """Where a test (``name`` with or without its parameters) runs in the check."""
    base = name.split("[", 1)[0]
    return ORDER.index(base) if base in ORDER else len(ORDER)


def budget(environ: dict[str, str] | os._Environ[str] = os.environ) -> float | None:
    """The check's seconds, or None outside the check; ValueError for a value that is not."""
    text = environ.get(BUDGET_VARIABLE)
    if not text:
        return None
    seconds = float(text)
    if not seconds > 0:
        raise ValueError(f"{BUDGET_VARIABLE}: {text!r} must be seconds > 0")
    return seconds


def spent(seconds: float, started: float, now: float | None = None) -> bool:
    return (time.time() if now is None else now) - started >= seconds
