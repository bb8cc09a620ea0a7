"""The contract between the shared timing loop and a framework backend.

A backend module ``dlperf.backends.<framework>`` exposes ``build(case) -> Workload``. The timing
loop in :mod:`dlperf.worker.loop` is the only code that calls ``step``/``sync``; backends never time
anything themselves, so every framework is measured the same way.

Standard library only; valid Python 3.7.
"""

import platform
import time
from typing import Any, Callable, Dict, List, Optional


class UnsupportedError(Exception):
    """The backend cannot run this combination (e.g. tf32 on a CPU, int8 training)."""


class Workload(object):
    """One built model with its optimizer and synthetic data, ready to step.

    Subclasses fill ``samples_per_step`` (samples processed per step on this process),
    ``params`` (trainable parameter count as built), and ``info`` (framework facts worth
    recording: versions, threads, device, layout, compile mode...).
    """

    samples_per_step = 0  # type: int
    params = 0  # type: int
    info = {}  # type: Dict[str, Any]

    def __init__(self, samples_per_step=0, params=0, info=None):
        # type: (int, int, Optional[Dict[str, Any]]) -> None
        self.samples_per_step = samples_per_step
        self.params = params
        self.info = info if info is not None else {}

    def step(self):
        # type: () -> Any
        """Run one training (or inference) step; return a handle on the loss, possibly lazy."""
        raise NotImplementedError

    def sync(self):
        # type: () -> None
        """Block until all asynchronous device work issued so far has finished."""
        raise NotImplementedError

    def barrier(self):
        # type: () -> None
        """Wait for every rank of a distributed job; a no-op for a single process."""
        return None

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's small non-negative ``value`` (< 2**24), in rank order, on every rank: the
        vote by which all ranks of a job end ``--warmup-steps auto`` at the same step
        (:func:`dlperf.worker.steady.warm_up`). A collective: every rank calls it, after the same
        step. A single process gets ``[value]``; a distributed backend sends it through its own
        collectives (e.g. a sum of a vector as long as the job that is zero but for ``value`` at
        the rank's own index: exact in float32 too)."""
        return [value]

    def allreduce_probe(self):
        # type: () -> Optional[float]
        """Seconds one all-reduce of a buffer as large as the model's gradients takes across the
        job (median of a few, after one untimed), or None for one process. The loop calls it
        after the timed window, so it never disturbs the window; it shows how much of a
        data-parallel step the gradient exchange alone costs on this machine and network."""
        return None

    def loss_value(self, handle):
        # type: (Any) -> float
        """Turn a loss handle from ``step`` into a Python float (may synchronise)."""
        return float(handle)

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        """Peak device memory allocated by this process since :meth:`reset_device_peak`, or
        None on a host-only device."""
        return None

    def reset_device_peak(self):
        # type: () -> bool
        """Start the device memory peak afresh from what is allocated now; False where the
        framework cannot (its peak then counts from the start, and the result says so). The
        loop calls it after the warm-up, so that the peak is the steady step's (persistent
        state included), not the first steps' one-off workspaces: cuDNN's autotuner tries
        algorithms with GBs of scratch, and compilers allocate while they compile."""
        return False

    def profiler(self):
        # type: () -> Any
        """The framework's own profiler with the backend's mapping table, for a few steps after
        the window (:class:`dlperf.worker.profile.Profiler`); raises
        :class:`dlperf.worker.profile.ProfileUnavailable` with the reason where it has none
        that sees operators here."""
        from dlperf.worker.profile import ProfileUnavailable

        raise ProfileUnavailable("this backend has no profiler wired in")


PROBE_REPEATS = 3


def median_seconds(operation, sync, repeats=PROBE_REPEATS):
    # type: (Callable[[], Any], Callable[[], None], int) -> float
    """Median wall time of ``operation`` (each followed by ``sync``), after one untimed call:
    how backends time their all-reduce probe the same way."""
    operation()
    sync()
    times = []  # type: List[float]
    for _ in range(repeats):
        start = time.perf_counter()
        operation()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def cpu_name():
    # type: () -> str
    """The CPU's marketing name, which backends record as the device name on a host-only run."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class PipelineOnlyWorkload(Workload):
    """The input pipeline alone (``--data-only``): a step takes the next batch (on the device),
    nothing more. Its "loss" is the mean of the last batch's pixels: finite, or the pipeline is
    broken. Each backend's subclass says how a batch is taken, waited for and averaged."""

    def __init__(self, feed, device, batch, info):
        # type: (Any, Any, int, Dict[str, Any]) -> None
        super(PipelineOnlyWorkload, self).__init__(batch, 0, info)
        self.feed = feed
        self.device = device
        self._last = None  # type: Any
