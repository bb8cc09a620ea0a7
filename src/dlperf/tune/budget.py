"""The time a tune may take: a hard bound, counted across a kill and a resume.

Every measurement a tune starts gets at most the time left as its timeout, so the bound holds
even when one configuration hangs. What was spent before a kill is the stored trials' wall time,
so a resumed tune continues the same budget instead of starting a new one. The estimate of what
a trial or the confirmation will cost comes from what this search's own runs took.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dlperf.errors import UsageError
from dlperf.numbers import duration

#: The least a tune can do anything with: one screening run of the default and of one other
#: configuration, and a confirmation. Anything smaller is refused before anything runs.
MIN_BUDGET_S = 60.0
MAX_BUDGET_S = 7 * 24 * 3600.0
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([hms])", re.I)
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse(text: str, flag: str = "--budget") -> float:
    """``20m``, ``2h``, ``1h30m``, ``90s`` or plain seconds -> seconds."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        parts = _PART.findall(raw)
        if not parts or _PART.sub("", raw).strip():
            raise UsageError(f"{flag}: {text!r} must be a duration such as 20m, 2h, 1h30m or "
                             f"90s") from None
        seconds = sum(float(number) * _UNIT_S[unit.lower()] for number, unit in parts)
    if not math.isfinite(seconds) or seconds < MIN_BUDGET_S or seconds > MAX_BUDGET_S:
        raise UsageError(f"{flag}: {text!r} is too small for one trial and its confirmation: "
                         f"give at least {MIN_BUDGET_S:g}s (e.g. 20m)"
                         if math.isfinite(seconds) and seconds < MIN_BUDGET_S else
                         f"{flag}: {text!r} must be between {MIN_BUDGET_S:g}s and 7 days")
    return seconds


text = duration  # ``1h05m``, ``12m30s``, ``45s``


@dataclass
class Budget:
    """``total_s`` in all; ``spent_before_s`` by an earlier, killed run of the same study."""

    total_s: float
    spent_before_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def spent(self) -> float:
        return self.spent_before_s + (time.monotonic() - self.started)

    def left(self) -> float:
        return max(0.0, self.total_s - self.spent())

    def fits(self, seconds: float) -> bool:
        return seconds <= self.left()


def typical(walls: Sequence[float]) -> float | None:
    """What one run costs, from the runs so far: their median (a compile-heavy outlier does
    not make every estimate pessimistic), or None before the first."""
    values = sorted(w for w in walls if w > 0)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
