"""A few more steps after the timed window under the framework's own profiler, its operators
sorted into one set of categories that every framework shares.

The window is over before anything here runs, so the measured throughput never carries the
profiler's cost. A backend's ``Workload.profiler()`` hands over a :class:`Profiler`: the
framework's own tool (``torch.profiler``, ``tf.profiler``, ``jax.profiler``...) behind
``start``/``stop``, and its mapping table (``rules``: operator-name pattern -> category), which
lives in the backend's folder. ``stop`` returns the operators as :class:`Event` intervals; this
module turns them into seconds per step:

- On one thread the innermost operator owns an instant (``aten::conv2d`` holds
  ``aten::mkldnn_convolution``: the time is the inner one's), except under a rule marked
  ``encloses`` (an optimizer's step, a collective, the input pipeline): it claims everything
  under it. A rule whose category is None marks a name as part of whatever encloses it
  (allocations, views); alone it owns nothing.
- Across threads an instant where k operators run is shared k ways, so the categories add up to
  the time some operator covered, never more than the wall time.
- ``unattributed`` is the rest of the profiled step time: dispatch, Python, idle.

Where the profiler cannot see operators on this device the backend raises
:class:`ProfileUnavailable` with the reason, recorded as ``profile.unavailable``: never a made-up
split. A profiler that fails is recorded as ``profile.error``; the measured result stands.

Standard library only; valid Python 3.7.
"""

import collections
import gzip
import json
import os
import re
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

CATEGORIES = ("convolution", "matmul", "normalization", "elementwise", "pooling",
              "softmax_loss", "optimizer", "layout", "memory_copy", "communication",
              "input_pipeline", "other")
UNATTRIBUTED = "unattributed"
ENCLOSES = "encloses"
DEFAULT_STEPS = 3
TOP_OPS = 10
UNMAPPED_LISTED = 20
TRACE_EVENT_LIMIT = 200000  # a trace file of about 20 MB before gzip: a viewer opens it whole

# an operator as the profiler saw it: name, thread (any hashable), start and duration in seconds
Event = collections.namedtuple("Event", "name thread start dur")


class ProfileUnavailable(Exception):
    """The framework's profiler cannot see operators here (this device, this mode): the reason."""


class Rule(object):
    """``pattern`` (a regular expression searched in the operator's name) -> ``category`` (one
    of :data:`CATEGORIES`, or None: part of whatever encloses it); ``encloses``: the operator
    claims the time of everything under it on its thread."""

    def __init__(self, pattern, category, encloses=False):
        # type: (str, Optional[str], bool) -> None
        if category is not None and category not in CATEGORIES:
            raise ValueError("category %r is not one of %s" % (category, ", ".join(CATEGORIES)))
        self.pattern = re.compile(pattern)
        self.category = category
        self.encloses = encloses


def rules(table):
    # type: (Sequence[Tuple[Any, ...]]) -> List[Rule]
    """A backend's mapping table, ``(pattern, category[, "encloses"])`` rows, as rules (the
    first that matches decides)."""
    return [Rule(row[0], row[1], len(row) > 2 and row[2] == ENCLOSES) for row in table]


class ScopePrefixes(object):
    """Names that only an operator's scope tells apart (a Keras optimizer's update is plain
    ``Mul``/``Sub``): ``(pattern searched in the scope, prefix)`` rows, the first match
    prefixing the operator's name (``optimizer/Mul``), so a mapping row can match the prefix."""

    def __init__(self, table):
        # type: (Sequence[Tuple[str, str]]) -> None
        self._rows = [(re.compile(pattern), prefix) for pattern, prefix in table]

    def name(self, scope, op_type):
        # type: (str, str) -> str
        """``op_type``, after the prefix ``scope`` earns."""
        for pattern, prefix in self._rows:
            if pattern.search(scope):
                return prefix + "/" + op_type
        return op_type


def classify(name, table):
    # type: (str, Sequence[Rule]) -> Tuple[Optional[str], bool, bool]
    """(category, encloses, mapped) of an operator: the first rule that matches; unmatched
    names are ``other``, not mapped (listed so the table can be completed)."""
    for rule in table:
        if rule.pattern.search(name):
            return rule.category, rule.encloses, True
    return "other", False, False


class Profiler(object):
    """The framework's own profiler, for :func:`profile`. Subclasses set ``tool`` ({"name",
    "version"}) and ``rules`` and implement ``start`` and ``stop``; ``stop`` returns the
    operators seen since ``start`` (:class:`Event`, seconds on any one clock)."""

    tool = {}  # type: Dict[str, Any]
    rules = []  # type: List[Rule]

    def start(self):
        # type: () -> None
        raise NotImplementedError

    def stop(self):
        # type: () -> List[Event]
        raise NotImplementedError


class _Open(object):
    __slots__ = ("end", "index", "category", "encloses")

    def __init__(self, end, index, category, encloses):
        # type: (float, int, Optional[str], bool) -> None
        self.end, self.index, self.category, self.encloses = end, index, category, encloses


def _owner(stack):
    # type: (List[_Open]) -> Optional[_Open]
    for item in stack:  # the outermost enclosing operator claims all under it
        if item.encloses:
            return item
    for item in reversed(stack):  # else the innermost one with a category of its own
        if item.category is not None:
            return item
    return None


def thread_segments(events, classes):
    # type: (List[Tuple[float, float, int]], List[Tuple[Optional[str], bool, bool]]) -> List[Tuple[float, float, int]]
    """(start, end, owner) pieces of one thread's timeline: who owns each instant, by nesting.
    ``events``: (start, end, index into ``classes``). An operator that ends after its parent
    is cut at the parent's end (profilers round timestamps)."""
    segments = []  # type: List[Tuple[float, float, int]]
    stack = []  # type: List[_Open]
    cursor = [0.0]

    def advance(to):
        # type: (float) -> None
        owner = _owner(stack) if stack else None
        if owner is not None and to > cursor[0]:
            segments.append((cursor[0], to, owner.index))
        cursor[0] = max(cursor[0], to)

    for start, end, index in sorted(events, key=lambda e: (e[0], -e[1])):
        while stack and stack[-1].end <= start:
            advance(stack[-1].end)
            stack.pop()
        if stack:
            advance(start)
            end = min(end, stack[-1].end)
        else:
            cursor[0] = start
        category, encloses, _ = classes[index]
        stack.append(_Open(end, index, category, encloses))
    while stack:
        advance(stack[-1].end)
        stack.pop()
    return segments


def share_time(segments):
    # type: (List[Tuple[float, float, int]]) -> Tuple[Dict[int, float], float]
    """Seconds per owner when an instant with k owners running is shared k ways, and the time
    any owner covered."""
    points = []  # type: List[Tuple[float, int, int]]
    for start, end, index in segments:
        points.append((start, 1, index))
        points.append((end, -1, index))
    points.sort(key=lambda p: (p[0], p[1]))
    owned = collections.defaultdict(float)  # type: Dict[int, float]
    active = collections.Counter()  # type: collections.Counter
    running = 0
    covered = 0.0
    last = None  # type: Optional[float]
    for when, change, index in points:
        if last is not None and running and when > last:
            piece = (when - last) / running
            for owner, times in active.items():
                owned[owner] += piece * times
            covered += when - last
        last = when
        active[index] += change
        running += change
        if active[index] == 0:
            del active[index]
    return owned, covered


def attribute(events, table, steps, step_s):
    # type: (Sequence[Event], Sequence[Rule], int, float) -> Dict[str, Any]
    """The profile's figures from ``events`` over ``steps`` steps of ``step_s`` seconds each:
    seconds per step per category (``unattributed`` making up the step), operators per step per
    category, the top operators and the unmapped names."""
    names = sorted(set(e.name for e in events))
    classes_by_name = {name: classify(name, table) for name in names}
    classes = [classes_by_name[e.name] for e in events]
    by_thread = collections.defaultdict(list)  # type: Dict[Any, List[Tuple[float, float, int]]]
    for index, event in enumerate(events):
        by_thread[event.thread].append((event.start, event.start + max(event.dur, 0.0), index))
    segments = []  # type: List[Tuple[float, float, int]]
    for thread_events in by_thread.values():
        segments.extend(thread_segments(thread_events, classes))
    owned, _ = share_time(segments)
    seconds = collections.defaultdict(float)  # type: Dict[str, float]
    per_name = collections.defaultdict(float)  # type: Dict[str, float]
    for index, spent in owned.items():
        seconds[classes[index][0] or "other"] += spent
        per_name[events[index].name] += spent
    # operators that own time: a framework that names one call in several nested ranges
    # (Paddle's dygraph wrapper around its kernel) counts it once
    counts = collections.Counter(classes[index][0] or "other" for index, spent in owned.items()
                                 if spent > 0)
    total = step_s * steps
    attributed = sum(seconds.values())
    categories = {name: seconds.get(name, 0.0) / steps for name in CATEGORIES}
    categories[UNATTRIBUTED] = max(0.0, total - attributed) / steps
    ranked = sorted(per_name.items(), key=lambda item: -item[1])
    calls = collections.Counter(e.name for e in events)
    unmapped = sorted((n for n in names if not classes_by_name[n][2]),
                      key=lambda n: -per_name.get(n, 0.0))
    return {
        "categories": categories,
        "counts": {name: counts.get(name, 0) / float(steps) for name in CATEGORIES},
        "coverage": attributed / total if total > 0 else None,
        "top_ops": [{"name": name, "category": classes_by_name[name][0] or "other",
                     "s_per_step": spent / steps, "calls_per_step": calls[name] / float(steps)}
                    for name, spent in ranked[:TOP_OPS]],
        "unmapped": [{"name": n, "s_per_step": per_name.get(n, 0.0) / steps}
                     for n in unmapped[:UNMAPPED_LISTED]],
        "unmapped_count": len(unmapped),
        "events": len(events),
    }


def write_trace(path, events, table, tool):
    # type: (str, Sequence[Event], Sequence[Rule], Dict[str, Any]) -> Dict[str, Any]
    """The operators as a gzipped Chrome trace (chrome://tracing, ui.perfetto.dev), each named
    as its framework calls it and tagged with its category; at most :data:`TRACE_EVENT_LIMIT`
    events, the earliest."""
    if not events:
        return {"path": None, "events": 0, "truncated": False}
    origin = min(e.start for e in events)
    threads = {}  # type: Dict[Any, int]
    kept = sorted(events, key=lambda e: e.start)[:TRACE_EVENT_LIMIT]
    trace = []
    for event in kept:
        tid = threads.setdefault(event.thread, len(threads))
        trace.append({"name": event.name, "cat": classify(event.name, table)[0] or "other",
                      "ph": "X", "pid": 0, "tid": tid, "ts": (event.start - origin) * 1e6,
                      "dur": max(event.dur, 0.0) * 1e6})
    payload = {"traceEvents": trace, "displayTimeUnit": "ms",
               "otherData": {"tool": tool, "threads": {str(v): str(k) for k, v in threads.items()}}}
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt") as handle:
        json.dump(payload, handle)
    os.replace(tmp, path)
    return {"path": path, "events": len(kept), "truncated": len(kept) < len(events)}


def profile(workload, steps, measured_step_s, trace_path, clock=time.perf_counter):
    # type: (Any, int, float, Optional[str], Any) -> Dict[str, Any]
    """``steps`` steps under the workload's own profiler, after the window: the profile block
    of the result. Never raises: a profiler that cannot run here or fails is recorded."""
    started = time.time()
    try:
        profiler = workload.profiler()
    except ProfileUnavailable as why:
        return {"unavailable": str(why)}
    try:
        workload.sync()
        profiler.start()
        begin = clock()
        for _ in range(steps):
            workload.step()
        workload.sync()
        wall = clock() - begin
        events = profiler.stop()
    except ProfileUnavailable as why:
        return {"unavailable": str(why), "tool": profiler.tool}
    except Exception as error:  # the profiler's failure, never the measurement's
        return {"error": "{}: {}".format(type(error).__name__, str(error).strip()[:300]),
                "tool": profiler.tool}
    step_s = wall / steps
    out = {"tool": profiler.tool, "steps": steps, "step_s": step_s,
           "measured_step_s": measured_step_s, "started_at": started,
           "overhead": step_s / measured_step_s - 1.0 if measured_step_s else None}
    if not events:
        out["unavailable"] = ("{} recorded no operators on this device".format(
            profiler.tool.get("name", "the profiler")))
        return out
    out.update(attribute(events, profiler.rules, steps, step_s))
    if trace_path:
        try:
            out["trace"] = write_trace(trace_path, events, profiler.rules, profiler.tool)
        except (OSError, ValueError) as error:
            out["trace"] = {"path": None, "error": str(error)[:300]}
    return out


def total(categories):
    # type: (Dict[str, float]) -> float
    """The step time the categories add up to (``unattributed`` included)."""
    return sum(categories.values())


def iter_categories(categories):
    # type: (Dict[str, float]) -> Iterable[Tuple[str, float]]
    """The categories in their fixed order, ``unattributed`` last."""
    for name in CATEGORIES + (UNATTRIBUTED,):
        yield name, categories.get(name, 0.0)
