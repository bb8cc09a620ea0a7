"""Honest summaries of repeated measurements.

The reported figure is the median over repeats; the spread beside it (min, max, IQR, CV and a
seeded bootstrap 95% interval of the median) tells the reader how far to trust it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

CV_WARN = 0.05  # a spread wider than this is flagged, not hidden
STEADY_WARN = 0.05  # first vs second half of the window differing by more means too little warm-up
DRIFT_P = 0.05  # ... and only when the step times say the halves really differ (Welch's test)
BOOTSTRAP_SAMPLES = 10_000


def throughput(samples: float, window_s: float) -> float:
    """Samples in the timed window over the window's wall time; never a mean of per-step rates."""
    if window_s <= 0:
        raise ValueError(f"window time must be positive, got {window_s}")
    return samples / window_s


def median_or_none(values: Sequence[float] | None) -> float | None:
    """The median of ``values``; None when there are none (a missing figure, not an error)."""
    return statistics.median(values) if values else None


def row_medians(resamples: np.ndarray) -> np.ndarray:
    """Each row's median, equal to ``np.median(resamples, axis=1)`` to the last bit: a sort of
    each row then its middle (the mean of its two middles for an even width). The bootstraps
    take medians of thousands of short rows, where numpy's partition per row was 2-4x slower
    (`dlperf ab`, `gate` and the calibration's thousands of draws). Rows holding a NaN go to
    numpy, whose NaN the sort would misplace."""
    if resamples.ndim != 2 or resamples.shape[1] == 0 or not np.isfinite(resamples).all():
        return np.median(resamples, axis=1)
    ordered = np.sort(resamples, axis=1)
    middle = resamples.shape[1] // 2
    if resamples.shape[1] % 2:
        return ordered[:, middle]
    return np.mean(ordered[:, middle - 1:middle + 1], axis=1)


def bootstrap_ci(values: Sequence[float] | np.ndarray, seed: int = 0, level: float = 0.95,
                 n_resamples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the median; None when there is nothing to resample."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return None
    rng = np.random.default_rng(seed)
    resamples = rng.choice(data, size=(n_resamples, data.size), replace=True)
    medians = row_medians(resamples)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


def ratio_ci(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray,
             seed: int = 0, level: float = 0.95, n_resamples: int = BOOTSTRAP_SAMPLES
             ) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(candidate) / median(baseline) for two sets of
    independent repeats (each resampled on its own: two runs' repeats are not pairs, as `dlperf
    ab`'s interleaved turns are); None with fewer than 2 values a side or a zero baseline."""
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size < 2 or b.size < 2 or not np.all(a > 0):
        return None
    rng = np.random.default_rng(seed)
    ratios = row_medians(rng.choice(b, size=(n_resamples, b.size))) / row_medians(
        rng.choice(a, size=(n_resamples, a.size)))
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


def half_width(values: Sequence[float], seed: int = 0) -> float | None:
    """Half the 95 % interval of the median (:func:`bootstrap_ci`) over the median: how far
    the median may be off, as a share of it; None with fewer than 2 values."""
    interval = bootstrap_ci(values, seed=seed)
    center = float(np.median(np.asarray(values, dtype=float))) if len(values) else 0.0
    if interval is None or center <= 0:
        return None
    return (interval[1] - interval[0]) / 2 / center


def interval_reached(values: Sequence[float], target: float, at_least: int) -> bool:
    """Whether ``at_least`` values or more have a median whose 95 % interval is within
    ``target`` of it (``--repeats auto``'s stopping rule)."""
    if len(values) < at_least:
        return False
    width = half_width(values)
    return width is not None and width <= target


def summarize(values: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Median and spread of per-repeat values, in the result contract's shape."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return {"median": None, "mean": None, "min": None, "max": None, "iqr": None,
                "cv": None, "ci95": None, "n": 0, "repeats": []}
    q1, q3 = np.percentile(data, [25, 75])
    mean = float(data.mean())
    cv = float(data.std(ddof=1) / mean) if data.size > 1 and mean > 0 else None
    ci = bootstrap_ci(data, seed=seed)
    return {
        "median": float(np.median(data)),
        "mean": mean,
        "min": float(data.min()),
        "max": float(data.max()),
        "iqr": float(q3 - q1),
        "cv": cv,
        "ci95": list(ci) if ci else None,
        "n": int(data.size),
        "repeats": [float(v) for v in data],
    }


def half_drift(halves: Sequence[Sequence[float]] | None) -> float | None:
    """Relative change of the mean step time from the window's first half to its second.

    ``halves`` is the worker's ``[[steps, seconds], [steps, seconds]]`` between synchronised
    marks (the only marks that mean anything on an asynchronous device). Positive means the
    second half was slower. None when the window is too short to split (fewer than 2 steps a
    half) or the worker recorded no halves.
    """
    if not halves or len(halves) != 2:
        return None
    (n1, s1), (n2, s2) = halves
    if n1 < 2 or n2 < 2 or s1 <= 0 or s2 <= 0:
        return None
    return float((s2 / n2 - s1 / n1) / (s1 / n1))


def drift_p(step_times: Sequence[float] | None, halves: Sequence[Sequence[float]] | None
            ) -> float | None:
    """Whether the window's two halves differ beyond step-to-step noise: the p-value of Welch's
    t-test between the step times of the first half and those of the second.

    Two slow steps in a ten-step window (a host hiccup) move a half's mean by 10% without any
    trend; a warm-up that was too short moves every step of the first half. Only the second is
    what the drift flag is for. None when the halves hold fewer than 2 steps each, the step times
    do not match the halves, or every step took the same time.
    """
    if not step_times or not halves or len(halves) != 2:
        return None
    middle = int(halves[0][0])
    first, second = list(step_times[:middle]), list(step_times[middle:])
    if len(first) < 2 or len(second) < 2 or len(second) != int(halves[1][0]):
        return None
    if np.ptp(first) == 0 and np.ptp(second) == 0:
        return None
    p = welch_p(first, second)
    return p if np.isfinite(p) else None


def noisy(summary: dict[str, Any]) -> bool:
    """Whether the repeats spread wider than ``CV_WARN``."""
    cv = summary.get("cv")
    return cv is not None and cv > CV_WARN


def unsteady(drifts: Sequence[float | None],
             drift_ps: Sequence[float | None] | None = None) -> list[int]:
    """Indices of the repeats whose window's halves differ by more than ``STEADY_WARN`` and,
    where its step times are known (``drift_ps``, one per drift), not by noise (Welch)."""
    ps = list(drift_ps) if drift_ps is not None else [None] * len(drifts)
    return [i for i, (d, p) in enumerate(zip(drifts, ps)) if d is not None
            and abs(d) > STEADY_WARN and (p is None or p < DRIFT_P)]


def spread_warnings(summary: dict[str, Any], drifts: Sequence[float | None],
                    drift_ps: Sequence[float | None] | None = None,
                    explain: Callable[[list[int]], str | None] | None = None) -> list[str]:
    """Human-readable flags for a noisy or unsteady measurement (see ``noisy``, ``unsteady``).
    ``explain`` gets the indices of the repeats a flag concerns (all of them for a noisy one;
    the same order as ``drifts`` and ``summary['repeats']``) and may return what on the host
    moved them, which the line then says."""
    warnings = []

    def because(indices: list[int]) -> str:
        cause = explain(indices) if explain is not None else None
        return f"; {cause}" if cause else ""

    if noisy(summary):
        warnings.append(f"noisy: CV across repeats is {summary['cv']:.1%} (> {CV_WARN:.0%})"
                        + because(list(range(int(summary.get("n") or 0)))))
    flagged = unsteady(drifts, drift_ps)
    if flagged:
        ps = list(drift_ps) if drift_ps is not None else [None] * len(drifts)
        worst = max(flagged, key=lambda i: abs(drifts[i] or 0.0))
        drift, p = drifts[worst] or 0.0, ps[worst]
        beyond = f", Welch p = {p:.3f} over its step times" if p is not None else ""
        warnings.append(
            f"unsteady window in {len(flagged)} repeat(s): step time changed {drift:+.1%} "
            f"from first to second half (> {STEADY_WARN:.0%}{beyond}): the host was busy or the "
            f"warm-up too short (--warmup-steps auto waits for a steady state)"
            + because(flagged))
    return warnings


def warmup_warnings(warmups: Sequence[dict[str, Any] | None]) -> list[str]:
    """Flag repeats whose auto warm-up hit its bound instead of reaching a steady state."""
    unsteady = [w for w in warmups if w and w.get("stop") in ("max_steps", "max_seconds")]
    if not unsteady:
        return []
    worst = max(unsteady, key=lambda w: abs(w.get("drift") or 0.0))
    rule = worst.get("rule") or {}
    return [f"warm-up never became steady in {len(unsteady)} repeat(s): stopped at "
            f"{worst['stop']} after {worst.get('steps')} steps with step-time CV "
            f"{worst.get('cv', 0.0):.1%} and drift {worst.get('drift', 0.0):+.1%} over the last "
            f"{rule.get('window', '?')} (limits {rule.get('max_cv', 0):.0%} / "
            f"{rule.get('max_drift', 0):.0%})"]


# Latency percentiles reported for inference, with the name each gets in ``latency_ms``.
LATENCY_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0),
                       ("p99_9", 99.9))
LATENCY_METHOD = "numpy.percentile method='linear' (Hyndman-Fan type 7), pooled over repeats"


def latency_ms(per_repeat: Sequence[Sequence[float]]) -> dict[str, Any] | None:
    """Latency summary in milliseconds from per-iteration latencies in seconds, one list per repeat.

    Percentiles are taken over **all repeats' iterations pooled** (each repeat is a fresh process,
    so pooling gives the tail the most samples), with numpy's default 'linear' interpolation
    between the two nearest order statistics, which is monotone in the level: p50 <= p90 <= p95
    <= p99 <= p99.9 always. The per-repeat p50/p99 lists beside them show the spread across
    processes. None when no latency was recorded (training, or every repeat failed).
    """
    lists = [np.asarray(values, dtype=float) * 1000.0 for values in per_repeat if len(values)]
    if not lists:
        return None
    pooled = np.concatenate(lists)
    levels = [level for _, level in LATENCY_PERCENTILES]
    out: dict[str, Any] = {"mean": float(pooled.mean())}
    out.update({name: float(value) for (name, _), value in
                zip(LATENCY_PERCENTILES, np.percentile(pooled, levels, method="linear"))})
    out.update({"min": float(pooled.min()), "max": float(pooled.max()), "n": int(pooled.size),
                "method": LATENCY_METHOD,
                "repeats": {"mean": [float(v.mean()) for v in lists],
                            "p50": [float(np.percentile(v, 50)) for v in lists],
                            "p99": [float(np.percentile(v, 99)) for v in lists]}})
    return out


def mannwhitney_min_p(n1: int, n2: int, sides: int = 2) -> float:
    """Smallest p-value the exact Mann-Whitney U test can give for samples of these sizes
    (``sides`` 2: two-sided, 1: one-sided): below some sizes no result can be significant."""
    return min(1.0, sides / math.comb(n1 + n2, n1))


#: the two-sample tests on per-repeat values that `dlperf compare` and `dlperf gate` offer
TESTS = ("mannwhitney", "welch")
# `dlperf ab`'s interval over pairs, bounded as the sign test is: with n pairs of no change,
# all n move the same one way with chance 2^-n, and then a bootstrap interval excludes 1
# (docs/calibration.md: 3 pairs raised 11.1 % false "slower", 5 pairs 2.9 %; 2^-3, 2^-5)
PAIRED_TEST = "sign"
TEST_NAMES = {"mannwhitney": "Mann-Whitney", "welch": "Welch's t", PAIRED_TEST: "sign test"}
# The significance level of `dlperf compare` (and the report's comparisons) unless --alpha.
# docs/calibration.md: at 0.05 compare's Welch raised 1.8 % false alarms with 3 repeats a side
# and Mann-Whitney 2.1 % with 5; Mann-Whitney with 3 (12 %, over alpha) is now "inconclusive".
DEFAULT_ALPHA = 0.05
MOST_REPEATS = 1000  # where repeats_needed stops looking


def sign_min_p(pairs: int, sides: int = 2) -> float:
    """Smallest p-value the sign test can give over ``pairs`` pairs: every pair one way."""
    return min(1.0, sides / 2 ** pairs)


def reaches(test: str, n: int, m: int, alpha: float = DEFAULT_ALPHA, sides: int = 2) -> bool:
    """Whether ``test`` (one of :data:`TESTS`, or :data:`PAIRED_TEST` over ``n`` pairs, ``m``
    the same) can give p < ``alpha`` at all with ``n`` and ``m`` repeats: Welch's t needs 2 a
    side, exact Mann-Whitney also a smallest p (:func:`mannwhitney_min_p`) below alpha, pairs
    :func:`sign_min_p` below it. Where it cannot, a verdict beyond a threshold is the
    threshold's alone, which docs/calibration.md measured wrong 11-12 % of the time."""
    if test not in (*TESTS, PAIRED_TEST):
        raise ValueError(f"test: {test!r} is not one of {', '.join((*TESTS, PAIRED_TEST))}")
    if min(n, m) < 2:
        return False
    if test == PAIRED_TEST:
        return sign_min_p(min(n, m), sides) < alpha
    return test == "welch" or mannwhitney_min_p(n, m, sides) < alpha


def repeats_needed(test: str, alpha: float = DEFAULT_ALPHA, sides: int = 2) -> int:
    """The fewest repeats a side with which ``test`` can reach p < ``alpha``
    (:func:`reaches`); :data:`MOST_REPEATS` when none up to it can."""
    return next((k for k in range(2, MOST_REPEATS) if reaches(test, k, k, alpha, sides)),
                MOST_REPEATS)


def unreachable(test: str, n: int, m: int, alpha: float = DEFAULT_ALPHA, sides: int = 2
                ) -> str | None:
    """None when ``test`` can reach p < ``alpha`` with ``n`` and ``m`` repeats; else why not in
    words, with how many repeats a side would do: the start of an "inconclusive" line, to which
    each command adds its own way out (``--repeats N``, ``--test welch``)."""
    if reaches(test, n, m, alpha, sides):
        return None
    needed = repeats_needed(test, alpha, sides)
    if test == PAIRED_TEST:
        k = min(n, m)
        return (f"{k} pair(s) cannot reach p < {alpha:g}: all {k} moving one way by chance "
                f"alone has p {sign_min_p(k, sides):.3g} (the sign test's bound; needs "
                f"{needed})")
    have = (f"{n} repeat{'s' if n != 1 else ''} a side" if n == m
            else f"{n} and {m} repeats")
    floor = (f"smallest p {mannwhitney_min_p(n, m, sides):.3g}; "
             if test == "mannwhitney" and min(n, m) >= 1 else "")
    return (f"{have} cannot reach p < {alpha:g} with {TEST_NAMES[test]} "
            f"({floor}needs {needed} a side)")


def welch_p(first: Sequence[float] | np.ndarray, second: Sequence[float] | np.ndarray,
            alternative: str = "two-sided") -> float:
    """Welch's unequal-variance t-test p-value that ``first`` and ``second`` differ
    (``alternative="less"``: that ``first`` is the lower; ``"greater"``: the higher): the
    statistic and Welch-Satterthwaite degrees of freedom of scipy.stats.ttest_ind(equal_var=False),
    the tail from Student's t (scipy.special.stdtr, which ttest_ind's own p-value calls). The
    same p to rounding (tests/stats/test_stats.py draws both), without ttest_ind's 2.5 ms a call of
    input checks (a calibration's thousands of draws paid them) or scipy.stats' 1.8 s import. NaN
    where the statistic is undefined (fewer than 2 values a side, no variance on either)."""
    from scipy.special import stdtr  # here: a result is folded without it

    a = np.asarray(first, dtype=float)
    b = np.asarray(second, dtype=float)
    if a.size < 2 or b.size < 2:
        return math.nan
    va, vb = float(np.var(a, ddof=1)) / a.size, float(np.var(b, ddof=1)) / b.size
    if not va + vb > 0:
        return math.nan
    t = (float(np.mean(a)) - float(np.mean(b))) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    if alternative == "less":
        return float(stdtr(df, t))
    if alternative == "greater":
        return float(stdtr(df, -t))
    if alternative != "two-sided":
        raise ValueError(f"alternative: {alternative!r} is not one of two-sided, less, greater")
    return float(2.0 * stdtr(df, -abs(t)))


def shift_p(first: Sequence[float] | np.ndarray, second: Sequence[float] | np.ndarray, test: str,
            alternative: str = "two-sided") -> tuple[float | None, str | None]:
    """The p-value of Mann-Whitney U or Welch's t (one of :data:`TESTS`) that ``first`` and
    ``second`` differ (``alternative="less"``: that ``first`` is the lower), or None and why the
    test is undefined for these values. Both need at least 2 values a side; whether Mann-Whitney
    can reach a given alpha at all with so few is the caller's to say (:func:`mannwhitney_min_p`).
    """
    if test not in TESTS:
        raise ValueError(f"test: {test!r} is not one of {', '.join(TESTS)}")
    a = np.asarray(first, dtype=float)
    b = np.asarray(second, dtype=float)
    if test == "welch":
        if np.var(a, ddof=1) == 0 and np.var(b, ddof=1) == 0:
            return None, "no variance on either side: Welch's t is undefined"
        p = welch_p(a, b, alternative)
        return (p, None) if math.isfinite(p) else (None, "Welch's t is undefined for these values")
    from scipy import stats as scipy_stats  # here: 1.8 s of imports that every `dlperf` command paid

    p = float(scipy_stats.mannwhitneyu(a, b, alternative=alternative).pvalue)
    return (p, None) if math.isfinite(p) else (None, "the test is undefined for these values")
