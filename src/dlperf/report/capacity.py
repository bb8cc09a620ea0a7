"""The report's capacity searches: every probe ``dlperf capacity`` stored, per search.

A probe is a run stored under the sweep name ``capacity`` (:data:`dlperf.studies.capacity.SWEEP_NAME`);
its launch facts name the search it belonged to and the parameter that search varied
(``launch.capacity``). Probes stored before those facts existed are grouped by the order they
were stored in: consecutive probes belong to one search while their cases (and memory limit)
differ in exactly one integer setting, the batch size or one knob, and no value repeats (a
search never probes a value twice); such a search of a single probe cannot say which setting
it varied and is shown with all its settings.

Per search: a table of every probed value in ascending order (status, throughput, latency per
iteration, peak memory; failures footnoted with their reason), the answer as ``dlperf
capacity`` states it, and for HTML a small inline SVG of latency and peak memory against the
value, failed probes marked with an x and their status. Text from the database is data: the
tables are escaped by the renderers, the figure is drawn with mathtext off and its text left as
(XML-escaped) SVG text.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf import display
from dlperf.report.tables import Cell, Report, Table, knob_text, number, short, variant
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.store import Store
from dlperf.studies.capacity import SWEEP_NAME

SIZE = (7.5, 2.8)
LOG_SPAN = 10.0  # a log x axis when the largest value is more than this times the smallest


@dataclass
class Probe:
    """One stored probe: its value of the searched parameter and what its run gave."""

    run_id: int | None
    value: int | None
    status: str
    error: str | None
    throughput: float | None
    unit: str
    latency_ms: float | None
    peak_host_bytes: int | None
    peak_device_bytes: int | None


@dataclass
class Search:
    """Consecutive probes of one case that differ in one parameter only."""

    case: Mapping[str, Any]  # the first probe's case
    memory_limit_bytes: int | None
    param: str | None = None  # None: a single probe, the varied setting is not known
    results: list[ResultLike] = field(default_factory=list)

    @property
    def probes(self) -> list[Probe]:
        """Every probe, ascending by value (in stored order where the value is unknown)."""
        found = [_probe(result, self.param) for result in self.results]
        return sorted(found, key=lambda p: -1 if p.value is None else p.value)

    @property
    def largest(self) -> int | None:
        """The largest value that ran below every out-of-memory probe (None: none did)."""
        probes = self.probes
        ooms = [p.value for p in probes if p.status == "oom" and p.value is not None]
        limit = min(ooms) if ooms else None
        fits = [p.value for p in probes if p.status == "ok" and p.value is not None
                and (limit is None or p.value < limit)]
        return max(fits) if fits else None

    @property
    def smallest_failing(self) -> int | None:
        """The smallest out-of-memory value above the largest that ran (None: none)."""
        low = self.largest
        ooms = [p.value for p in self.probes if p.status == "oom" and p.value is not None
                and (low is None or p.value > low)]
        return min(ooms) if ooms else None

    def title(self) -> str:
        case = self.case
        what = self.param or "one probe (the parameter searched is not stored)"
        limit = (f" under {display.human_bytes(self.memory_limit_bytes)}"
                 if self.memory_limit_bytes else "")
        return f"{case.get('framework', '?')} {case.get('model', '?')}: {what}{limit}"

    def settings(self) -> str:
        """The fixed settings every probe shared, in words (the varied one left out)."""
        case = dict(self.case)
        knobs = dict(case.get("knobs") or {})
        knobs.pop(self.param or "", None)
        parts = [] if self.param == "batch_size" else [f"batch size {case.get('batch_size')}"]
        parts += [str(case["task"] or "train"), str(case["precision"] or "fp32"),
                  variant(case)]
        devices = int(case["devices"] or 1) * int(case["nnodes"] or 1)
        if devices > 1:
            parts.append(f"{devices} devices")
        knob_words = knob_text({**case, "knobs": knobs})
        if knob_words:
            parts.append(knob_words)
        parts.append("on " + " / ".join(self.devices()))
        parts.append(f"{case['warmup_steps']} warm-up + {case['steps']} steps, "
                     f"{case['repeats']} repeat(s) per probe")
        parts.append("memory limit " + (display.human_bytes(self.memory_limit_bytes)
                                        if self.memory_limit_bytes else "none (the machine's)"))
        return ", ".join(parts)

    def devices(self) -> list[str]:
        """The devices the probes ran on (result.device_of): one, unless the search crossed
        devices; the probes that ran say it, else every probe's record."""
        probes = [read_result(r) for r in self.results]
        ran = [r for r in probes if r.status == "ok"] or probes
        return list(dict.fromkeys(r.device for r in ran)) or ["?"]

    def answer(self) -> str:
        """The search's answer, as `dlperf capacity` words it."""
        if self.param is None:
            return f"a single probe: {self.probes[0].status} (the parameter searched is not stored)"
        name = self.param
        low, high = self.largest, self.smallest_failing
        if low is not None and high is not None:
            text = (f"largest {name} that fits: {low} ({high} runs out of memory; "
                    f"resolution {high - low})")
        elif low is not None:
            text = f"largest {name}: at least {low} (no probe ran out of memory)"
        elif high is not None:
            text = f"nothing fits: {name}={high} already runs out of memory"
        else:
            text = "no probe ran"
        stopped = [p for p in self.probes if p.status not in ("ok", "oom")]
        if stopped:
            first = stopped[0]
            text += (f"; stopped by probe {first.value if first.value is not None else '?'}: "
                     f"{first.status} (only out-of-memory bounds a capacity search)")
        return text


def _case(result: ResultLike) -> Mapping[str, Any]:
    return read_result(result).case


def _limit(result: ResultLike) -> int | None:
    value = (read_result(result).launch or {}).get("memory_limit_bytes")
    return value if isinstance(value, int) else None


def _settings(case: Mapping[str, Any]) -> dict[str, Any]:
    """The integer settings a search may vary: the batch size and every integer knob."""
    out = {"batch_size": case.get("batch_size")}
    for name, value in (case.get("knobs") or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    return out


def _differing(first: Mapping[str, Any], case: Mapping[str, Any]) -> set[str] | None:
    """The integer settings in which ``case`` differs from ``first``; None when anything else
    differs (another model, precision, knob set, step count...): another search."""
    rest_a = {k: v for k, v in first.items() if k not in ("batch_size", "knobs")}
    rest_b = {k: v for k, v in case.items() if k not in ("batch_size", "knobs")}
    knobs_a, knobs_b = first.get("knobs") or {}, case.get("knobs") or {}
    if rest_a != rest_b or set(knobs_a) != set(knobs_b):
        return None
    a, b = _settings(first), _settings(case)
    if set(a) != set(b) or any(knobs_a[k] != knobs_b[k] for k in knobs_a if k not in a):
        return None
    return {name for name in a if a[name] != b[name]}


def _probe(result: ResultLike, param: str | None) -> Probe:
    typed = read_result(result)
    value = _settings(typed.case).get(param) if param else None
    rate = typed.throughput.median if typed.throughput else None
    latency = typed.iteration_ms
    return Probe(run_id=typed.run_id, value=value if isinstance(value, int) else None,
                 status=typed.status or "unfinished", error=typed.error,
                 throughput=rate if isinstance(rate, (int, float)) else None, unit=typed.unit,
                 latency_ms=latency if isinstance(latency, (int, float)) and latency else None,
                 peak_host_bytes=typed.peak_host_bytes or None,
                 peak_device_bytes=typed.peak_device_bytes or None)


def _tag(result: ResultLike) -> tuple[str, str] | None:
    """(search id, parameter) from the probe's launch facts; None for probes stored before
    dlperf recorded them."""
    tag = (read_result(result).launch or {}).get("capacity")
    if isinstance(tag, dict) and isinstance(tag.get("search"), str) \
            and isinstance(tag.get("param"), str):
        return tag["search"], tag["param"]
    return None


def group(results: Sequence[ResultLike]) -> list[Search]:
    """Probe results, in the order they were stored, as the searches that made them."""
    searches: list[Search] = []
    tagged: dict[str, Search] = {}
    current: Search | None = None
    for result in results:
        case, limit = _case(result), _limit(result)
        tag = _tag(result)
        if tag is not None:  # the probe says which search it belongs to
            search = tagged.get(tag[0])
            if search is None:
                search = tagged[tag[0]] = Search(case=case, memory_limit_bytes=limit,
                                                 param=tag[1], results=[])
                searches.append(search)
            search.results.append(result)
            current = None
            continue
        joins = False
        if current is not None and limit == current.memory_limit_bytes:
            differ = _differing(current.case, case)
            if differ is not None and len(differ) == 1 and (current.param is None
                                                            or differ == {current.param}):
                name = next(iter(differ))
                seen = {_settings(_case(r)).get(name) for r in current.results}
                joins = _settings(case).get(name) not in seen
                if joins:
                    current.param = name
        if joins and current is not None:
            current.results.append(result)
        else:
            current = Search(case=case, memory_limit_bytes=limit, results=[result])
            searches.append(current)
    return searches


def load(store: Store) -> list[Search]:
    """The capacity searches stored in ``store`` (every finished probe), oldest first."""
    results = []
    for row in store.runs("sweep=? AND result_json IS NOT NULL", (SWEEP_NAME,)):
        result = store.decode(row)
        result.setdefault("run_id", row["id"])
        results.append(result)
    return group(results)


def table(search: Search, report: Report) -> Table:
    """Every probe ascending by value; a failure's reason becomes one of ``report``'s notes."""
    probes = search.probes
    unit = next((p.unit for p in probes if p.throughput is not None), "samples/s")
    out = Table(title=search.title(),
                headers=[search.param or "value", "status", f"throughput ({unit})",
                         "latency / iteration (ms)", "peak host memory",
                         "peak device memory", "run"],
                align=["r", "l", "r", "r", "r", "r", "r"])
    for found in probes:
        status = Cell(found.status)
        if found.status != "ok":
            where = f"{search.param}={found.value}" if found.value is not None else "probe"
            status.notes.append(report.note(short(
                f"capacity {search.case.get('framework')} {search.case.get('model')} "
                f"{where}: {found.status} — {found.error or 'no reason stored'}")))
        out.rows.append([Cell("—" if found.value is None else str(found.value)), status,
                         Cell(number(found.throughput)), Cell(number(found.latency_ms, 2)),
                         Cell(display.human_bytes(found.peak_host_bytes)),
                         Cell(display.human_bytes(found.peak_device_bytes)),
                         Cell("" if found.run_id is None else str(found.run_id))])
    return out


def _count(value: float, _position: Any = None) -> str:
    """Tick labels as the CLI takes sizes: 1000 -> 1K, 3200000 -> 3.2M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def figure(search: Search) -> str | None:
    """Latency per iteration and peak memory against the value, as inline SVG text; None when
    no probe has a known value (a single probe: the varied setting is not stored)."""
    probes = [p for p in search.probes if p.value is not None]
    if not probes:
        return None
    # matplotlib loads here, not when the report command starts; plots sets Agg, mathtext off
    from matplotlib import ticker, transforms

    from dlperf.report import plots, timelines

    plt = plots.plt
    ok = [p for p in probes if p.status == "ok"]
    failed = [p for p in probes if p.status != "ok"]
    values = [p.value for p in probes if p.value is not None]  # all of them
    peaks = [b for p in ok for b in (p.peak_host_bytes, p.peak_device_bytes) if b]
    scale, unit = ((2**30, "GiB") if peaks and max(peaks) >= 2**30 else (2**20, "MiB"))
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": None, "font.size": 7,
                         "font.sans-serif": ["DejaVu Sans"]}):
        fig, (left, right) = plt.subplots(1, 2, figsize=SIZE)
        lat = [(p.value, p.latency_ms) for p in ok if p.latency_ms is not None]
        left.plot([v for v, _ in lat], [m for _, m in lat], "o-", color="C0", markersize=3,
                  linewidth=1.0, label="latency / iteration")
        left.set_ylabel("latency / iteration (ms)")
        for name, key, colour in (("peak host memory", "peak_host_bytes", "C1"),
                                  ("peak device memory", "peak_device_bytes", "C2")):
            points = [(p.value, getattr(p, key) / scale) for p in ok if getattr(p, key)]
            if points:
                right.plot([v for v, _ in points], [b for _, b in points], "o-", color=colour,
                           markersize=3, linewidth=1.0, label=name)
        right.set_ylabel(f"peak memory ({unit})")
        if right.get_lines():
            right.legend(fontsize=6, loc="best", frameon=False)
        log = min(values) > 0 and max(values) / min(values) > LOG_SPAN
        for axes in (left, right):
            if log:
                axes.set_xscale("log")
            low, high = min(values), max(values)
            pad = 0.05 * ((high - low) or high or 1)
            axes.set_xlim(*((low / 1.3, high * 1.3) if log else (low - pad, high + pad)))
            axes.xaxis.set_major_formatter(ticker.FuncFormatter(_count))
            axes.xaxis.set_minor_formatter(ticker.NullFormatter())
            axes.set_xlabel(search.param or "value")
            heights = [y for line in axes.get_lines() for y in line.get_ydata()]
            # from 0, with room above a flat line (memory often barely moves) for the legend
            axes.set_ylim(0, max(heights) * 1.25 if heights and max(heights) > 0 else 1)
            axes.grid(True, alpha=0.3, linewidth=0.5)
            # failed probes: an x at the value on the axis, labelled with the status
            where = transforms.blended_transform_factory(axes.transData, axes.transAxes)
            for index, found in enumerate(sorted(failed, key=lambda p: p.value or 0)):
                axes.plot([found.value], [0.04], "x", color="C3", markersize=6,
                          markeredgewidth=1.5, transform=where, clip_on=False)
                # staggered: neighbouring failures (a bisection's last probes) stay readable
                axes.annotate(found.status, (found.value, 0.04), xycoords=where,
                              textcoords="offset points", xytext=(0, 5 + 8 * (index % 3)),
                              ha="center", fontsize=6, color="C3")
        fig.suptitle(search.title(), fontsize=7)
        fig.subplots_adjust(left=0.08, right=0.99, top=0.86, bottom=0.17, wspace=0.25)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
    return timelines._clean(buffer.getvalue())


def caption(search: Search) -> str:
    """The figure's caption (plain text; the caller escapes)."""
    failed = [p for p in search.probes if p.status != "ok"]
    marks = (f"; x: {len(failed)} failed probe(s) ("
             + ", ".join(sorted({p.status for p in failed})) + ")") if failed else ""
    return (f"{search.title()}: latency per iteration and peak memory of the probes that ran "
            f"against {search.param or 'the value'}{marks}. {search.answer()}.")
