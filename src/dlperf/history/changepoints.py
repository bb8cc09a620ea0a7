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
significant (p < ``ALPHA``) and larger than the series' noise and ``MIN_CHANGE``. A flat series
of real repeats therefore reports nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import ruptures
from scipy import stats

MIN_POINTS = 4  # two on each side of a change
MIN_SIZE = 2  # results in a segment
PENALTY_SIGMAS = 3.0
ALPHA = 0.01
MIN_CHANGE = 0.02  # relative
SIGMA_FLOOR = 0.003  # log units: identical medians still have a noise floor


@dataclass(frozen=True)
class ChangePoint:
    """A change before the result at ``index`` (0-based in the ordered series)."""

    index: int
    before_median: float
    after_median: float
    relative_change: float  # after / before - 1
    p_value: float
    before_n: int  # repeats pooled on each side
    after_n: int


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
    signal = np.log(np.asarray(medians, dtype=float)).reshape(-1, 1)
    penalty = PENALTY_SIGMAS * sigma ** 2 * math.log(len(medians))
    ends = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(signal).predict(pen=penalty)
    return [end for end in ends if end < len(medians)]


def detect(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[ChangePoint]:
    """The confirmed change points of a series (each result's median and its repeats)."""
    if len(medians) < MIN_POINTS:
        return []
    sigma = noise_sigma(medians)
    breaks = candidates(medians, sigma)
    bounds = [0, *breaks, len(medians)]
    found = []
    for left, here, right in zip(bounds, bounds[1:], bounds[2:]):
        before = [v for r in repeats[left:here] for v in r]
        after = [v for r in repeats[here:right] for v in r]
        before_median = float(np.median(medians[left:here]))
        after_median = float(np.median(medians[here:right]))
        change = after_median / before_median - 1.0
        if len(set(before) | set(after)) < 2:
            continue
        p_value = float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
        large = abs(math.log(after_median / before_median)) > max(2.0 * sigma,
                                                                   math.log1p(MIN_CHANGE))
        if p_value < ALPHA and large:
            found.append(ChangePoint(here, before_median, after_median, change, p_value,
                                     len(before), len(after)))
    return found
