"""The one timing loop every backend is measured with.

build (timed) -> first step (timed apart: it holds compilation) -> remaining warm-up steps ->
barrier + device sync -> timed window of measured steps -> device sync -> barrier.

Warm-up is either a fixed count (``warmup_steps`` an integer, the first step included) or
``"auto"``: steps are then synchronised one by one and the warm-up ends when the last few step
times are steady (:mod:`dlperf.worker.steady` states the rule), bounded in steps
(``warmup_max_steps``) and seconds. In a job of several processes the ranks vote after every
warm-up step through the workload's ``all_gather_ints``, so that all stop at the same step.

The window has three modes, chosen by the case:

- **throughput** (training): steps are issued back to back and the device is synchronised only at
  the window's ends, so asynchronous frameworks keep their pipelines full.
- **latency** (``task == "infer"``): every iteration is synchronised, so the time between two
  marks is the real latency of one batch; the per-iteration latencies go into the result.
- **server** (``scenario == "server"``): queries arrive by a seeded Poisson process at
  ``server.rate_qps``; each is served in arrival order once the previous one is done, and its
  latency runs from its *scheduled* arrival, so queueing behind a slow query is never hidden.

In the first two modes the window holds at least ``steps`` iterations and, when
``min_duration_s`` is set, keeps going until that much time has passed. Throughput is always the
samples in the window over the window's time.
"""

import math
import random
import time
from typing import Any, Callable, Dict, List, Optional

from dlperf.worker import profile, steady
from dlperf.worker.workload import Workload


class NonFiniteLoss(Exception):
    """The loss became NaN or infinite: the case failed, however fast it was."""


def _finite(value, where):
    # type: (float, str) -> float
    if not math.isfinite(value):
        raise NonFiniteLoss("loss is not finite ({}) {}".format(value, where))
    return value


def measure(build, case, trace_path=None, profiling=True):
    # type: (Any, Dict[str, Any], Optional[str], bool) -> Dict[str, Any]
    """Build a workload with ``build(case)`` and time it; return the per-process figures, and
    the profile of :func:`profiled_steps` (``profiling``: this rank's, to ``trace_path``)."""
    clock, steps = time.perf_counter, int(case["steps"])
    # wall-clock start of each phase, so the harness can place its monitor samples in them
    phase_starts = {"build": time.time()}  # type: Dict[str, float]
    start = clock()
    workload = build(case)  # type: Workload
    workload.sync()
    build_s = clock() - start

    phase_starts["first_step"] = time.time()
    start = clock()
    handle = workload.step()
    loss_first = _finite(workload.loss_value(handle), "after the first step")
    first_step_s = clock() - start

    phase_starts["warmup"] = time.time()
    start = clock()
    processes = int(case.get("devices", 1)) * int(case.get("nnodes", 1))
    if case["warmup_steps"] == "auto":
        def synchronised_step():
            # type: () -> None
            workload.step()
            workload.sync()

        max_steps = case.get("warmup_max_steps")
        # several ranks must stop at the same step (each step holds a gradient all-reduce that
        # must pair with the peers' own): they vote after every step; one process decides alone
        vote = workload.all_gather_ints if processes > 1 else None
        warmup = steady.warm_up(synchronised_step, clock,
                                max_steps=steady.MAX_STEPS if max_steps is None
                                else int(max_steps), vote=vote)
    else:
        for _ in range(int(case["warmup_steps"]) - 1):
            workload.step()
        workload.sync()
        warmup = {"stop": "fixed", "steps": int(case["warmup_steps"]) - 1}
    warmup_s = clock() - start
    warmup_steps = 1 + warmup["steps"]

    workload.barrier()
    workload.sync()
    peak_since = "window" if workload.reset_device_peak() else "start"
    phase_starts["window"] = time.time()
    if case.get("scenario") == "server":
        window = serve(workload, case, clock)
    else:
        window = timed_window(workload, steps, float(case.get("min_duration_s") or 0.0),
                              case.get("task") == "infer", clock,
                              planted_sleep(workload, case, clock),
                              vote=workload.all_gather_ints if processes > 1 else None)
    workload.barrier()
    phase_starts["end"] = time.time()
    handle = window.pop("handle")
    loss_last = _finite(workload.loss_value(handle),
                        "after {} warm-up and {} measured steps".format(
                            warmup_steps, window["window_steps"]))
    result = {
        "samples_per_step": workload.samples_per_step,
        "params": workload.params,
        "build_s": build_s,
        "first_step_s": first_step_s,
        "warmup_s": warmup_s,
        "warmup_steps_done": warmup_steps,
        "warmup": warmup,
        "loss_first": loss_first,
        "loss_last": loss_last,
        "peak_device_bytes": workload.peak_device_bytes(),
        "peak_device_since": peak_since,
        "allreduce_s": workload.allreduce_probe(),
        "info": workload.info,
        "phase_starts": phase_starts,
    }  # type: Dict[str, Any]
    if case.get("profile_steps"):  # after the window, never inside it
        result["profile"] = profiled_steps(workload, case, window, trace_path, profiling)
    result.update(window)
    result["window_samples"] = result["window_steps"] * workload.samples_per_step
    return result


def profiled_steps(workload, case, window, trace_path, profiling):
    # type: (Workload, Dict[str, Any], Dict[str, Any], Optional[str], bool) -> Optional[Dict[str, Any]]
    """``case["profile_steps"]`` more steps after the window: under the framework's profiler
    where this rank records them (the profile block), else plainly (None), so every collective
    has its peers."""
    block = None
    steps = int(case["profile_steps"])
    if profiling:
        block = profile.profile(workload, steps, window["window_s"] / window["window_steps"],
                                trace_path)
    else:
        for _ in range(steps):
            workload.step()
        workload.sync()
    workload.barrier()
    return block


def planted_sleep(workload, case, clock):
    # type: (Any, Dict[str, Any], Callable[[], float]) -> float
    """Calibration only (``plant_slowdown`` p): the sleep to add to every timed step so that
    throughput falls by p, from one synchronised reference step just before the window
    (step x p / (1 - p)); 0 without it."""
    share = float(case.get("plant_slowdown") or 0.0)
    if not share:
        return 0.0
    start = clock()
    workload.step()
    workload.sync()
    sleep_s = (clock() - start) * share / (1.0 - share)
    workload.barrier()  # every rank starts its window together again
    workload.sync()
    return sleep_s


def timed_window(workload, steps, min_duration_s, synchronise_each, clock, planted_s=0.0,
                 vote=None):
    # type: (Workload, int, float, bool, Any, float, Optional[Callable[[int], List[int]]]) -> Dict[str, Any]
    """At least ``steps`` iterations and at least ``min_duration_s`` seconds of synchronised time.

    With ``synchronise_each`` every iteration waits for the device, so consecutive marks bound one
    batch's latency. Without it steps are issued in runs and the device is synchronised only at
    the end of a run (the run's last mark is moved to that point, because its last step is done
    only once the device says so): on an asynchronous device (JAX, MXNet, OneFlow, CUDA) an
    unsynchronised mark is when a step was queued, not when it ran, so neither the window's
    duration nor its first half can be judged from one. The first run is half the steps; while
    synchronised time falls short of half (then all) of ``min_duration_s``, the next run is the
    number of steps the rate so far says is missing. ``halves`` = [steps, seconds] of each half
    between the synchronised marks; the middle is the first synchronised mark past both half the
    steps and half the minimum duration.

    ``vote`` (several ranks: ``all_gather_ints``): each rank judges a minimum duration by its own
    clock, and one that ran a step more would wait forever in an all-reduce its peers never join;
    so each proposes its next run (0: done) and all run the largest. No vote without a minimum.
    """
    marks = []  # type: List[float]
    handle = [None]  # type: List[Any]
    window_start = clock()

    def issue(count):
        # type: (int) -> float
        """``count`` more steps, then a synchronised mark; seconds since the window started."""
        for _ in range(count):
            handle[0] = workload.step()
            if synchronise_each or planted_s:
                workload.sync()
            if planted_s:
                time.sleep(planted_s)  # calibration's planted slowdown, inside the window
            marks.append(clock())
        if not synchronise_each:
            workload.sync()
            marks[-1] = clock()
        return marks[-1] - window_start

    def missing(elapsed, target_s):
        # type: (float, float) -> int
        """Steps still needed to reach ``target_s`` at the rate so far (at least one)."""
        if synchronise_each or elapsed <= 0.0:
            return 1
        return max(1, int(math.ceil((target_s - elapsed) * len(marks) / elapsed)))

    def reach(elapsed, target_s):
        # type: (float, float) -> float
        """Runs until ``target_s`` has passed on every rank's clock; the seconds since the start."""
        if min_duration_s <= 0.0:
            return elapsed
        while True:
            count = missing(elapsed, target_s) if elapsed < target_s else 0
            if vote is not None:
                count = max(vote(count))
            if not count:
                return elapsed
            elapsed = issue(count)

    elapsed = reach(issue(max(1, steps // 2)), min_duration_s / 2.0)
    middle = len(marks)
    if steps > middle:
        elapsed = issue(steps - middle)
    reach(elapsed, min_duration_s)
    window_end = marks[-1]
    step_times = [b - a for a, b in zip([window_start] + marks[:-1], marks)]
    mid = marks[middle - 1]
    out = {
        "handle": handle[0],
        "window_s": window_end - window_start,
        "window_steps": len(marks),
        "step_times_s": step_times,
        "halves": [[middle, mid - window_start], [len(marks) - middle, window_end - mid]],
        "planted_s": planted_s or None,  # calibration's sleep in every step (plant_slowdown)
    }  # type: Dict[str, Any]
    if synchronise_each:
        out["latencies_s"] = step_times
    return out


def poisson_arrivals(rate_qps, min_duration_s, min_queries, seed):
    # type: (float, float, int, int) -> List[float]
    """Seeded Poisson arrival times (s from the start): as many as it takes to pass both minimums."""
    rng = random.Random(seed)
    arrivals = []  # type: List[float]
    now = 0.0
    while len(arrivals) < min_queries or now < min_duration_s:
        now += rng.expovariate(rate_qps)
        arrivals.append(now)
    return arrivals


def allowed_late(queries, level=99.0):
    # type: (int, float) -> int
    """How many of ``queries`` latencies may exceed a bound while the ``level`` percentile
    (numpy 'linear' interpolation) can still be within it. One more and the order statistic
    below the percentile's position is itself over the bound, so the bound is broken whatever
    the remaining queries do."""
    return queries - 1 - int(math.floor(level / 100.0 * (queries - 1)))


def serve(workload, case, clock):
    # type: (Workload, Dict[str, Any], Any) -> Dict[str, Any]
    """Serve a seeded Poisson stream of queries (one ``step`` each) in arrival order.

    Latency is measured from each query's scheduled arrival to the end of its (synchronised)
    step. The run stops early once more queries have exceeded the target than p99 allows: the
    bound is then broken whatever the rest would do, and an overloaded probe costs no more time.
    """
    server = case["server"]
    rate = float(server["rate_qps"])
    target_s = float(server["target_latency_ms"]) / 1000.0
    min_queries = int(server["min_queries"])
    min_duration_s = float(case.get("min_duration_s") or 0.0)
    arrivals = poisson_arrivals(rate, min_duration_s, min_queries, int(case.get("seed", 0)))
    budget = allowed_late(len(arrivals))
    latencies = []  # type: List[float]
    service = []  # type: List[float]
    late = 0
    early_stop = False
    handle = None  # type: Any
    start = clock()
    for arrival in arrivals:
        wait = start + arrival - clock()
        if wait > 0:
            time.sleep(wait)
        began = clock()
        handle = workload.step()
        workload.sync()
        done = clock()
        latencies.append(done - start - arrival)
        service.append(done - began)
        if latencies[-1] > target_s:
            late += 1
            if late > budget:
                early_stop = True
                break
    end = clock()
    span = end - start
    completed = len(latencies)
    return {
        "handle": handle,
        "window_s": span,
        "window_steps": completed,
        "step_times_s": service,
        "latencies_s": latencies,
        "server": {
            "rate_qps": rate,
            "target_latency_ms": target_s * 1000.0,
            "scheduled": len(arrivals),
            "completed": completed,
            "span_s": span,
            "achieved_qps": completed / span if span > 0 else None,
            "over_target": late,
            "allowed_over_target": budget,
            "early_stop": early_stop,
            "min_queries": min_queries,
            "min_duration_s": min_duration_s,
            "valid": (not early_stop and completed >= min_queries
                      and span >= min_duration_s),
            "busy_fraction": sum(service) / span if span > 0 else None,
        },
    }
