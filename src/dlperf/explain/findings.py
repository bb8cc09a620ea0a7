"""Findings in words: a small set of rules that turn a profile, a roofline and a comparison into
sentences, each carrying the figures it cites. No rule fires without its numbers, and a finding
about a result flagged noisy says so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlperf import stats
from dlperf.explain.diff import Difference, differ
from dlperf.results.codec import read_result
from dlperf.results.model import Result
from dlperf.worker.profile import UNATTRIBUTED

# shares of the profiled step above which a category is worth a sentence
UNATTRIBUTED_SHARE = 0.30
LAYOUT_SHARE = 0.15
COMMUNICATION_SHARE = 0.20
OPTIMIZER_SHARE = 0.20
INPUT_SHARE = 0.10
UNMAPPED_SHARE = 0.05
PROFILE_OVERHEAD = 0.20  # profiled steps this much slower than measured ones
FAR_FROM_ROOF = 0.30
SAME_SPEED = 0.02  # two step times within this are the same speed: no "why"


#: what the rules read: a typed result, or a result object (read by dlperf.results)
ResultLike = Result | Mapping[str, Any]


@dataclass
class Finding:
    rule: str
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms/step"


def _pct(share: float) -> str:
    return f"{share:.0%}"


def noisy_note(result: ResultLike) -> str | None:
    """The caveat every finding of a result flagged noisy carries."""
    typed = read_result(result)
    summary = typed.raw.get("throughput") or {}
    if typed.throughput is not None and typed.throughput.median and stats.noisy(summary):
        label = typed.raw.get("label", "the result")
        return f"{label} was flagged noisy (CV {typed.throughput.cv:.1%})"
    return None


def _with_caveats(found: list[Finding], *results: Result) -> list[Finding]:
    notes = [note for note in (noisy_note(r) for r in results) if note]
    if notes:
        for finding in found:
            finding.text += f" [{'; '.join(notes)}: read with care]"
            finding.figures["noisy"] = notes
    return found


def of_result(result: ResultLike) -> list[Finding]:
    """What one profiled result's numbers say."""
    typed = read_result(result)
    block = typed.profile
    found: list[Finding] = []
    cats = block.categories if block else {}
    if block and cats:
        step = block.step_s
        case = typed.case

        def share(name: str) -> float:
            return cats.get(name, 0.0) / step if step else 0.0

        if share(UNATTRIBUTED) >= UNATTRIBUTED_SHARE:
            why = ("the profiler cannot see inside compiled code" if case.get("compile") else
                   f"dispatch-bound at batch {case.get('batch_size')}: compile, or a larger "
                   f"batch")
            found.append(Finding("unattributed", (
                f"{_pct(share(UNATTRIBUTED))} of the step is unattributed "
                f"({_ms(cats[UNATTRIBUTED])} of {_ms(step or 0.0)}): time no operator covers "
                f"(framework dispatch, Python, idle); {why}"),
                {"share": share(UNATTRIBUTED), "s_per_step": cats[UNATTRIBUTED],
                 "step_s": step}))
        if share("layout") >= LAYOUT_SHARE:
            found.append(Finding("layout", (
                f"{_pct(share('layout'))} of the step is layout conversion "
                f"({_ms(cats['layout'])}: reorders, transposes, casts between operators that "
                f"want different formats or precisions)"),
                {"share": share("layout"), "s_per_step": cats["layout"]}))
        devices = typed.devices
        if devices > 1 and share("communication") >= COMMUNICATION_SHARE:
            found.append(Finding("communication", (
                f"{devices} processes: {_pct(share('communication'))} of the step in "
                f"collective communication ({_ms(cats['communication'])})"),
                {"share": share("communication"), "devices": devices}))
        if share("optimizer") >= OPTIMIZER_SHARE:
            found.append(Finding("optimizer", (
                f"the optimizer update takes {_pct(share('optimizer'))} of the step "
                f"({_ms(cats['optimizer'])}) for {typed.params or '?'} "
                f"parameters at batch {case.get('batch_size')}: a larger batch spreads it"),
                {"share": share("optimizer")}))
        if share("input_pipeline") >= INPUT_SHARE:
            found.append(Finding("input", (
                f"{_pct(share('input_pipeline'))} of the step waits for the input pipeline "
                f"({_ms(cats['input_pipeline'])})"), {"share": share("input_pipeline")}))
        if share("other") >= UNMAPPED_SHARE and block.unmapped:
            names = ", ".join(op["name"] for op in block.unmapped[:3])
            found.append(Finding("unmapped", (
                f"{_pct(share('other'))} of the step is in operators the backend's table does "
                f"not map ({names}...): counted as other"), {"share": share("other")}))
        overhead = block.overhead
        if overhead is not None and overhead >= PROFILE_OVERHEAD:
            found.append(Finding("overhead", (
                f"profiled steps took {_pct(overhead)} longer than measured ones "
                f"({_ms(step or 0.0)} against {_ms(block.measured_step_s or 0.0)}): the "
                f"categories describe a slowed step"), {"overhead": overhead}))
    found += _roofline(typed)
    for finding in found:
        finding.text = f"{typed.raw.get('label')}: {finding.text}"
    return _with_caveats(found, typed)


def _roofline(result: Result) -> list[Finding]:
    roof = result.roofline
    if roof is None:
        return []
    if roof.roof_note:
        return [Finding("roofline", f"no roofline verdict: {roof.roof_note}", {})]
    if not roof.bound or roof.of_roof is None or roof.intensity is None or roof.ridge is None:
        return []
    figures = {"intensity": roof.intensity, "ridge": roof.ridge, "bound": roof.bound,
               "of_roof": roof.of_roof}
    text = (f"at {roof.intensity:.1f} FLOP/byte (this machine's ridge: {roof.ridge:.1f}) "
            f"the step is {roof.bound}-bound by the estimate, and reaches "
            f"{_pct(roof.of_roof)} of that roof")
    if roof.of_roof < FAR_FROM_ROOF:
        text += "; far below it, so overheads rather than the hardware set the pace"
    return [Finding("roofline", text, figures)]


def cpu_precision_note(result: ResultLike, precision: str) -> str | None:
    """What this CPU has for a reduced precision, from the result's recorded CPU flags."""
    typed = read_result(result)
    flags = typed.cpu_flags
    if not flags or "cpu" not in typed.device:
        return None
    if "bf16" in precision:
        if "amx_bf16" in flags:
            return "this CPU has AMX (bf16 tiles)"
        if "avx512_bf16" in flags:
            return "this CPU has AVX-512 BF16 but no AMX"
        return "this CPU has no bf16 instructions (bf16 is converted or emulated)"
    if "fp16" in precision:
        return ("this CPU has AVX-512 FP16" if "avx512_fp16" in flags else
                "this CPU has no fp16 arithmetic (fp16 is converted to fp32 to compute)")
    return None


def of_pair(a: ResultLike, b: ResultLike) -> list[Finding]:
    """Why B's step takes longer or shorter than A's: the categories that moved most."""
    ta, tb = read_result(a), read_result(b)
    if not (ta.profile and ta.profile.categories and tb.profile and tb.profile.categories):
        return []
    pa, pb = ta.profile.raw, tb.profile.raw
    diff: Difference = differ(pa, pb)
    ratio = pa["step_s"] / pb["step_s"] if pb["step_s"] else None
    la, lb = _side(ta, tb), _side(tb, ta)
    if ratio is None:
        return []
    found: list[Finding] = []
    if abs(ratio - 1.0) < SAME_SPEED:
        same = f"the profiled steps take the same time ({_ms(pb['step_s'])} against " \
               f"{_ms(pa['step_s'])})"
        found.append(Finding("same", f"{lb} and {la} step in the same time "
                             f"({_ms(pb['step_s'])} against {_ms(pa['step_s'])})",
                             {"ratio": ratio, "reasons": [same]}))
        return _with_caveats(found, ta, tb)
    top = [row for row in diff.rows if abs(row.delta) > 0][:2]
    parts = []
    for row in top:
        share = diff.share(row)
        parts.append(f"{row.category} took {abs(row.delta) * 1e3:.1f} ms/step "
                     f"{'more' if row.delta > 0 else 'less'}"
                     + ("" if share is None else f" ({_pct(share)} of the difference)"
                        if share >= 0 else f" (offsetting {_pct(-share)} of it)"))
    precision = tb.raw["case"].get("precision", "")
    if ta.raw["case"].get("precision") != precision:
        note = cpu_precision_note(tb, precision)
        rows = {row.category: row.delta for row in diff.rows}
        compute = rows.get("convolution", 0.0) + rows.get("matmul", 0.0)
        if note:
            parts.append(f"{note}, and its {precision} convolutions and GEMMs ran "
                         f"{abs(compute) * 1e3:.1f} ms/step "
                         f"{'slower' if compute > 0 else 'faster'}")
        if rows.get("layout", 0.0) > 0:
            parts.append(f"it pays {rows['layout'] * 1e3:.1f} ms/step more in casts and reorders")
    text = f"{lb} is {ratio:.2f}x {la}'s speed: " + "; ".join(parts)
    # the clauses after the colon: a report puts them after its own ratio of throughputs
    found.append(Finding("difference", text, {
        "ratio": ratio, "a_step_s": pa["step_s"], "b_step_s": pb["step_s"],
        "rows": [{"category": r.category, "delta_s": r.delta, "share": diff.share(r)}
                 for r in top], "reasons": parts}))
    return _with_caveats(found, ta, tb)


def _side(result: Result, other: Result) -> str:
    """The shortest name that tells two results apart: what differs in their cases."""
    case, peer = result.raw["case"], other.raw["case"]
    fields = [f for f in ("framework", "precision", "compile", "devices", "batch_size", "model",
                          "options") if case.get(f) != peer.get(f)]
    words = []
    for name in fields:
        value = case.get(name)
        words.append({"compile": "compiled" if value else "eager",
                      "devices": f"{value} devices", "batch_size": f"batch {value}"}.get(
                          name, str(value)))
    if not words:  # one case measured twice (two versions, two days): the runs
        return f"run {result.run_id}" if result.run_id else str(result.raw.get("label"))
    return " ".join(words)
