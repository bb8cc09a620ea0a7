"""Stored ``dlperf accuracy`` rows in reports and comparisons.

The report's accuracy table is the Dell EMC study's (per model and engine: fp32 top-1/top-5, the
lower precision's, the differences in points, and how many held-out answers changed), with the
inference speedup of that precision beside it: INT8 is only worth its accuracy loss if it is
faster, so the table shows both. The speedup comes from stored ``dlperf infer`` results of the
same model and engine (throughput over the fp32 twin at the same batch size, per batch size);
where none were stored the cell says so. The accuracy model is usually trained small (image 32
on the digits) while inference runs at its own size: the image size is shown with the speedup.

``compare`` matches rows by their key (model, engine, precision, data, recipe, seed) and calls a
top-1 drop of more than ``--accuracy-threshold`` points a regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.result import device_kind_name
from dlperf.report import inference
from dlperf.report.tables import Cell, Report, Table, short, times_text
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike

DEFAULT_THRESHOLD_POINTS = 1.0


def latest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest row of each key, in the order keys first appeared."""
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        found.pop(row["accuracy_key"], None)
        found[row["accuracy_key"]] = row
    return sorted(found.values(), key=lambda r: (r["model"], r["framework"], r["precision"]))


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}%"


def _points(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


def dataset_text(row: dict[str, Any]) -> str:
    data = row.get("dataset") or {}
    raw = data.get("name") or "?"
    name: str = {"sklearn-digits": "digits"}.get(raw, raw)
    if data.get("path"):
        name += f" {data['path']}"
    return f"{name} (image {data.get('image_size', '?')}, seed {data.get('split_seed', '?')})"


def _device(row: dict[str, Any]) -> str:
    from dlperf.studies.accuracy import row_device

    device = row_device(row)
    return "—" if device == "-" else device


def infer_speedup(row: dict[str, Any], results: Sequence[ResultLike]) -> str:
    """Stored inference speedups of this model, engine and precision over fp32, per batch."""
    if row["precision"] == "fp32":
        return "—"
    index = inference.fp32_index(results)
    parts = []
    for result in map(read_result, results):
        case = result.case
        if not inference.is_inference(result) or case.get("model") != row["model"] \
                or case.get("framework") != row["framework"] \
                or case.get("precision") != row["precision"]:
            continue
        value = inference.throughput_speedup(result, index)
        if value is None:
            continue
        mode = " compile" if case.get("compile") else ""
        size = (case.get("knobs") or {}).get("image_size")
        # the device the timing ran on: the accuracy row's own may differ (a CPU study beside
        # GPU timings), so every speedup names its own
        where = device_kind_name(result.device)
        parts.append((int(case.get("batch_size") or 0),
                      f"bsz {case.get('batch_size')}{mode}: {times_text(value)} "
                      + (f"(image {size}, {where})" if size else f"({where})")))
    if not parts:
        return "no stored infer result with an fp32 twin"
    return "; ".join(text for _, text in sorted(parts))


def table(report: Report, rows: list[dict[str, Any]], results: Sequence[ResultLike]) -> Table:
    """One row per model, engine and lower precision; failures footnoted."""
    out = Table("Accuracy: fp32 vs lower precision (INT8 …), with the inference speedup",
                ["model", "engine", "device", "precision", "fp32 top-1", "top-1",
                 "Δ top-1 (points)", "fp32 top-5", "top-5", "Δ top-5 (points)", "changed top-1",
                 "held out", "data", "inference speedup vs fp32 (stored infer)"],
                ["l", "l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "l", "l"])
    for row in latest(rows):
        ok = row["status"] == "ok"
        notes = [] if ok else [report.note(short(
            f"accuracy {row['model']} {row['framework']} {row['precision']}: {row['status']}"
            f" — {row.get('error')}"))]
        out.rows.append([
            Cell(row["model"]), Cell(row["framework"]), Cell(_device(row)),
            Cell(row["precision"]),
            Cell(_pct(row.get("fp32_top1"))),
            Cell(_pct(row.get("top1")) if ok else row["status"], notes),
            Cell(_points(row.get("diff_top1"))), Cell(_pct(row.get("fp32_top5"))),
            Cell(_pct(row.get("top5"))), Cell(_points(row.get("diff_top5"))),
            Cell("—" if row.get("changed_top1") is None else str(row["changed_top1"])),
            Cell("—" if row.get("samples") is None else str(row["samples"])),
            Cell(dataset_text(row)), Cell(infer_speedup(row, results))])
    return out


# ------------------------------------------------------------------------------------ compare


def measured_top1(row: dict[str, Any] | None) -> float | None:
    """The row's own top-1: the lower precision's, or fp32's on an fp32-only row."""
    if not row or row.get("status") != "ok":
        return None
    return row.get("fp32_top1") if row.get("precision") == "fp32" else row.get("top1")


@dataclass
class RowComparison:
    label: str
    baseline: dict[str, Any] | None
    candidate: dict[str, Any] | None
    verdict: str  # same | better | worse | failed | fixed | only in baseline | only in candidate
    change: float | None = None  # top-1 points, candidate minus baseline
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return self.verdict in ("worse", "failed")

    def to_dict(self) -> dict[str, Any]:
        def brief(row: dict[str, Any] | None) -> dict[str, Any] | None:
            return None if row is None else {
                k: row.get(k) for k in ("id", "status", "fp32_top1", "top1", "diff_top1",
                                        "fp32_top5", "top5", "diff_top5", "changed_top1",
                                        "samples")}
        return {"label": self.label, "verdict": self.verdict, "top1_change_points": self.change,
                "baseline": brief(self.baseline), "candidate": brief(self.candidate),
                "notes": self.notes}


def label(row: dict[str, Any]) -> str:
    return f"{row['model']} {row['framework']} {row['precision']}"


def compare_rows(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]],
                 threshold: float = DEFAULT_THRESHOLD_POINTS) -> list[RowComparison]:
    """Match the newest rows of each side by key; a top-1 drop beyond ``threshold`` points is
    ``worse``. Accuracy on a fixed held-out set is one count, not a sample of repeats, so no
    significance test applies: the threshold alone decides."""
    base = {r["accuracy_key"]: r for r in latest(baseline)}
    cand = {r["accuracy_key"]: r for r in latest(candidate)}
    out = []
    for key in [*base, *(k for k in cand if k not in base)]:
        b, c = base.get(key), cand.get(key)
        name = label(b or c or {})
        if b is None or c is None:
            out.append(RowComparison(name, b, c, "only in candidate" if b is None
                                     else "only in baseline"))
            continue
        top_b, top_c = measured_top1(b), measured_top1(c)
        if top_b is None and top_c is None:
            out.append(RowComparison(name, b, c, "same", notes=[
                f"failed on both sides ({b['status']} / {c['status']})"]))
        elif top_c is None:
            out.append(RowComparison(name, b, c, "failed", notes=[
                f"candidate {c['status']}: {short(c.get('error'))}"]))
        elif top_b is None:
            out.append(RowComparison(name, b, c, "fixed", notes=[
                f"baseline {b['status']}: {short(b.get('error'))}"]))
        else:
            change = top_c - top_b
            verdict = ("worse" if change < -threshold else
                       "better" if change > threshold else "same")
            out.append(RowComparison(name, b, c, verdict, change))
    return out


def add_environments(report: Report, rows: list[dict[str, Any]]) -> None:
    """The machines the accuracy rows were scored on join the report's environment section."""
    from dlperf.report.tables import Environment, environment

    for row in latest(rows):
        facts = environment(row.get("env") or {})
        if not any(e.facts == facts for e in report.environments):
            report.environments.append(Environment(facts))
