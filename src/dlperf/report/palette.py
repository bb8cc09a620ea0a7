"""One colour per framework, and per precision, in every figure of a report.

A report's figures draw one mapping: a framework (or, in a report of one framework, a precision)
is the same colour in the bar chart, the line charts, the spread and the roofline. The colours
are fixed, not handed out in the order a figure meets its series, so torch is matplotlib's first
colour in every report and tensorflow the same colour in the bars and the roofline. What else
tells two series of one colour apart (a mode, a precision, a version) is a hatch, a marker or a
line style, numbered within the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlperf.report.tables import PRECISION_ORDER
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.spec import frameworks

#: torch, the framework in dlperf's own environment and in most reports, keeps matplotlib's
#: first colour; the others follow by name. Ten frameworks, ten colours of matplotlib's cycle.
FRAMEWORK_COLOURS = {name: f"C{index % 10}" for index, name in enumerate(
    sorted(frameworks(), key=lambda name: (name != "torch", name)))}
PRECISION_COLOURS = {name: f"C{index % 10}" for index, name in enumerate(PRECISION_ORDER)}
OTHER = "0.45"  # a framework or precision dlperf does not declare (a result from elsewhere)

HATCHES = ("", "//", "..", "xx", "\\\\")
MARKERS = ("o", "s", "^", "D", "v", "P")
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Palette:
    """``by``: what a colour stands for in this report, ``framework`` or ``precision``."""

    by: str

    def key(self, result: ResultLike) -> str:
        return str(read_result(result).case.get(self.by))

    def colour(self, result: ResultLike) -> str:
        table = FRAMEWORK_COLOURS if self.by == "framework" else PRECISION_COLOURS
        return table.get(self.key(result), OTHER)

    def styles(self, series: Mapping[str, ResultLike]) -> dict[str, tuple[str, int]]:
        """Per series name (a representative result each): its colour and its number among the
        figure's series of that colour (0 for the first: plain bar, solid line, circle)."""
        seen: dict[str, int] = {}
        out = {}
        for name in sorted(series):
            key = self.key(series[name])
            out[name] = (self.colour(series[name]), seen.get(key, 0))
            seen[key] = seen.get(key, 0) + 1
        return out


def of(results: Sequence[ResultLike]) -> Palette:
    """The report's mapping: by framework where it holds more than one framework (or only one
    precision), else by precision (one framework's fp32 against its amp-bf16)."""
    cases = [read_result(r).case for r in results]
    found = {name: {str(case.get(name)) for case in cases} for name in ("framework", "precision")}
    return Palette("precision" if len(found["framework"]) < 2 and len(found["precision"]) > 1
                   else "framework")
