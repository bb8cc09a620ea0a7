"""Finished ``dlperf tune`` studies in the report: default vs best per framework, and each search.

Per framework a table with a row per tuned case (the newest finished study of it): the default's
throughput and settings, the best's throughput and the settings it changed, the speedup the
interleaved ``ab`` confirmed (ratio of medians, its 95 % interval, the pairs), a mark where the
best changes the mathematics (batch size, precision) with the best at the default's batch size
and precision beside it, the search's time and its trials. Under it, a chart per search: every
trial's throughput in order, pruned and failed trials marked apart, the default's level as a
line. Every text is data; the renderers escape it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf import numbers
from dlperf.report import framework_notes
from dlperf.report.tables import Cell, Report, Table, knob_text, number
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.tune import settings as config

CHANGES_MATH_NOTE = ("a best that changes the batch size or the precision trains differently "
                     "(another batch, other numerics): its throughput is not the same training "
                     "as the default's; the best at the default's batch size and precision "
                     "beside it is the like-for-like one")
NOT_CONFIRMED = "not confirmed (the budget ended before the interleaved pairs)"


@dataclass
class Study:
    """One finished tune: its case, outcome and trials, as :func:`dlperf.tune.stored.outcomes`
    gives them."""

    key: str
    case: dict[str, Any]
    outcome: dict[str, Any]
    trials: list[dict[str, Any]]
    finished_at: str = ""

    @property
    def framework(self) -> str:
        return str(self.case.get("framework") or "?")

    def shape(self) -> str:
        """``resnet50 (image_size=64) train · bsz 8 fp32 · cpu``."""
        case = self.case
        knobs = knob_text(case)
        return (f"{case.get('model')}" + (f" ({knobs})" if knobs else "")
                + f" {case.get('task') or 'train'} · bsz {case.get('batch_size')} "
                  f"{case.get('precision')} · {self.outcome.get('device') or case.get('device')}")

    def title(self) -> str:
        return f"{self.framework} {self.shape()}"


@dataclass
class Section:
    """The report's tune section: a table per framework, the studies it shows."""

    tables: list[Table] = field(default_factory=list)
    studies: list[Study] = field(default_factory=list)


def newest(found: list[dict[str, Any]]) -> list[Study]:
    """The newest finished study of each tuned case (a ``--new`` search replaces the older)."""
    latest: dict[str, dict[str, Any]] = {}
    for study in found:
        latest.pop(study["base_key"], None)
        latest[study["base_key"]] = study
    return [Study(key=str(s["study"]), case=dict(s.get("case") or {}),
                  outcome=dict(s["outcome"]), trials=list(s.get("trials") or []),
                  finished_at=str(s.get("finished_at") or "")) for s in latest.values()]


def duration(seconds: float | None) -> str:
    return "—" if seconds is None else numbers.duration(seconds)


def speedup_text(chosen: dict[str, Any] | None) -> str:
    """``1.123× (95 % CI 1.05–1.19, 4 pairs, faster)``, from the confirming ``ab``."""
    if not chosen:
        return "—"
    if chosen.get("trial") == 0:
        return "1× (the default is the best found)"
    found = chosen.get("ab") or {}
    if found.get("ratio") is None:
        return NOT_CONFIRMED
    ci = found.get("ci95")
    interval = f"95 % CI {ci[0]:.3f}–{ci[1]:.3f}, " if ci else "no interval, "
    return (f"{found['ratio']:.3f}× ({interval}{found.get('pairs', 0)} pairs, "
            f"{found.get('verdict') or '?'})")


def changed_text(chosen: dict[str, Any] | None) -> str:
    if not chosen:
        return "—"
    changed = chosen.get("changed") or {}
    return config.describe(changed) if changed else "none (the default)"


def fixed_text(outcome: dict[str, Any]) -> str:
    """The best at the default's batch size and precision, where the best changed either."""
    best = outcome.get("best") or {}
    if not best.get("changes_math"):
        return "the best (it keeps them)"
    fixed = outcome.get("best_fixed")
    if not fixed:
        return "the default (nothing faster at them)"
    return (f"{number(fixed.get('throughput'))} · {changed_text(fixed)} · "
            f"{speedup_text(fixed)}")


def trials_text(outcome: dict[str, Any]) -> str:
    counts = outcome.get("trials") or {}
    refused = counts.get("refused", 0)  # proposed, declared impossible, never measured
    return (f"{counts.get('complete', 0)} complete, {counts.get('pruned', 0)} pruned, "
            f"{counts.get('failed', 0)} failed"
            + (f", {refused} left out (declared impossible)" if refused else ""))


def time_text(outcome: dict[str, Any]) -> str:
    return (f"{duration(outcome.get('search_s'))} of {duration(outcome.get('budget_s'))} "
            f"(confirming {duration(outcome.get('confirm_s'))})")


def row(report: Report, study: Study) -> list[Cell]:
    outcome = study.outcome
    default = outcome.get("default") or {}
    best = outcome.get("best")
    notes = [report.note(text) for text in framework_notes.texts(
        study.framework, [{"case": study.case}])]
    maths = (best or {}).get("changes_math") or []
    return [Cell(study.framework, notes), Cell(study.shape()),
            Cell(number(default.get("throughput"))),
            Cell(config.describe(default.get("settings") or {})),
            Cell(number((best or {}).get("throughput"))), Cell(changed_text(best)),
            Cell(speedup_text(best)),
            Cell(("yes: " + ", ".join(maths)) if maths else "no",
                 [report.note(CHANGES_MATH_NOTE)] if maths else []),
            Cell(fixed_text(outcome)), Cell(time_text(outcome)), Cell(trials_text(outcome))]


HEADERS = ["framework", "model / shape", "default ({unit}, search)", "default settings",
           "best ({unit}, search)", "best: settings changed", "speedup (interleaved ab)",
           "changes the mathematics", "best at the default's batch and precision",
           "search time", "trials"]
ALIGN = ["l", "l", "r", "l", "r", "l", "l", "l", "l", "l", "l"]


def build(report: Report, found: list[dict[str, Any]]) -> Section:
    """The section for ``found`` (:func:`dlperf.tune.stored.outcomes`); empty when none."""
    section = Section(studies=newest(found))
    by_framework: dict[str, list[Study]] = {}
    for study in section.studies:
        by_framework.setdefault(study.framework, []).append(study)
    for framework in sorted(by_framework):
        members = by_framework[framework]
        unit = members[0].outcome.get("unit") or "samples/s"
        table = Table(f"{framework}: default vs best",
                      [h.format(unit=unit) for h in HEADERS], list(ALIGN))
        for study in members:
            table.rows.append(row(report, study))
        section.tables.append(table)
    return section


def for_results(found: list[dict[str, Any]], results: Sequence[ResultLike],
                sweep: str | None) -> list[dict[str, Any]]:
    """The studies a report of ``results`` shows: all of them without a sweep (or for the
    tune's own runs); with one, those of the frameworks and models the sweep measured."""
    if sweep in (None, "tune"):
        return found
    shown = {(case.get("framework"), case.get("model"))
             for case in (read_result(r).case for r in results)}
    return [s for s in found if (s.get("framework"), s.get("model")) in shown]


def caption(study: Study) -> str:
    outcome = study.outcome
    best = outcome.get("best") or {}
    return (f"{study.title()}: throughput of every trial in the order measured (study "
            f"{study.key}); {trials_text(outcome)}; best trial {best.get('trial', '—')} "
            f"({changed_text(best)}); dashed: the default's level")


def figure(study: Study) -> bytes | None:
    """Trial number vs throughput: complete trials filled, pruned hollow (at the value of the
    rung they reached), failed as crosses on the axis, the best a star, the default a line."""
    from dlperf.report import plots  # matplotlib, set up as the report's other figures

    plt = plots.plt
    shown = [t for t in study.trials if not str(t.get("error") or "").startswith("same ")
             and t.get("state") != "refused"]  # proposed, never measured
    if not shown:
        return None
    outcome = study.outcome
    unit = outcome.get("unit") or "samples/s"
    figure_, axes = plt.subplots(figsize=(plots.WIDTH, 3.6))
    complete = [t for t in shown if t.get("state") == "complete" and t.get("value") is not None]
    pruned = [t for t in shown if t.get("state") == "pruned" and t.get("value") is not None]
    failed = [t for t in shown if t not in complete and t not in pruned]
    if complete:
        axes.plot([t["number"] for t in complete], [t["value"] for t in complete], "o",
                  color="C0", label="complete (median of its repeats)")
    if pruned:
        axes.plot([t["number"] for t in pruned], [t["value"] for t in pruned], "o",
                  markerfacecolor="none", color="C1", label="pruned (its screening run)")
    if failed:
        axes.plot([t["number"] for t in failed], [0.0] * len(failed), "x", color="C3",
                  markersize=8, clip_on=False, label="failed (no throughput)")
    default = (outcome.get("default") or {}).get("throughput")
    if default is not None:
        axes.axhline(default, linestyle="--", color="0.3", linewidth=1.2,
                     label=f"default: {default:,.1f}")
    best = outcome.get("best") or {}
    top = next((t for t in complete if t["number"] == best.get("trial")), None)
    if top is not None:
        axes.plot([top["number"]], [top["value"]], "*", color="C2", markersize=14,
                  label=f"best: trial {top['number']}")
    axes.set_ylim(bottom=0)
    axes.xaxis.set_major_locator(plots.ticker.MaxNLocator(integer=True))
    axes.set_xlabel("trial (in the order measured; 0 is the default)")
    axes.set_ylabel(f"throughput ({unit})")
    axes.set_title(f"Search: {study.title()}")
    axes.grid(True, alpha=0.3)
    plots._legend_below(axes, 5)
    return plots._png(figure_)


def opening_count(report: Report, tunes: Section | None) -> str:
    """A report's opening count: its results and, when it has a tune section, its tunes. A
    tune's trials are kept out of the results tables, so a database holding only tunes would
    otherwise open with a bare "0 result(s)" above a page of them."""
    line = f"{len(report.results)} result(s)"
    if tunes and tunes.studies:
        line += f" and {len(tunes.studies)} tune(s), whose trials are shown in their own section"
    return line
