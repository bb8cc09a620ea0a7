"""The results of one experiment, in order: what ``dlperf history`` shows and ``dlperf gate``
compares.

An experiment is a case without its environment: the same model, shapes, precision, mode and
devices measured by any environment (the pinned one, ``jax==0.9.2``, a user's own build) under
any label. Its key is the case's key with ``env`` and ``run_label`` cleared, so versions of a
framework line up in one series while two models never do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlperf.errors import UsageError
from dlperf.report import reading
from dlperf.results.codec import read_result
from dlperf.results.model import Result
from dlperf.spec import Case, SpecError
from dlperf.store import Store

ORDERS = ("time", "label", "version")
FILTERS = ("framework", "model", "task", "precision", "batch_size")


@dataclass(frozen=True)
class Point:
    """One stored result of the series."""

    run_id: int
    finished_at: str
    case_key: str
    environment: str  # its name: jax, jax==0.9.2, python:/path
    version: str | None
    label: str | None
    median: float
    ci95: tuple[float, float] | None
    repeats: tuple[float, ...]
    result: Result
    where: str = ""  # the file or database row it was read from, for a message naming it


def experiment_key(case: dict[str, Any]) -> str:
    """The key of ``case`` with its environment and label cleared."""
    try:
        return Case.from_dict({**case, "env": "", "run_label": ""}).key()
    except (SpecError, TypeError, ValueError, AttributeError, KeyError):
        # not a Case: `dlperf external`'s, or an older form
        rest = {k: v for k, v in case.items() if k not in ("env", "run_label", "repeats")}
        text = json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str)
        return "other:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def experiment_of(result: Result | Mapping[str, Any]) -> str:
    """The experiment a result belongs to: its case without environment and label, on the
    device it resolved to (a case with ``--device auto`` measured on a CPU host and on a GPU host
    is two series, never one)."""
    typed = read_result(result)
    return f"{experiment_key(dict(typed.raw['case']))}@{typed.device}"


def point(row: Any, result: dict[str, Any], where: str) -> Point | None:
    """A finished, successful result as a point; None for a failure (no throughput). A result
    without the fields a series reads, of their types, is one line naming ``where`` it is."""
    why = reading.result_problem(result, reading.SERIES)
    if why:
        raise UsageError(f"{where}: {why}")
    typed = read_result(result)
    if not typed.median or typed.throughput is None:
        return None
    return Point(run_id=int(row["id"]), finished_at=str(row["finished_at"] or row["started_at"]),
                 case_key=str(typed.case_key), environment=typed.environment_name,
                 version=typed.framework_version, label=typed.run_label,
                 median=float(typed.median), ci95=typed.throughput.ci95,
                 repeats=tuple(float(v) for v in typed.throughput.repeats or [typed.median]),
                 result=typed, where=where)


def all_points(store: Store) -> list[Point]:
    out = []
    for row in store.runs("result_json IS NOT NULL"):
        found = point(row, store.decode(row), f"{store.flag}: {store.path}: run {row['id']}")
        if found is not None:
            out.append(found)
    return out


def of_case(store: Store, case: str) -> list[Point]:
    """The series of the experiment a case key (16 hex digits) or a run id belongs to."""
    points = all_points(store)
    if case.isdigit():
        chosen = [p for p in points if p.run_id == int(case)]
        if not chosen:
            raise UsageError(f"--case: run {case} is not a finished, successful result in "
                             f"{store.path}")
        wanted = experiment_of(chosen[0].result)
    else:
        chosen = [p for p in points if p.case_key == case]
        if not chosen:
            raise UsageError(f"--case: no successful result of case {case} in {store.path} "
                             f"(`dlperf results --json` lists case keys)")
        wanted = experiment_of(chosen[0].result)
    return [p for p in points if experiment_of(p.result) == wanted]


def matching(store: Store, filters: dict[str, Any]) -> list[Point]:
    """The results whose case has every given field; one experiment, else one line naming the
    choices (so that two models never share a series)."""
    points = [p for p in all_points(store)
              if all(read_result(p.result).case.get(k) == v for k, v in filters.items()
                     if v is not None)]
    if not points:
        given = ", ".join(f"{k}={v}" for k, v in filters.items() if v is not None)
        raise UsageError(f"no successful result in {store.path} matches {given}")
    experiments: dict[str, list[Point]] = {}
    for p in points:
        experiments.setdefault(experiment_of(p.result), []).append(p)
    if len(experiments) > 1:
        labels = sorted({" ".join(p.result.label.split()[:5]) for p in points})
        raise UsageError(f"the filters match {len(experiments)} experiments ({'; '.join(labels)}"
                         f"); narrow them (--task, --precision, --batch-size) or give --case")
    return next(iter(experiments.values()))


def _version_key(text: str | None) -> tuple:
    parts = []
    for piece in (text or "").replace("+", ".").replace("-", ".").split("."):
        parts.append((0, int(piece), "") if piece.isdigit() else (1, 0, piece))
    return tuple(parts)


def ordered(points: list[Point], by: str) -> list[Point]:
    """By time (stored order), label (as text; a commit hash is no order, so labels are best
    made sortable: c01, c02 or dates), or framework version (numerically)."""
    if by == "label":
        return sorted(points, key=lambda p: (p.label or "", p.run_id))
    if by == "version":
        return sorted(points, key=lambda p: (_version_key(p.version), p.run_id))
    return sorted(points, key=lambda p: (p.finished_at, p.run_id))
