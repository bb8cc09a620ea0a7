"""The links a projection prices an all-reduce over, and what each collective algorithm costs on
them (docs/projection.md, "The all-reduce", "The links").

Apart from the overlap and the projection because it is the one part of the model that knows
how bytes cross a network (a link given as ``RATE@LATENCY`` or read from a measured
:class:`dlperf.collective_model.Model`; a ring on one node, one ring through every process
across nodes, a parameter server's push and pull), and the all-reduce validation
(benchmarks/allreduce_validation.py) prices transfers with it alone.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from dlperf.errors import UsageError
from dlperf.host import emulated
from dlperf.worker.support import EXCHANGES

MIB = 1 << 20
# the packing taken for an engine that declares none (:class:`dlperf.worker.support.Packing`):
# PyTorch DDP's default buckets
DDP_BUCKET_BYTES = 25 * MIB
#: how an engine's all-reduce moves a step's gradients (:class:`dlperf.worker.support.Wire`'s
#: ``exchange``): a ring (one through every process across nodes), or a parameter server's push
#: and pull
RING, PARAMETER_SERVER = EXCHANGES
MAX_LINK_BITS = 100 * 10**12  # a given link: NVLink-class fabrics pass 1 Tbit/s
_LATENCY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*", re.I)
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


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


def path_and_wire_s(wire_s: float, path_s: float, serial: float) -> float:
    """An all-reduce that crosses a framework's own collective path (its copies, serialisation
    and reductions: ``path_s`` where the wire is not the limit) and a wire (``wire_s``: the
    bytes over its rate): the wire's time plus the share ``serial`` of the path's time that does
    not overlap it, never less than the path alone. ``serial`` 0: the slower of the two (a
    pipelined ring); 1: the two in series (1/B = 1/B_wire + 1/B_path)."""
    return max(path_s, wire_s + serial * path_s)
