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
from collections.abc import Callable, Sequence
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


#: The share of a budget kept for confirming: a slow case confirms with fewer pairs instead of
#: leaving the search no time at all; but the fewest pairs' cost where that is more, up to
#: half the budget (beyond it the search would measure nothing worth confirming).
MAX_SHARE = 1 / 3
MIN_PAIRS_SHARE = 1 / 2
MIN_PAIRS = 2  # the fewest pairs that give an interval


def pair_s(default_walls: Sequence[float], candidate_walls: Sequence[float]) -> float | None:
    """What one pair costs: a run of the default and one of the candidate, each at its own
    runs' typical wall. A compiled candidate's run costs several of the default's (XLA in
    tensorflow1: 2-3x), which one typical run over all the trials hid. An unmeasured side
    costs what the measured one does; None when neither has run."""
    known = [w for w in (budgets.typical(default_walls), budgets.typical(candidate_walls))
             if w]
    return 2 * sum(known) / len(known) if known else None


def cost_s(pairs_s: Sequence[float | None], pairs: int) -> float:
    """What confirming costs: ``pairs`` pairs of each comparison, at that comparison's
    :func:`pair_s`."""
    return pairs * sum(cost for cost in pairs_s if cost)


def reserve_s(pairs_s: Sequence[float | None], asked: int, budget_s: float) -> float:
    """The budget kept from the search for confirming: the asked pairs when they cost at
    most :data:`MAX_SHARE` of it, else that share, but at least the :data:`MIN_PAIRS` pairs
    up to :data:`MIN_PAIRS_SHARE` (a comparison of one pair is not confirmed; searching less
    is the better loss, searching nothing is not)."""
    floor = min(cost_s(pairs_s, MIN_PAIRS), MIN_PAIRS_SHARE * budget_s)
    return min(cost_s(pairs_s, asked), max(MAX_SHARE * budget_s, floor))


def affordable_pairs(pairs_s: Sequence[float | None], left_s: float, asked: int) -> int:
    """The pairs the next confirmation gets when ``pairs_s`` are it and the ones after it:
    as asked when all fit in ``left_s``, else as many as fit, never fewer than two (the
    budget still ends the last)."""
    cost = cost_s(pairs_s, 1)
    if not cost:
        return asked
    return max(MIN_PAIRS, min(asked, int(left_s // cost)))


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
