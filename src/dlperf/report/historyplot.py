"""The report's history figure: an experiment measured more than once (other versions, builds
or labels of one case) as a line of medians with their 95 % intervals, in run order, labelled
by environment and label, with the change points ``dlperf history`` finds marked."""

from __future__ import annotations

from typing import Any

from dlperf.history import changepoints, series

MAX_PANELS = 4


def experiments(results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Successful results grouped by experiment (a case whatever its environment and label),
    run order, only the experiments measured at least twice; the longest first."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        tp = result.get("throughput") or {}
        if result.get("status") == "ok" and tp.get("median"):
            groups.setdefault(series.experiment_of(result), []).append(result)
    found = [sorted(g, key=lambda r: r.get("run_id") or 0) for g in groups.values()
             if len(g) > 1]
    return sorted(found, key=len, reverse=True)[:MAX_PANELS]


def tick(result: dict[str, Any]) -> str:
    environment = result.get("environment") or {}
    name = environment.get("name") or result["case"]["framework"]
    version = environment.get("framework_version")
    text = f"{name} {version}" if version and version not in name else name
    return f"{text}\n{environment['label']}" if environment.get("label") else text


def history_figure(results: list[dict[str, Any]]) -> bytes | None:
    shown = experiments(results)
    if not shown:
        return None
    from dlperf.report.plots import WIDTH, _png, plt

    figure, panels = plt.subplots(len(shown), 1, figsize=(WIDTH, 3.2 * len(shown)),
                                  squeeze=False)
    for axes, group in zip(panels[:, 0], shown):
        medians = [r["throughput"]["median"] for r in group]
        # an interval that leaves out its median (a stored result's own) is drawn from the median
        low = [max(0.0, m - (r["throughput"].get("ci95") or [m, m])[0])
               for m, r in zip(medians, group)]
        high = [max(0.0, (r["throughput"].get("ci95") or [m, m])[1] - m)
                for m, r in zip(medians, group)]
        xs = list(range(len(group)))
        axes.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3)
        repeats = [r["throughput"].get("repeats") or [m] for m, r in zip(medians, group)]
        for change in changepoints.detect(medians, repeats):
            axes.axvline(change.index - 0.5, color="tab:red", linestyle="--")
            axes.annotate(f"{change.relative_change:+.1%} (p={change.p_value:.1g})",
                          (change.index - 0.5, max(medians)), color="tab:red", fontsize=8,
                          ha="left", va="top")
        axes.set_xticks(xs)
        axes.set_xticklabels([tick(r) for r in group], fontsize=7, rotation=30, ha="right")
        axes.set_ylabel(group[0].get("unit", "samples/s"))
        axes.set_title(str(group[0].get("label")), fontsize=9)
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    return _png(figure)
