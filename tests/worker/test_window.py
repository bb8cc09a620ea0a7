"""The shared timed window on an asynchronous device: the drift between its halves comes from
synchronised marks, so a device that queues steps (JAX, CUDA) is judged by when steps ran, not
when they were queued. The loop is the real one; the device is a queue on a virtual clock, so
the arithmetic is exact and no test depends on this machine's speed."""

from __future__ import annotations

import threading

import pytest

from dlperf import stats
from dlperf.worker.loop import measure, timed_window
from dlperf.worker.workload import Workload

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


class QueuedDevice(Workload):
    """``step`` only queues work (costing the host ``dispatch_s``); ``sync`` waits until the
    queue has run. ``costs`` gives each step's device time in order."""

    samples_per_step = 1

    def __init__(self, costs: list[float], dispatch_s: float = 0.001) -> None:
        self.costs, self.dispatch_s = list(costs), dispatch_s
        self.now = 0.0  # the virtual clock
        self.device_free_at = 0.0
        self.syncs = 0

    def clock(self) -> float:
        return self.now

    def step(self) -> float:
        self.now += self.dispatch_s
        self.device_free_at = max(self.device_free_at, self.now) + self.costs.pop(0)
        return 0.0

    def sync(self) -> None:
        self.syncs += 1
        self.now = max(self.now, self.device_free_at)


def test_a_steady_queued_device_shows_no_drift():
    device = QueuedDevice([1.0] * 10)
    out = timed_window(device, 10, 0.0, False, device.clock)
    assert out["halves"] == [[5, pytest.approx(5.001)], [5, pytest.approx(5.001)]]
    assert stats.half_drift(out["halves"]) == pytest.approx(0.0, abs=1e-3)
    assert out["window_s"] == pytest.approx(10.002)
    assert device.syncs == 2  # the middle and the end: nothing else waits for the device
    # the unsynchronised marks inside each half are when steps were queued, not when they ran
    assert out["step_times_s"][:4] == pytest.approx([0.001] * 4)


def test_a_device_that_slows_down_shows_its_drift():
    device = QueuedDevice([1.0] * 6 + [1.2] * 6)
    out = timed_window(device, 12, 0.0, False, device.clock)
    assert stats.half_drift(out["halves"]) == pytest.approx(0.2, abs=1e-3)


def test_the_middle_waits_for_half_the_minimum_duration():
    # 4 steps asked but 10 s at least: the first run (2 steps) is synchronised at 3 s; the rate
    # says 2 more reach 5 s, synchronised at 6 s: the middle; 3 more then reach 10 s
    device = QueuedDevice([1.0] * 20, dispatch_s=1.0)
    out = timed_window(device, 4, 10.0, False, device.clock)
    assert out["window_steps"] == 7
    assert out["halves"] == [[4, pytest.approx(6.0)], [3, pytest.approx(4.0)]]


def test_the_minimum_duration_is_judged_by_when_steps_ran_not_when_they_were_queued():
    # a device that queues a step in 1 ms but runs it in 1 s: judged by queueing time the window
    # would issue ~10,000 steps before its 10 s had passed (MXNet's engine queues without bound:
    # 8-step windows with a 2-s minimum ran 9-42 s); judged by synchronised time it stops at 10 s
    device = QueuedDevice([1.0] * 40)
    out = timed_window(device, 4, 10.0, False, device.clock)
    assert out["window_steps"] == 10
    assert out["window_s"] == pytest.approx(10.0, abs=0.01)
    assert out["halves"][0][0] == 5 and out["halves"][0][1] >= 5.0
    assert device.syncs <= 4  # a few synchronised marks, not one per step


def test_synchronised_steps_split_the_same_way():
    device = QueuedDevice([1.0] * 4 + [2.0] * 4)
    out = timed_window(device, 8, 0.0, True, device.clock)
    assert out["latencies_s"] == out["step_times_s"]
    assert stats.half_drift(out["halves"]) == pytest.approx(1.0, abs=1e-2)


class Workspaces(Workload):
    """A device whose first step takes a one-off workspace (an autotuner's scratch) of 1000
    bytes on top of 100 bytes of steady state; ``resettable`` says whether its framework can
    start the peak afresh."""

    samples_per_step = 1
    params = 1
    info: dict = {}

    def __init__(self, resettable: bool) -> None:
        self.resettable, self.steps, self.peak = resettable, 0, 0

    def step(self) -> float:
        self.steps += 1
        self.peak = max(self.peak, 1100 if self.steps == 1 else 100)
        return 1.0

    def sync(self) -> None:
        return None

    def peak_device_bytes(self) -> int:
        return self.peak

    def reset_device_peak(self) -> bool:
        if self.resettable:
            self.peak = 100  # what stays allocated
        return self.resettable


@pytest.mark.parametrize("resettable, peak, since", [(True, 100, "window"),
                                                     (False, 1100, "start")])
def test_the_device_peak_is_the_steady_steps_where_the_framework_can_reset_it(
        resettable, peak, since):
    out = measure(lambda case: Workspaces(resettable),
                  {"steps": 4, "warmup_steps": 2, "task": "train"}, profiling=False)
    assert (out["peak_device_bytes"], out["peak_device_since"]) == (peak, since)


class Ballot:
    """``all_gather_ints`` for ranks that are threads: each rank's value, in rank order, once
    every rank has given one (a collective, as a framework's is); a rank left waiting past
    ``timeout`` fails instead of hanging the test."""

    def __init__(self, ranks: int, timeout: float = 30.0) -> None:
        self.values: list[int] = [0] * ranks
        self.calls = [0] * ranks
        self.gathered = threading.Barrier(ranks, timeout=timeout)
        self.read = threading.Barrier(ranks, timeout=timeout)

    def of(self, rank: int):
        def vote(value: int) -> list[int]:
            self.calls[rank] += 1
            self.values[rank] = value
            self.gathered.wait()
            seen = list(self.values)
            self.read.wait()  # nobody writes the next vote before all read this one
            return seen
        return vote


def test_ranks_whose_clocks_disagree_end_a_minimum_duration_at_the_same_step():
    # rank 1's steps look 30 % longer on its own clock: alone, each rank would judge the 10-s
    # minimum by itself and ask for a different number of steps, and in a real job the rank that
    # asks for more waits forever in an all-reduce its peer never joins
    costs = {0: 1.0, 1: 1.3}
    alone = {}
    for rank, cost in costs.items():
        device = QueuedDevice([cost] * 40)
        alone[rank] = timed_window(device, 4, 10.0, False, device.clock)["window_steps"]
    assert alone[0] != alone[1]
    ballot, ends, errors = Ballot(2), {}, []

    def rank(r: int) -> None:
        device = QueuedDevice([costs[r]] * 40)
        try:
            ends[r] = timed_window(device, 4, 10.0, False, device.clock, vote=ballot.of(r))
        except Exception as error:  # a broken ballot: a rank waited for a vote that never came
            errors.append(error)

    threads = [threading.Thread(target=rank, args=(r,)) for r in costs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    # both ran the larger count each time: the slower clock's, which passes 10 s on both clocks
    assert ends[0]["window_steps"] == ends[1]["window_steps"] == max(alone.values())
    assert ends[1]["window_s"] >= 10.0 and ends[0]["window_s"] >= 10.0
    assert ballot.calls[0] == ballot.calls[1] >= 2  # the middle's decision and the end's


def test_without_a_minimum_duration_ranks_run_the_asked_steps_and_never_vote():
    ballot = Ballot(1)
    device = QueuedDevice([1.0] * 10)
    out = timed_window(device, 10, 0.0, False, device.clock, vote=ballot.of(0))
    assert out["window_steps"] == 10 and ballot.calls == [0]
