"""The report as one self-contained HTML file: tables, plots embedded as base64 PNG, environment.

Nothing is fetched when the file is opened (no scripts, fonts or stylesheets from elsewhere), so it
can be mailed, attached to a CI run or opened years later.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dlperf.report import historyplot, inferplots, plots, profiles, timelines, varies
from dlperf.report.palette import Palette
from dlperf.report.palette import of as palette_of
from dlperf.report.tables import Cell, Report, Section, Table, method
from dlperf.report.tune import opening_count
from dlperf.results.codec import read_result

if TYPE_CHECKING:
    from dlperf.report.capacity import Search
    from dlperf.report.tune import Section as TuneSection

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #1d1d1f; line-height: 1.4; }
h1 { font-size: 1.7em; margin-bottom: 0.2em; }
h2 { border-bottom: 2px solid #d0d7de; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.3em 0.6em; }
th { background: #f3f5f7; text-align: left; }
td.r { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafbfc; }
sup a { text-decoration: none; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #e5e7eb; }
figure svg { max-width: 100%; height: auto; border: 1px solid #e5e7eb; }
figcaption, .muted { color: #57606a; font-size: 0.9em; }
ol.notes li { font-size: 0.88em; margin-bottom: 0.3em; }
.env td:first-child { font-weight: 600; white-space: nowrap; }
nav ul { columns: 2; }
div.wide { overflow-x: auto; }
ul.answers li { margin-bottom: 0.4em; }
"""

Draw = Callable[[list[dict[str, Any]], Palette], "bytes | None"]
#: the section's figures, each left out where it has nothing to draw: a title (or how to make it
#: from the section's results: the comparison figure is titled by what it compares) and a drawing
FIGURES: tuple[tuple[str | Callable[[list[dict[str, Any]]], str], Draw], ...] = (
    (plots.compared_title, plots.compared),
    ("Throughput vs devices", plots.scaling),
    ("Speedup vs devices", plots.speedup),
    ("Throughput vs batch size", plots.batch_size),
    ("Per-repeat spread", plots.repeat_spread),
    ("Roofline", profiles.roofline_figure),
)
HISTORY = "History and versions"


def not_measured(section: Section) -> list[str]:
    """What the section's figures and findings would show had it been measured: the one line
    a report says about what it does not hold, in a few words each."""
    shown = varies.ok(section.results)
    if not shown:
        return []
    along = varies.varying(section.results)
    typed = [read_result(r) for r in shown]
    missing = []
    if varies.DEVICE_COUNTS not in along:
        missing.append("more than one device count")
    elif not any(r.speedup is not None and r.devices > 1 for r in typed):
        missing.append("a 1-device baseline for a speedup")
    if varies.BATCH not in along:
        missing.append("more than one batch size")
    if not profiles.profiled(section.results) and any(
            (r.case.get("task") or "train") == "train" for r in typed):
        missing.append("profiles (dlperf run --profile)")
    if not profiles.roofline_points(section.results):
        missing.append("the machine's peaks for a roofline (dlperf sysinfo --probe)")
    return missing


def answers(section: Section) -> str:
    """Under the summary: each comparison whose two sides were profiled, its ratio, interval
    and verdict, and why in words, each reason with its numbers."""
    lines = profiles.comparison_lines(section.compared)
    if not lines:
        return ""
    return ('<ul class="answers">' + "".join(f"<li>{_e(line)}</li>" for line in lines)
            + "</ul>")


def profile_section(results: list[dict[str, Any]]) -> str:
    """Where the time goes (profiled results: `--profile`) and each result's findings in words."""
    found = profiles.table(results)
    lines = profiles.unavailable(results) + profiles.finding_lines(results)
    parts = [f"<h3>{_e(found.title)}</h3>{table(found)}"] if found is not None else []
    if lines:
        parts.append("<h3>Findings</h3><ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines)
                     + "</ul>")
    return "".join(parts)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def cell(value: Cell, align: str, header: bool = False) -> str:
    marks = "".join(f'<sup><a href="#note-{n}">[{n}]</a></sup>'
                    for n in dict.fromkeys(value.notes))
    tag = "th" if header else "td"
    return f'<{tag} class="{align}">{_e(value.text)}{marks}</{tag}>'


def table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(cell(c, a) for c, a in zip(row, t.align)) + "</tr>"
                   for row in t.rows)
    # a table wider than the page scrolls in its own box; the page keeps its width
    return (f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def figure(title: str, png: bytes | None) -> str:
    """The figure, or nothing where it has nothing to draw."""
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_e(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(title)}</figcaption></figure>")


def history_block(title: str, results: list[dict[str, Any]],
                  every: list[dict[str, Any]] | None, palette: Palette) -> str:
    """The history figure of the section's experiments over all their stored results (``every``;
    the report's own rows alone keep only the newest per case and label), and the change points
    in words under it; nothing where no experiment was measured twice."""
    groups = historyplot.experiments(results, every)
    if not groups:
        return ""
    lines = historyplot.change_lines(groups)
    words = ('<ul class="muted">' + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>"
             if lines else "")
    return figure(title, historyplot.history_figure(results, every, palette)) + words


def timeline_figures(results: list[dict[str, Any]]) -> str:
    """Per case, the median repeat's resources over time (inline SVG: matplotlib escapes the
    text it writes, and the caption is escaped here)."""
    shown = [r for r in results if timelines.has_timeline(r)]
    if not shown:
        return ""
    parts = ["<h3>Resources over time</h3><p class=\"muted\">CPU of the worker's process tree "
             "against the rest of the host, its memory, and the host's disk and network, sampled "
             "every half second through one repeat; shaded: the worker's phases (the window is "
             "green). Window means are over the window's samples only.</p>"]
    for result in shown:
        parts.append(f"<figure>{timelines.figure(result)}<figcaption>"
                     f"{_e(read_result(result).label)}: {_e(timelines.caption(result))}"
                     "</figcaption></figure>")
    return "".join(parts)


def raw_repeats(results: list[dict[str, Any]]) -> str:
    rows = []
    for result in results:
        typed = read_result(result)
        repeats = typed.throughput.repeats if typed.throughput else ()
        values = ", ".join(f"{v:,.2f}" for v in repeats) or "—"
        run_id = "" if typed.run_id is None else typed.run_id
        rows.append(f"<tr><td>{_e(run_id)}</td><td>{_e(typed.label)}"
                    f"</td><td>{_e(typed.status)}</td><td>{_e(values)}</td></tr>")
    return ("<details><summary>Raw per-repeat throughput</summary><table><thead><tr>"
            "<th>run</th><th>case</th><th>status</th><th>repeats (samples/s)</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></details>")


def capacity_section(report: Report, searches: Sequence[Search]) -> str:
    """Stored `dlperf capacity` searches: per search its settings, every probe, the answer and
    latency and peak memory against the value (inline SVG; matplotlib escapes its text)."""
    from dlperf.report import capacity

    if not searches:
        return ""
    parts = ['<section><h2 id="capacity">Capacity</h2><p class="muted">Every probe '
             "<code>dlperf capacity</code> stored (sweep <code>capacity</code>), per search, "
             "ascending by value; each probe is a fresh worker with a short window.</p>"]
    for search in searches:
        parts.append(f"<h3>{_e(search.title())}</h3>"
                     f'<p class="muted">Settings: {_e(search.settings())}</p>'
                     f"{table(capacity.table(search, report))}"
                     f"<p><strong>Answer:</strong> {_e(search.answer())}</p>")
        svg = capacity.figure(search)
        if svg is None:
            parts.append('<p class="muted">No plot: the probe\'s value of the searched '
                         "parameter is not stored.</p>")
        else:
            parts.append(f'<figure class="capacity">{svg}<figcaption>'
                         f"{_e(capacity.caption(search))}</figcaption></figure>")
    parts.append("</section>")
    return "".join(parts)


TUNE_ID = "default-vs-best"


def tune_section(tunes: TuneSection | None) -> str:
    """Finished `dlperf tune` studies: a default-vs-best table per framework, then a chart of
    each search (PNG; its text is the studies' data, which matplotlib draws as plain text)."""
    from dlperf.report import tune

    if tunes is None or not tunes.tables:
        return ""
    parts = [f'<section><h2 id="{TUNE_ID}">Default vs best (dlperf tune)</h2>'
             '<p class="muted">Each framework at its defaults and at the fastest configuration '
             "<code>dlperf tune</code> found among the settings its backend declares. "
             "Throughputs are the search's (median of the trial's repeats); the speedup is the "
             "interleaved <code>ab</code> that confirmed the best against the default: the ratio "
             "of medians, its bootstrap 95 % interval and the pairs. A best that changes the "
             "batch size or the precision is marked, and the best at the default's batch size "
             "and precision stands beside it.</p>"]
    for found in tunes.tables:
        parts.append(f"<h3>{_e(found.title)}</h3>{table(found)}")
    for study in tunes.studies:
        parts.append(figure(f"Search: {study.title()}", tune.figure(study)))
        parts.append(f'<p class="muted">{_e(tune.caption(study))}</p>')
    parts.append("</section>")
    return "".join(parts)


def render(report: Report, title: str = "dlperf report",
           capacity: Sequence[Search] = (), history: list[dict[str, Any]] | None = None,
           tunes: TuneSection | None = None) -> str:
    """``capacity``: stored capacity searches (:func:`dlperf.report.capacity.load`);
    ``history``: every stored successful result (:func:`dlperf.report.results.load_history`),
    for the history figure (default: the report's results); ``tunes``: finished tunes
    (:func:`dlperf.report.tune.build`)."""
    now = dt.datetime.now().isoformat(timespec="seconds")
    count = opening_count(report, tunes)
    parts = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{_e(title)}</h1>",
             f'<p class="muted">{_e(count)}, generated {_e(now)}. {_e(method(report))}</p>']
    parts.append("<nav><ul>" + "".join(
        f'<li><a href="#{anchor(s.title)}">{_e(s.title)}</a></li>' for s in report.sections)
        + (f'<li><a href="#{TUNE_ID}">Default vs best</a></li>'
           if tunes is not None and tunes.tables else "")
        + ('<li><a href="#capacity">Capacity</a></li>' if capacity else "")
        + ('<li><a href="#accuracy">Accuracy</a></li>' if report.accuracy else "")
        + '<li><a href="#notes">Notes</a></li><li><a href="#environment">Environment</a></li>'
        "</ul></nav>")
    palette = palette_of(report.results)  # one colour per framework (or precision) throughout
    for section in report.sections:
        parts.append(f'<section><h2 id="{anchor(section.title)}">{_e(section.title)}</h2>')
        parts.append(table(section.summary))
        parts.append(answers(section))
        for scaling in section.scaling:
            parts.append(f"<h3>{_e(scaling.title)}</h3>{table(scaling)}")
        for name, draw in (*FIGURES, *inferplots.figures(section.results)):
            title = name if isinstance(name, str) else name(section.results)
            parts.append(figure(f"{section.title}: {title}", draw(section.results, palette)))
        for made in section.projections:  # drawn apart from the measured figures
            parts.append(figure(f"{section.title}: projected (not measured), projection "
                                f"{made.get('id', '?')}", plots.projected(made, section.results)))
        parts.append(history_block(f"{section.title}: {HISTORY}", section.results, history,
                                   palette))
        missing = not_measured(section)
        if missing:
            parts.append(f'<p class="muted">Not measured here: {_e("; ".join(missing))}.</p>')
        for detail in section.details:
            parts.append(f"<h3>{_e(detail.title)}</h3>{table(detail)}")
        parts.append(profile_section(section.results))
        parts.append(timeline_figures(section.results))
        parts.append(raw_repeats(section.results))
        parts.append("</section>")
    parts.append(tune_section(tunes))
    parts.append(capacity_section(report, capacity))
    for accuracy in report.accuracy:  # stored `dlperf accuracy` rows
        parts.append(f'<section><h2 id="accuracy">{_e(accuracy.title)}</h2>{table(accuracy)}'
                     "</section>")
    parts.append('<h2 id="notes">Notes</h2>')
    if report.notes:
        parts.append('<ol class="notes">' + "".join(
            f'<li id="note-{n}">{_e(text)}</li>' for n, text in enumerate(report.notes, 1))
            + "</ol>")
    else:
        parts.append('<p class="muted">No failures, fallbacks or warnings.</p>')
    parts.append('<h2 id="environment">Environment</h2>')
    for index, facts in enumerate(report.environments, 1):
        if len(report.environments) > 1:
            parts.append(f"<h3>Environment {index}</h3>")
        parts.append('<table class="env">' + "".join(
            f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in facts.rows()) + "</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
