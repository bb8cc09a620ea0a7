"""Stored projections (`dlperf project`) in a report: a table of their own under the section of
the result they start from, titled as projected, never a row among measured ones."""

from __future__ import annotations

from typing import Any

from dlperf.projection.span import Span
from dlperf.report.tables import Cell, Report, Table


def table(projection: dict[str, Any]) -> Table:
    """One projection's targets: nodes, devices, throughput, speedup and efficiency, each with
    its interval; the model in the title."""
    made = Table(f"projected (not measured): {projection['label']} — projection "
                 f"{projection.get('id', '?')}; model: {projection['model'].get('text', '?')}",
                 ["nodes", "devices/node", "devices", "throughput (samples/s, projected)",
                  "with the model's validated error", "speedup (projected)",
                  "scaling efficiency (projected)"],
                 ["r", "r", "r", "r", "r", "r", "r"])
    for point in projection["points"]:
        made.rows.append([Cell(str(point["nodes"])), Cell(str(point["devices_per_node"])),
                          Cell(str(point["devices"])), Cell(Span(**point["throughput"]).text()),
                          Cell(_with_model_error(point)),
                          Cell(Span(**point["speedup"]).text(2)),
                          Cell(Span(**point["scaling_efficiency"]).text(pct=True))])
    return made


def _with_model_error(point: dict[str, Any]) -> str:
    """The throughput's interval widened by the model's error, and which check's; a projection
    stored before 2026-11-30 has none."""
    wider, error = point.get("throughput_with_model_error"), point.get("model_error")
    if not wider or not error:
        return "not stored"
    beyond = ", past the validated shapes" if error.get("beyond_validated") else ""
    own = error.get("past_its_device")  # stored since 2026-12-07
    if own and not beyond:
        beyond = (f", past the shapes checked on a {own['device'].upper()} (at most "
                  f"{own['nodes']} nodes, {own['devices']} devices)")
    return (f"{wider['low']:,.1f}–{wider['high']:,.1f} ({error['check']} check: "
            f"{error['under']:+.1%} to {error['over']:+.1%}{beyond})")


def attach(report: Report, projections: list[dict[str, Any]]) -> None:
    """Each projection whose starting result the report shows, as a table after that
    section's scaling tables (the newest projection of a start last)."""
    for projection in projections:
        source = projection.get("source") or {}
        for section in report.sections:
            if any(r.get("case_key") == source.get("case_key") and
                   r.get("label") == source.get("label") for r in section.results):
                section.scaling.append(table(projection))
                section.projections.append(projection)
                break
