"""The report of `dlperf reproduce`: a study's published tables laid out as published, the
measured figure and its ratio to the published one beside each value, and what differs.

Every table keeps the study's rows and columns (label columns, then each value column twice: as
published, and as measured with ``measured / published`` in brackets), so it reads like the page
it reproduces. Under its heading go the source, what differs between the two measurements
(device and its measured peak against the published hardware and its datasheet peak, versions,
model knobs) and how the shapes were paired at this scale (:mod:`dlperf.report.pairing`). A
published footnote, a failure, or the reason a cell has no counterpart here is a numbered note.
"""

from __future__ import annotations

import datetime as dt
import html as html_mod
from dataclasses import dataclass, field
from typing import Any

from dlperf import models, reference
from dlperf.host import peak
from dlperf.reference import render
from dlperf.report import html, markdown
from dlperf.report.pairing import Figure, Pairer, Pairings, ratio_text
from dlperf.report.tables import Cell, Table
from dlperf.result import device_of
from dlperf.results.codec import read_result
from dlperf.studies.reproduce import Plan

SCALE_TEXT = {
    "cpu": "this machine's CPU at small shapes (the sweep file's knobs and batches), one process "
           "per core for the multi-device rows: the study's device counts, batch sizes and "
           "precisions pair with these as each table's \"paired\" line says, so a ratio says "
           "how far this machine at this scale lands from the study's hardware, not that "
           "either is wrong",
    "published": "the study's own shapes (GPUs per node, nodes, batch sizes, precisions) on this "
                 "machine's GPUs",
}
TINY_TEXT = ("--tiny: every case at the smallest shapes and one short repeat, to check that the "
             "reproduction runs end to end; its numbers mean nothing")


@dataclass
class Block:
    """One published table as reproduced: its heading, the lines under it, the table."""

    title: str
    lines: list[str]
    table: Table


@dataclass
class Reproduction:
    title: str
    intro: list[str]
    blocks: list[Block]
    notes: list[str] = field(default_factory=list)  # note i is notes[i - 1]

    def note(self, text: str) -> int:
        if text not in self.notes:
            self.notes.append(text)
        return self.notes.index(text) + 1


def build(plan: Plan, results: list[dict[str, Any]], where: str) -> Reproduction:
    """The report of ``plan``'s study from ``results`` (each with its speedup filled:
    :func:`dlperf.report.results.with_scaling`); ``where`` names the sweep and database."""
    study = plan.study
    ok = sum(1 for r in results if r.get("status") == "ok")
    intro = [f"Scale: {plan.scale} — {SCALE_TEXT[plan.scale]}."]
    if plan.tiny:
        intro.append(f"{TINY_TEXT}.")
    intro.append(f"Measured: {where}: {len(results)} of the study's {len(plan.all_keys)} cases "
                 f"at this scale stored, {ok} ok, {len(results) - ok} failed or refused; "
                 f"ratio = measured / published.")
    report = Reproduction(f"Reproduction: {study.title}", intro, [])
    pairer = Pairer(study, plan.scale, results)
    for table in study.reference_tables():
        report.blocks.append(_block(report, pairer, table))
    return report


def _block(report: Reproduction, pairer: Pairer, table: reference.Table) -> Block:
    headers = list(table.label_columns)
    align = ["l"] * len(headers)
    for column in table.columns:
        headers += [f"{render.with_unit(column.label, column.unit)}: published",
                    "measured (ratio)"]
        align += ["r", "r"]
    layout = Table(table.id, headers, align)
    pairings = Pairings()
    used: list[dict[str, Any]] = []
    values = iter(table.values())
    for row in table.rows:
        published = [[next(values) for _ in cells] for cells in row.cells]
        flat = [value for cell in published for value in cell]
        marks = [report.note(text) for text in
                 dict.fromkeys(table.footnotes[m] for m in row.footnotes)]
        cells = [Cell(text, marks if i == 0 else []) for i, text in enumerate(row.label)]
        for column, row_cells, row_values in zip(table.columns, row.cells, published):
            figures = [pairer.figure(table, flat, value, pairings) for value in row_values]
            for figure in figures:
                used += figure.results
            cells += [_published_cell(report, table, column, row_cells),
                      _measured_cell(report, row_cells, row_values, figures)]
        layout.rows.append(cells)
    lines = [f"{table.citation()}; dlperf reference show {table.id}",
             *_differs(table, used), *_paired(pairings)]
    return Block(table.title, lines, layout)


def _published_cell(report: Reproduction, table: reference.Table, column: reference.Column,
                    cells: tuple[reference.Cell, ...]) -> Cell:
    """The value(s) as published, with the column's and the cell's footnotes (the row's are on
    its label)."""
    text = " / ".join(f"{'~' if c.approx else ''}{c.text}{f' {c.label}' if c.label else ''}"
                      for c in cells)
    marks = [*column.footnotes, *(mark for c in cells for mark in c.footnotes)]
    return Cell(text, [report.note(table.footnotes[m]) for m in dict.fromkeys(marks)])


def _measured_cell(report: Reproduction, cells: tuple[reference.Cell, ...],
                   values: list[reference.Published], figures: list[Figure]) -> Cell:
    parts = []
    marks = []
    for cell, value, figure in zip(cells, values, figures):
        ratio = ratio_text(figure.value, value.value)
        parts.append(figure.text + (f" ({ratio})" if ratio else "")
                     + (f" {cell.label}" if cell.label and len(cells) > 1 else ""))
        if figure.why:
            marks.append(report.note(figure.why))
    return Cell(" / ".join(parts), list(dict.fromkeys(marks)))


def _differs(table: reference.Table, used: list[dict[str, Any]]) -> list[str]:
    """What differs between the measured cells and the published ones: devices and their
    peaks, versions, model knobs."""
    results = list({id(r): r for r in used}.values())
    hardware = table.hardware
    gpu = str(hardware.get("gpu", "?"))
    shape = ""
    if hardware.get("nodes") and hardware.get("gpus_per_node"):
        shape = f" ({hardware['nodes']} node(s) × {hardware['gpus_per_node']})"
    sheet = peak.datasheet(gpu)
    sheet_text = (", datasheet peak " + ", ".join(f"{v / 1e12:g} TFLOP/s {k}"
                                                  for k, v in sheet.items())
                  if sheet else ", no datasheet peak known to dlperf")
    published = (f"Published on: {gpu} × {hardware.get('count', '?')}{shape}, "
                 f"{hardware.get('interconnect', '?')}{sheet_text}; "
                 + "; ".join(f"{k} {v}" for k, v in table.software.items()))
    if not results:
        return [published, "Measured on: nothing of this table was measured here."]
    devices = sorted({device_of(r) for r in results})
    cpus = sorted({str(((r.get("env") or {}).get("cpu") or {}).get("model", "?"))
                   for r in results})
    peaks: dict[str, float] = {}
    for result in results:
        rate = (result.get("flops") or {}).get("peak_per_s")
        if rate:
            peaks.setdefault(str(result["case"].get("precision")), float(rate))
    # each framework's versions among the results that ran (one stopped before its first
    # repeat recorded none), "?" for a framework none of whose results says
    known: dict[str, set[str]] = {}
    for typed in map(read_result, results):
        seen = known.setdefault(str(typed.case.get("framework")), set())
        if typed.framework_version:
            seen.add(str(typed.framework_version))
    versions = sorted(f"{name} {version}" for name, seen in known.items()
                      for version in (seen or {"?"}))
    knobs: dict[str, tuple[set[str], str]] = {}
    axes = {key for value in table.values() for key in value.keys}  # the table's own, not knobs
    for result in results:
        case = result["case"]
        defaults = models.get(case["model"]).defaults if case.get("model") in \
            models.CATALOGUE else {}
        for name, value in sorted((case.get("knobs") or {}).items()):
            if name in defaults and defaults[name] != value and name not in axes:
                knobs.setdefault(name, (set(), str(defaults[name])))[0].add(str(value))
    knob_text = "; ".join(f"{name}={'/'.join(sorted(seen))} (the study: {study})"
                          for name, (seen, study) in knobs.items())
    peak_text = ", ".join(f"{v / 1e12:.3g} TFLOP/s {k}" for k, v in sorted(peaks.items()))
    measured = (f"Measured on: {', '.join(devices)} ({', '.join(cpus)})"
                + (f", measured matmul peak {peak_text}" if peak_text else "")
                + f"; {', '.join(versions)}"
                + (f"; knobs {knob_text}" if knob_text else ""))
    return [published, measured]


def _paired(pairings: Pairings) -> list[str]:
    if not pairings.seen:
        return []
    by_what: dict[str, list[str]] = {}
    for (what, published), measured in pairings.seen.items():
        by_what.setdefault(what, []).append(f"{published} → {', '.join(sorted(measured))}")
    return ["Paired: " + "; ".join(f"{what} {', '.join(items)}"
                                   for what, items in by_what.items())]


def to_markdown(report: Reproduction) -> str:
    now = dt.datetime.now().isoformat(timespec="seconds")
    esc = markdown._escape
    lines = [f"# {esc(report.title)}", "", f"Generated {now}.", ""]
    lines += [f"- {esc(line)}" for line in report.intro] + [""]
    for block in report.blocks:
        lines += [f"## {esc(block.title)}", ""]
        lines += [f"- {esc(line)}" for line in block.lines] + [""]
        lines += markdown.table(block.table) + [""]
    if report.notes:
        lines += ["## Notes", ""]
        lines += [f"{n}. {esc(text)}" for n, text in enumerate(report.notes, 1)] + [""]
    return "\n".join(lines)


def to_html(report: Reproduction) -> str:
    """One self-contained page (the report's style, nothing fetched when it opens)."""
    esc = html_mod.escape
    now = dt.datetime.now().isoformat(timespec="seconds")
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{esc(report.title)}</title><style>{html.STYLE}</style></head><body>",
             f"<h1>{esc(report.title)}</h1><p class=\"muted\">Generated {now}.</p><ul>"
             + "".join(f"<li>{esc(line)}</li>" for line in report.intro) + "</ul>"]
    for block in report.blocks:
        parts.append(f"<h2 id=\"{html.anchor(block.title)}\">{esc(block.title)}</h2><ul>"
                     + "".join(f"<li>{esc(line)}</li>" for line in block.lines) + "</ul>")
        parts.append(html.table(block.table))
    if report.notes:
        parts.append("<h2>Notes</h2><ol class=\"notes\">" + "".join(
            f"<li id=\"note-{n}\">{esc(text)}</li>" for n, text in enumerate(report.notes, 1))
            + "</ol>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
