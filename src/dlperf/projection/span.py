"""A projected figure with its interval, and how every projected figure is shown.

Apart because the overlap (its step with the overhead), the projection (every point's figures) and
the report (a stored projection's figures) all carry and show one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A value and its interval."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 1, pct: bool = False) -> str:
        """``value (low–high)``, as a number with ``digits`` or (``pct``) a percentage: how a
        projected figure is shown everywhere (the command's table, the report's)."""
        if pct:
            return f"{self.value:.1%} ({self.low:.1%}–{self.high:.1%})"
        return f"{self.value:,.{digits}f} ({self.low:,.{digits}f}–{self.high:,.{digits}f})"

    def scaled(self, factor: float) -> "Span":
        ends = sorted((self.low * factor, self.high * factor))
        return Span(self.value * factor, ends[0], ends[1])
