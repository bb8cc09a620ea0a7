"""How much of its all-reduce a data-parallel step hides behind its backward pass, and what
several processes cost beyond it, as multi-process results show them (docs/projection.md, "The
overlap", "The multi-process overhead").

Apart from the projection because it is read from measurements, not computed from a shape: one
result, or two (a window's and an overhead's), at one batch size or two, each with its 95 %
intervals, gives an :class:`Overlap` that :func:`dlperf.projection.model.project` applies to every
target. Which stored results it is read from is :mod:`dlperf.scaling`'s rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dlperf.projection.links import PARAMETER_SERVER
from dlperf.projection.span import Span

# the backward pass's share of a step's compute: twice the forward's FLOPs (a weight and an
# activation gradient per forward product), so 2/3 of the whole; the overlap window's bound
BACKWARD_SHARE = 2 / 3
#: the exchanges whose traffic overlaps the whole step, not the backward pass alone: a
#: parameter server's (MXNet's kvstore: each key is pushed as its gradient is made and pulled
#: by its layer's priority, so the next step's forward starts on the first layers' weights
#: while the other keys are still moving). Their step is the longer of the compute (with the
#: multi-process overhead) and the exchange, max(c + o, A): read from each result, the window
#: only bounded by the backward pass instead read 0-0.4 s from the slowest link's result, where
#: a few per cent of its exchange's seconds swamp it, and the 1 Gbit/s cases on three machine
#: kinds missed by -21 % (docs/projection.md, "A parameter server overlaps the whole step")
WHOLE_STEP = frozenset({PARAMETER_SERVER})


def overlaps_whole_step(exchange: str, source_nodes: int) -> bool:
    """Whether a projection's window is the whole step: an exchange in :data:`WHOLE_STEP`,
    read from a result across nodes, where the exchange waits on the link between them while
    the CPUs compute. On one host the servers' copies and sums are the processes' own CPU work,
    which the compute cannot hide, and the window is read as a ring's (one-host check, 5
    MXNet cases: median error 5.0 % read, 8.8 % as the whole step)."""
    return exchange in WHOLE_STEP and source_nodes > 1


@dataclass(frozen=True)
class Overhead:
    """The multi-process overhead of a step whose 1-device step is c: ``fixed_s + share x c``
    (per-step coordination, which does not grow with the batch, and contention, which grows
    with the compute)."""

    fixed_s: float
    share: float

    def at(self, compute_s: float) -> float:
        return self.fixed_s + self.share * compute_s


def overhead_fit(points: list[tuple[float, float]]) -> Overhead:
    """The overhead through two (1-device step, overhead seconds) points, each a multi-process
    result at its own batch size against its own 1-device step: two equations, two unknowns.
    A negative part is clamped to 0 and the other refitted by least squares over both points
    (the fixed part alone: their mean; the share alone: sum(c x o) / sum(c^2)), so the fit
    never credits more processes with a speed-up."""
    (c1, o1), (c2, o2) = points
    if c1 == c2:
        raise ValueError("two 1-device steps of the same length fit no share")
    share = (o2 - o1) / (c2 - c1)
    fixed = o1 - share * c1
    if share < 0:
        return Overhead(max((o1 + o2) / 2, 0.0), 0.0)
    if fixed < 0:
        return Overhead(0.0, max((c1 * o1 + c2 * o2) / (c1 * c1 + c2 * c2), 0.0))
    return Overhead(fixed, share)


@dataclass(frozen=True)
class Overlap:
    """How much all-reduce the backward pass hides, where it came from, and the multi-process
    overhead.

    ``window_s``: the seconds of all-reduce hidden behind the backward pass; an all-reduce
    longer than the window is exposed by the rest (``max(0, A - window)``). ``value``: the share
    of its source's own all-reduce that hid (shown; a projection stored before the window had
    only this share, applied to every all-reduce). ``overhead``: what a multi-process step took
    beyond the start's step and its exposed all-reduce, as a share of the start's step: the
    processes' contention for a shared host (memory bandwidth, caches: emulated hosts and CPU
    processes share one machine), the framework's per-step coordination. ``overhead_fixed``: the
    same overhead read as a fixed time per step rather than a share of it (as a share of the
    start's step), where it was measured at another batch size: one batch cannot tell the two
    readings apart, so the interval spans both. ``overhead_s``: where results at two batch
    sizes were fitted (:func:`overhead_fit`), the overhead's fixed seconds per step, with
    ``overhead`` its share of the step; ``overhead_fits`` the fits at the interval's ends (from
    the two results' 95 % intervals; the fit itself where they have none). ``whole_step``: an
    exchange that overlaps the whole step (:data:`WHOLE_STEP`), whose window is the target's
    own step with its overhead (``window_s`` then shows its source's, in seconds).
    ``overhead_range``: the overhead read at the ends of its source's step's 95 % interval,
    where that source is one result (at the start's batch or, carried by :func:`at_batch`, as
    both readings): all of that step's spread lands on the overhead, a steady result's too.
    """

    value: float | None  # None: not measured, the interval spans 0..1
    source: str
    overhead: float = 0.0
    window_s: float | None = None
    overhead_fixed: float | None = None
    overhead_s: float | None = None
    overhead_fits: tuple[Overhead, Overhead] | None = None
    window_ends: tuple[float, float] | None = None  # (least, most) window its sources allow
    whole_step: bool = False  # the window is the target's whole step (:data:`WHOLE_STEP`)
    # (least, most) overhead share at its source's step's 95 % interval ends (one batch size)
    overhead_range: tuple[float, float] | None = None

    def exposed(self, comm_s: float) -> tuple[float, float, float]:
        """(least, middle, most) seconds of an all-reduce of ``comm_s`` left exposed: the most
        window its sources' spread allows hides the most, the least the least."""
        if self.value is None:
            return 0.0, comm_s / 2, comm_s
        if self.window_s is None:  # a share, as stored before the window
            return ((1 - self.value) * comm_s,) * 3
        least, most = self.window_ends or (self.window_s, self.window_s)
        return (max(comm_s - most, 0.0), max(comm_s - self.window_s, 0.0),
                max(comm_s - least, 0.0))

    @property
    def overhead_ends(self) -> tuple[float, float, float]:
        """(low, value, high) of the overhead's share of the start's step."""
        readings = sorted((self.overhead, self.overhead if self.overhead_fixed is None
                           else self.overhead_fixed, *(self.overhead_range or ())))
        return readings[0], self.overhead, readings[-1]

    def with_overhead(self, compute: Span) -> Span:
        """The start's step with the multi-process overhead added: a share (its two readings
        as the interval's ends, at another batch) or, fitted, a fixed time plus a share (the
        fits at the ends evaluated at the step's ends, the least and the most kept)."""
        if self.overhead_s is None:
            low_h, mid_h, high_h = self.overhead_ends
            return Span(compute.value * (1 + mid_h), compute.low * (1 + low_h),
                        compute.high * (1 + high_h))
        fit = Overhead(self.overhead_s, self.overhead)
        fits = (fit, *(self.overhead_fits or ()))
        return Span(compute.value + fit.at(compute.value),
                    min(compute.low + f.at(compute.low) for f in fits),
                    max(compute.high + f.at(compute.high) for f in fits))


def overlap_from(measured_step_s: float, compute_s: float, comm_s: float, source: str,
                 step_span: tuple[float, float] | None = None,
                 comm_span: tuple[float, float] | None = None,
                 whole_step: bool = False) -> Overlap:
    """The overlap one multi-process result shows: the part of its all-reduce (``comm_s``) its
    step (against the 1-device step) does not show, as a window and as a share, within [0, 1];
    what its step took beyond the whole all-reduce, as the overhead (a share of the 1-device
    step). One result cannot tell a hidden all-reduce from an overhead: the excess is first
    taken as an exposed all-reduce, so its window is the least that explains it. Its ends: the
    same at the ends of its step's and its all-reduce's 95 % intervals (``step_span``,
    ``comm_span``, where stored): the least window where the step is slowest and the all-reduce
    shortest, the most at the other corner. ``whole_step`` (:func:`overlaps_whole_step`):
    :func:`whole_step_from` that result."""
    if comm_s <= 0:
        return Overlap(None, f"{source}: the model's all-reduce there is 0 s")
    seen = Seen(measured_step_s, compute_s, comm_s, source, step_span, comm_span)
    if whole_step:
        return whole_step_from(seen)
    exposed = measured_step_s - compute_s
    least, most_likely, most = overhead_seen_s(seen, 0.0)  # as if none of it hid
    overhead = most_likely / compute_s if compute_s > 0 else 0.0
    share = min(max(1 - exposed / comm_s, 0.0), 1.0)
    step_low, step_high = step_span or (measured_step_s, measured_step_s)
    comm_low, comm_high = comm_span or (comm_s, comm_s)

    def hidden(step: float, comm: float) -> float:
        return min(max(comm - (step - compute_s), 0.0), max(comm, 0.0))

    window = share * comm_s
    return Overlap(share, source, overhead, window_s=window,
                   window_ends=_ends(window, hidden(step_high, comm_low), lower_bound_only(
                       hidden(step_low, comm_high), comm_s, BACKWARD_SHARE * compute_s)),
                   overhead_range=_share_range((least, most), compute_s))


def hid_whole(most: float, comm_s: float) -> bool:
    """Whether a window's source could have hidden its whole all-reduce (``comm_s``) within its
    step's noise: the most window its 95 % intervals allow (``most``) reaches that all-reduce.
    Such a source bounds the window from below only (:func:`lower_bound_only`); one that did not
    shows part of its all-reduce exposed (:func:`dlperf.scaling.shows_exposed`, asked of a
    stored overlap by the rule that chooses a window's source). The one statement of it."""
    return bool(most >= comm_s)


def lower_bound_only(most: float, comm_s: float, bound: float) -> float:
    """A window's most, or the backward pass (``bound``) where its source hid its whole
    all-reduce (``comm_s``; :func:`hid_whole`): then that step bounds it from below only."""
    return max(most, bound) if hid_whole(most, comm_s) else most


def _share_range(seconds: tuple[float, float], compute_s: float) -> tuple[float, float] | None:
    """An overhead's (least, most) seconds as shares of the 1-device step; None without a
    step to share or where the two agree (no interval)."""
    if compute_s <= 0 or seconds[0] == seconds[1]:
        return None
    return seconds[0] / compute_s, seconds[1] / compute_s


def _ends(window_s: float, least: float, most: float) -> tuple[float, float] | None:
    """A window's ends, around it; None where its sources allow no other (no intervals)."""
    ends = (min(least, window_s), max(most, window_s))
    return None if ends == (window_s, window_s) else ends


@dataclass(frozen=True)
class Seen:
    """What one multi-process result shows: its step, the 1-device step of its configuration
    (its batch) and the all-reduce it adds over the start's, in seconds."""

    step_s: float
    compute_s: float
    comm_s: float
    source: str
    step_span: tuple[float, float] | None = None  # its step's 95 % interval, where stored
    comm_span: tuple[float, float] | None = None  # its all-reduce's, where its probe had repeats

    @property
    def excess_s(self) -> float:
        return self.step_s - self.compute_s

    @property
    def excess_ends(self) -> tuple[float, float]:
        """(least, most) excess over the 1-device step, at its step's interval's ends."""
        low, high = self.step_span or (self.step_s, self.step_s)
        return low - self.compute_s, high - self.compute_s

    @property
    def comm_ends(self) -> tuple[float, float]:
        return self.comm_span or (self.comm_s, self.comm_s)


def overhead_under_whole_step(seen: Seen, step_s: float | None = None) -> float:
    """The overhead seconds of one result whose exchange overlaps the whole step (step =
    max(c + o, A)): its whole excess over its 1-device step where its step is longer than its
    exchange, else none (the step is the exchange's, the overhead hidden under it). ``step_s``:
    its step at an end of its interval instead of its median."""
    step = seen.step_s if step_s is None else step_s
    return max(step - seen.compute_s, 0.0) if step > seen.comm_s else 0.0


def whole_step_from(overhead: Seen) -> Overlap:
    """An exchange that overlaps the whole step (:data:`WHOLE_STEP`): the window is the
    target's step with its overhead, so only the overhead is read, from ``overhead`` (a result
    whose exchange is short: :func:`overhead_under_whole_step`); the share shown is the part of
    that result's exchange its step hid."""
    o_s = overhead_under_whole_step(overhead)
    whole = overhead.compute_s + o_s
    share = min(whole / overhead.comm_s, 1.0) if overhead.comm_s > 0 else 1.0
    low, high = overhead.step_span or (overhead.step_s, overhead.step_s)
    ends = (overhead_under_whole_step(overhead, low), overhead_under_whole_step(overhead, high))
    return Overlap(share, f"window: the whole step (a parameter server's); overhead: "
                          f"{overhead.source}",
                   o_s / overhead.compute_s if overhead.compute_s > 0 else 0.0,
                   window_s=whole, whole_step=True,
                   overhead_range=_share_range(ends, overhead.compute_s))


def window_from(window: Seen, overhead: Seen, whole_step: bool = False) -> Overlap:
    """The window and the overhead from two results: ``overhead`` one whose all-reduce is short
    (hidden, or nearly), ``window`` one whose all-reduce is long enough to be exposed past the
    window. Their excesses over the 1-device step are o + max(0, A - H) each: the long one's
    gives the window H = excess(short) + A(long) - excess(long) (with the short one's all-reduce
    hidden, o is its whole excess), kept within [0, the backward pass] (BACKWARD_SHARE of the
    1-device step, stretched as the whole step is by the overhead: the processes contend
    during the backward pass too); the overhead is then the short one's excess less what of
    its all-reduce the window leaves exposed. ``whole_step`` (:func:`overlaps_whole_step`):
    no window is read, :func:`whole_step_from` ``overhead``."""
    if whole_step:
        return whole_step_from(overhead)
    bound = BACKWARD_SHARE * (window.compute_s + max(overhead.excess_s, 0.0))

    def kept(hidden: float) -> float:
        return min(max(hidden, 0.0), bound)

    window_s = kept(overhead.excess_s + window.comm_s - window.excess_s)
    # its ends: the two steps and the long one's all-reduce at their intervals' ends (the
    # 1-device step is in both excesses at one batch, so its own spread cancels)
    least = kept(overhead.excess_ends[0] + window.comm_ends[0] - window.excess_ends[1])
    most = lower_bound_only(
        kept(overhead.excess_ends[1] + window.comm_ends[1] - window.excess_ends[0]),
        window.comm_s, bound)
    fastest, overhead_s, slowest = overhead_seen_s(overhead, window_s)
    share = min(window_s / window.comm_s, 1.0) if window.comm_s > 0 else 1.0
    return Overlap(share, f"window: {window.source}; overhead: {overhead.source}",
                   overhead_s / overhead.compute_s if overhead.compute_s > 0 else 0.0,
                   window_s=window_s, window_ends=_ends(window_s, least, most),
                   overhead_range=_share_range((fastest, slowest), overhead.compute_s))


def at_batch(overlap: Overlap, own_compute_s: float, start_compute_s: float) -> Overlap:
    """An overlap measured where the 1-device step was ``own_compute_s`` (another batch size),
    carried to a start whose step is ``start_compute_s``: the window in seconds as measured (on
    the one-host check, scaling it with the step moved MXNet's and TensorFlow 1's projections
    further off, docs/projection.md), the overhead as a share of the step, with its reading as
    a fixed time per step (the same seconds) beside it for the interval."""
    if overlap.value is None or own_compute_s <= 0 or start_compute_s <= 0 or \
            own_compute_s == start_compute_s:
        return overlap
    ratio = own_compute_s / start_compute_s
    found = overlap.overhead_range
    return dataclasses.replace(overlap, overhead_fixed=overlap.overhead * ratio,
                               overhead_range=None if found is None else
                               (min(found[0], found[0] * ratio), max(found[1], found[1] * ratio)))


def overhead_seen_s(seen: Seen, window_s: float) -> tuple[float, float, float]:
    """(least, middle, most) overhead seconds of one multi-process result given the window:
    its excess over its own 1-device step less the all-reduce the window leaves exposed, at
    its step's 95 % interval ends and median (``Seen.step_span``; the median alone without
    one)."""
    exposed = max(seen.comm_s - window_s, 0.0)
    low, high = seen.step_span or (seen.step_s, seen.step_s)

    def beyond(step: float) -> float:
        return max(step - seen.compute_s - exposed, 0.0)

    return beyond(low), beyond(seen.step_s), beyond(high)


def fitted(overlap: Overlap, sources: tuple[Seen, Seen], start_compute_s: float) -> Overlap:
    """``overlap`` (its window) with the overhead fitted from two multi-process results at two
    batch sizes (:func:`overhead_fit`): its value through their medians; its ends the fits
    through the corners of their 95 % intervals that give the least and the most overhead at
    the start's 1-device step (the fit alone where neither has an interval)."""
    window = overlap.window_s or 0.0

    def seen_ends(seen: Seen) -> tuple[float, float, float]:
        if not overlap.whole_step:
            return overhead_seen_s(seen, window)
        low, high = seen.step_span or (seen.step_s, seen.step_s)
        return (overhead_under_whole_step(seen, low), overhead_under_whole_step(seen),
                overhead_under_whole_step(seen, high))

    ends = [seen_ends(seen) for seen in sources]
    (a, b) = sources
    fit = overhead_fit([(a.compute_s, ends[0][1]), (b.compute_s, ends[1][1])])
    corners = [overhead_fit([(a.compute_s, x), (b.compute_s, y)])
               for x in (ends[0][0], ends[0][2]) for y in (ends[1][0], ends[1][2])]
    corners.sort(key=lambda f: f.at(start_compute_s))
    return dataclasses.replace(
        overlap, source=f"{overlap.source}; overhead fitted: {a.source} and {b.source}",
        overhead=fit.share, overhead_fixed=None, overhead_s=fit.fixed_s,
        overhead_fits=(corners[0], corners[-1]))
