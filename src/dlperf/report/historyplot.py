"""The report's history figure: an experiment measured more than once (other versions, builds
or labels of one case, or the same case on other days) as a line of medians with their 95 %
intervals, in run order, labelled by environment and label, with the change points
``dlperf history`` finds marked, and the same change points in words under it."""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.history import changepoints, series
from dlperf.report.palette import Palette, of
from dlperf.results.codec import read_result
from dlperf.results.model import Result, ResultLike

MAX_PANELS = 4


def usable(result: ResultLike) -> bool:
    return bool(read_result(result).median)


def experiments(shown: Sequence[ResultLike],
                every: Sequence[ResultLike] | None = None) -> list[list[Result]]:
    """The experiments (a case whatever its environment and label) of the ``shown`` results,
    each with all its successful results in ``every`` (every stored one; default ``shown``) in
    run order, only those measured at least twice; the longest first."""
    wanted = {series.experiment_of(r) for r in shown if usable(r)}
    groups: dict[str, list[Result]] = {}
    for result in map(read_result, shown if every is None else every):
        if usable(result):
            key = series.experiment_of(result)
            if key in wanted:
                groups.setdefault(key, []).append(result)
    found = [sorted(g, key=lambda r: r.run_id or 0) for g in groups.values() if len(g) > 1]
    return sorted(found, key=len, reverse=True)[:MAX_PANELS]


def judged(group: list[Result]) -> list[changepoints.ChangePoint]:
    """The confirmed change points of one experiment's results."""
    throughputs = [r.throughput for r in group]
    medians = [t.median for t in throughputs if t and t.median is not None]
    repeats = [list(t.repeats) or [t.median] for t in throughputs if t and t.median is not None]
    return changepoints.detect(medians, repeats)


def tick(result: Result) -> str:
    name = result.environment_name
    version = result.framework_version
    text = f"{name} {version}" if version and version not in name else name
    return f"{text}\n{result.run_label}" if result.run_label else text


def change_lines(groups: list[list[Result]]) -> list[str]:
    """Each experiment's change points in words (or that it has none): the figure's caption."""
    lines = []
    for group in groups:
        found = judged(group)
        name = group[0].label
        if len(group) < changepoints.MIN_POINTS:
            lines.append(f"{name}: {len(group)} results, too few to look for a change point "
                         f"(at least {changepoints.MIN_POINTS})")
        elif not found:
            lines.append(f"{name}: no change point in {len(group)} results")
        for change in found:
            at = group[change.index]
            lines.append(f"{name}: change point before run {at.run_id} "
                         f"({tick(at).replace(chr(10), ' ')}): "
                         f"{change.before_median:,.1f} -> {change.after_median:,.1f} "
                         f"({change.relative_change:+.1%}, Mann-Whitney p = "
                         f"{change.p_value:.2g})")
    return lines


def history_figure(shown: Sequence[ResultLike], every: Sequence[ResultLike] | None = None,
                   palette: Palette | None = None) -> bytes | None:
    """One panel per experiment, in the report's colour of its framework (or precision)."""
    groups = experiments(shown, every)
    if not groups:
        return None
    from dlperf.report.plots import WIDTH, _png, plt

    figure, panels = plt.subplots(len(groups), 1, figsize=(WIDTH, 3.2 * len(groups)),
                                  squeeze=False)
    for axes, group in zip(panels[:, 0], groups):
        medians = [float(r.median or 0.0) for r in group]  # usable(): each has one
        intervals = [(r.throughput.ci95 if r.throughput else None) or (m, m)
                     for m, r in zip(medians, group)]
        # an interval that leaves out its median (a stored result's own) is drawn from the median
        low = [max(0.0, m - ci[0]) for m, ci in zip(medians, intervals)]
        high = [max(0.0, ci[1] - m) for m, ci in zip(medians, intervals)]
        xs = list(range(len(group)))
        axes.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3,
                      color=(palette or of(group)).colour(group[0]))
        for change in judged(group):
            axes.axvline(change.index - 0.5, color="tab:red", linestyle="--")
            axes.annotate(f"{change.relative_change:+.1%} (p={change.p_value:.1g})",
                          (change.index - 0.5, max(medians)), color="tab:red", fontsize=8,
                          ha="left", va="top")
        axes.set_xticks(xs)
        axes.set_xticklabels([tick(r) for r in group], fontsize=7, rotation=30, ha="right")
        axes.set_ylabel(group[0].unit)
        axes.set_title(group[0].label, fontsize=9)
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    return _png(figure)
