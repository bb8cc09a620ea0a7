"""``dlperf project``: a measured 1-device result projected to N devices and nodes
(:mod:`dlperf.projection.model`), or a published 1-GPU figure projected to the study's own
shapes and set beside the published ones (``--published TABLE``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from dlperf import collective_model, display, models, outputs, scaling, spec, stats
from dlperf.backends.horovod import PACKING as HOROVOD_PACKING
from dlperf.commands import HELP
from dlperf.commands._links import MEASURED, check_links, is_measured, link_spec, measured_link
from dlperf.commands.compare import resolve
from dlperf.errors import UsageError
from dlperf.projection.error import engine_named, median_abs
from dlperf.projection.links import DDP_BUCKET_BYTES, MIB, RING, Link, allreduce_s, gradient_bytes
from dlperf.projection.model import (Inputs, Point, Projection, Shape, not_modelled, project,
                                     spread_of, targets)
from dlperf.projection.overlap import (Overlap, Seen, at_batch, fitted, overlap_from,
                                       overlaps_whole_step, window_from)
from dlperf.projection.span import Span
from dlperf.store import DEFAULT_DB, Store
from dlperf.worker.support import Packing, Wire, device_kind, packing_mode


def node_counts(text: str) -> list[int]:
    try:
        counts = [int(word) for word in text.split(",") if word.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: node counts, whole numbers >= 1 separated "
                                         f"by commas, e.g. 1,2,4,8")
    return counts


def whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number >= 1")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("project", help=HELP["project"])
    parser.add_argument("result", nargs="?", metavar="RESULT",
                        help="the result to start from (1 device, or 1 node's devices): a run "
                             "id in --db, or a result JSON file")
    parser.add_argument("--db", default=DEFAULT_DB,
                        help="database of the result, the collective models, the overlap's "
                             "result; the projection is stored there")
    parser.add_argument("--devices-per-node", type=whole, default=1, metavar="N",
                        help="devices on each node of every target (default 1)")
    parser.add_argument("--nnodes", type=node_counts, default=[1], metavar="N,N,...",
                        help="node counts to project to (default 1)")
    parser.add_argument("--intra", default=MEASURED, metavar="SPEC",
                        help="the link between a node's processes: measured (the framework's "
                             "all-reduce model from `dlperf collectives` on one host, fitted "
                             "over the sizes near the step's messages where its engine sends "
                             "them in one size), or RATE@LATENCY, e.g. 1200gbit@2us (up to "
                             "100tbit)")
    parser.add_argument("--inter", default=None, metavar="SPEC",
                        help="the link between nodes: measured[:LINK] (the model measured "
                             "across emulated hosts, over LINK), or RATE@LATENCY, e.g. "
                             "100gbit@5us; needed for targets of several nodes")
    parser.add_argument("--overlap-from", metavar="RESULT",
                        help="a multi-process result of the same configuration whose step "
                             "shows the overlap and the multi-process overhead (default: as "
                             "the validation reads them from --db: the fastest link whose step "
                             "shows part of its all-reduce, the overhead from an unshaped "
                             "result; none there: the interval spans 0-100 %%); it may be at "
                             "another batch size where --db holds that batch's 1-device result")
    parser.add_argument("--overhead-from", metavar="RESULT", action="append", default=[],
                        help="with --overlap-from: a multi-process result of the same "
                             "configuration and batch whose all-reduce is short (unshaped, or "
                             "on fewer devices): the overhead is read from it, and the overlap "
                             "window from --overlap-from's (one whose all-reduce is long enough "
                             "to be exposed, over a link near the target's: docs/projection.md, "
                             "'Which rate the window is read from'). Given twice: two results "
                             "of the configuration at two batch sizes (each with its 1-device "
                             "result in --db), the overhead fitted through them as a fixed "
                             "time per step plus a share of the step, the window from "
                             "--overlap-from alone")
    parser.add_argument("--launcher", choices=("native", "horovod"), default="native",
                        help="the targets' engine: the framework's own data parallelism "
                             "(default) or Horovod (its tensor fusion's packing), projected from "
                             "the framework's own 1-device result")
    parser.add_argument("--bucket-mb", type=float, default=None, metavar="MIB",
                        help="gradient buckets of this size in place of the engine's "
                             "declared packing (PyTorch DDP: 25 MiB buckets, Horovod: 64 MiB "
                             "fusion, TensorFlow: one pack, JAX on CPUs: one all-reduce per "
                             "gradient tensor; docs/projection.md lists them)")
    parser.add_argument("--published", metavar="TABLE",
                        help="project a published table's 1-GPU figures to its own shapes and "
                             "compare (`dlperf reference` lists them); needs --intra/--inter "
                             "as RATE@LATENCY of the study's hardware")
    parser.add_argument("--from-node", action="store_true",
                        help="with --published: start from each framework's 1-node figure "
                             "with the most GPUs (not its 1-GPU one)")
    parser.add_argument("--no-store", action="store_true", help="show, do not store")
    parser.add_argument("--json", type=Path, help="also write the projection(s) as JSON")
    return parser


#: how far a multi-host result's own bytes on the wire may be from the engine's declaration
#: before the projection says so (the stored results' medians are within 9 % of theirs)
WIRE_TOLERANCE = 0.25


def wire_warnings(db: str, result: dict[str, Any], wire: Wire) -> list[str]:
    """One line for each multi-host result of the configuration whose bytes on the wire a step
    (:func:`dlperf.scaling.wire_share`) are not the engine's declaration: an all-reduce sent
    twice (JAX's before 2026-12-02), or an engine that changed."""
    out = []
    for other in multi_results(db, result):
        seen = scaling.wire_share(other)
        if seen is not None and abs(seen / wire.share - 1) > WIRE_TOLERANCE:
            out.append(f"run {other.get('run_id')} ({other.get('label')}) put {seen:.2f}x a "
                       f"ring's bytes on the wire a step, where the engine declares "
                       f"{wire.share:g}x: links given as a rate are priced at the declaration")
    return out


# ------------------------------------------------------------------------------------------------
# a measured result
# ------------------------------------------------------------------------------------------------

def one(spec: str, which: str, db: str) -> dict[str, Any]:
    items = resolve(spec, which, db)
    if len(items) != 1:
        raise UsageError(f"{which}: {spec} holds {len(items)} results; name one")
    return items[0]


def source_result(args: argparse.Namespace) -> dict[str, Any]:
    result = one(args.result, "RESULT", args.db)
    case = result["case"]
    if int(case.get("nnodes") or 1) != 1 or (case.get("launcher") or "native") != "native":
        raise UsageError(f"RESULT: {result.get('label')} ran on {case.get('nnodes')} nodes "
                         f"with {case.get('launcher')}; a projection starts from a 1-device or "
                         f"1-node result of the framework's own engine")
    if result.get("status") != "ok" or not (result.get("throughput") or {}).get("median"):
        raise UsageError(f"RESULT: {result.get('label')} did not succeed "
                         f"({result.get('status')}); nothing to project")
    if case.get("task", "train") != "train":
        raise UsageError(f"RESULT: {result.get('label')} is {case.get('task')}; a projection "
                         f"models data-parallel training")
    return result


def multi_results(db: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Successful multi-device results of ``result``'s configuration in ``db``, oldest first."""
    if not Path(db).is_file():
        return []
    wanted = scaling.config(result)
    out = []
    with Store(db, readonly=True) as store:
        for row in store.runs("result_json IS NOT NULL AND status = 'ok'"):
            other = store.decode(row)
            if scaling.total_devices(other["case"]) > 1 and scaling.config(other) == wanted \
                    and (other["case"].get("launcher") or "native") == "native":
                other.setdefault("run_id", row["id"])
                out.append(other)
    return out


def _without_batch(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in scaling.config(result).items() if k != "batch_size"}


def _own_compute_s(other: dict[str, Any], db: str, flag: str) -> float:
    """The 1-device step of ``other``'s configuration (its batch), for a source of the overlap
    measured at another batch than the start's."""
    with Store(db, readonly=True) as store:
        base = scaling.find_baseline(store, other)
    if base is None or not (base.get("throughput") or {}).get("median"):
        raise UsageError(f"{flag}: {other.get('label')} is at another batch size than "
                         f"RESULT and {db} holds no 1-device result of its own configuration "
                         f"to set its step against; measure it with --devices 1")
    return int(other["case"]["batch_size"]) / float(base["throughput"]["median"])


def _named(spec: str, flag: str, db: str, result: dict[str, Any],
           start: Shape) -> dict[str, Any]:
    """A named source of the overlap: a result of the start's configuration (any batch size) on
    more devices."""
    other = one(spec, flag, db)
    if _without_batch(other) != _without_batch(result) or \
            scaling.total_devices(other["case"]) <= start.devices:
        raise UsageError(f"{flag}: {other.get('label')} is not a result of "
                         f"{result.get('label')}'s configuration (any batch size) on more "
                         f"devices")
    return other


def seen_in(other: dict[str, Any], flag: str, db: str, result: dict[str, Any],
            compute_s: float, gradient: int, messages: int, intra: Link, inter: Link | None,
            start: Shape, exchange: str = RING) -> Seen | None:
    """What ``other`` shows: its step, its own 1-device step (the start's, at the same batch)
    and the all-reduce it adds over the start's, priced as the targets are where that can be
    done: with measured links, the framework's measured models of ``other``'s own links (the
    window is then read in the units the targets are priced in: OneFlow's one-buffer probe at
    100 Mbit/s takes twice the wire, its bucketed step's all-reduce does not); else its ranks'
    own probe (the whole gradient at once); else the model at its shape (its link may not be
    the target's); None where it spans nodes and no link between nodes is known."""
    case = other["case"]
    if case.get("batch_size") != result["case"].get("batch_size"):
        compute_s = _own_compute_s(other, db, flag)
    nodes, per_node = int(case.get("nnodes") or 1), int(case.get("devices") or 1)
    step = int(other.get("global_batch") or 0) / float(other["throughput"]["median"])
    source = f"run {other.get('run_id')}: {other.get('label')}"
    span = _step_span(other)
    # the start's own all-reduce, which every reading but the probe's takes off
    start_s = allreduce_s(gradient, messages, start.per_node, start.nodes, intra, inter, exchange)
    own = own_links(other, db, str(result["case"]["framework"]), intra, inter)
    if own is not None:
        comm = allreduce_s(gradient, messages, per_node, nodes, *own, exchange) - start_s
        where = own[1] if nodes > 1 and own[1] is not None else own[0]
        return Seen(step, compute_s, comm,
                    f"{source} (priced by {where.source.split(', run ')[0]})", span)
    probed = scaling.allreduce_seconds(other)
    if probed is not None:
        at_start = allreduce_s(gradient, 1, start.per_node, start.nodes, intra, inter, exchange)
        interval = scaling.allreduce_interval(other)
        return Seen(step, compute_s, probed - at_start,
                    f"{source} (its all-reduce probe: {probed * 1e3:.4g} ms)", span,
                    None if interval is None else
                    (interval[0] - at_start, interval[1] - at_start))
    if nodes > 1 and inter is None:
        return None
    comm = allreduce_s(gradient, messages, per_node, nodes, intra, inter, exchange) - start_s
    return Seen(step, compute_s, comm, source, span)


def own_links(other: dict[str, Any], db: str, framework: str, intra: Link,
              inter: Link | None) -> tuple[Link, Link | None] | None:
    """The measured models of ``other``'s own links, where the targets' link at the level it
    differs in is a measured model too: on one host the targets' own (the host is the same),
    across nodes the model over ``other``'s link (its rate, or unshaped) beside the targets'
    link inside a node; None where that link of the targets' is given as a rate or no model of
    ``other``'s link is stored."""
    def measured(link: Link | None) -> bool:
        return link is not None and link.source.startswith("measured")

    nodes = int(other["case"].get("nnodes") or 1)
    if nodes == 1:
        return (intra, inter) if measured(intra) else None
    if not measured(inter):
        return None
    from dlperf.host import emulated

    rate = other["case"].get("link") or None
    try:
        across = measured_link(db, framework, True,
                               emulated.normalize_rate(rate) if rate else None,
                               inter.message_bytes if inter is not None else None)
    except UsageError:
        return None
    return intra, across


def _step_span(other: dict[str, Any]) -> tuple[float, float] | None:
    """A multi-process result's step at the ends of its throughput's 95 % interval (the fast
    end first); None where it stores none."""
    ci = (other.get("throughput") or {}).get("ci95")
    samples = int(other.get("global_batch") or 0)
    if not ci or any(v is None or not float(v) > 0 for v in ci):
        return None
    return samples / float(max(ci)), samples / float(min(ci))


@dataclasses.dataclass(frozen=True)
class Read:
    """An overlap as read from stored results, and from which: the window's result and what it
    shows, and the overhead's result where the two were read apart (None: the window's alone,
    its excess first read as an exposed all-reduce)."""

    overlap: Overlap
    window: dict[str, Any] | None = None
    seen: Seen | None = None
    overhead: dict[str, Any] | None = None


def overlap_of(args: argparse.Namespace, result: dict[str, Any], compute_s: float,
               gradient: int, messages: int, intra: Link, inter: Link | None,
               start: Shape, exchange: str = RING) -> tuple[Overlap, list[str]]:
    """The overlap window and the multi-process overhead, from results of the configuration on
    more devices than the start, and what the projection says of them: ``--overlap-from``
    alone gives both (its excess first read as an exposed all-reduce); with ``--overhead-from``
    (a result whose all-reduce is short: unshaped, or fewer devices) that one gives the overhead
    and ``--overlap-from`` (whose all-reduce is long enough to be exposed) the window; neither
    named, the results the validated rule chooses (:func:`chosen`). Measured at another batch
    size than the start's, the window scales with the 1-device step and the overhead's two
    readings (a share of the step, a fixed time) bound the interval. With two
    ``--overhead-from`` at two batch sizes the overhead is fitted through them as a fixed time
    plus a share (:func:`dlperf.projection.overlap.fitted`), the window read from ``--overlap-from``
    alone."""
    if len(args.overhead_from) > 2:
        raise UsageError(f"--overhead-from: given {len(args.overhead_from)} times; give one "
                         f"(at --overlap-from's batch) or two (at two batch sizes)")
    if args.overhead_from and not args.overlap_from:
        raise UsageError("--overhead-from: name the window's result with --overlap-from too "
                         "(one whose all-reduce is long enough to be exposed)")
    links = (gradient, messages, intra, inter, start, exchange)
    if not args.overlap_from:
        read, why = chosen(args.db, result, compute_s, links)
        if read.overlap.value is None or why is None:
            return read.overlap, []
        named = dataclasses.replace(read.overlap, source=f"{read.overlap.source}; chosen as "
                                                         f"{why}")
        return named, window_warnings(args, read, links, result, compute_s, read)
    other = _named(args.overlap_from, "--overlap-from", args.db, result, start)
    if len(args.overhead_from) == 2:
        window = seen_in(other, "--overlap-from", args.db, result, compute_s, *links)
        if window is None:
            return unpriced(other), []
        return _fitted(args, result, compute_s, window, links), []
    short = None
    if args.overhead_from:
        short = _named(args.overhead_from[0], "--overhead-from", args.db, result, start)
        if short["case"].get("batch_size") != other["case"].get("batch_size"):
            raise UsageError(f"--overhead-from: {short.get('label')} is at another batch size "
                             f"than --overlap-from's {other.get('label')}; name two of the "
                             f"same batch")
    read = read_overlap(args.db, result, compute_s, other, short, links)
    return read.overlap, window_warnings(args, read, links, result, compute_s)


def unpriced(other: dict[str, Any]) -> Overlap:
    """No overlap: ``other`` ran across nodes and the link between them is neither probed nor
    given, so its all-reduce cannot be priced."""
    return Overlap(None, f"run {other.get('run_id')} spans nodes and no link between nodes is "
                         f"known")


def read_overlap(db: str, result: dict[str, Any], compute_s: float, other: dict[str, Any],
                 short: dict[str, Any] | None, links: tuple[Any, ...]) -> Read:
    """The overlap read from ``other`` (the window's result) alone, or with ``short`` (the
    overhead's: :func:`dlperf.projection.overlap.window_from`)."""
    whole = overlaps_whole_step(links[5], int(other["case"].get("nnodes") or 1))
    window = seen_in(other, "--overlap-from", db, result, compute_s, *links)
    if window is None:
        return Read(unpriced(other))
    if short is None:
        made = overlap_from(window.step_s, window.compute_s, window.comm_s,
                            window.source, window.step_span,
                            window.comm_span, whole)
        return Read(at_batch(made, window.compute_s, compute_s), other, window)
    overhead = seen_in(short, "--overhead-from", db, result, compute_s, *links)
    if overhead is None:
        raise UsageError(f"--overhead-from: {short.get('label')} spans nodes and neither has "
                         f"an all-reduce probe nor is the link between nodes given (--inter)")
    return Read(at_batch(window_from(window, overhead, whole),
                         window.compute_s, compute_s), other, window, short)


def chosen(db: str, result: dict[str, Any], compute_s: float,
           links: tuple[Any, ...]) -> tuple[Read, str | None]:
    """With no source named, the rule the validation's error is published for
    (:func:`dlperf.scaling.shows_exposed` and below): of the configuration's results on more
    devices than the start over a shaped link, the fastest whose step shows part of its
    all-reduce past the window, else the slowest, each with its overhead from an unshaped
    result of its shape and batch; with none over a shaped link, the newest alone. And why, in
    words (None: no result)."""
    start = links[4]
    found = [r for r in multi_results(db, result)
             if scaling.total_devices(r["case"]) > start.devices]
    if not found:
        more = ("multi-process result" if start.devices == 1 else
                f"result on more devices than the start's {start.nodes} x {start.per_node}")
        return Read(Overlap(None, f"no {more} of this configuration in {db}")), None
    tried = scaling.shaped_fastest_first(found)
    if not tried:
        return (read_overlap(db, result, compute_s, found[-1], None, links),
                "the newest: none was run over a shaped link")
    for other in tried:
        partner = scaling.overhead_partner(found, other)
        read = read_overlap(db, result, compute_s, other, partner, links)
        if scaling.shows_exposed(vars(read.overlap)):
            return read, ("the fastest link whose step shows part of its all-reduce past the "
                          "window (docs/projection.md)")
    return read, "the slowest link: none showed its all-reduce past the window"


def window_warnings(args: argparse.Namespace, read: Read, links: tuple[Any, ...],
                    result: dict[str, Any], compute_s: float,
                    better: Read | None = None) -> list[str]:
    """What the projection says of where its window was read from: a result read alone whose
    all-reduce is shorter than a target's (past it, one step cannot tell a hidden all-reduce
    from an overhead: the window is the least that explains the step, the projection the
    slow end of what that result allows), or two whose window's source hid its whole
    all-reduce within its noise (the window is then a lower bound, its most the backward pass:
    :func:`dlperf.projection.overlap.lower_bound_only`); each with the stored
    results the rule would read it from instead (``better``: its choice, where the rule already
    made it; else made here), or the run that would show it."""
    o, seen = read.overlap, read.seen
    if o.value is None or o.whole_step or seen is None or read.window is None:
        return []
    gradient, messages, intra, inter, start, exchange = links
    at_start = allreduce_s(gradient, messages, start.per_node, start.nodes, intra,
                           inter, exchange)
    longest = max(allreduce_s(gradient, messages, s.per_node, s.nodes, intra, inter,
                              exchange) - at_start
                  for s in targets(args.devices_per_node, args.nnodes))
    run = f"run {read.window.get('run_id')}"
    if read.overhead is None and seen.comm_s < longest:
        said = (f"overlap window read from one result, {run}, whose all-reduce "
                f"({seen.comm_s * 1e3:.4g} ms) is shorter than the targets' (up to "
                f"{longest * 1e3:.4g} ms): past it one step cannot tell a hidden all-reduce from "
                f"an overhead, so the window is the least that explains that step and those "
                f"targets the slow end of what it allows")
    elif read.overhead is not None and not scaling.shows_exposed(vars(o)):
        said = (f"the overlap window's result, {run}, hid its whole all-reduce "
                f"({seen.comm_s * 1e3:.4g} ms) within its step's noise: the window "
                f"({(o.window_s or 0) * 1e3:.4g} ms) is the least it allows, the interval's "
                f"fast end a window as long as the backward pass")
    else:
        return []
    if better is None:  # the rule's choice, where the source was named
        better, _ = chosen(args.db, result, compute_s, links)
    if better.overhead is not None and better.window is not None and \
            scaling.shows_exposed(vars(better.overlap)) and \
            (better.window.get("run_id"), better.overhead.get("run_id")) != \
            (read.window.get("run_id"), (read.overhead or {}).get("run_id")):
        return [f"{said}; --overlap-from {better.window.get('run_id')} --overhead-from "
                f"{better.overhead.get('run_id')} reads it where it shows (docs/projection.md)"]
    return [f"{said}; a result of this configuration over a slower link shows it (`dlperf run "
            f"... --emulate-hosts 2 --link RATE`), named with --overlap-from beside this one's "
            f"--overhead-from"]


def _fitted(args: argparse.Namespace, result: dict[str, Any], compute_s: float,
            window: Seen, links: tuple[Any, ...]) -> Overlap:
    """The window from ``window`` (--overlap-from) alone, the overhead fitted through the two
    ``--overhead-from`` results: the configuration's, at two batch sizes."""
    flag = "--overhead-from"
    named = [_named(spec, flag, args.db, result, links[4]) for spec in args.overhead_from]
    if named[0]["case"].get("batch_size") == named[1]["case"].get("batch_size"):
        raise UsageError(f"{flag}: {named[0].get('label')} and {named[1].get('label')} are at "
                         f"one batch size; a fit needs two")
    seen = [seen_in(other, flag, args.db, result, compute_s, *links) for other in named]
    if seen[0] is None or seen[1] is None:
        raise UsageError(f"{flag}: a result spans nodes and neither has an all-reduce probe "
                         f"nor is the link between nodes given (--inter)")
    if seen[0].compute_s == seen[1].compute_s:
        raise UsageError(f"{flag}: the 1-device steps of {named[0].get('label')} and "
                         f"{named[1].get('label')} are equal; a fit needs two")
    whole = overlaps_whole_step(links[5], int(named[0]["case"].get("nnodes") or 1))
    made = overlap_from(window.step_s, window.compute_s, window.comm_s, window.source,
                        window.step_span, window.comm_span, whole)
    return fitted(made, (seen[0], seen[1]), compute_s)


def bucket_given(args: argparse.Namespace) -> Packing | None:
    """``--bucket-mb``'s buckets, which replace any declaration; None without it."""
    if args.bucket_mb is None:
        return None
    if not args.bucket_mb > 0:
        raise UsageError(f"--bucket-mb: {args.bucket_mb} must be > 0")
    return Packing(f"--bucket-mb {args.bucket_mb:g}",
                   bucket_bytes=max(1, int(args.bucket_mb * MIB)))


def taken_as_ddp(why: str) -> Packing:
    """PyTorch DDP's 25 MiB buckets for an engine whose packing is not known, saying why."""
    return Packing(f"{why}: taken as PyTorch DDP's 25 MiB buckets",
                   bucket_bytes=DDP_BUCKET_BYTES)


def packing_of(args: argparse.Namespace, case: dict[str, Any], device: str) -> Packing:
    """How the targets' engine hands a step's gradients to its all-reduce: --bucket-mb, else
    Horovod's fusion for ``--launcher horovod``, else the backend's declaration for the kind of
    ``device`` (the result's resolved one), else PyTorch DDP's 25 MiB buckets, saying so."""
    given = bucket_given(args)
    if given is not None:
        return given
    if args.launcher == "horovod":
        return HOROVOD_PACKING
    framework = str(case.get("framework"))
    kind = device_kind(device)
    compiled = bool(case.get("compile"))
    declared = spec.support(framework).packing_for(kind, compiled) \
        if framework in spec.frameworks() else None
    return declared or taken_as_ddp(
        f"{framework} declares none on {kind}/{packing_mode(compiled)}")


def messages_of(packing: Packing, gradient: int, case: dict[str, Any],
                what: str) -> int:
    """All-reduces a step sends under ``packing``; one line where it counts gradient tensors
    and the model does not."""
    name = str(case.get("model"))
    tensors = None
    if name in models.names():
        tensors = models.get(name).gradient_tensors(case.get("knobs") or {})
    count = packing.messages(gradient, tensors)
    if count is None:
        raise UsageError(f"{what}: {packing.describe()}, and model {name} does not count its "
                         f"gradient tensors; give --bucket-mb")
    return count


def from_result(args: argparse.Namespace) -> Projection:
    result = source_result(args)
    case = result["case"]
    shapes = targets(args.devices_per_node, args.nnodes)
    device = str(result.get("device") or case.get("device"))
    kind = device_kind(device)
    wire = spec.wire_of(str(case.get("framework")), args.launcher, kind)
    params = (result.get("model") or {}).get("params")
    if not params:
        raise UsageError(f"RESULT: {result.get('label')} records no parameter count")
    gradient = gradient_bytes(int(params), case.get("precision", "fp32"))
    packing = packing_of(args, case, device)
    messages = messages_of(packing, gradient, case, "RESULT")
    message = packing.message_bytes(gradient)
    check_links(args)
    transfer = message if message is not None else gradient  # what a step moves as one
    intra = link_spec(args.intra, "--intra", args.db, case["framework"], wire, message, transfer)
    assert intra is not None
    inter = link_spec(args.inter, "--inter", args.db, case["framework"], wire, message, transfer)
    if any(s.nodes > 1 for s in shapes) and inter is None:
        raise UsageError("--inter: targets of several nodes need the link between nodes "
                         "(measured[:LINK] or RATE@LATENCY)")
    median, low, high = spread_of(result["throughput"])
    batch = int(case["batch_size"])
    start = Shape(int(case.get("devices") or 1), 1)
    samples = batch * start.devices  # the start's step, from its whole job's throughput
    compute = Span(samples / median, samples / high, samples / low)
    overlap, said = overlap_of(args, result, compute.value, gradient, messages, intra, inter,
                               start, wire.exchange)
    engine = "horovod" if args.launcher == "horovod" else str(case["framework"])
    inputs = Inputs(compute, batch, gradient, messages, packing.describe(wire.exchange), intra,
                    inter, overlap, start, engine, wire.exchange, kind)
    warnings = wire_warnings(args.db, result, wire) + said
    for name, link in (("--intra", intra), ("--inter", inter)):
        if link is not None and link.beyond and link.message_bytes is not None:
            warnings.append(f"{name}: its {link.message_bytes / 2**20:.3g} MiB messages are past "
                            f"{collective_model.BEYOND_FACTOR:g}x the largest size measured: "
                            f"their price extrapolates the fit; measure up to them with "
                            f"`dlperf collectives --sizes`")
        if link is not None and link.calls_half_width > stats.CV_WARN:
            warnings.append(f"{name}: price uncertain: {link.calls_text}, which the interval "
                            f"carries; more calls (`dlperf collectives --iters`) narrow it")
    cv = (result.get("throughput") or {}).get("cv")
    measured = f"the start's result ({start.nodes} x {start.per_node})"  # 1 device or a node
    if cv is not None and cv > 0.05:
        warnings.append(f"{measured} is noisy (CV {cv:.1%}): its interval is wide")
    if (result.get("warmup") or {}).get("steady") is False:
        warnings.append(f"{measured}: its window was not steady")
    if overlap.value is None:
        warnings.append(f"overlap not measured ({overlap.source}): the interval spans no "
                        f"overlap to full overlap")
    spread = overlap.overhead_range
    if spread is not None and spread[1] - spread[0] > 2 * stats.CV_WARN:
        # why a steady result can leave it wide: the overhead is what is left of a step time,
        # so the step's whole spread is its spread (this once blamed a noisy result, also where
        # the result's CV was 2 %)
        warnings.append(f"multi-process overhead uncertain: {overlap.overhead:.1%} of the step, "
                        f"{spread[0]:.1%}-{spread[1]:.1%} at its source's 95 % interval ends (it "
                        f"is that step less the compute and the exchange: all of the step's "
                        f"spread lands on it), which the interval carries")
    points = [project(inputs, s) for s in shapes]
    warnings += model_error_warnings(points, kind)
    return Projection(
        str(result.get("label")),
        {"run_id": result.get("run_id"), "label": result.get("label"),
         "case_key": result.get("case_key"), "throughput": median,
         "throughput_interval": [low, high]},
        inputs, points, warnings)


def shapes_text(points: list[Point]) -> str:
    """The targets of ``points`` as the command names them: "2 x 1, 4 x 1"."""
    return ", ".join(f"{p.shape.nodes} x {p.shape.per_node}" for p in points)


def model_error_warnings(points: list[Point], device: str) -> list[str]:
    """A line for the targets past every validated shape, and one for those past every shape
    validated on the start's ``device`` kind (their model error joins both kinds' checks)."""
    warnings = []
    beyond = [p for p in points if p.model_error.beyond]
    if beyond:
        widest = beyond[0].model_error.check
        warnings.append(f"{shapes_text(beyond)}: "
                        f"past every validated shape (at most {widest.nodes} nodes, "
                        f"{widest.devices} devices): the model's error there is not known; "
                        f"the interval carries the largest seen ({widest.name} "
                        f"check{'s' if widest.parts else ''})")
    past = [p for p in points if p.model_error.short_of is not None and not p.model_error.beyond]
    if past:
        own = past[0].model_error.short_of
        assert own is not None
        warnings.append(f"{shapes_text(past)}: "
                        f"past every shape checked on a {device.upper()} (at most "
                        f"{own.nodes} nodes, {own.devices} devices): the model's error there is "
                        f"not known on this kind of device; 'with model error' carries the "
                        f"{own.name} check{'s' if own.parts else ''} with the one that reaches "
                        f"it on other hardware")
    return warnings


# ------------------------------------------------------------------------------------------------
# a published table
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Compared:
    """One published figure beside its projection."""

    framework: str
    shape: Shape
    published: float
    point: Point

    @property
    def error(self) -> float:
        return self.point.throughput.value / self.published - 1

    @property
    def inside(self) -> bool:
        return self.point.throughput.low <= self.published <= self.point.throughput.high


def published(args: argparse.Namespace) -> tuple[Projection | None, list[Compared]]:
    from dlperf import reference

    try:
        table = reference.table(args.published)
    except reference.ReferenceFileError as error:
        raise UsageError(f"--published: {error}") from None
    check_links(args)
    if any(given is None or is_measured(given) for given in (args.intra, args.inter)):
        raise UsageError("--published: give the study's links as --intra RATE@LATENCY and "
                         "--inter RATE@LATENCY (its hardware, not this machine's)")
    intra = link_spec(args.intra, "--intra", args.db, "torch")
    inter = link_spec(args.inter, "--inter", args.db, "torch")
    assert intra is not None and inter is not None
    values = [v for v in table.values() if v.quantity == "throughput" and v.value]
    if not values:
        kinds = sorted({v.quantity for v in table.values()})
        raise UsageError(f"--published: {args.published} publishes {', '.join(kinds)} only, no "
                         f"throughput on one GPU or node to start a projection from (the "
                         f"model needs the step time it adds the all-reduce to)")
    keys = values[0].keys
    model, precision = str(keys.get("model", "")), str(keys.get("precision", "fp32"))
    batch = keys.get("batch_size")
    if model not in models.names() or not isinstance(batch, int):
        raise UsageError(f"--published: {args.published} has no model of the catalogue and "
                         f"batch size per device to project")
    params = models.get(model).params({})
    gradient = gradient_bytes(params, precision.lower())
    packing = bucket_given(args) or taken_as_ddp(
        f"{args.published} does not say how its implementations packed their gradients")
    messages = messages_of(packing, gradient, {"model": model}, "--published")
    compared = []
    for framework in dict.fromkeys(v.column for v in values):  # a column per implementation
        mine = [v for v in values if v.column == framework]
        one_node = [v for v in mine if v.keys.get("nodes") == 1 and v.value]
        if args.from_node:
            one_node = sorted(one_node, key=lambda v: -int(v.keys.get("gpus_per_node") or 1))
        else:
            one_node = [v for v in one_node if v.keys.get("gpus_per_node") == 1]
        if not one_node:
            continue
        start_value = one_node[0]
        start = Shape(int(start_value.keys.get("gpus_per_node") or 1), 1)
        step = batch * start.devices / float(start_value.value or 0)
        inputs = Inputs(Span(step, step, step), batch, gradient, messages, packing.describe(),
                        intra, inter, Overlap(None, "the study states none"), start,
                        engine_named(framework), device="cuda")
        for value in mine:
            shape = Shape(int(value.keys.get("gpus_per_node") or 1),
                          int(value.keys.get("nodes") or 1))
            if shape.devices <= start.devices or value.value is None:
                continue
            compared.append(Compared(framework, shape, float(value.value),
                                     project(inputs, shape)))
    if not compared:
        raise UsageError(f"--published: {args.published} has no 1-GPU figure with larger "
                         f"shapes to project")
    return None, compared


# ------------------------------------------------------------------------------------------------
# showing and storing
# ------------------------------------------------------------------------------------------------

def show(made: Projection) -> None:
    rows = [[str(p.shape.nodes), str(p.shape.per_node), str(p.shape.devices),
             p.allreduce_s.scaled(1e3).text(), p.step_s.scaled(1e3).text(),
             p.throughput.text(), _ends(p.throughput_with_model_error),
             p.speedup.text(2), p.efficiency.text(pct=True)]
            for p in made.points]
    table = display.new_table(f"projected (not measured): {made.label}", [
        ("nodes", "right"), ("devices/node", "right"), ("devices", "right"),
        ("all-reduce ms", "right"), ("step ms", "right"), ("samples/s", "right"),
        ("with model error", "right"), ("speedup", "right"), ("scaling efficiency", "right")])
    for row in rows:
        table.add_row(*row)
    display.out.print(table)
    display.out.print(f"model: {made.model_text()}", soft_wrap=True, highlight=False)
    display.out.print("intervals: the inputs' spread (the start's 95 % interval, the links' fit "
                      "error or their calls' interval, the overlap's and the overhead's range); "
                      "'with model error' widens the samples/s "
                      "interval by the model's own error as validated (each check's cases, "
                      "where and when: docs/projection.md; stored with the projection, --json's "
                      "model_error):", soft_wrap=True, highlight=False)
    for check in dict.fromkeys(p.model_error.check for p in made.points):
        shapes = shapes_text([p for p in made.points if p.model_error.check == check])
        display.out.print(f"  {shapes}: {check.text()}", soft_wrap=True, highlight=False)
    display.out.print("not modelled: " + "; ".join(not_modelled(
        made.inputs.exchange)), soft_wrap=True, highlight=False)
    for warning in made.warnings:
        display.warn(warning)


def _ends(span: Span) -> str:
    return f"{span.low:,.1f}–{span.high:,.1f}"


def show_published(table_id: str, compared: list[Compared], from_node: bool) -> None:
    rows = [[c.framework, str(c.shape.nodes), str(c.shape.devices), f"{c.published:,.1f}",
             c.point.throughput.text(), f"{c.error:+.1%}", "yes" if c.inside else "no"]
            for c in compared]
    start = "1-node" if from_node else "1-GPU"
    table = display.new_table(f"{table_id}: published against projected from each {start} "
                              f"figure", [("framework", "left"), ("nodes", "right"),
                                          ("GPUs", "right"), ("published", "right"),
                                          ("projected (interval)", "right"),
                                          ("error", "right"), ("inside", "left")])
    for row in rows:
        table.add_row(*row)
    display.out.print(table)
    errors = [c.error for c in compared]
    display.out.print(f"{len(errors)} figures: median |error| {median_abs(errors):.1%}, "
                      f"largest {max(abs(e) for e in errors):.1%}; overlap not stated by the "
                      f"study: each interval spans none to full", highlight=False)


def main(args: argparse.Namespace) -> int:
    outputs.check_writable("--json", args.json)
    if args.published:
        if args.result:
            raise UsageError("RESULT: give a result or --published, not both")
        _, compared = published(args)
        show_published(args.published, compared, args.from_node)
        if args.json:
            outputs.write_json(args.json, [
                {"framework": c.framework, "nodes": c.shape.nodes,
                 "gpus_per_node": c.shape.per_node, "published": c.published,
                 "projected": dataclasses.asdict(c.point.throughput), "error": c.error,
                 "inside": c.inside} for c in compared])
        return 0
    if not args.result:
        raise UsageError("RESULT: name the 1-device result (a run id in --db or a JSON file), "
                         "or --published TABLE")
    made = from_result(args)
    show(made)
    stored = made.to_dict()
    if not args.no_store:
        with Store(args.db) as store:
            stored["id"] = store.add_projection(stored)
        display.out.print(f"stored as projection {stored['id']} in {args.db}", highlight=False)
    if args.json:
        outputs.write_json(args.json, stored)
    return 0
