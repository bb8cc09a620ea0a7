"""When is a run warmed up? The steady-state rule of ``--warmup-steps auto``.

After the first (compiling) step, the worker keeps stepping, timing each step between two device
synchronisations, and judges the last ``WINDOW`` step times:

* **drift**: the least-squares slope of step time over the window, times the window's length,
  relative to its mean: how much the step time changed across the window. Warm-up effects
  (allocator growth, autotuning, caches, JIT tiers, CPU frequency ramps) are trends, and a trend
  is what this catches; it must be within ``MAX_DRIFT``.
* **spread**: the coefficient of variation of the window: it must be within ``MAX_CV``, so a
  window of alternating fast and slow steps (no trend, but no steady state either) does not pass.

Both are relative, so the rule is the same for a 5 ms and a 5 s step. The warm-up stops at the
first window that passes ("steady"), or at ``max_steps`` / ``max_s`` ("max_steps" /
"max_seconds"), and the result records which, with the numbers, so an unsteady repeat is
flagged instead of silently measured. The window of 5 steps is the shortest in which a slope is
more than noise on a CPU; the 5 % bounds match the harness's warnings (CV across repeats, drift
between the halves of the timed window).

Standard library only; valid Python 3.7.
"""

import math
from typing import Any, Callable, Dict, List, Sequence, Tuple

WINDOW = 5
MAX_CV = 0.05
MAX_DRIFT = 0.05
MAX_STEPS = 200
MAX_SECONDS = 60.0
KEPT_STEP_TIMES = 500  # bound on the step times a result carries


def judge(times):
    # type: (Sequence[float]) -> Tuple[float, float]
    """(cv, drift) of a window of step times; drift is signed (+ = getting slower)."""
    n = len(times)
    mean = sum(times) / n
    if mean <= 0:
        return 0.0, 0.0
    var = sum((t - mean) ** 2 for t in times) / (n - 1) if n > 1 else 0.0
    cv = math.sqrt(var) / mean
    xs = range(n)
    x_mean = (n - 1) / 2.0
    sxx = sum((x - x_mean) ** 2 for x in xs)
    slope = sum((x - x_mean) * (t - mean) for x, t in zip(xs, times)) / sxx if sxx else 0.0
    return cv, slope * (n - 1) / mean


def is_steady(times, window=WINDOW, max_cv=MAX_CV, max_drift=MAX_DRIFT):
    # type: (Sequence[float], int, float, float) -> bool
    """Whether the last ``window`` step times are steady by both criteria."""
    if len(times) < window:
        return False
    cv, drift = judge(times[-window:])
    return cv <= max_cv and abs(drift) <= max_drift


def warm_up(step, clock, max_steps=MAX_STEPS, max_s=MAX_SECONDS, window=WINDOW):
    # type: (Callable[[], Any], Callable[[], float], int, float, int) -> Dict[str, Any]
    """Call ``step`` (one synchronised step) until steady or a bound is hit; report why."""
    times = []  # type: List[float]
    start = clock()
    reason = "max_steps"
    while len(times) < max_steps:
        began = clock()
        step()
        times.append(clock() - began)
        if is_steady(times, window):
            reason = "steady"
            break
        if clock() - start >= max_s:
            reason = "max_seconds"
            break
    cv, drift = judge(times[-window:]) if times else (0.0, 0.0)
    return {
        "stop": reason,
        "steps": len(times),
        "cv": cv,
        "drift": drift,
        "rule": {"window": window, "max_cv": MAX_CV, "max_drift": MAX_DRIFT,
                 "max_steps": max_steps, "max_s": max_s},
        "step_times_s": times[-KEPT_STEP_TIMES:],
    }
