"""Change points of a series of results: where its level moved, how much, how surely.

Detection is ruptures' PELT (Killick et al. 2012: the exact optimal segmentation under a
penalty, linear time) on the logarithm of each result's median, cost ``l2`` (a shift in the
mean). Why ruptures: a maintained, pip-installable library (a wheel for this Python, only numpy
and scipy beneath it) with exact search; MongoDB's e-divisive (signal-processing-algorithms, and
Apache Otava on top of it) ships here only as a source build.

Noise-aware twice over. The penalty scales with the series' own noise: sigma is estimated from
the median absolute difference of successive medians (robust to the steps themselves), and a
change must pay ``PENALTY_SIGMAS * sigma^2 * ln(n)`` (a BIC-like price, three times the usual).
Then each candidate is confirmed on the results' repeats: the pooled repeats of the segment
before and after it are compared with a Mann-Whitney U test (two-sided), and the change must be
significant (p < ``ALPHA``) and larger than ``NOISE_SIGMAS`` times the series' noise and
``MIN_CHANGE``; the least
significant candidate that fails is dropped and its neighbours tested again over the merged
segments, until all left pass. A flat series of real repeats therefore reports nothing, and
every candidate dropped says why (:func:`evaluate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dlperf.stats import mannwhitney_min_p

MIN_POINTS = 4  # two on each side of a change
MIN_SIZE = 2  # results in a segment
PENALTY_SIGMAS = 3.0
ALPHA = 0.01
MIN_CHANGE = 0.02  # relative
# a confirmed change exceeds this many sigmas of the series' own noise: pooled repeats of one
# run understate the drift between runs (20 real runs of one case held a +4 % step at 2 sigma)
NOISE_SIGMAS = 3.0
SIGMA_FLOOR = 0.003  # log units: identical medians still have a noise floor


@dataclass(frozen=True)
class ChangePoint:
    """A change before the result at ``index`` (0-based in the ordered series); a candidate the
    repeats did not confirm carries the reason (``confirmed`` False)."""

    index: int
    before_median: float
    after_median: float
    relative_change: float  # after / before - 1
    p_value: float | None
    before_n: int  # repeats pooled on each side
    after_n: int
    reason: str | None = None  # why it is not confirmed

    @property
    def confirmed(self) -> bool:
        return self.reason is None


def noise_sigma(medians: Sequence[float]) -> float:
    """The series' own noise in log units: median absolute successive difference / (0.6745
    sqrt 2), which a few steps barely move."""
    logs = np.log(np.asarray(medians, dtype=float))
    if logs.size < 2:
        return SIGMA_FLOOR
    diffs = np.abs(np.diff(logs))
    return max(float(np.median(diffs)) / (0.6745 * math.sqrt(2)), SIGMA_FLOOR)


def candidates(medians: Sequence[float], sigma: float) -> list[int]:
    """PELT's break indices (the first result of each new segment)."""
    import ruptures  # here, not at the top: 0.5 s (with scipy) that every `dlperf` call paid

    signal = np.log(np.asarray(medians, dtype=float)).reshape(-1, 1)
    penalty = PENALTY_SIGMAS * sigma ** 2 * math.log(len(medians))
    ends = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(signal).predict(pen=penalty)
    return [end for end in ends if end < len(medians)]


def judge(medians: Sequence[float], repeats: Sequence[Sequence[float]], left: int, here: int,
          right: int, sigma: float) -> ChangePoint:
    """The candidate at ``here`` between the segments [left, here) and [here, right), tested on
    their pooled repeats."""
    before = [v for r in repeats[left:here] for v in r]
    after = [v for r in repeats[here:right] for v in r]
    before_median = float(np.median(medians[left:here]))
    after_median = float(np.median(medians[here:right]))
    change = after_median / before_median - 1.0
    # the smallest two-sided p the exact test can give for these sizes
    floor = mannwhitney_min_p(len(before), len(after))
    p_value: float | None = None
    from scipy import stats  # imported when a change point is judged, like ruptures

    if len(set(before) | set(after)) < 2:
        reason = "the repeats are all equal"
    else:
        p_value = float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
        smallest = max(NOISE_SIGMAS * sigma, math.log1p(MIN_CHANGE))
        if floor >= ALPHA:
            reason = (f"too few repeats to test ({len(before)} and {len(after)}: the smallest "
                      f"p is {floor:.2g})")
        elif p_value >= ALPHA:
            reason = f"not significant (p = {p_value:.2g})"
        elif abs(math.log(after_median / before_median)) <= smallest:
            reason = f"within the series' noise ({math.expm1(smallest):.1%})"
        else:
            reason = None
    return ChangePoint(here, before_median, after_median, change, p_value, len(before),
                       len(after), reason)


def evaluate(medians: Sequence[float],
             repeats: Sequence[Sequence[float]]) -> list[ChangePoint]:
    """Every candidate PELT proposes, in order, each confirmed or with why not. The least
    significant unconfirmed candidate is dropped and its neighbours tested again over the merged
    segment (more repeats each side), until every one left is confirmed."""
    if len(medians) < MIN_POINTS:
        return []
    sigma = noise_sigma(medians)
    breaks = candidates(medians, sigma)
    rejected: dict[int, ChangePoint] = {}
    while True:
        bounds = [0, *breaks, len(medians)]
        judged = [judge(medians, repeats, left, here, right, sigma)
                  for left, here, right in zip(bounds, bounds[1:], bounds[2:])]
        weak = [c for c in judged if not c.confirmed]
        if not weak:
            break
        worst = max(weak, key=lambda c: 2.0 if c.p_value is None else c.p_value)
        rejected[worst.index] = worst
        breaks.remove(worst.index)
    return sorted([*judged, *rejected.values()], key=lambda c: c.index)


def detect(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[ChangePoint]:
    """The confirmed change points of a series (each result's median and its repeats)."""
    return [c for c in evaluate(medians, repeats) if c.confirmed]
