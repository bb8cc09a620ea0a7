"""The one timing loop every backend is measured with.

build (timed) -> first step (timed apart: it holds compilation) -> remaining warm-up steps ->
barrier + device sync -> timed window of measured steps -> device sync -> barrier.
"""

import math
import time
from typing import Any, Dict, List

from dlperf.worker.workload import Workload


class NonFiniteLoss(Exception):
    """The loss became NaN or infinite: the case failed, however fast it was."""


def _finite(value, where):
    # type: (float, str) -> float
    if not math.isfinite(value):
        raise NonFiniteLoss("loss is not finite ({}) {}".format(value, where))
    return value


def measure(build, case):
    # type: (Any, Dict[str, Any]) -> Dict[str, Any]
    """Build a workload with ``build(case)`` and time it; return the per-process figures."""
    clock = time.perf_counter
    warmup_steps = int(case["warmup_steps"])
    steps = int(case["steps"])

    start = clock()
    workload = build(case)  # type: Workload
    workload.sync()
    build_s = clock() - start

    start = clock()
    handle = workload.step()
    loss_first = _finite(workload.loss_value(handle), "after the first step")
    first_step_s = clock() - start

    start = clock()
    for _ in range(warmup_steps - 1):
        workload.step()
    workload.sync()
    warmup_s = clock() - start

    workload.barrier()
    workload.sync()
    marks = []  # type: List[float]
    window_start = clock()
    for _ in range(steps):
        handle = workload.step()
        marks.append(clock())
    workload.sync()
    window_end = clock()
    workload.barrier()

    marks[-1] = window_end  # the last step is done only once the device says so
    step_times = [b - a for a, b in zip([window_start] + marks[:-1], marks)]
    loss_last = _finite(workload.loss_value(handle),
                        "after {} warm-up and {} measured steps".format(warmup_steps, steps))
    return {
        "samples_per_step": workload.samples_per_step,
        "params": workload.params,
        "build_s": build_s,
        "first_step_s": first_step_s,
        "warmup_s": warmup_s,
        "window_s": window_end - window_start,
        "window_steps": steps,
        "window_samples": steps * workload.samples_per_step,
        "step_times_s": step_times,
        "loss_first": loss_first,
        "loss_last": loss_last,
        "peak_device_bytes": workload.peak_device_bytes(),
        "info": workload.info,
    }
