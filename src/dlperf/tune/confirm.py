"""The confirmation: the best configuration against the default, interleaved.

The search's values come from runs minutes apart; a winner by 3 % may be a machine that warmed
up. So the best (and the best at the default batch size and precision, where that is another)
runs against the default in ``dlperf ab``'s way: A B, B A, ... in fresh ``dlperf run``
processes, the ratio of medians with a bootstrap interval over pairs. Each turn gets what is
left of the budget as its timeout; the pairs that finished are the answer when it runs out.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.history import reproduce
from dlperf.spec import Case
from dlperf.studies import ab
from dlperf.tune import budget as budgets
from dlperf.tune import settings as config


def sides(case: Case, default: dict[str, Any], candidate: dict[str, Any]) -> list[list[str]]:
    """``run FLAGS`` of the default (A) and of the candidate (B), one repeat per turn."""
    return [reproduce.run_flags(config.apply(case, chosen).to_dict())
            for chosen in (default, candidate)]


#: The most of a budget kept for confirming: a slow case confirms with fewer pairs instead of
#: leaving the search no time at all.
MAX_SHARE = 1 / 3
MIN_PAIRS = 2  # the fewest pairs that give an interval


def cost_s(per_run_s: float | None, pairs: int, comparisons: int) -> float:
    """What confirming costs: two runs a pair, ``comparisons`` of them."""
    return 0.0 if per_run_s is None else 2 * pairs * comparisons * per_run_s


def affordable_pairs(per_run_s: float | None, left_s: float, comparisons: int,
                     asked: int) -> int:
    """The pairs each of ``comparisons`` confirmations gets from ``left_s``: as asked when
    they fit, else as many as fit, never fewer than two (the budget still ends the last)."""
    if not per_run_s:
        return asked
    fit = int(left_s // (2 * comparisons * per_run_s))
    return max(MIN_PAIRS, min(asked, fit))


def confirm(case: Case, default: dict[str, Any], candidate: dict[str, Any], pairs: int,
            budget: budgets.Budget, say: Callable[[str], None]) -> dict[str, Any]:
    """``ab``'s summary of default (A) vs candidate (B): ratio B/A, its 95 % interval, the
    pairs that finished within the budget, and each side's median."""
    argv = sides(case, default, candidate)
    result = ab.Comparison(pairs=pairs)
    with tempfile.TemporaryDirectory(prefix="dlperf-tune-ab-") as tmp:
        for pair, side in ab.order(pairs):
            if budget.left() < 1.0:
                say(f"confirmation: the budget ended after {pair} of {pairs} pairs")
                break
            try:
                value, status, error, device = ab.run_side(
                    argv[0 if side == "A" else 1], Path(tmp), f"{side}{pair}",
                    timeout_s=budget.left())
            except subprocess.TimeoutExpired:
                say(f"confirmation: the budget ended during pair {pair + 1} of {pairs}")
                break
            result.turns.append(ab.Turn(side, pair, value, status, error, device))
            shown = f"{value:,.2f}" if value is not None else f"{status}: {error}"
            say(f"  confirm pair {pair + 1}/{pairs} {'default' if side == 'A' else 'best'}: "
                f"{shown}")
            if status != "ok":
                break
    summary = result.summary()
    if summary["pairs"] < MIN_PAIRS:  # one pair is two runs minutes apart, not a comparison
        summary.update(ratio=None, ci95=None, verdict="not confirmed")
    return {"ratio": summary["ratio"], "ci95": summary["ci95"], "pairs": summary["pairs"],
            "pairs_asked": pairs, "verdict": summary["verdict"],
            "a": {"median": summary["a"]["median"], "values": summary["a"]["values"]},
            "b": {"median": summary["b"]["median"], "values": summary["b"]["values"]},
            "failed": summary.get("failed"), "method": summary["method"]}
