"""Speedup and scaling efficiency of a multi-device result over its 1-device baseline.

speedup = throughput(N devices) / throughput(1 device of the same configuration), and scaling
efficiency = speedup / N (DESIGN.md). The baseline is the newest successful 1-device result in the
database whose configuration matches: same framework, model, task, precision, compile, batch size
per device, resolved device (kind and GPU name: a CPU result is never the baseline of a GPU one,
whatever ``--device`` asked for), data, model knobs, threads per process, environment,
allocator, options and input pipeline (plus the inference scenario): the fields
:class:`dlperf.spec.Case` declares ``baseline``.
Steps, warm-up and seed may differ: they change how long we measure, not what. The baseline is
always the framework's own (``launcher`` native): a Horovod result, at 1 process too, is scaled
over the same 1-device native result as the native ones, so both engines' rows compare.

Without such a baseline the speedup is None with a note saying so; never 1.0 or 0.

And which multi-device results a projection reads its overlap window and its overhead from
(:func:`shows_exposed` and below). A window is read as a source's all-reduce less what its step
shows of it, so a source whose step hid its whole all-reduce bounds the window from below only,
and the longer the source's all-reduce, the more seconds a few per cent of its error is
(docs/projection.md, "Which rate the window is read from"). The validation's error is published
for one rule, written here once: of the configuration's results over a shaped link, the fastest
whose step shows part of its all-reduce past the window, else the slowest; the overhead from an
unshaped result of the same shape and batch, whose all-reduce is short. `dlperf project` follows
it where no source is named; benchmarks/projection_validation.py leaves out the target's own
rate (its check is out of sample).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from typing import Any, Sequence, TypeVar

from dlperf.result import device_kind_name
from dlperf.results.codec import read_result
from dlperf.results.model import Result
from dlperf.spec import baseline_fields
from dlperf.stats import bootstrap_ci
from dlperf.store import Store

NO_BASELINE = "no 1-device baseline"  # the same words the report shows
# the case fields declared to split baselines (dlperf.spec.Case); the requested device ("auto")
# is not among them: the resolved one is (see config)
CONFIG_FIELDS = baseline_fields()

#: what these functions take: a typed result, or a result object (read by dlperf.results)
ResultLike = Result | Mapping[str, Any]


def total_devices(case: Mapping[str, Any]) -> int:
    return int(case.get("devices") or 1) * int(case.get("nnodes") or 1)


def config(result: ResultLike) -> dict[str, Any]:
    """The fields a baseline must share with ``result``'s case (an older result's missing ones
    at their defaults: :func:`dlperf.results.codec.case_with_defaults`), and the device it
    resolved to, without the GPU's index."""
    typed = read_result(result)
    out = {}
    for name in CONFIG_FIELDS:
        value = typed.case.get(name)
        out[name] = dict(value) if isinstance(value, Mapping) else value
    out["device"] = device_kind_name(typed.device)
    return out


def find_baseline(store: Store, result: ResultLike) -> dict[str, Any] | None:
    """The newest successful 1-device native result of ``result``'s configuration on the same
    resolved device, or None."""
    wanted = json.dumps(config(result), sort_keys=True)
    best: tuple[Result, int] | None = None
    rows = store.runs("result_json IS NOT NULL AND status = 'ok'")
    for row in rows:
        stored = json.loads(row["case_json"])
        if total_devices(stored) != 1:
            continue
        if (stored.get("launcher") or "native") != "native":
            continue  # the one baseline of every engine is the framework's own 1-device run
        candidate = store.result(row)
        if json.dumps(config(candidate), sort_keys=True) != wanted:
            continue
        if candidate.median:
            best = candidate, row["id"]  # rows come oldest first: the last match is the newest
    if best is None:
        return None
    out = dict(best[0].raw)
    out.setdefault("run_id", best[1])
    return out


def scaling(result: ResultLike, store: Store | None) -> dict[str, Any]:
    """The fields to add to ``result``: speedup, scaling_efficiency, their baseline or a note."""
    typed = read_result(result)
    n = typed.devices
    value = typed.median or None  # a zero median has no speedup either
    out: dict[str, Any] = {"speedup": None, "scaling_efficiency": None,
                           "speedup_baseline": None, "speedup_note": None}
    if value is None:
        out["speedup_note"] = f"the case did not succeed ({typed.status})"
    elif n == 1 and typed.launcher == "native":
        out.update(speedup=1.0, scaling_efficiency=1.0,
                   speedup_note="1 device: its own baseline")
    elif store is None:
        out["speedup_note"] = f"{NO_BASELINE}: no results database to look in"
    else:
        base = find_baseline(store, typed)
        if base is None:
            out["speedup_note"] = NO_BASELINE
        else:
            median = base["throughput"]["median"]
            speedup = value / median
            out.update(speedup=speedup, scaling_efficiency=speedup / n,
                       speedup_baseline={"run_id": base.get("run_id"), "label": base.get("label"),
                                         "device": base.get("device"), "throughput": median})
    return out


def describe(result: ResultLike, db: str | None = None) -> str:
    """One line for people: the speedup and efficiency, or why there are none."""
    typed = read_result(result)
    n = typed.devices
    if typed.speedup is not None and n > 1:
        base = typed.speedup_baseline or {}
        where = device_kind_name(typed.device)
        return (f"speedup {typed.speedup:.2f}x on {n} devices ({where}) over 1 device "
                f"({base.get('throughput', 0):,.1f} samples/s, run {base.get('run_id')}); "
                f"scaling efficiency {typed.scaling_efficiency:.1%}")
    if (typed.speedup_note or "").startswith(NO_BASELINE):
        where = f" in {db}" if db else ""
        return (f"speedup: none — {NO_BASELINE} of this configuration{where}; measure it with "
                f"the same command and --devices 1 --nnodes 1")
    return f"speedup: none — {typed.speedup_note or 'not computed'}"


def emulated_hosts(result: ResultLike) -> Mapping[str, Any] | None:
    """The emulated hosts ``result`` ran on (:mod:`dlperf.host.emulated`), or None: a `dlperf run
    --emulate-hosts` result holds them as ``emulated_hosts`` (the whole job's traffic), a sweep's
    in its launch facts (its first repeat's traffic; each repeat's is stored with the repeat)."""
    return read_result(result).emulated_hosts


def allreduce_repeats(result: ResultLike) -> list[float]:
    """Seconds of one all-reduce of the model's gradients across ``result``'s job, as its ranks'
    probe measured it after each repeat's timed window (an fp32 buffer of the parameters,
    reduced by the framework's own collective): the slowest rank's, a value a repeat. Empty for
    one process or without the probe."""
    typed = read_result(result)
    if typed.devices < 2:
        return []
    per_repeat: list[list[float]] = []
    for rank in typed.ranks:
        for index, seconds in enumerate(rank.allreduce_s):
            while len(per_repeat) <= index:
                per_repeat.append([])
            if seconds:
                per_repeat[index].append(float(seconds))
    return [max(times) for times in per_repeat if times]


def allreduce_seconds(result: ResultLike) -> float | None:
    """The median over the repeats of :func:`allreduce_repeats`; None without any."""
    slowest = allreduce_repeats(result)
    return statistics.median(slowest) if slowest else None


def allreduce_interval(result: ResultLike) -> tuple[float, float] | None:
    """The 95 % interval of :func:`allreduce_seconds`, as a throughput's is made
    (:func:`dlperf.stats.bootstrap_ci`); None with fewer than 2 repeats probed."""
    return bootstrap_ci(allreduce_repeats(result))


def allreduce_bus_bandwidth(result: ResultLike) -> float | None:
    """Bytes per second of the job's gradient all-reduce (:func:`allreduce_seconds`) as
    nccl-tests' bus bandwidth: the buffer's bytes times 2(n-1)/n over the time. In a ring this
    is what each process sends over its own link per second, so it cannot exceed the link's
    rate. None for one process or without the probe."""
    from dlperf.worker.collectives import bus_factor

    typed = read_result(result)
    seconds = allreduce_seconds(typed)
    if not typed.params or seconds is None:
        return None
    return 4 * int(typed.params) * bus_factor("allreduce", typed.devices) / seconds


#: what the host monitor's network columns count on emulated hosts (:func:`links_counted`)
BRIDGE_PORTS = "every emulated host's link (the bridge's ports: rx is what the hosts sent)"
NODE_0_LINK = "node 0's link (its interface: tx is what it sent)"


def links_counted(result: ResultLike) -> str | None:
    """Whose links a result's network columns (the monitor's, loopback left out) count, where
    it ran across emulated hosts: a sweep's monitor sits in this machine's namespace and sees
    the bridge's ports (:data:`BRIDGE_PORTS`), `dlperf run`'s node 0 in its host's and sees its
    own interface (:data:`NODE_0_LINK`); None elsewhere (the host's own interfaces): a run
    that did not start emulated hosts itself (``launch.emulated_hosts``) counts the host's,
    whatever emulated hosts another job had up beside it (their bridge's ports are interfaces of
    this namespace too)."""
    from dlperf.host import emulated

    raw = read_result(result).raw
    hosts = (raw.get("launch") or {}).get("emulated_hosts") or {}
    if not hosts.get("emulated"):
        return None
    names = set(((raw.get("monitor") or {}).get("net_by_interface") or {}))
    if emulated.INTERFACE in names:
        return NODE_0_LINK
    if any(n.startswith(emulated.PREFIX) and n.rstrip("0123456789").endswith("v")
           for n in names):
        return BRIDGE_PORTS
    return None


def wire_shares(result: ResultLike) -> list[float]:
    """What each host of a job across emulated hosts, one process a host, put on its link a
    training step during each repeat's timed window, as a share of a ring all-reduce of the
    step's gradients (2(n-1)/n of their bytes a process): 1 for a ring, 2 for an engine that
    sends each gradient twice. Read from the host monitor's network rate over the window
    (``timeline.window_means``), which counts what its own namespace sees: under `dlperf
    sweep --emulate-hosts`, the bridge's ports, whose received bytes are what the hosts sent;
    under `dlperf run --emulate-hosts`, node 0's interface, whose sent bytes are its own. Frames
    are counted, so their headers are taken off (:data:`dlperf.host.emulated.PAYLOAD_SHARE`).
    Empty where the result is not of that kind or lacks what it needs."""
    from dlperf.host import emulated
    from dlperf.projection.links import gradient_bytes
    from dlperf.worker.collectives import bus_factor

    typed = read_result(result)
    raw, case = typed.raw, typed.case
    nodes = int(case.get("nnodes") or 1)
    counted = links_counted(typed)
    if nodes < 2 or int(case.get("devices") or 1) != 1 or not typed.params or counted is None:
        return []
    column, hosts = ("net_rx_bytes_s", nodes) if counted == BRIDGE_PORTS else \
        ("net_tx_bytes_s", 1)
    ring = gradient_bytes(int(typed.params), str(case.get("precision") or "fp32")) * \
        bus_factor("allreduce", nodes)
    repeats = list((raw.get("throughput") or {}).get("repeats") or [])
    batch = typed.global_batch
    out = []
    for window in (raw.get("timeline") or {}).get("window_means") or []:
        index, rate = window.get("repeat"), window.get(column)
        if not isinstance(index, int) or not 0 <= index < len(repeats) or not rate \
                or not batch or not repeats[index]:
            continue
        step = batch / float(repeats[index])
        out.append(float(rate) * step / hosts * emulated.PAYLOAD_SHARE / ring)
    return out


def wire_share(result: ResultLike) -> float | None:
    """The median of :func:`wire_shares`; None without any."""
    shares = wire_shares(result)
    return statistics.median(shares) if shares else None


# ------------------------------------------------------------------------------------------------
# where a projection's overlap window is read from
# ------------------------------------------------------------------------------------------------

#: a stored result: what the rule is given is what it gives back
R = TypeVar("R", bound=Mapping[str, Any])


def link_bits(result: Mapping[str, Any]) -> int | None:
    """The shaped link of a multi-process result in bits/s; None where it has none (one host's
    own loopback, or emulated hosts whose bridge was not shaped)."""
    from dlperf.host import emulated

    link = result["case"].get("link")
    return emulated.parse_rate(link, "link") if link else None


def shows_exposed(overlap: Mapping[str, Any]) -> bool:
    """Whether the result a window was read from (``overlap``: a projection's, as stored or as
    :class:`dlperf.projection.overlap.Overlap`'s fields) shows part of its all-reduce exposed
    beyond its step's noise: it did not hide the whole of it
    (:func:`dlperf.projection.overlap.hid_whole`, the criterion's one statement), asked with the
    most window its 95 % intervals allow and its all-reduce as stored, the window over the share
    of it that hid. A window or a share of 0 hid none of it; no window read shows nothing."""
    from dlperf.projection.overlap import hid_whole

    share, window = overlap.get("value"), overlap.get("window_s")
    if share is None or window is None:
        return False
    if window <= 0 or share <= 0:
        return True
    most = (overlap.get("window_ends") or (window, window))[1]
    return not hid_whole(most, window / share)


def shaped_fastest_first(found: Sequence[R]) -> list[R]:
    """The results over a shaped link, the fastest link first, the newer first at one rate
    (``found`` oldest first): the order the rule tries them in."""
    shaped = [(i, r) for i, r in enumerate(found) if link_bits(r) is not None]
    shaped.sort(key=lambda pair: (-(link_bits(pair[1]) or 0), -pair[0]))
    return [r for _, r in shaped]


def overhead_partner(found: Sequence[R], window: Mapping[str, Any]) -> R | None:
    """The newest unshaped result of ``window``'s shape (nodes and devices a node) and batch
    (:func:`config`; ``found`` oldest first): its all-reduce short, its excess
    the overhead; None where there is none."""
    def shape(result: Mapping[str, Any]) -> tuple[int, int]:
        return int(result["case"].get("nnodes") or 1), int(result["case"].get("devices") or 1)

    same = [r for r in found if link_bits(r) is None and shape(r) == shape(window)
            and config(r) == config(window)]
    return same[-1] if same else None


def serial_share(measured_s: float, wire_s: float, path_s: float) -> float:
    """The share of the path's time an all-reduce measured over a wire shows in series with
    it: (measured - wire) / path, within [0, 1]."""
    if path_s <= 0:
        return 0.0
    return min(max((measured_s - wire_s) / path_s, 0.0), 1.0)
