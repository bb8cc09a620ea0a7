"""The report's content as plain tables, shared by the Markdown and HTML renderers.

Like DLPerf's summary: per model, one row per framework (and variant) and resolved device, a
throughput and a speedup column per precision, failed or fallback cells footnoted with the reason.
A case measured on the CPU and on a GPU is two rows, two scaling tables, two detail tables, each
naming its device: never one figure, never one speedup. Then DLPerf's scaling
table per framework (and variant): for every precision and batch size measured on more than one
device, a row per topology — nodes | devices per node | devices → throughput | speedup | scaling
efficiency. Under it, one detail table per configuration: nodes | devices | batch/device |
throughput | spread | speedup | scaling efficiency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf import models
from dlperf.host import emulated
from dlperf.report import framework_notes, inference, ratios, varies
from dlperf.report.results import NO_BASELINE, total_devices
from dlperf.results.codec import case_with_defaults, read_result
from dlperf.results.model import ResultLike
from dlperf.scaling import allreduce_bus_bandwidth, emulated_hosts
from dlperf.spec import environment_name, frameworks, support

PRECISION_ORDER = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "int8")
NOTE_CHARS = 220
# a measured bus bandwidth may pass a shaped link's rate by this much (the token bucket's burst,
# the probe's timer) before the report says it cannot be
LINK_SLACK = 1.05


@dataclass
class Cell:
    text: str
    notes: list[int] = field(default_factory=list)


@dataclass
class Table:
    title: str
    headers: list[str]
    align: list[str]  # "l" or "r" per column
    rows: list[list[Cell]] = field(default_factory=list)


@dataclass
class Section:
    """One model (with its knobs and task): its summary and its detail tables."""

    title: str
    summary: Table
    details: list[Table]
    results: list[dict[str, Any]]
    scaling: list[Table] = field(default_factory=list)  # one per framework and variant
    # what the section compares (precisions, rows): ratio, interval, verdict, and the why
    compared: list[ratios.Ratio] = field(default_factory=list)
    # stored projections (`dlperf project`) that start from a result of this section
    projections: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Environment:
    """Machine facts shared by some results, and the worker settings each of them ran with."""

    facts: list[tuple[str, str]]
    workers: dict[str, list[str]] = field(default_factory=dict)  # setting -> result labels

    def rows(self) -> list[tuple[str, str]]:
        out = list(self.facts)
        for setting, labels in self.workers.items():
            out.append(("worker", f"{setting} — {', '.join(labels)}"))
        return out


@dataclass
class Report:
    sections: list[Section]
    notes: list[str]  # footnote i is notes[i - 1]
    environments: list[Environment]
    results: list[dict[str, Any]]
    accuracy: list[Table] = field(default_factory=list)  # stored `dlperf accuracy` rows

    def note(self, text: str) -> int:
        if text in self.notes:
            return self.notes.index(text) + 1
        self.notes.append(text)
        return len(self.notes)


def number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def short(text: str | None, limit: int = NOTE_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def knob_text(case: Mapping[str, Any]) -> str:
    """Knobs that differ from the catalogue's defaults, e.g. ``image_size=32``."""
    model = case.get("model")
    defaults = models.get(model).defaults if model in models.CATALOGUE else {}
    knobs = case_with_defaults(case)["knobs"] or {}
    return " ".join(f"{k}={v}" for k, v in sorted(knobs.items()) if defaults.get(k) != v)


def variant(case: Mapping[str, Any]) -> str:
    """How the framework ran: its own script (external), or the mode its backend declares for
    the compile setting (a TF ``tf.function`` graph is not "eager", TF 1.15 runs a Session),
    with the case's framework options and allocator."""
    external = (case.get("external") or {}).get("name")
    if external:
        return f"external: {external}"
    case = case_with_defaults(case)
    framework = case.get("framework")
    if framework in frameworks():
        mode = support(framework).mode(bool(case["compile"]))
    else:
        mode = "compiled" if case["compile"] else "eager"
    # the framework's own options (Caffe2's engine) are another way it ran: never one row
    kind = f"{mode} · {case['options']}" if case["options"] else mode
    if case["allocator"]:  # another malloc preloaded (--allocator): another row
        kind += f" · {case['allocator']}"
    if case["plant_slowdown"]:  # calibration's planted slowdown: never mistaken for a case
        kind += f" · PLANTED -{case['plant_slowdown']:.0%}"
    # so is another environment (a version, the user's own build) and another label: one row
    # each, never the best of two versions
    if case["env"]:
        kind += f" · {environment_name(str(framework), case['env'])}"
    if case["run_label"]:
        kind += f" · label {case['run_label']}"
    return kind


def variant_of(result: ResultLike) -> str:
    """:func:`variant` of the result's case, and the tune configuration its settings came from
    (``--config best``, a sweep's ``config: best``): a tuned result is a row of its own beside
    the framework's defaults, never folded into them."""
    typed = read_result(result)
    kind = variant(typed.case)
    return f"{kind} · config {typed.config_which}" if typed.config_which else kind


def version_of(results: Sequence[ResultLike]) -> str:
    """The framework version(s) the results were measured with."""
    found = sorted({str(version) for version in
                    (read_result(r).framework_version for r in results) if version})
    return ", ".join(found) or "—"


def precision_rank(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else 99


def _case(result: ResultLike) -> Mapping[str, Any]:
    """The result's case, every field added since at its value before it existed."""
    return read_result(result).case


def section_key(result: ResultLike) -> tuple[str, str, str]:
    case = _case(result)
    return case.get("model") or "?", knob_text(case), case["task"]


def spread(result: ResultLike) -> str:
    tp = read_result(result).throughput
    if tp is None or tp.median is None:
        return "—"
    parts = []
    if tp.cv is not None:
        parts.append(f"CV {tp.cv:.1%}")
    if tp.min is not None and tp.n > 1:
        parts.append(f"{number(tp.min)}–{number(tp.max)}")
    parts.append(f"n={tp.n}")
    return ", ".join(parts)


def speedup_text(result: ResultLike) -> str:
    typed = read_result(result)
    if typed.speedup is not None:
        return ratios.ratio_text(typed.speedup)
    if typed.status == "ok" and typed.devices > 1:
        return NO_BASELINE
    return "—"


def engine(case: Mapping[str, Any]) -> str:
    """What started the processes and carried the gradients: ``native`` (the framework's own
    data parallelism) or ``horovod · gloo`` / ``horovod · mpi``."""
    case = case_with_defaults(case)
    if case["launcher"] == "native":
        return "native"
    return f"{case['launcher']} · {case['controller']}"


def failure_note(result: ResultLike) -> str:
    typed = read_result(result)
    case = typed.case
    where = f"bsz {case.get('batch_size')}"
    if typed.devices > 1:
        where += f" on {case['nnodes']}×{case['devices']} devices"
    return short(f"{case.get('framework')} {case['precision']} {where}: "
                 f"{typed.status} — {typed.error}")


def fallback_note(result: ResultLike) -> str | None:
    typed = read_result(result)
    if typed.fallback_from_batch_size is None:
        return None
    case = typed.case
    return short(f"{case.get('framework')} {case['precision']} bsz "
                 f"{case.get('batch_size')}: {typed.fallback_from_batch_size} ran out of memory")


def row_key(result: ResultLike) -> tuple[str, str, str]:
    """The summary row a result belongs to: framework, variant (and engine), device."""
    typed = read_result(result)
    kind = variant_of(typed)
    if engine(typed.case) != "native":  # Horovod's rows beside the framework's own
        kind += f" · {engine(typed.case)}"
    return typed.case.get("framework", "?"), kind, typed.device


def _median(result: ResultLike) -> float | None:
    return read_result(result).median


def _shown(members: list[dict[str, Any]], precision: str) -> dict[str, Any] | None:
    """The result a row's throughput cell shows: the fastest on the most devices measured."""
    ok = [r for r in members if _case(r)["precision"] == precision and _median(r) is not None]
    if not ok:
        return None
    most = max(total_devices(r) for r in ok)
    return max((r for r in ok if total_devices(r) == most), key=lambda r: _median(r) or 0.0)


def _pick(found: list[ratios.Ratio], shown: dict[str, Any] | None, say_where: bool) -> Cell:
    """One comparison for a summary cell: the one of the result the row shows, else the one
    on the most devices at the largest batch; ``say_where``: with its batch (and devices),
    where those vary in the section."""
    if not found:
        return Cell("—")
    best = max(found, key=lambda x: (x.candidate is shown, total_devices(x.candidate),
                                     int(_case(x.candidate).get("batch_size") or 0)))
    case = _case(best.candidate)
    at = ""
    if say_where:
        at = f" at bsz {case.get('batch_size')}" + (
            f", {total_devices(best.candidate)} devices" if total_devices(best.candidate) > 1
            else "")
    return Cell(best.cell() + at)


def comparisons(results: list[dict[str, Any]], baseline: str = inference.BASELINE
                ) -> tuple[list[ratios.Ratio], list[ratios.Ratio]]:
    """The section's comparisons: each precision against the ``baseline`` one (else the first
    in :data:`PRECISION_ORDER` measured: fp32 before amp-bf16), and each summary row against
    the row measured first (its framework, mode, version or settings against theirs), between
    results that differ in that alone."""
    shown = varies.ok(results)
    if not shown:
        return [], []
    measured = {str(_case(r)["precision"]) for r in shown}
    base_precision = baseline if baseline in measured else min(measured, key=precision_rank)
    base_row = row_key(shown[0])
    return (ratios.along(results, (varies.PRECISIONS,),
                         lambda r: _case(r)["precision"] == base_precision),
            ratios.along(results, varies.ROW, lambda r: row_key(r) == base_row))


def _throughput_cells(report: Report, members: list[dict[str, Any]], precision: str,
                      speedups: bool) -> list[Cell]:
    """A summary row's cells of one precision: the throughput its fastest result on the most
    devices reached (failures and fallbacks at that scale footnoted), and with ``speedups``
    that result's speedup."""
    cell_results = [r for r in members if _case(r)["precision"] == precision]
    best = _shown(members, precision)
    if not cell_results:
        return [Cell("—")] * (2 if speedups else 1)
    if best is None:
        notes = [report.note(failure_note(r)) for r in cell_results]
        statuses = sorted({read_result(r).status or "?" for r in cell_results})
        return [Cell("/".join(statuses), notes)] + ([Cell("—")] if speedups else [])
    most = total_devices(best)
    notes = []
    if fallback_note(best):
        notes.append(report.note(fallback_note(best) or ""))
    # failures at the chosen scale (larger batches that did not fit, crashes)
    for failed in cell_results:
        if read_result(failed).status != "ok" and total_devices(failed) == most:
            notes.append(report.note(failure_note(failed)))
    scale = f", {most} devices" if most > 1 else ""
    cells = [Cell(f"{number(_median(best))} "
                  f"(bsz {_case(best).get('batch_size')}{scale})", notes)]
    return cells + ([Cell(speedup_text(best))] if speedups else [])


def _summary(report: Report, results: list[dict[str, Any]],
             by_precision: list[ratios.Ratio], by_row: list[ratios.Ratio]) -> Table:
    """One row per framework, variant and device; per precision its throughput, the speedup
    over devices only where device counts vary, the ratio of each precision to the first where
    precisions vary, and each row's ratio to the first row's where rows compare."""
    precisions = sorted({_case(r)["precision"] for r in results}, key=precision_rank)
    along = varies.varying(results)
    speedups = varies.DEVICE_COUNTS in along
    say_where = varies.BATCH in along or speedups
    unit = read_result(results[0]).unit
    headers, align = ["framework", "version", "variant", "device"], ["l", "l", "l", "l"]
    for precision in precisions:
        headers.append(f"{precision.upper()} throughput ({unit})")
        align.append("r")
        if speedups:
            headers.append(f"{precision.upper()} speedup")
            align.append("r")
    ratio_precisions = list(dict.fromkeys(str(_case(x.candidate)["precision"])
                                          for x in by_precision))
    ratio_precisions.sort(key=precision_rank)
    base_precision = str(_case(by_precision[0].baseline)["precision"]) if by_precision else ""
    for precision in ratio_precisions:
        headers.append(f"{precision} / {base_precision} (ratio, 95 % CI, verdict)")
        align.append("l")
    base_row = row_key(by_row[0].baseline) if by_row else None
    # the first row named by what tells the rows apart: "tensorflow", "torch label v1"
    base_name = " ".join(axis.describe(by_row[0].baseline)
                         for axis in varies.varying(results, varies.ROW)) if by_row else ""
    row_precisions = sorted({str(_case(x.candidate)["precision"]) for x in by_row},
                            key=precision_rank)
    for precision in row_precisions:
        headers.append(f"{precision.upper()} vs {base_name} (ratio, 95 % CI, verdict)")
        align.append("l")
    table = Table("summary", headers, align)
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for result in results:
        rows.setdefault(row_key(result), []).append(result)
    for key, members in sorted(rows.items()):
        framework, kind, where_run = key
        chosen = [report.note(text) for text in framework_notes.texts(framework, members)]
        row = [Cell(framework, chosen), Cell(version_of(members)), Cell(kind), Cell(where_run)]
        for precision in precisions:
            row += _throughput_cells(report, members, precision, speedups)
        for precision in ratio_precisions:
            row.append(_pick([x for x in by_precision if row_key(x.candidate) == key
                              and _case(x.candidate)["precision"] == precision],
                             _shown(members, precision), say_where))
        for precision in row_precisions:
            if key == base_row:
                row.append(Cell("baseline"))
                continue
            row.append(_pick([x for x in by_row if row_key(x.candidate) == key
                              and _case(x.candidate)["precision"] == precision],
                             _shown(members, precision), say_where))
        table.rows.append(row)
    return table


def times_text(value: float | None) -> str:
    """A ratio cell: ``1.23×`` as :func:`ratios.ratio_text` writes it, ``—`` for none."""
    return "—" if value is None else f"{ratios.ratio_text(value)}×"


def efficiency_text(result: ResultLike) -> str:
    efficiency = read_result(result).scaling_efficiency
    return "—" if efficiency is None else f"{efficiency:.1%}"


def link_cells(report: Report, result: ResultLike) -> list[Cell]:
    """The link a result's hosts had (``unshaped`` between emulated hosts, ``—`` on one host)
    and its all-reduce's bus bandwidth; a bandwidth above the link's rate gets a note: a shaped
    link cannot carry more, so the probe or the shaping is wrong."""
    rate = _case(result)["link"]
    hosts = emulated_hosts(result)
    shown = rate or ("unshaped" if hosts else "—")
    bandwidth = allreduce_bus_bandwidth(result)
    if bandwidth is None:
        return [Cell(shown), Cell("—")]
    notes = []
    limit = emulated.parse_rate(rate, "link") if rate else None
    if limit is not None and bandwidth * 8 > limit * LINK_SLACK:
        notes.append(report.note(f"{bandwidth * 8 / 1e9:.3g} Gbit/s measured over a "
                                 f"{rate} link: more than the link carries"))
    return [Cell(shown), Cell(f"{bandwidth * 8 / 1e9:.3g} Gbit/s", notes)]


def _scaling(report: Report, results: list[dict[str, Any]]) -> list[Table]:
    """DLPerf's scaling tables: per framework and variant, the configurations (precision, batch
    per device) measured on more than one device, a row per nodes × devices per node; where
    Horovod ran too, an engine column and its rows beside the native ones, every speedup over
    the same 1-device native result (:mod:`dlperf.scaling`)."""
    groups: dict[tuple[str, str, str], dict[tuple[str, int], list[dict[str, Any]]]] = {}
    for result in results:
        typed = read_result(result)
        case = typed.case
        groups.setdefault((case.get("framework", "?"), variant_of(typed), typed.device),
                          {}).setdefault(
            (case["precision"], int(case.get("batch_size") or 0)), []).append(result)
    tables = []
    for (framework, kind, where), configs in sorted(groups.items()):
        scaled = {key: members for key, members in configs.items()
                  if any(total_devices(r) > 1 for r in members)}
        if not scaled:
            continue
        unit = read_result(next(iter(scaled.values()))[0]).unit
        engines = any(engine(_case(r)) != "native" for members in scaled.values()
                      for r in members)
        # emulated hosts: their link's rate, and the all-reduce's measured bus bandwidth beside it
        links = any(emulated_hosts(r) or _case(r)["link"] for members in scaled.values()
                    for r in members)
        table = Table(f"scaling of {framework} · {kind} · {where}",
                      ["precision", "batch/device", "nodes", "devices/node", "devices",
                       *(["engine"] if engines else []),
                       *(["link", "all-reduce bus bw (measured)"] if links else []),
                       f"throughput ({unit}, median)", "speedup", "scaling efficiency"],
                      ["l", "r", "r", "r", "r", *(["l"] if engines else []),
                       *(["l", "r"] if links else []), "r", "r", "r"])
        for (precision, batch), members in sorted(
                scaled.items(), key=lambda item: (precision_rank(item[0][0]), item[0][1])):
            members = sorted(members, key=lambda r: (total_devices(r), _case(r)["nnodes"],
                                                     engine(_case(r))))
            for result in members:
                typed = read_result(result)
                case = typed.case
                ok = typed.status == "ok"
                notes = [] if ok else [report.note(failure_note(typed))]
                if fallback_note(typed):
                    notes.append(report.note(fallback_note(typed) or ""))
                table.rows.append([
                    Cell(precision), Cell(str(batch)), Cell(str(case["nnodes"])),
                    Cell(str(case["devices"])), Cell(str(typed.devices)),
                    *([Cell(engine(case))] if engines else []),
                    *(link_cells(report, typed) if links else []),
                    Cell(number(typed.median) if ok else typed.status or "?", notes),
                    Cell(speedup_text(result)), Cell(efficiency_text(result))])
        tables.append(table)
    return tables


def _details(report: Report, results: list[dict[str, Any]],
             baseline: str = inference.BASELINE) -> list[Table]:
    """Per configuration and precision, a row per topology and batch; the throughput over the
    ``baseline`` precision's (AMP over FP32) where a configuration has both, and for inference
    the latency statistics with each one's speedup over ``baseline``."""
    configs: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for result in results:
        typed = read_result(result)
        case = typed.case
        kind = variant_of(typed)
        if engine(case) != "native":  # Horovod's rows in a table of their own
            kind += f" · {engine(case)}"
        configs.setdefault((case.get("framework", "?"), kind, typed.device, case["precision"]),
                           []).append(result)
    has_latency = any(read_result(r).latency_ms for r in results)
    speedups = varies.DEVICE_COUNTS in varies.varying(results)
    twins = inference.precision_index(results, baseline)
    # every task's twins, for the throughput ratio: a column only where some result has one
    anywhere = inference.precision_index(results, baseline, inference_only=False)
    ratio_of = {id(r): inference.throughput_speedup(r, anywhere, baseline, inference_only=False)
                for r in results if _case(r)["precision"] != baseline}
    precision_ratio = any(value is not None for value in ratio_of.values())
    tables = []
    for (framework, kind, where, precision), members in sorted(
            configs.items(), key=lambda item: (*item[0][:3], precision_rank(item[0][3]))):
        headers = ["nodes", "devices", "batch/device", "global batch",
                   f"throughput ({read_result(members[0]).unit}, median)", "spread",
                   *(["speedup", "scaling efficiency"] if speedups else []), "TFLOP/s", "MFU"]
        align = ["r", "r", "r", "r", "r", "l", *(["r", "r"] if speedups else []), "r", "r"]
        if precision_ratio:
            headers.append(f"throughput vs {baseline}")
            align.append("r")
        if has_latency:
            headers += [f"{label} ms" for _, label in inference.STATISTICS]
            headers += [f"{label} speedup vs {baseline}" for _, label in inference.STATISTICS]
            align += ["r"] * (2 * len(inference.STATISTICS))
        headers.append("status")
        align.append("l")
        table = Table(f"{framework} · {kind} · {where} · {precision}", headers, align)
        members.sort(key=lambda r: (_case(r)["nnodes"], _case(r)["devices"],
                                    _case(r).get("batch_size", 0)))
        for result in members:
            typed = read_result(result)
            case = typed.case
            ok = typed.status == "ok"
            notes = []
            if not ok:
                notes.append(report.note(failure_note(typed)))
            if fallback_note(typed):
                notes.append(report.note(fallback_note(typed) or ""))
            for warning in typed.warnings:
                notes.append(report.note(short(f"{typed.label}: {warning}")))
            row = [Cell(str(case["nnodes"])), Cell(str(case["devices"])),
                   Cell(str(case.get("batch_size"))), Cell(str(typed.global_batch or "—")),
                   Cell(number(typed.median)), Cell(spread(typed))]
            if speedups:
                row += [Cell(speedup_text(typed)), Cell(efficiency_text(typed))]
            flops = typed.flops
            achieved = flops.achieved_per_s if ok and flops else None
            row += [Cell(number(achieved / 1e12, 3) if achieved else "—"),
                    Cell("—" if achieved is None or flops is None or flops.mfu is None
                         else f"{flops.mfu:.1%}")]
            if precision_ratio:
                value = ratio_of.get(id(result))
                row.append(Cell(times_text(value)))
            if has_latency:
                row += [Cell(number(typed.latency_ms.get(key), 2))
                        for key, _ in inference.STATISTICS]
                # the baseline's latency / this one's
                faster = inference.latency_speedups(result, twins, baseline)
                row += [Cell(times_text(faster[key])) for key, _ in inference.STATISTICS]
            row.append(Cell(typed.status or "?", notes))
            table.rows.append(row)
        tables.append(table)
    return tables


def environment(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The machine and harness facts of one result's environment."""
    cpu = env.get("cpu") or {}
    gpus = env.get("gpus") or []
    git = env.get("git") or {}
    libraries = env.get("libraries") or {}
    return [
        ("host", str(env.get("hostname", "?"))),
        ("CPU", f"{cpu.get('model', '?')} ({cpu.get('physical_cores', '?')} cores, "
                f"{cpu.get('logical_cores', '?')} threads; {' '.join(cpu.get('flags') or [])})"),
        ("memory", f"{(env.get('memory_bytes') or 0) / 2**30:.1f} GiB"),
        ("GPUs", ", ".join(f"{g.get('name', '?')} ({g.get('driver', '')})" for g in gpus)
         or "none"),
        ("OS", str(env.get("os", "?"))),
        ("Python (harness)", str(env.get("python", "?"))),
        ("libraries", ", ".join(f"{k} {v}" for k, v in sorted(libraries.items()) if v)),
        ("git", f"{git.get('commit', '?')[:12]}{' (dirty)' if git.get('dirty') else ''}"
         if git else "not a git checkout"),
    ]


def worker_setting(env: Mapping[str, Any]) -> str | None:
    """What the worker saw: Python, framework version, threads; None when no worker reported."""
    worker = env.get("worker") or {}
    framework = worker.get("framework") or {}
    if not worker:
        return None
    parts = [f"Python {worker.get('python', '?')}"]
    parts += [f"{k}={v}" for k, v in sorted(framework.items()) if k.endswith("version")]
    parts += [f"{k}={v}" for k, v in sorted(framework.items()) if "thread" in k]
    variables = worker.get("thread_variables") or {}
    parts += [f"{k}={v}" for k, v in sorted(variables.items())] or ["no thread variables set"]
    return ", ".join(parts)


def method(report: Report) -> str:
    """What the report's figures mean, said once at its top: the speedup only where some section
    varies the device count, the ratios only where some section compares."""
    parts = ["Throughput is the median over repeats, each repeat in a fresh process; batch size "
             "is per device"]
    if any(varies.DEVICE_COUNTS in varies.varying(s.results) for s in report.sections):
        parts.append("speedup is throughput on N devices over 1 device of the same "
                     "configuration, and scaling efficiency is speedup / N")
    if any(s.compared for s in report.sections):
        parts.append(ratios.METHOD)
    return "; ".join(parts) + "."


def build(results: list[dict[str, Any]], baseline: str = inference.BASELINE) -> Report:
    """Sections per model (knobs, task) in the order the models first appear; ``baseline``: the
    precision the detail tables' precision speedups divide by."""
    report = Report([], [], [], results)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(section_key(result), []).append(result)
    for (model, knobs, task), members in groups.items():
        title = model + (f" ({knobs})" if knobs else "")
        if task != "train":
            title += f" — {task}"
        by_precision, by_row = comparisons(members, baseline)
        summary = _summary(report, members, by_precision, by_row)
        scaling = _scaling(report, members)
        details = _details(report, members, baseline)
        report.sections.append(Section(title, summary, details, members, scaling,
                                       by_precision + by_row))
    for typed in map(read_result, results):
        facts = environment(typed.env)
        found = next((e for e in report.environments if e.facts == facts), None)
        if found is None:
            found = Environment(facts)
            report.environments.append(found)
        setting = worker_setting(typed.env)
        if setting is not None:
            found.workers.setdefault(setting, []).append(typed.label or "?")
    return report
