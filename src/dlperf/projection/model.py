"""The projection itself: a data-parallel case beyond the devices measured, the model of
docs/projection.md, its inputs, its projected points and the projection as stored and shown.

A data-parallel step on N devices is the 1-device step (each device computes its own batch)
plus the part of the gradient all-reduce the backward pass does not hide:

    step(N) = compute + overhead(compute) + max(0, allreduce(N) - window)

* ``compute``: the measured 1-device step (batch / throughput), with the measurement's interval.
* ``allreduce(N)``: the gradients (parameters x bytes per gradient element) in the all-reduces
  the engine sends a step (its declared packing: buckets of a size, one for all, or one per
  gradient tensor or group of them; :class:`dlperf.worker.support.Packing`), each all-reduced
  by a ring on one node (2(N-1) latencies and 2(N-1)/N of the bucket over the link), or across
  nodes by one ring through every process, node after node (each node's NIC carries its one ring
  edge out: 2(P-1)/P of the bucket for P processes in all, as every engine's counters on 2
  emulated hosts of 2 processes show, not a hierarchical ring's 2(N-1)/N); or, for an engine
  that declares a parameter server (MXNet's kvstore), every worker's push and pull through a
  server on each node (:func:`dlperf.projection.links.pushpull_s`). The links' latency and
  bandwidth are measured (``dlperf collectives``: Hockney's alpha-beta fit of the framework's
  own collective path) or given (a rate and a latency).
* ``overlap``: the seconds of all-reduce the backend hides behind its backward pass (a window:
  what is longer is exposed), measured from multi-process results of the same configuration
  (their steps against the 1-device step and their all-reduce); never assumed: without one,
  the interval spans no overlap to full overlap and says so.
* ``overhead``: what several processes cost beyond that (contention for a shared host,
  per-step coordination): a share of the step, from the same results, or, from results at two
  batch sizes, a fixed time per step plus a share
  (:func:`dlperf.projection.overlap.overhead_fit`).

Every projected figure carries an interval: the 1-device measurement's, the links' fit error (or,
where wider, the 95 % interval of their measured calls' median at the sizes that price the step's
transfer) and the overlap's range, propagated by evaluating the model at their ends (the model
is monotone in each). The throughput has a second one, that interval widened by the model's own
error as its validation measured it (:mod:`dlperf.projection.error`). What the model leaves out
is listed with every projection (:func:`not_modelled`).

The links and the all-reduce's cost are :mod:`dlperf.projection.links`', the overlap and the
overhead as measured :mod:`dlperf.projection.overlap`'s; this module puts them together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import UsageError
from dlperf.projection.error import ModelError, for_target
from dlperf.projection.links import PARAMETER_SERVER, RING, Link, allreduce_s
from dlperf.projection.overlap import BACKWARD_SHARE, Overlap
from dlperf.projection.span import Span

NOT_MODELLED = ("stragglers and jitter between nodes", "network congestion from other jobs",
                "pipeline or tensor parallelism", "a parameter server's bottleneck",
                "input pipelines that slow down as more processes read",
                "on a CPU host, the collective's own CPU on the cores the step computes on past "
                "the shape the overhead was read at (it grows with the ranks, not as the ring's "
                "bytes do)")
#: in place of "a parameter server's bottleneck" for an engine whose servers are modelled
#: (:func:`dlperf.projection.links.pushpull_s`): what that model still leaves out
SERVERS_LEFT_OUT = ("a server's own summing and copying beyond what its measured push and pull "
                    "shows (none in a link given as a rate), and keys spread unevenly over the "
                    "servers")


def not_modelled(exchange: str = RING) -> tuple[str, ...]:
    """What a projection of an engine with ``exchange`` leaves out (listed with it)."""
    if exchange != PARAMETER_SERVER:
        return NOT_MODELLED
    return tuple(SERVERS_LEFT_OUT if item == "a parameter server's bottleneck" else item
                 for item in NOT_MODELLED)


@dataclass(frozen=True)
class Shape:
    """A target: ``per_node`` devices on each of ``nodes`` nodes."""

    per_node: int
    nodes: int

    @property
    def devices(self) -> int:
        return self.per_node * self.nodes


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
    engine: str | None = None  # whose cases of a check its model error takes (projection.error)
    exchange: str = RING  # how the engine's all-reduce moves the gradients (EXCHANGES)
    device: str | None = None  # the start's kind ("cpu", "cuda"): which checks are its own


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
                            start_devices=start.devices, engine=inputs.engine,
                            device=inputs.device))


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
