"""The comparisons a report shows: two results that differ along what is compared (precision,
framework, mode, version) and in nothing else, as a ratio of their median throughputs with a
95 % interval and the verdict `dlperf compare` gives (its threshold, its tests:
:func:`dlperf.report.compare.compare_pair`), and, where both were profiled, the reason in words
(:func:`dlperf.explain.findings.of_pair`, the rules `dlperf explain` applies).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf import stats
from dlperf.explain import findings
from dlperf.report import varies
from dlperf.report.compare import DEFAULT_ALPHA, CaseComparison, compare_pair
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike

TEST_NAMES = {"mannwhitney": "Mann-Whitney U", "welch": "Welch's t"}
METHOD = ("a ratio is one median throughput over the other, its 95 % interval a bootstrap over "
          "both sides' repeats, and its verdict `dlperf compare`'s: a change under 5 % is the "
          "same, a larger one is faster or slower where a two-sided test on the repeats says so "
          "at α = 0.05 (Mann-Whitney U where the repeats are enough for it to, else Welch's t)")


def choose_test(a: int, b: int) -> str:
    """Mann-Whitney U, `dlperf compare`'s default, where ``a`` and ``b`` repeats let it reach
    α at all; else Welch's t (three repeats a side cannot give Mann-Whitney p < 0.1)."""
    return "mannwhitney" if stats.mannwhitney_min_p(a, b) < DEFAULT_ALPHA else "welch"


def _repeats(result: ResultLike) -> list[float]:
    throughput = read_result(result).throughput
    return list(throughput.repeats) if throughput else []


#: the most decimals an interval's ends get to read apart (:func:`decimals_apart`)
MOST_DECIMALS = 4


def decimals_of(value: float) -> int:
    """Two decimals, or as many as two significant digits need below 0.1, where two decimals
    would show an interval of 0.0915-0.0949 as 0.09-0.09 (amp-bf16 on a CPU without bf16)."""
    if value == 0 or not math.isfinite(value) or abs(value) >= 0.1:
        return 2
    return 1 - math.floor(math.log10(abs(value)))


def decimals_apart(low: float, high: float) -> int:
    """The fewest decimals, from what each end needs (:func:`decimals_of`) up to MOST_DECIMALS,
    at which an interval's two ends read differently: two decimals showed amp-bf16's 0.1086-0.1123
    against fp32 on a CPU without bf16 as 0.11-0.11, an interval that says nothing."""
    decimals = max(decimals_of(low), decimals_of(high))
    while decimals < MOST_DECIMALS and f"{low:.{decimals}f}" == f"{high:.{decimals}f}":
        decimals += 1
    return decimals


def ratio_text(value: float, decimals: int | None = None) -> str:
    """A ratio as shown: ``decimals`` of them, by default :func:`decimals_of` its value."""
    return f"{value:.{decimals_of(value) if decimals is None else decimals}f}"


@dataclass
class Ratio:
    """``candidate`` against ``baseline``: ``compared`` holds the ratio, test and verdict."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    compared: CaseComparison
    ci: tuple[float, float] | None
    reasons: list[str] = field(default_factory=list)  # from the profiles; none without them
    caveats: list[str] = field(default_factory=list)  # a side flagged noisy

    @property
    def ratio(self) -> float:
        assert self.compared.ratio is not None
        return self.compared.ratio

    @property
    def decimals(self) -> int:
        """What the ratio and its interval are shown to: as many decimals as the interval's
        ends need to read apart, so that the ratio is rounded as its ends are."""
        return decimals_of(self.ratio) if self.ci is None else decimals_apart(*self.ci)

    def interval(self) -> str:
        if self.ci is None:
            return "no interval: fewer than 2 repeats a side"
        return f"95 % CI {self._bounds()}"

    def _bounds(self) -> str:
        """``0.85–0.97``: the interval's ends as ratios are shown."""
        assert self.ci is not None
        decimals = self.decimals
        return f"{ratio_text(self.ci[0], decimals)}–{ratio_text(self.ci[1], decimals)}"

    def test(self) -> str:
        test = self.compared.test
        if test is None or test.p_value is None:
            return "no test: fewer than 2 repeats a side"
        return f"{TEST_NAMES.get(test.name, test.name)} p = {test.p_value:.2g}"

    def cell(self) -> str:
        """The summary's cell: ``0.91× (0.85–0.97) slower, Welch's t p = 0.003``."""
        low_high = "" if self.ci is None else f" ({self._bounds()})"
        return (f"{ratio_text(self.ratio, self.decimals)}×{low_high} {self.compared.verdict}, "
                f"{self.test()}")

    def sentence(self) -> str:
        """``amp-bf16 is 0.91× fp32 (95 % CI ...; Welch's t p = ...: slower): convolution
        took N ms/step more ...``, each reason with the numbers it rests on."""
        base, cand = varies.names(self.baseline, self.candidate)
        text = (f"{cand} is {ratio_text(self.ratio, self.decimals)}× {base} ({self.interval()}; "
                f"{self.test()}: {self.compared.verdict})")
        if self.reasons:
            text += ": " + "; ".join(self.reasons)
        if self.caveats:
            text += f" [{'; '.join(self.caveats)}: read with care]"
        return text


def between(baseline: dict[str, Any], candidate: dict[str, Any]) -> Ratio | None:
    """The comparison of two successful results; None where either has no throughput."""
    a, b = _repeats(baseline), _repeats(candidate)
    test = choose_test(len(a), len(b))
    compared = compare_pair(read_result(candidate).case_key or "", baseline, candidate,
                            test=test)
    if compared.ratio is None:
        return None
    reasons: list[str] = []
    caveats: list[str] = []
    for found in findings.of_pair(baseline, candidate):
        reasons += found.figures.get("reasons") or []
        caveats = list(found.figures.get("noisy") or caveats)
    return Ratio(baseline, candidate, compared, stats.ratio_ci(a, b), reasons, caveats)


def along(results: list[dict[str, Any]], free: tuple[varies.Axis, ...],
          is_baseline: Callable[[dict[str, Any]], bool]) -> list[Ratio]:
    """Every comparison of a baseline result (``is_baseline``) with a result that differs from
    it along the ``free`` axes only, in the order of ``results``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in varies.ok(results):
        groups.setdefault(varies.match_key(result, free), []).append(result)
    out = []
    for members in groups.values():
        base = next((r for r in members if is_baseline(r)), None)
        if base is None:
            continue
        for result in members:
            if result is not base and not is_baseline(result):
                found = between(base, result)
                if found is not None:
                    out.append(found)
    return out
