"""What got faster or slower between two sets of results, and whether the data can tell.

Cases are matched by their identity hash (``case_key``). Per case: both medians, their ratio, a
two-sided test on the per-repeat throughputs (Mann–Whitney U by default, Welch's t on request)
and a verdict that respects a threshold. A test that cannot be computed, or that cannot reach
significance with so few repeats (:func:`dlperf.stats.unreachable`), is reported as such
("n/a: ...") and never as significant; a change beyond the threshold is then ``inconclusive``,
with the repeats that would decide it, never a verdict from the threshold alone (which
docs/calibration.md measured raising 12 % false alarms with 3 repeats a side).

Each side names the device it ran on (the result's resolved device, ``Result.device``):
a case whose sides ran on different devices is in ``Comparison.across_devices``, which
``dlperf compare`` refuses unless asked (``--across-devices``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlperf.results.codec import read_result
from dlperf.results.model import Result, ResultLike
from dlperf.stats import DEFAULT_ALPHA, TESTS, repeats_needed, shift_p, unreachable

# The smallest change `dlperf compare` reports; with the test at DEFAULT_ALPHA it held compare's
# false alarms to 1.8-2.1 % on A/A splits of real repeats (docs/calibration.md), so it stays.
DEFAULT_THRESHOLD = 0.05
#: verdicts of a case both sides measured (besides failed / fixed / only in ...)
INCONCLUSIVE = "inconclusive"


@dataclass
class TestResult:
    """p-value of a two-sided test, or why there is none."""

    name: str
    p_value: float | None
    reason: str | None = None  # set when p_value is None or cannot reach alpha
    advice: str | None = None  # how to get a usable test ("rerun with --repeats 4 ...")

    def usable(self) -> bool:
        return self.p_value is not None and self.reason is None

    def brief(self) -> str:
        if self.p_value is None:
            return "n/a"
        return f"p={self.p_value:.3g}" + (" (n/a)" if self.reason else "")

    def text(self) -> str:
        if self.p_value is None:
            return f"n/a: {self.reason}"
        if self.reason:
            return f"p={self.p_value:.3g} (n/a: {self.reason})"
        return f"p={self.p_value:.3g}"


def significance(baseline: list[float], candidate: list[float], test: str = "mannwhitney",
                 alpha: float = DEFAULT_ALPHA) -> TestResult:
    """Two-sided test of the per-repeat values; never a p-value where the test is undefined."""
    if test not in TESTS:
        raise ValueError(f"test: {test!r} is not one of {', '.join(TESTS)}")
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    short = unreachable(test, a.size, b.size, alpha)
    needed = repeats_needed(test, alpha)
    advice = f"rerun with --repeats {needed}" + (" or --test welch" if test != "welch" else "")
    if a.size < 2 or b.size < 2:
        return TestResult(test, None, short, advice)
    p, undefined = shift_p(a, b, test)
    if p is None:
        return TestResult(test, None, undefined)
    if short:
        return TestResult(test, p, short, advice)
    return TestResult(test, p)


#: every verdict of a case, in the order counts are shown
VERDICTS = ("faster", "slower", "same", INCONCLUSIVE, "failed", "fixed", "only in baseline",
            "only in candidate")


@dataclass
class CaseComparison:
    key: str
    label: str
    baseline: Result | None
    candidate: Result | None
    # faster | slower | same | inconclusive | failed | fixed | only in baseline | only in candidate
    verdict: str
    ratio: float | None = None
    test: TestResult | None = None
    notes: list[str] = field(default_factory=list)
    # two single results of different cases, compared on purpose: the case fields that differ
    differs: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return self.verdict in ("slower", "failed")

    @property
    def devices(self) -> tuple[str | None, str | None]:
        """The device each side ran on (None for a side that has no result)."""
        return (None if self.baseline is None else self.baseline.device,
                None if self.candidate is None else self.candidate.device)

    def device_text(self) -> str:
        """``cpu``, or ``cpu → cuda:0 NVIDIA H100 ...`` when the sides ran on different ones."""
        base, cand = self.devices
        if base is None or cand is None or base == cand:
            return base or cand or "—"
        return f"{base} → {cand}"


@dataclass
class Comparison:
    cases: list[CaseComparison]
    threshold: float
    alpha: float
    test: str

    @property
    def ratios(self) -> list[float]:
        return [c.ratio for c in self.cases if c.ratio is not None]

    @property
    def geometric_mean(self) -> float | None:
        """Geometric mean of candidate/baseline over the cases both measured."""
        ratios = self.ratios
        return float(math.exp(sum(math.log(r) for r in ratios) / len(ratios))) if ratios else None

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c.verdict == verdict)

    @property
    def regressions(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.regressed]

    @property
    def across_devices(self) -> list[CaseComparison]:
        """The cases whose two sides ran on different devices."""
        return [c for c in self.cases if None not in c.devices and len(set(c.devices)) == 2]

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold, "alpha": self.alpha, "test": self.test,
            "geometric_mean_ratio": self.geometric_mean,
            "counts": {v: self.count(v) for v in VERDICTS},
            "cases": [{
                "case_key": c.key, "label": c.label, "verdict": c.verdict, "ratio": c.ratio,
                "baseline_median": c.baseline.median if c.baseline else None,
                "candidate_median": c.candidate.median if c.candidate else None,
                "baseline_repeats": _repeats(c.baseline),
                "candidate_repeats": _repeats(c.candidate),
                "baseline_device": c.devices[0], "candidate_device": c.devices[1],
                "baseline_run_id": c.baseline.run_id if c.baseline else None,
                "candidate_run_id": c.candidate.run_id if c.candidate else None,
                "p_value": c.test.p_value if c.test else None,
                "significance": c.test.text() if c.test else None,
                "significant": (c.test.usable() and c.test.p_value is not None
                                and c.test.p_value < self.alpha) if c.test else False,
                "notes": c.notes,
                "differs": c.differs,
            } for c in self.cases],
        }


def _repeats(result: Result | None) -> list[float]:
    if result is None or result.status != "ok" or result.throughput is None:
        return []
    return list(result.throughput.repeats)


def compare_pair(key: str, baseline: ResultLike, candidate: ResultLike,
                 threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                 test: str = "mannwhitney") -> CaseComparison:
    baseline, candidate = read_result(baseline), read_result(candidate)
    label = candidate.label or baseline.label or key
    base_ok, cand_ok = baseline.median, candidate.median
    if not base_ok and not cand_ok:
        return CaseComparison(key, label, baseline, candidate, "same",
                              notes=[f"failed on both sides ({baseline.status} / "
                                     f"{candidate.status})"])
    if base_ok and not cand_ok:
        return CaseComparison(key, label, baseline, candidate, "failed",
                              notes=[f"candidate {candidate.status}: {candidate.error}"])
    if cand_ok and not base_ok:
        return CaseComparison(key, label, baseline, candidate, "fixed",
                              notes=[f"baseline {baseline.status}: {baseline.error}"])
    assert base_ok and cand_ok
    ratio = cand_ok / base_ok
    result = significance(_repeats(baseline), _repeats(candidate), test, alpha)
    change = ratio - 1.0
    notes: list[str] = []
    if abs(change) < threshold:
        verdict = "same"
    elif result.usable():
        assert result.p_value is not None
        if result.p_value < alpha:
            verdict = "faster" if change > 0 else "slower"
        else:
            verdict = "same"
            notes.append(f"{change:+.1%} is within the noise ({result.text()} ≥ {alpha:g})")
    else:
        verdict = INCONCLUSIVE
        notes.append(f"{INCONCLUSIVE}: {change:+.1%} is beyond the {threshold:.0%} threshold but "
                     f"{result.reason}" + (f"; {result.advice}" if result.advice else ""))
    return CaseComparison(key, label, baseline, candidate, verdict, ratio, result, notes)


#: case fields that do not make a different case (how long and how often it was measured)
NOT_IDENTITY = ("repeats", "timeout_s")


def stored_case(result: Result) -> Mapping[str, Any]:
    """The case as the result stored it: what identifies a result written by another tool and
    what two compared results differ in are the fields they hold, not the current version's
    defaults for the ones they lack."""
    case = result.raw.get("case")
    return case if isinstance(case, Mapping) else {}


def case_key(result: ResultLike) -> str:
    typed = read_result(result)
    if typed.case_key:
        return str(typed.case_key)
    # results written by other tools: identify them by their case fields
    case = {k: v for k, v in stored_case(typed).items() if k not in NOT_IDENTITY}
    return json.dumps(case, sort_keys=True)


def case_differences(baseline: ResultLike, candidate: ResultLike) -> list[str]:
    """``field: old → new`` for each case field two results do not share (what was compared)."""
    base, cand = stored_case(read_result(baseline)), stored_case(read_result(candidate))
    return [f"{name}: {base.get(name, '—')} → {cand.get(name, '—')}"
            for name in sorted(set(base) | set(cand))
            if name not in NOT_IDENTITY and base.get(name) != cand.get(name)]


def compare(baseline: Sequence[ResultLike], candidate: Sequence[ResultLike],
            threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
            test: str = "mannwhitney") -> Comparison:
    """Match by case key; two single results are compared even when their cases differ."""
    base = {case_key(r): r for r in map(read_result, baseline)}
    cand = {case_key(r): r for r in map(read_result, candidate)}
    cases: list[CaseComparison] = []
    if len(base) == 1 and len(cand) == 1 and set(base) != set(cand):
        rb, (kc, rc) = next(iter(base.values())), next(iter(cand.items()))
        item = compare_pair(kc, rb, rc, threshold, alpha, test)
        item.label = f"{rb.label} → {rc.label}"
        item.differs = case_differences(rb, rc)
        return Comparison([item], threshold, alpha, test)
    for key, result in base.items():
        if key in cand:
            cases.append(compare_pair(key, result, cand[key], threshold, alpha, test))
        else:
            cases.append(CaseComparison(key, result.label or key, result, None,
                                        "only in baseline"))
    for key, result in cand.items():
        if key not in base:
            cases.append(CaseComparison(key, result.label or key, None, result,
                                        "only in candidate"))
    return Comparison(cases, threshold, alpha, test)
