"""Two profiles side by side: each category's seconds per step, its difference, and that
difference's share of the step-time difference, largest contribution first; and the operators
that moved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlperf.worker.profile import CATEGORIES, UNATTRIBUTED

ORDER = CATEGORIES + (UNATTRIBUTED,)
MOVED_OPS = 5


@dataclass
class Row:
    """One category of two profiles (seconds per step)."""

    category: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass
class Difference:
    """Where the step-time difference of B against A comes from."""

    rows: list[Row]  # every category, largest |difference| first
    a_step_s: float
    b_step_s: float
    moved: list[dict[str, Any]]  # operators by the same name in both, largest |change| first

    @property
    def delta(self) -> float:
        return self.b_step_s - self.a_step_s

    def share(self, row: Row) -> float | None:
        """The row's part of the total difference (None when the steps take the same time)."""
        return row.delta / self.delta if self.delta else None


def categories(block: Mapping[str, Any]) -> list[tuple[str, float]]:
    """A profile's categories in their fixed order (seconds per step)."""
    values = block.get("categories") or {}
    return [(name, float(values.get(name, 0.0))) for name in ORDER]


def differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> Difference:
    """The difference of profile ``b`` against profile ``a``."""
    first, second = dict(categories(a)), dict(categories(b))
    rows = sorted((Row(name, first[name], second[name]) for name in ORDER),
                  key=lambda row: -abs(row.delta))
    return Difference(rows, a["step_s"], b["step_s"], moved_ops(a, b))


def moved_ops(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Operators among either side's top ones that both profiles name, by how much their time
    per step changed (two frameworks rarely share names: then none)."""
    left = {op["name"]: op for op in a.get("top_ops") or []}
    right = {op["name"]: op for op in b.get("top_ops") or []}
    both = sorted(set(left) & set(right),
                  key=lambda n: -abs(right[n]["s_per_step"] - left[n]["s_per_step"]))
    return [{"name": name, "category": right[name]["category"],
             "a_s": left[name]["s_per_step"], "b_s": right[name]["s_per_step"]}
            for name in both[:MOVED_OPS]]
