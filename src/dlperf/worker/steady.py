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
first window that passes ("steady"), or at ``max_steps`` (the case's ``warmup_max_steps``,
``--warmup-max-steps``, default ``MAX_STEPS``) / ``max_s`` ("max_steps" / "max_seconds"), and
the result records which, with the numbers, so an unsteady repeat is flagged instead of
silently measured. The window of 5 steps is the shortest in which a slope is more than noise on
a CPU; the 5 % bounds match the harness's warnings (CV across repeats, drift between the halves
of the timed window).

**Several ranks vote.** In a data-parallel job every rank steps in lockstep with its peers (each
step holds a gradient all-reduce), so all must stop warming up at the same step: a rank that
stopped alone would pair its next collective (the loop's barrier) with a peer's all-reduce. With
a ``vote`` (the workload's ``all_gather_ints``), after each step every rank judges its own
window and sends its verdict (:data:`KEEP_GOING`, :data:`STEADY`, or the bound it hit,
:data:`AT_MAX_STEPS` / :data:`AT_MAX_SECONDS`); every rank receives them all, in rank order, and
applies the same rule (:func:`agreed`): stop at a bound as soon as any rank hit one, or
"steady" once every rank's own last window is steady at the same step. The step count and the
stop reason are then the same on every rank; the cv and drift stay each rank's own.

Standard library only; valid Python 3.7.
"""

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

WINDOW = 5
MAX_CV = 0.05
MAX_DRIFT = 0.05
MAX_STEPS = 200
MAX_SECONDS = 60.0
KEPT_STEP_TIMES = 500  # bound on the step times a result carries

# a rank's verdict after a step: small non-negative integers, so that any backend's collective
# carries them exactly
KEEP_GOING, STEADY, AT_MAX_STEPS, AT_MAX_SECONDS = 0, 1, 2, 3


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


def verdict(times, elapsed_s, max_steps=MAX_STEPS, max_s=MAX_SECONDS, window=WINDOW):
    # type: (Sequence[float], float, int, float, int) -> int
    """One rank's verdict on its own step times after ``elapsed_s`` seconds of warm-up: steady
    first (a window that passes ends the warm-up even at a bound), then the time bound, then
    the step bound."""
    if is_steady(times, window):
        return STEADY
    if elapsed_s >= max_s:
        return AT_MAX_SECONDS
    if len(times) >= max_steps:
        return AT_MAX_STEPS
    return KEEP_GOING


def agreed(verdicts):
    # type: (Sequence[int]) -> Optional[str]
    """The stop reason every rank derives from all ranks' verdicts, or None to keep going: a
    bound any rank hit (the time bound before the step bound, as for one rank), else "steady"
    when every rank is steady."""
    if AT_MAX_SECONDS in verdicts:
        return "max_seconds"
    if AT_MAX_STEPS in verdicts:
        return "max_steps"
    if verdicts and all(v == STEADY for v in verdicts):
        return "steady"
    return None


Vote = Callable[[int], List[int]]  # every rank's verdict, in rank order, from this rank's own


def warm_up(step, clock, max_steps=MAX_STEPS, max_s=MAX_SECONDS, window=WINDOW, vote=None):
    # type: (Callable[[], Any], Callable[[], float], int, float, int, Optional[Vote]) -> Dict[str, Any]
    """Call ``step`` (one synchronised step) until steady or a bound is hit; report why.

    ``vote``: for a job of several ranks, ``vote(my_verdict) -> every rank's verdict`` (a
    collective every rank calls after every step), so that all stop at the same step; None for
    one process, which decides alone and calls no collective."""
    times = []  # type: List[float]
    verdicts = []  # type: List[int]
    start = clock()
    reason = "max_steps"
    while len(times) < max_steps:
        began = clock()
        step()
        times.append(clock() - began)
        mine = verdict(times, clock() - start, max_steps, max_s, window)
        verdicts = list(vote(mine)) if vote is not None else [mine]
        stop = agreed(verdicts)
        if stop is not None:
            reason = stop
            break
    cv, drift = judge(times[-window:]) if times else (0.0, 0.0)
    out = {
        "stop": reason,
        "steps": len(times),
        "cv": cv,
        "drift": drift,
        "rule": {"window": window, "max_cv": MAX_CV, "max_drift": MAX_DRIFT,
                 "max_steps": max_steps, "max_s": max_s},
        "step_times_s": times[-KEPT_STEP_TIMES:],
    }  # type: Dict[str, Any]
    if vote is not None:
        # the decision was collective: the last step's verdicts, rank by rank
        out["vote"] = "all ranks"
        out["verdicts"] = verdicts
    return out
