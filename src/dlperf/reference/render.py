"""A reference table shown as published: cells with their notes and footnote marks, the unit of
each column, then the footnotes and where the table comes from (Markdown, JSON, or the rows a
terminal table is built from)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from dlperf.reference.model import Cell, Published, Row, Table


def cell_text(cells: tuple[Cell, ...]) -> str:
    """One published cell: ``[1]29171.69 w/XLA / 24734.22``, ``~550``, ``OOM``."""
    marks = "".join(f"[{mark}]" for mark in dict.fromkeys(m for c in cells for m in c.footnotes))
    return marks + " / ".join(f"{'~' if c.approx else ''}{c.text}{f' {c.label}' if c.label else ''}"
                              for c in cells)


def units_by_row(table: Table) -> bool:
    """Whether the rows, not the columns, say what is measured (a table of specifications)."""
    return any(column.unit is None for column in table.columns)


def header(table: Table) -> list[str]:
    """The column headings: the label columns, the unit column when rows carry the unit, then
    each value column with its unit."""
    units = ["unit"] if units_by_row(table) else []
    return [*table.label_columns, *units, *(with_unit(c.label, c.unit) for c in table.columns)]


def with_unit(label: str, unit: str | None) -> str:
    """``label [unit]``, unless the published label already names the unit."""
    if unit is None or re.search(rf"(?<!\w){re.escape(unit)}(?!\w)", label):
        return label
    return f"{label} [{unit}]"


def row_cells(table: Table, row: Row) -> list[str]:
    marks = "".join(f"[{mark}]" for mark in row.footnotes)
    labels = [f"{marks}{row.label[0]}", *row.label[1:]] if row.label else []
    units = [str(row.unit)] if units_by_row(table) else []
    return [*labels, *units, *(cell_text(cells) for cells in row.cells)]


def column_marks(table: Table) -> list[str]:
    """Footnotes that a column carries, as lines under the table."""
    return [f"column {c.label}: see [{mark}]" for c in table.columns for mark in c.footnotes]


def provenance(table: Table) -> list[tuple[str, str]]:
    """Where the table comes from and what it states, as (name, text) lines."""
    study = table.study
    lines = [("study", f"{study.title} ({study.authors}, {study.kind})"),
             ("version", f"{table.version}, {study.date}"),
             ("where", table.source.location),
             ("read off a plot", "yes" if table.source.read_off_plot else "no")]
    if table.url:
        lines.append(("url", table.url))
    if study.seed:
        lines.append(("seed", f"../shared/seeds/{study.seed}"))
    for name, block in (("hardware", table.hardware), ("software", table.software),
                        ("settings", table.settings), ("keys", table.keys)):
        if block:
            lines.append((name, "; ".join(f"{k}: {v}" for k, v in block.items())))
    lines += [("note", note) for note in (*study.notes, *table.notes)]
    lines.append(("file", f"src/dlperf/reference/{study.file}"))
    return lines


def markdown(table: Table) -> str:
    """The table as Markdown: heading, the published layout, footnotes, then its source."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    head = header(table)
    out = [f"### {table.title}", "", f"`{table.id}`", "", line(head),
           line(["---"] * len(head))]
    out += [line(row_cells(table, row)) for row in table.rows]
    notes = [f"[{mark}] {text}" for mark, text in table.footnotes.items()] + column_marks(table)
    if notes:
        out += [""] + [f"- {note}" for note in notes]
    out += [""] + [f"- {name}: {text}" for name, text in provenance(table)]
    return "\n".join(out) + "\n"


def as_dict(table: Table) -> dict[str, Any]:
    """The table as JSON data: the layout as published, its provenance, and every value in the
    long form a comparison reads (merged keys, unit, source)."""
    study = dataclasses.asdict(table.study)
    return {
        "id": table.id, "title": table.title, "study": study,
        "source": dataclasses.asdict(table.source), "version": table.version, "url": table.url,
        "hardware": table.hardware, "software": table.software, "settings": table.settings,
        "keys": dict(table.keys), "label_columns": list(table.label_columns),
        "columns": [dataclasses.asdict(c) for c in table.columns],
        "rows": [dataclasses.asdict(r) for r in table.rows],
        "footnotes": dict(table.footnotes), "notes": list(table.notes),
        "values": [value_dict(v) for v in table.values()],
    }


def value_dict(value: Published) -> dict[str, Any]:
    return dataclasses.asdict(value)


def listing(tables: tuple[Table, ...]) -> list[dict[str, Any]]:
    """One line per table: what ``dlperf reference`` lists."""
    return [{"id": t.id, "study": t.study.title, "date": t.study.date, "what": t.title,
             "rows": len(t.rows), "values": len(t.values()),
             "read_off_plot": t.source.read_off_plot}
            for t in tables]
