"""Projecting a data-parallel case beyond the devices measured: the model of docs/projection.md.

A data-parallel step on N devices is the 1-device step (each device computes its own batch)
plus the part of the gradient all-reduce the backward pass does not hide:

    step(N) = compute + overhead(compute) + max(0, allreduce(N) - window)

* ``compute``: the measured 1-device step (batch / throughput), with the measurement's interval.
* ``allreduce(N)``: the gradients (parameters x bytes per gradient element) in the all-reduces
  the engine sends a step (its declared packing: buckets of a size, one for all, or one per
  gradient tensor or group of them; :class:`dlperf.worker.support.Packing`), each all-reduced by a ring on one node (2(N-1) latencies and 2(N-1)/N of the bucket
  over the link), or across nodes by one ring through every process, node after node (each
  node's NIC carries its one ring edge out: 2(P-1)/P of the bucket for P processes in all, as
  every engine's counters on 2 emulated hosts of 2 processes show, not a hierarchical ring's
  2(N-1)/N); or, for an engine that declares a parameter server (MXNet's kvstore), every worker's
  push and pull through a server on each node (:func:`pushpull_s`). The links' latency and
  bandwidth are measured (``dlperf collectives``: Hockney's alpha-beta fit of the framework's own
  collective path) or given (a rate and a latency).
* ``overlap``: the seconds of all-reduce the backend hides behind its backward pass (a window:
  what is longer is exposed), measured from multi-process results of the same configuration
  (their steps against the 1-device step and their all-reduce); never assumed: without one,
  the interval spans no overlap to full overlap and says so.
* ``overhead``: what several processes cost beyond that (contention for a shared host,
  per-step coordination): a share of the step, from the same results, or, from results at two
  batch sizes, a fixed time per step plus a share (:func:`overhead_fit`).

Every projected figure carries an interval: the 1-device measurement's, the links' fit error (or,
where wider, the 95 % interval of their measured calls' median at the sizes that price the step's
transfer) and the overlap's range, propagated by evaluating the model at their ends (the model is monotone in
each). The throughput has a second one, that interval widened by the model's own error as its
validation measured it (:mod:`dlperf.projection_error`). What the model leaves out is listed
with every projection (:func:`not_modelled`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import UsageError
from dlperf.host import emulated
from dlperf.projection_error import ModelError, for_target
from dlperf.worker.support import EXCHANGES

MIB = 1 << 20
# the packing taken for an engine that declares none (:class:`dlperf.worker.support.Packing`):
# PyTorch DDP's default buckets
DDP_BUCKET_BYTES = 25 * MIB
# the backward pass's share of a step's compute: twice the forward's FLOPs (a weight and an
# activation gradient per forward product), so 2/3 of the whole; the overlap window's bound
BACKWARD_SHARE = 2 / 3
#: how an engine's all-reduce moves a step's gradients (:class:`dlperf.worker.support.Wire`'s
#: ``exchange``): a ring (one through every process across nodes), or a parameter server's push
#: and pull
RING, PARAMETER_SERVER = EXCHANGES
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
NOT_MODELLED = ("stragglers and jitter between nodes", "network congestion from other jobs",
                "pipeline or tensor parallelism", "a parameter server's bottleneck",
                "input pipelines that slow down as more processes read",
                "on a CPU host, the collective's own CPU on the cores the step computes on past "
                "the shape the overhead was read at (it grows with the ranks, not as the ring's "
                "bytes do)")
#: in place of "a parameter server's bottleneck" for an engine whose servers are modelled
#: (:func:`pushpull_s`): what that model still leaves out
SERVERS_LEFT_OUT = ("a server's own summing and copying beyond what its measured push and pull "
                    "shows (none in a link given as a rate), and keys spread unevenly over the "
                    "servers")
MAX_LINK_BITS = 100 * 10**12  # a given link: NVLink-class fabrics pass 1 Tbit/s
_LATENCY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*", re.I)
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def not_modelled(exchange: str = RING) -> tuple[str, ...]:
    """What a projection of an engine with ``exchange`` leaves out (listed with it)."""
    if exchange != PARAMETER_SERVER:
        return NOT_MODELLED
    return tuple(SERVERS_LEFT_OUT if item == "a parameter server's bottleneck" else item
                 for item in NOT_MODELLED)


@dataclass(frozen=True)
class Link:
    """One level of the network a collective crosses: per process (or per node's NIC, between
    nodes) the bus bandwidth in bytes/s and the latency of one ring hop; ``error`` the relative
    error of the fit it came from (0 when given)."""

    bandwidth: float
    latency: float
    source: str
    error: float = 0.0
    message_bytes: float | None = None  # the message size a measured model was fitted near
    beyond: bool = False  # that message is past the sizes measured (the fit extrapolated)
    # a measured model's calls where a step's transfer is priced: their median's 95 % interval
    # relative to it and its words (collective_model.CallSpread); 0 and "" where not known
    calls_low: float = 0.0
    calls_high: float = 0.0
    calls_text: str = ""

    @property
    def calls_half_width(self) -> float:
        """Half its calls' interval (:attr:`collective_model.CallSpread.half_width`)."""
        return (self.calls_high - self.calls_low) / 2

    @property
    def ends(self) -> tuple[float, float]:
        """The factors the link's price is multiplied by at the interval's fast and slow ends:
        its fit's misfit either side, or its calls' interval where that reaches further."""
        return (min(1 - self.error, 1 + self.calls_low), max(1 + self.error, 1 + self.calls_high))

    def describe(self) -> str:
        return (f"{self.bandwidth * 8 / 1e9:.3g} Gbit/s, {self.latency * 1e6:.3g} us per hop "
                f"({self.source})")


def parse_latency(text: str, flag: str) -> float:
    found = _LATENCY.fullmatch(text)
    if not found:
        raise UsageError(f"{flag}: {text!r} is not a latency; write NUMBER followed by ns, us, "
                         f"ms or s, e.g. 5us")
    return float(found.group(1)) * _SECONDS[found.group(2).lower()]


def given_link(text: str, flag: str) -> Link:
    """``RATE`` or ``RATE@LATENCY`` (tc's rate spelling: 100gbit@5us); latency 0 when left
    out."""
    rate, _, latency = text.partition("@")
    bits = emulated.parse_rate(rate, flag, most=MAX_LINK_BITS)
    if bits is None:
        raise UsageError(f"{flag}: {text!r} names no rate; write e.g. 100gbit@5us or measured")
    seconds = parse_latency(latency, flag) if latency else 0.0
    return Link(bits / 8, seconds, f"given: {text.strip()}")


def carrying(link: Link, share: float, what: str) -> Link:
    """A link given as a rate, for an engine whose all-reduce puts ``share`` times a ring's
    bytes on it (``what`` says whose and why): as a ring's link it moves the ring's bytes
    ``share`` times slower. A measured link has the engine's own bytes in it already."""
    if share == 1.0:
        return link
    return dataclasses.replace(link, bandwidth=link.bandwidth / share,
                               source=f"{link.source}, carrying {what}")


def link_of_model(model: Any, transfer_bytes: float | None = None) -> Link:
    """A measured :class:`dlperf.collective_model.Model` as the link the model prices with: an
    all-reduce on n ranks as a ring's (its bus bandwidth, its latency spread over the ring's
    2(n-1) hops); a parameter server's push and pull as :func:`pushpull_s`'s at the measured
    shape (d processes on each of N nodes: on one node the server's d x m each way, B = d / beta;
    across nodes each NIC's 2d(N-1)/N x m, B = 2d(N-1)/N / beta; the round trip's two
    latencies, alpha / 2 each), so that the model gives back the measured time there.
    ``transfer_bytes``: what one step moves as a unit (a message of one size, else the whole
    gradient), where the measured calls' spread is read (:meth:`Model.calls_at`)."""
    key, fit = model.key, model.fit
    if key.op not in ("allreduce", "pushpull") or key.ranks < 2:
        raise UsageError(f"collective model {key.describe()}: an all-reduce, or a parameter "
                         f"server's push and pull, on 2 or more ranks is needed")
    if fit.beta_s <= 0:
        raise UsageError(f"collective model {key.describe()}: its sizes show no bandwidth "
                         f"(latency-bound); measure larger sizes")
    source = f"measured: {key.describe()}, run {model.run}"
    near = model.near_bytes
    if near is not None:
        source += (f", fitted over {model.sizes_text()} for its {near / 2**20:.3g} MiB "
                   f"messages")
    beyond = near is not None and model.beyond(near)
    spread = model.calls_at(transfer_bytes) if transfer_bytes else None
    calls = {} if spread is None else {"calls_low": spread.low, "calls_high": spread.high,
                                       "calls_text": spread.text()}
    if key.op == "pushpull":
        share = link_bytes(PARAMETER_SERVER, key.nproc, key.nnodes)
        return Link(share / fit.beta_s, fit.alpha_s / 2, source, fit.max_error, near, beyond,
                    **calls)
    return Link(model.factor / fit.beta_s, fit.alpha_s / (2 * (key.ranks - 1)), source,
                fit.max_error, near, beyond, **calls)


def ring_allreduce_s(nbytes: float, ranks: int, link: Link) -> float:
    """A ring all-reduce of ``nbytes`` on ``ranks``: 2(n-1) hops of latency and 2(n-1)/n of the
    message over each process's link."""
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) * link.latency + 2 * (ranks - 1) / ranks * nbytes / link.bandwidth


def flat_ring_allreduce_s(nbytes: float, per_node: int, nodes: int, intra: Link,
                          inter: Link) -> float:
    """One ring through all P = ``per_node`` x ``nodes`` processes, node after node, as every
    engine dlperf runs all-reduces across nodes (gloo, TensorFlow's RING, MCCL, OneFlow's,
    Horovod's): on 2 emulated hosts of 2 processes each host's link carried 1.5 times the
    message, the ring's 2(P-1)/P, where a hierarchical all-reduce's NIC carries 2(N-1)/N, 1.0
    (docs/projection.md). Each node's NIC carries its one ring edge out, its other edges are
    inside the node; every edge carries 2(P-1)/P of the message, and each of the ring's 2(P-1)
    steps lasts as long as its slowest hop."""
    ranks = per_node * nodes
    if ranks < 2:
        return 0.0
    hops = [inter] if per_node == 1 else [inter, intra]
    latency = max(hop.latency for hop in hops)
    bandwidth = min(hop.bandwidth for hop in hops)
    return 2 * (ranks - 1) * latency + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def pushpull_s(nbytes: float, per_node: int, nodes: int, intra: Link,
               inter: Link | None) -> float:
    """Every worker (``per_node`` = d on each of ``nodes`` = N) pushes ``nbytes`` to the
    parameter servers, a server on each node holding 1/N of the bytes (ps-lite spreads the keys,
    and splits the large ones, over the servers), and pulls the sum back. Each node's NIC carries
    its d workers' pushes to the other nodes' servers and its server's replies to the other
    nodes' workers: 2d(N-1)/N of the message each way (2.0 on 2 emulated hosts of 2 workers, as
    their counters show), where a ring's carries 2(dN-1)/dN once for the node (1.5 there). Each
    server takes its own node's d workers' share over the node's link (d/N of the message each
    way) at the same time. Each a round trip: a push's latency, then the pull's."""
    d, n = per_node, nodes
    if d * n < 2:
        return 0.0
    inside = 2 * intra.latency + d * nbytes / n / intra.bandwidth
    if n == 1:
        return inside
    assert inter is not None
    between = 2 * inter.latency + 2 * d * (n - 1) / n * nbytes / inter.bandwidth
    return max(inside, between)


def link_bytes(exchange: str, per_node: int, nodes: int) -> float:
    """The multiple of one message each process's link (each node's NIC, across nodes) carries
    each way at a shape: a ring's 2(P-1)/P of its P = dN processes (across nodes its one edge
    out of the node); a parameter server's d on one node (its server's), 2d(N-1)/N across
    nodes. A bus bandwidth read with a ring's bytes (an all-reduce probe's) is a link for
    ``exchange`` at that shape times ``link_bytes(exchange) / link_bytes(RING)``."""
    d, n = per_node, nodes
    if exchange == PARAMETER_SERVER:
        return float(d) if n == 1 else 2 * d * (n - 1) / n
    return 2 * (d * n - 1) / (d * n)


def allreduce_s(gradient_bytes: float, messages: int, per_node: int, nodes: int, intra: Link,
                inter: Link | None, exchange: str = RING) -> float:
    """One step's gradient all-reduce in ``messages`` all-reduces: each pays its latency, the
    bytes cost the same however they are cut (the time is linear in them), so the cut is taken
    as equal parts. A parameter server's (``exchange`` PARAMETER_SERVER) pushes and pulls one
    round trip for the step, whatever its keys: each key's push is sent without waiting for the
    last one's reply (MXNet's engine runs the kvstore's pushes asynchronously and ps-lite's van
    queues them on one connection a server), so their latencies overlap and their bytes
    queue."""
    if gradient_bytes <= 0 or messages < 1:
        return 0.0
    if exchange == PARAMETER_SERVER:
        return pushpull_s(gradient_bytes, per_node, nodes, intra, inter)
    size = gradient_bytes / messages
    if nodes == 1:
        return messages * ring_allreduce_s(size, per_node, intra)
    assert inter is not None
    return messages * flat_ring_allreduce_s(size, per_node, nodes, intra, inter)


def gradient_bytes(params: int, precision: str) -> int:
    """Bytes of one step's gradients: fp32 for fp32, tf32 and autocast (the parameters, and so
    their gradients, stay fp32); 2 bytes for pure fp16/bf16 training."""
    return params * (2 if precision in ("fp16", "bf16") else 4)


@dataclass(frozen=True)
class Shape:
    """A target: ``per_node`` devices on each of ``nodes`` nodes."""

    per_node: int
    nodes: int

    @property
    def devices(self) -> int:
        return self.per_node * self.nodes


@dataclass(frozen=True)
class Span:
    """A value and its interval."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 1, pct: bool = False) -> str:
        """``value (low–high)``, as a number with ``digits`` or (``pct``) a percentage: how a
        projected figure is shown everywhere (the command's table, the report's)."""
        if pct:
            return f"{self.value:.1%} ({self.low:.1%}–{self.high:.1%})"
        return f"{self.value:,.{digits}f} ({self.low:,.{digits}f}–{self.high:,.{digits}f})"

    def scaled(self, factor: float) -> "Span":
        ends = sorted((self.low * factor, self.high * factor))
        return Span(self.value * factor, ends[0], ends[1])


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


@dataclass(frozen=True)
class Inputs:
    """Everything a projection is computed from: the measured step at ``start`` (one device, or
    one node's devices), whose own all-reduce the targets' replaces."""

    compute_s: Span  # the measured step at ``start``, seconds
    batch: int  # per device
    gradient_bytes: int
    messages: int  # all-reduces a step sends (the engine's packing)
    packing: str  # what sets ``messages``: the packing and where it comes from
    intra: Link
    inter: Link | None
    overlap: Overlap
    start: Shape = Shape(1, 1)
    engine: str | None = None  # whose cases of a check its model error takes (projection_error)
    exchange: str = RING  # how the engine's all-reduce moves the gradients (EXCHANGES)


@dataclass(frozen=True)
class Point:
    """One projected target."""

    shape: Shape
    allreduce_s: Span
    step_s: Span
    throughput: Span  # samples/s, the whole job; its interval the inputs' spread
    speedup: Span
    efficiency: Span
    model_error: ModelError

    @property
    def throughput_with_model_error(self) -> Span:
        """The throughput's interval widened by the model's validated error."""
        return Span(self.throughput.value,
                    *self.model_error.widen(self.throughput.low, self.throughput.high))


def project(inputs: Inputs, shape: Shape) -> Point:
    """The model at ``shape``: the measured step at the start plus the exposed part of the
    all-reduce the target adds over the start's own (step(start) + (1 - overlap) x (allreduce(
    target) - allreduce(start))). Its interval: the fast end at the fast ends of every input
    (the shorter measured step, the links' fit error or their calls' interval in their favour,
    the larger overlap), the slow end at the slow ones."""
    if shape.nodes > 1 and inputs.inter is None:
        raise UsageError("--inter: a target of several nodes needs the link between nodes "
                         "(measured or RATE@LATENCY)")
    start = inputs.start
    if shape.devices < start.devices or shape.nodes < start.nodes or \
            shape.per_node < start.per_node:
        raise UsageError(f"--nnodes/--devices-per-node: {shape.nodes} x {shape.per_node} is "
                         f"below what was measured ({start.nodes} x {start.per_node}); "
                         f"project upwards only")
    comm = (allreduce_s(inputs.gradient_bytes, inputs.messages, shape.per_node, shape.nodes,
                        inputs.intra, inputs.inter, inputs.exchange)
            - allreduce_s(inputs.gradient_bytes, inputs.messages, start.per_node, start.nodes,
                          inputs.intra, inputs.inter, inputs.exchange))
    links = [inputs.intra] + ([inputs.inter] if inputs.inter else [])
    fast = min(link.ends[0] for link in links)
    slow = max(link.ends[1] for link in links)
    comm_span = Span(comm, comm * max(fast, 0.0), comm * slow)
    c = inputs.compute_s
    if shape.devices > start.devices:  # more processes than the start: their overhead too
        c = inputs.overlap.with_overhead(c)
    if inputs.overlap.whole_step:  # the exchange overlaps the whole step: the longer of two;
        # the slow end as if it overlapped the backward pass alone (a ring's bound): where the
        # two are alike, a step's first keys wait for the backward pass and its last pulls
        # hold up the next forward (2.5 Gbit/s on a Zen 5: +20.8 % at the median)
        step = Span(max(c.value, comm_span.value), max(c.low, comm_span.low),
                    c.high + max(comm_span.high - BACKWARD_SHARE * c.high, 0.0))
    else:
        step = Span(c.value + inputs.overlap.exposed(comm_span.value)[1],
                    c.low + inputs.overlap.exposed(comm_span.low)[0],
                    c.high + inputs.overlap.exposed(comm_span.high)[2])
    samples = inputs.batch * shape.devices
    throughput = Span(samples / step.value, samples / step.high, samples / step.low)
    at_start = inputs.batch * start.devices / c.value
    speedup = throughput.scaled(start.devices / at_start)  # over one device at the start's pace
    return Point(shape, comm_span, step, throughput, speedup,
                 speedup.scaled(1 / shape.devices),
                 for_target(shape.nodes, shape.devices, start_nodes=start.nodes,
                            start_devices=start.devices, engine=inputs.engine))


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


def lower_bound_only(most: float, comm_s: float, bound: float) -> float:
    """A window's most, or the backward pass (``bound``) where its source's whole all-reduce
    (``comm_s``) could hide within its step's noise: then that step bounds it from below only."""
    return max(most, bound) if most >= comm_s else most


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


def path_and_wire_s(wire_s: float, path_s: float, serial: float) -> float:
    """An all-reduce that crosses a framework's own collective path (its copies, serialisation
    and reductions: ``path_s`` where the wire is not the limit) and a wire (``wire_s``: the
    bytes over its rate): the wire's time plus the share ``serial`` of the path's time that does
    not overlap it, never less than the path alone. ``serial`` 0: the slower of the two (a
    pipelined ring); 1: the two in series (1/B = 1/B_wire + 1/B_path)."""
    return max(path_s, wire_s + serial * path_s)


@dataclass
class Projection:
    """A projection of one case, as stored and shown."""

    label: str
    source: dict[str, Any]  # the 1-device result it starts from (run id, label, throughput)
    inputs: Inputs
    points: list[Point]
    warnings: list[str] = field(default_factory=list)

    def model_text(self) -> str:
        i = self.inputs
        where = ("1 device" if i.start.devices == 1
                 else f"{i.start.nodes} x {i.start.per_node} devices")
        parts = [f"measured step {i.compute_s.value * 1e3:.4g} ms on {where}",
                 f"gradients {i.gradient_bytes / 1e6:.4g} MB in {i.messages} "
                 + ("push(es) and pull(s) through a parameter server on each node"
                    if i.exchange == PARAMETER_SERVER else "all-reduce(s)")
                 + f" a step: {i.packing}",
                 f"intra-node {i.intra.describe()}"]
        if i.inter is not None:
            parts.append(f"between nodes {i.inter.describe()}")
        o = i.overlap
        overlap = "not measured: 0-100 %" if o.value is None else f"{o.value:.0%}"
        if o.whole_step:
            overlap = (f"window the whole step: the longer of the compute and the exchange "
                       f"({o.value:.0%} of its source's exchange hidden; slow end as the "
                       f"backward pass alone)")
        elif o.value is not None and o.window_s is not None:
            ends = ("" if o.window_ends is None else
                    f", {o.window_ends[0] * 1e3:.4g}-{o.window_ends[1] * 1e3:.4g} ms at its "
                    f"sources' interval ends")
            overlap = f"window {o.window_s * 1e3:.4g} ms ({overlap} of its all-reduce{ends})"
        if o.overhead_s is not None:
            overlap += (f", multi-process overhead {o.overhead_s * 1e3:.4g} ms per step + "
                        f"{o.overhead:.1%} of the step (fitted at two batch sizes)")
        elif o.overhead:
            overlap += f", multi-process overhead +{o.overhead:.1%} of the step"
            if o.overhead_fixed is not None:
                overlap += (f" (+{o.overhead_fixed:.1%} read as a fixed time per step: one "
                            f"batch size cannot tell them apart)")
        parts.append(f"overlap {overlap} ({i.overlap.source})")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        def span(s: Span) -> dict[str, float]:
            return {"value": s.value, "low": s.low, "high": s.high}

        i = self.inputs
        return {
            "kind": "projection", "label": self.label, "source": self.source,
            "model": {"text": self.model_text(), "compute_s": span(i.compute_s),
                      "batch_per_device": i.batch, "gradient_bytes": i.gradient_bytes,
                      "allreduces_per_step": i.messages, "packing": i.packing,
                      "start": {"nodes": i.start.nodes, "devices_per_node": i.start.per_node},
                      "intra": vars(i.intra), "inter": vars(i.inter) if i.inter else None,
                      "overlap": {"value": i.overlap.value, "source": i.overlap.source,
                                  "overhead": i.overlap.overhead,
                                  "window_s": i.overlap.window_s,
                                  "whole_step": i.overlap.whole_step,
                                  "window_ends": list(i.overlap.window_ends)
                                  if i.overlap.window_ends else None,
                                  "overhead_fixed": i.overlap.overhead_fixed,
                                  "overhead_s": i.overlap.overhead_s,
                                  "overhead_ends": [vars(f) for f in i.overlap.overhead_fits]
                                  if i.overlap.overhead_fits else None,
                                  "overhead_range": list(i.overlap.overhead_range)
                                  if i.overlap.overhead_range else None},
                      "exchange": i.exchange,
                      "not_modelled": list(not_modelled(i.exchange))},
            "points": [{"nodes": p.shape.nodes, "devices_per_node": p.shape.per_node,
                        "devices": p.shape.devices, "allreduce_s": span(p.allreduce_s),
                        "step_s": span(p.step_s), "throughput": span(p.throughput),
                        "throughput_with_model_error": span(p.throughput_with_model_error),
                        "model_error": p.model_error.to_dict(),
                        "speedup": span(p.speedup), "scaling_efficiency": span(p.efficiency)}
                       for p in self.points],
            "warnings": list(self.warnings)}


def targets(per_node: int, nodes: list[int]) -> list[Shape]:
    """The shapes asked for, each checked."""
    if per_node < 1 or not nodes or any(n < 1 for n in nodes):
        raise UsageError("--nnodes: node counts must be whole numbers >= 1, e.g. 1,2,4,8")
    shapes = [Shape(per_node, n) for n in nodes]
    if all(s.devices < 2 for s in shapes):
        raise UsageError("--devices-per-node/--nnodes: every target is one device, which was "
                         "measured, not projected")
    return shapes


def spread_of(throughput: dict[str, Any]) -> tuple[float, float, float]:
    """(median, low, high) of a stored throughput: its 95 % interval where it has one."""
    median = float(throughput["median"])
    interval = throughput.get("ci95") or [throughput.get("min"), throughput.get("max")]
    low, high = (float(v) if v is not None and math.isfinite(float(v)) else median
                 for v in interval)
    return median, min(low, median), max(high, median)
