"""The report as Markdown: DLPerf's summary table per model, detail tables, footnotes."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dlperf.report import profiles
from dlperf.report.tables import Cell, Report, Table, method
from dlperf.report.tune import opening_count

if TYPE_CHECKING:
    from dlperf.report.capacity import Search
    from dlperf.report.tune import Section as TuneSection


# Markdown's own punctuation, backslash-escaped (CommonMark allows it before any ASCII
# punctuation): emphasis, code, links and footnote references, and the math that GitHub renders
# between dollars. ``|`` ends a table cell. An underscore inside a word (``vocab_size``) is never
# emphasis in CommonMark, so only one at a word's edge is escaped and knob names stay readable.
_MARKDOWN_PUNCTUATION = str.maketrans({c: "\\" + c for c in "\\`*[]$~|"})
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# An ampersand is markup only where it starts a character reference (``&lt;``, ``&#60;``): only
# there is it written ``&amp;``, so "Wide & Deep" reads as written in the .md file too.
_ENTITY_AMPERSAND = re.compile(r"&(?=#?[0-9A-Za-z]+;)")


def _escape(text: str) -> str:
    """Text is data: HTML, emphasis, links or math in a host name, label or error must reach
    the reader as written, never become markup in the .md."""
    escaped = _ENTITY_AMPERSAND.sub("&amp;", str(text)).replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.translate(_MARKDOWN_PUNCTUATION)
    return _EDGE_UNDERSCORE.sub(r"\\_", escaped).replace("\n", " ")


def cell(value: Cell) -> str:
    marks = "".join(f"[{n}]" for n in dict.fromkeys(value.notes))
    return _escape(value.text) + (f" {marks}" if marks else "")


def table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(_escape(h) for h in t.headers) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in t.align) + "|"]
    for row in t.rows:
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines


def capacity_section(report: Report, searches: Sequence[Search]) -> list[str]:
    """Stored `dlperf capacity` searches: per search its settings, every probe and the answer."""
    from dlperf.report import capacity

    if not searches:
        return []
    lines = ["## Capacity", "",
             "Every probe `dlperf capacity` stored (sweep `capacity`), per search, ascending by "
             "value; each probe is a fresh worker with a short window.", ""]
    for search in searches:
        lines += [f"### {_escape(search.title())}", "", f"Settings: {_escape(search.settings())}",
                  ""]
        lines += table(capacity.table(search, report))
        lines += ["", f"**Answer:** {_escape(search.answer())}", ""]
    return lines


def tune_section(tunes: TuneSection | None) -> list[str]:
    """Finished `dlperf tune` studies: a default-vs-best table per framework (the HTML report
    adds a chart of each search)."""
    if tunes is None or not tunes.tables:
        return []
    lines = ["## Default vs best (dlperf tune)", "",
             "Each framework at its defaults and at the fastest configuration `dlperf tune` "
             "found among the settings its backend declares. Throughputs are the search's; the "
             "speedup is the interleaved `ab` that confirmed the best against the default (ratio "
             "of medians, bootstrap 95 % interval, pairs). A best that changes the batch size or "
             "the precision is marked, with the best at the default's batch size and precision "
             "beside it.", ""]
    for found in tunes.tables:
        lines += [f"### {_escape(found.title)}", ""] + table(found) + [""]
    return lines


def render(report: Report, title: str = "dlperf report",
           capacity: Sequence[Search] = (), tunes: TuneSection | None = None) -> str:
    """``capacity``: stored capacity searches (:func:`dlperf.report.capacity.load`);
    ``tunes``: finished tunes (:func:`dlperf.report.tune.build`)."""
    now = dt.datetime.now().isoformat(timespec="seconds")
    count = opening_count(report, tunes)
    lines = [f"# {_escape(title)}", "",
             f"{count}, generated {now}. {_escape(method(report))}", ""]
    for section in report.sections:
        lines += [f"## {_escape(section.title)}", ""]
        lines += table(section.summary)
        lines.append("")
        answered = profiles.comparison_lines(section.compared)  # the profiled comparisons' why
        if answered:
            lines += [f"- {_escape(line)}" for line in answered] + [""]
        for scaling in section.scaling:
            lines += [f"### {_escape(section.title)}: {_escape(scaling.title)}", ""]
            lines += table(scaling)
            lines.append("")
        for detail in section.details:
            lines += [f"### {_escape(section.title)}: {_escape(detail.title)}", ""]
            lines += table(detail)
            lines.append("")
        found = profiles.table(section.results)
        if found is not None:
            lines += [f"### {_escape(section.title)}: {_escape(found.title)}", ""]
            lines += table(found) + [""]
        said = profiles.unavailable(section.results) + profiles.finding_lines(section.results)
        if said:
            lines += [f"### {_escape(section.title)}: findings", ""]
            lines += [f"- {_escape(line)}" for line in said] + [""]
    lines += tune_section(tunes)
    lines += capacity_section(report, capacity)
    for accuracy in report.accuracy:  # stored `dlperf accuracy` rows
        lines += [f"## {_escape(accuracy.title)}", ""] + table(accuracy) + [""]
    if report.notes:
        lines += ["## Notes", ""]
        lines += [f"[{n}]: {_escape(text)}  " for n, text in enumerate(report.notes, 1)]
        lines.append("")
    lines += ["## Environment", ""]
    for index, facts in enumerate(report.environments, 1):
        if len(report.environments) > 1:
            lines += [f"### Environment {index}", ""]
        lines += ["| | |", "|---|---|"]
        lines += [f"| {_escape(k)} | {_escape(v)} |" for k, v in facts.rows()]
        lines.append("")
    return "\n".join(lines)
