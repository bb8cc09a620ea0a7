"""The fidelity table: one row per framework, dlperf's rate against a reference loop's.

`make fidelity` (benchmarks/fidelity.py) measures each installed framework with `dlperf ab`
(reference loop A, `dlperf run` B, interleaved pairs in fresh processes); this module turns the
pairs into the numbers a reader checks and writes them as a terminal table, JSON and Markdown.

The ratio is dlperf / loop per pair, summed up as the geometric mean of the pair ratios, with a
Student-t 95 % interval over the log pair ratios (scipy). Pairs, not the two sides' medians, carry
the comparison: a drift of the host moves both turns of a pair, and a ratio of rates is judged on
the log scale (0.5 and 2 are equally far from 1). With few pairs the t interval is wide, as it
should be (2 pairs: 12.7 standard errors each side); `dlperf ab`'s own bootstrap of the ratio of
medians is kept beside it in the JSON.

A row holds one entry per *reference loop kind* (``LOOP_KINDS``), each from its own `dlperf ab`:
``same-recipe``, the hand-written loops in benchmarks/handwritten/ that share the network module
and recipe with dlperf's backend (dlperf / loop: the harness's cost), and ``independent``, loops
that share nothing with dlperf (benchmarks/independent/, and Caffe2's own trainer; dlperf / loop:
the backend against what the framework's users write, issue 32). Each kind asked gets its own
column group (dlperf and loop samples/s, ratio, interval, pairs); a framework without one shows
"—" there, and ``missing`` in its row says why (a note under the table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

SCHEMA = 1
LEVEL = 0.95
# (key in a row's "loops", the column heading): the order of the column groups
LOOP_KINDS = (("same-recipe", "same-recipe loop"), ("independent", "independent loop"))
QUIET_IDLE = 0.90  # the whole machine idle at least this share before a framework's pairs ...
QUIET_OTHERS = 0.05  # ... and other processes under this share of its CPU time during them
METHOD = ("ratio: geometric mean of the pair ratios dlperf/loop; 95 % interval: Student t over "
          "the log pair ratios (scipy.stats.ttest_1samp), pairs interleaved in fresh processes")


def pair_ratios(loop: Sequence[float], dlperf: Sequence[float]) -> np.ndarray:
    """dlperf / loop of each complete pair (A is the loop, B dlperf, in `dlperf ab`'s order)."""
    a, b = np.asarray(loop, dtype=float), np.asarray(dlperf, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"pairs: {a.size} loop values against {b.size} dlperf values")
    if a.size and not (np.all(a > 0) and np.all(b > 0)):
        raise ValueError("pairs: every rate must be positive")
    return b / a


def ratio_interval(ratios: Sequence[float], level: float = LEVEL
                   ) -> tuple[float | None, tuple[float, float] | None]:
    """(geometric mean, its t interval) of pair ratios; (None, None) without a pair, and no
    interval from one pair (no spread to scale it by)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    if logs.size == 0:
        return None, None
    centre = float(math.exp(logs.mean()))
    if logs.size < 2:
        return centre, None
    if np.ptp(logs) == 0.0:  # identical ratios: scipy's t statistic is undefined, the spread 0
        return centre, (centre, centre)
    from scipy import stats  # here: 1.3 s of imports every fidelity.py start (a bad flag too) paid

    ci = stats.ttest_1samp(logs, 0.0).confidence_interval(confidence_level=level)
    return centre, (float(math.exp(ci.low)), float(math.exp(ci.high)))


def loop_entry(loop: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One reference loop's figures from `dlperf ab --json`'s summary (A = loop, B = dlperf)."""
    a, b = summary["a"]["values"], summary["b"]["values"]
    ratios = pair_ratios(a, b)
    ratio, ci = ratio_interval(ratios)
    return {"loop": loop, "pairs": int(ratios.size), "pairs_asked": summary.get("pairs_asked"),
            "dlperf": summary["b"]["median"], "loop_rate": summary["a"]["median"],
            # where each side ran, as `dlperf ab` read it from the results (resolved device)
            "device": ", ".join(summary["b"].get("devices") or []) or None,
            "loop_device": ", ".join(summary["a"].get("devices") or []) or None,
            "ratio": ratio, "ci95": list(ci) if ci else None,
            "pair_ratios": ratios.tolist(), "dlperf_values": list(b), "loop_values": list(a),
            "ab": {k: summary.get(k) for k in ("ratio", "ci95", "verdict", "method")}}


def host_cell(host: dict[str, Any] | None) -> str:
    """Host state in a few words: quiet or busy, load before->after, idle before->after, and
    what other processes took of the machine while the pairs ran."""
    if not host:
        return "—"
    before, after = host.get("before") or {}, host.get("after") or {}
    parts = []

    def pair(key: str, fmt: str) -> str:
        def one(value: Any) -> str:
            return "?" if value is None else format(value, fmt)
        return f"{one(before.get(key))}→{one(after.get(key))}"

    parts.append(f"load {pair('load1', '.2f')}")
    parts.append(f"idle {pair('idle', '.0%')}")
    others = (host.get("others") or {}).get("other_cpu_share")
    if others is not None:
        parts.append(f"others {others:.0%}")
    return f"{'quiet' if quiet(host) else 'busy'}: " + ", ".join(parts)


def quiet(host: dict[str, Any]) -> bool:
    """Idle enough before the pairs, and no neighbour took a noticeable share during them."""
    idle = (host.get("before") or {}).get("idle")
    others = (host.get("others") or {}).get("other_cpu_share")
    return (idle is not None and idle >= QUIET_IDLE
            and (others is None or others <= QUIET_OTHERS))


def kinds_measured(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The loop kinds asked (``asked``), measured or missing in some row, in ``LOOP_KINDS``
    order: the table's column groups."""
    seen = {kind for row in rows
            for kind in [*(row.get("asked") or []), *(row.get("loops") or {}),
                         *(row.get("missing") or {})]}
    return [(key, title) for key, title in LOOP_KINDS if key in seen] or [LOOP_KINDS[0]]


def header(rows: Sequence[dict[str, Any]]) -> list[str]:
    cells = ["framework", "shape", "device"]
    for key, title in kinds_measured(rows):
        cells += [f"dlperf samples/s ({key})", f"{title} samples/s", f"ratio vs {title}",
                  "95 % interval", "pairs"]
    return cells + ["host state"]


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def _ratio(value: float) -> str:
    """Three decimals near 1; three significant digits for the far bounds few pairs give."""
    return f"{value:.3f}" if 0.001 <= value < 1000 else f"{value:.3g}"


def cells(row: dict[str, Any], kinds: Sequence[tuple[str, str]]) -> list[str]:
    """One framework's cells; a skipped row says so in its first rate cell, a kind it lacks or
    that failed before a pair shows "—" (``notes`` says why)."""
    case = row.get("case") or {}
    shape = (f"image {case['image_size']}, batch {case['batch_size']}"
             if "image_size" in case else "—")
    loops = row.get("loops") or {}
    first = next((loops[key] for key, _ in kinds if key in loops), {})
    out = [row["framework"], shape, first.get("device") or "—"]
    for index, (key, _) in enumerate(kinds):
        entry = loops.get(key)
        if entry is None:
            shown = row["status"] if not loops and index == 0 else "—"
            out += [shown, "—", "—", "—", "—"]
            continue
        ci = entry.get("ci95")
        pairs = str(entry.get("pairs"))
        if entry.get("failed"):
            pairs += f" of {entry.get('pairs_asked')}, failed"
        out += [_rate(entry.get("dlperf")), _rate(entry.get("loop_rate")),
                "—" if entry.get("ratio") is None else _ratio(entry["ratio"]),
                f"{_ratio(ci[0])}–{_ratio(ci[1])}" if ci else "—", pairs]
    return out + [host_cell(row.get("host"))]


def notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For under the table, one line each: why a framework was skipped or failed, why it lacks
    a loop kind, the dlperf mode each independent loop was compared against, and what dlperf
    keeps different from a loop on purpose (with its measured cost)."""
    lines = [f"{row['framework']} {row['status']}: {row.get('reason')}" for row in rows
             if row["status"] != "measured"]
    for row in rows:
        for kind, reason in (row.get("missing") or {}).items():
            lines.append(f"{row['framework']}, {kind}: {reason}")
    modes = [f"{row['framework']} {entry.get('mode')} (dlperf "
             f"{'--compile' if entry.get('compile') else '--no-compile'})"
             for row in rows if (entry := (row.get("loops") or {}).get("independent"))]
    if modes:
        lines.append("independent loops run their framework's default mode, dlperf the same: "
                     + "; ".join(modes))
    lines += [f"{row['framework']} differs from its independent loop on purpose: {differs}"
              for row in rows
              if (differs := ((row.get("loops") or {}).get("independent") or {}).get("differs"))]
    return lines


def document(rows: Sequence[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON file's content: how it was measured, then the rows as measured."""
    return {"schema": SCHEMA, "method": METHOD, "settings": dict(settings), "rows": list(rows)}


def markdown(doc: dict[str, Any]) -> str:
    """The table as Markdown, with the method and the settings under it."""
    rows = doc["rows"]
    kinds = kinds_measured(rows)
    lines = ["# dlperf fidelity", "",
             "| " + " | ".join(header(rows)) + " |",
             "|" + "|".join(" --- " for _ in header(rows)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(row, kinds)) + " |")
    if notes(rows):
        lines += [""] + [f"- {line}" for line in notes(rows)]
    settings = ", ".join(f"{k} {v}" for k, v in doc["settings"].items())
    lines += ["", f"{doc['method']}. Ratio vs the same-recipe loop (dlperf's own network "
              f"module and recipe in the framework's idiomatic loop): within 0.97–1.03 the "
              f"harness neither costs nor inflates. Ratio vs the independent loop (one that "
              f"shares nothing with dlperf, written as the framework's users write it): within "
              f"0.97–1.03 dlperf's backend is as fast as that framework's own code. Host "
              f"state: load average (1 min) and whole-machine idle share before→after each "
              f"framework's pairs (all its loop kinds), and other processes' share of the CPU "
              f"during them (quiet: idle ≥ {QUIET_IDLE:.0%} before, others ≤ "
              f"{QUIET_OTHERS:.0%}).", "", f"Settings: {settings}.", ""]
    return "\n".join(lines)
