"""Which measured result stands for a published value, and the figure it gives.

A published value names its case by keys (framework, model, task, precision, XLA, gradient
clipping, a model knob such as Wide & Deep's vocab_size, nodes x GPUs per node, batch); a
framework without a dlperf backend has the one the study names stand in for it
(:attr:`dlperf.studies.reproduce.Study.frameworks`), or no counterpart. At the study's own scale (``published``) the measured
case has exactly those fields. At the ``cpu`` scale three of them differ, by rules stated once
here and shown in every table of the report:

- precision: :data:`dlperf.studies.reproduce.CPU_PRECISIONS` (AMP with FP16 -> amp-bf16, TF32 ->
  fp32);
- devices: one GPU pairs with one process where both were measured; the study's other GPU
  counts (per framework and table) pair from the largest down with this machine's other process
  counts: DLPerf's 32 GPUs with 2 processes, its 8 and 16 with none (so a table's largest scale
  is always compared), a table measured on 32 GPUs only with this machine's largest count;
- batch: where the table's rows are batch sizes (an inference sweep), a row pairs with the same
  batch; elsewhere the published batch is a setting: the largest that fit (``bsz=max``) pairs with
  the largest batch measured for the case, a fixed one with the smallest.

Speedups are computed the way the study computes them: over the 1-device result of the same
configuration (:func:`dlperf.report.results.with_scaling`), over the row's published baseline
precision where the row has one, else over the result that differs in precision alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf import models, reference
from dlperf.report.results import NO_BASELINE, total_devices
from dlperf.results.codec import read_result
from dlperf.results.model import ResultLike
from dlperf.spec import Case, SpecError, default_compile
from dlperf.studies.reproduce import Study, gpus, translate

# a published latency statistic -> the key of a result's latency_ms
STATISTIC = {"avg": "mean", "mean": "mean", "p50": "p50", "p90": "p90", "p95": "p95",
             "p99": "p99"}
# what a twin may differ in besides precision: the fields that never make an experiment
_NOT_IDENTITY = ("precision",)


@dataclass
class Figure:
    """A published value's measured counterpart: the figure (None where there is none), how it
    is shown, why it is missing or failed, and the results it came from."""

    value: float | None
    text: str
    why: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Pairings:
    """The shapes paired while filling a table: (what, published) -> measured, for its line."""

    seen: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def add(self, what: str, published: str, measured: str) -> None:
        if published != measured:
            self.seen.setdefault((what, published), set()).add(measured)


def _ok(result: ResultLike | None) -> bool:
    return result is not None and read_result(result).status == "ok"


def _case(result: ResultLike) -> Mapping[str, Any]:
    """The result's case, every field added since at its value before it existed."""
    return read_result(result).case


def _median(result: ResultLike) -> float | None:
    return read_result(result).median


def _identity(case: Mapping[str, Any], drop: Sequence[str]) -> str | None:
    try:
        found = Case.from_dict(dict(case)).identity()
    except (SpecError, TypeError, ValueError):
        return None
    for name in drop:
        found.pop(name, None)
    return repr(sorted(found.items(), key=lambda item: item[0]))


class Pairer:
    """Finds each published value's measured counterpart among a study's results."""

    def __init__(self, study: Study, scale: str, results: list[dict[str, Any]]) -> None:
        self.study = study
        self.scale = scale
        # the framework's own data parallelism only (a Horovod row is another engine)
        self.results = [r for r in results if read_result(r).launcher == "native"]
        self._identities: dict[tuple[int, tuple[str, ...]], str | None] = {}

    def identity(self, result: dict[str, Any], drop: tuple[str, ...]) -> str | None:
        """The result's case identity less ``drop`` (computed once per result)."""
        key = (id(result), drop)
        if key not in self._identities:
            self._identities[key] = _identity(_case(result), drop)
        return self._identities[key]

    # --- the case a value names -------------------------------------------------------------

    def candidates(self, value: reference.Published, precision: str | None = None
                   ) -> tuple[list[dict[str, Any]], str | None]:
        """The results of the value's framework, model, task, precision, XLA and clipping
        (every batch and device count), or none and why."""
        keys = value.keys
        framework = self.study.framework(keys.get("framework"))
        if framework is None:
            return [], f"{keys.get('framework')}: dlperf has no backend for it"
        if keys.get("dali"):
            return [], "w/DALI: dlperf measures synthetic data here, no input pipeline"
        wanted = translate(precision or str(keys.get("precision", "fp32")), self.scale)
        compile_ = bool(keys["xla"]) if "xla" in keys else default_compile(framework)
        no_clip = keys.get("grad_clip") is False
        model = str(keys.get("model"))
        knobs = {name: keys[name] for name in
                 (models.get(model).knobs if model in models.CATALOGUE else ()) if name in keys}
        mine = [r for r in self.results if _case(r).get("framework") == framework]
        if not mine:
            return [], f"{framework}: no result in this sweep"
        found = [r for r in mine if _matches(_case(r), keys, wanted, compile_, no_clip, knobs)]
        if not found:
            return [], (f"no result of {framework} {keys.get('model')} {wanted}"
                        + (" with XLA" if keys.get("xla") else "")
                        + (" without gradient clipping" if no_clip else "")
                        + "".join(f" at this {k}" for k in knobs)
                        + " in this sweep")
        return found, None

    def devices_for(self, table: reference.Table, value: reference.Published,
                    found: list[dict[str, Any]]) -> int | None:
        """The process count that stands for the value's GPUs (see the module's rules)."""
        wanted = gpus(value)
        if self.scale != "cpu":
            return wanted
        framework = value.keys.get("framework")
        published = {gpus(v) for v in table.values()
                     if v.keys.get("framework") == framework}
        measured = {total_devices(r) for r in found}
        pairs = {}
        if 1 in published and 1 in measured:
            pairs[1] = 1
        pairs.update(zip(sorted(published - pairs.keys(), reverse=True),
                         sorted(measured - set(pairs.values()), reverse=True)))
        return pairs.get(wanted)

    def batch_for(self, table: reference.Table, value: reference.Published,
                  found: list[dict[str, Any]]) -> int | None:
        """The batch per device that stands for the value's (see the module's rules)."""
        batches = sorted({_batch(r) for r in found})
        if not batches:
            return None
        keys = value.keys
        stated = keys.get("batch_size")
        if stated is None:
            framework = self.study.framework(keys.get("framework")) or ""
            stated = self.study.batch.get((framework, str(keys.get("precision"))))
        by_row = any("batch_size" in row.keys for row in table.rows)
        if self.scale != "cpu" or by_row:
            if stated is not None:
                return int(stated) if int(stated) in batches else None
        return batches[-1] if keys.get("largest_batch") else batches[0]

    def result_for(self, table: reference.Table, value: reference.Published,
                   pairings: Pairings | None = None, precision: str | None = None
                   ) -> tuple[dict[str, Any] | None, str | None]:
        """The measured result that stands for ``value`` (at ``precision`` instead of its own
        when given), or None and why."""
        found, why = self.candidates(value, precision)
        if not found:
            return None, why
        processes = self.devices_for(table, value, found)
        if processes is None:
            measured = sorted({total_devices(r) for r in found})
            return None, (f"no counterpart at the {self.scale} scale: one GPU pairs with one "
                          f"process, the study's largest GPU counts with this machine's "
                          f"largest process counts (measured: "
                          f"{', '.join(map(str, measured))} process(es))")
        at = [r for r in found if total_devices(r) == processes]
        if self.scale != "cpu":
            at = [r for r in at if int(_case(r)["nnodes"]) == int(value.keys.get("nodes", 1))]
        batch = self.batch_for(table, value, at)
        chosen = [r for r in at if _batch(r) == batch]
        if batch is None or not chosen:
            measured = sorted({_batch(r) for r in at})
            return None, (f"not measured at this scale: the sweep measured batch size(s) "
                          f"{', '.join(map(str, measured)) or 'none'} of this case on "
                          f"{processes} process(es)")
        result = next((r for r in chosen if _ok(r)), chosen[0])
        if pairings is not None:
            case = _case(result)
            pairings.add("devices", _gpus_text(value),
                         f"{processes} {'process' if processes == 1 else 'processes'}"
                         if self.scale == "cpu" else _gpus_text(value))
            if "batch_size" in value.keys or value.keys.get("largest_batch"):
                pairings.add("batch", _batch_text(value), f"bsz={case.get('batch_size')}")
            published = str(precision or value.keys.get("precision", "fp32"))
            pairings.add("precision", published, str(case["precision"]))
            framework = value.keys.get("framework")
            if framework is not None:
                pairings.add("framework", str(framework), str(case.get("framework")))
        return result, None

    def twin(self, result: dict[str, Any], precision: str,
             any_batch: bool = False) -> dict[str, Any] | None:
        """The result that differs from ``result`` in precision alone (and, with
        ``any_batch``, in batch size: the study doubled the batch with FP16), if measured."""
        drop = _NOT_IDENTITY + (("batch_size",) if any_batch else ())
        mine = self.identity(result, drop)
        if mine is None:
            return None
        found = [r for r in self.results if _case(r)["precision"] == precision
                 and total_devices(r) == total_devices(result)
                 and self.identity(r, drop) == mine]
        same = [r for r in found if _case(r).get("batch_size") == _case(result).get("batch_size")]
        return next(iter(same + found), None)

    # --- the figure -------------------------------------------------------------------------

    def figure(self, table: reference.Table, row: list[reference.Published],
               value: reference.Published, pairings: Pairings) -> Figure:
        """The measured counterpart of one published value."""
        if value.quantity == "improvement":
            return self.improvement(value)
        result, why = self.result_for(table, value, pairings)
        if result is None:
            return Figure(None, "not measured", why)
        typed = read_result(result)
        if not _ok(result):
            return Figure(None, typed.status or "?", f"{typed.label}: {typed.error}", [result])
        quantity = value.quantity
        if quantity == "throughput":
            return _number(typed.median, [result])
        if quantity in ("speedup", "scaling-efficiency"):
            found = typed.speedup if quantity == "speedup" else typed.scaling_efficiency
            if found is None:
                return Figure(None, "—", f"{typed.label}: {NO_BASELINE}", [result])
            return _number(found, [result])
        if quantity == "latency":
            stat = STATISTIC.get(str(value.keys.get("statistic")), "p50")
            return _number(typed.latency_ms.get(stat), [result])
        if quantity == "step-time":
            return _number(typed.iteration_ms, [result])
        if quantity == "memory" and value.unit == "MB":
            return self.memory(result)
        if quantity in ("precision-speedup", "latency-speedup"):
            return self.precision_speedup(table, row, value, result)
        return Figure(None, "—", f"dlperf does not measure {quantity} here")

    def memory(self, result: dict[str, Any]) -> Figure:
        """Peak memory in MiB (nvidia-smi's MB): the device's where the framework reports it,
        else the worker's resident host memory (a CPU's)."""
        typed = read_result(result)
        device = typed.peak_device_bytes
        found = device or typed.peak_host_bytes
        figure = _number(found / 2**20 if found else None, [result])
        if found and not device:
            figure.why = "measured: the worker's peak resident host memory (no device memory)"
        return figure

    def precision_speedup(self, table: reference.Table, row: list[reference.Published],
                          value: reference.Published, result: dict[str, Any]) -> Figure:
        """Throughput over the baseline precision's (latency: the baseline's over this one's):
        the row's own baseline cell where the study publishes one, else the twin case."""
        baseline = str(value.keys.get("baseline"))
        sibling = next((v for v in row if v.quantity == "throughput"
                        and v.keys.get("precision") == baseline), None)
        if sibling is not None:
            base, why = self.result_for(table, sibling)
        else:
            base = self.twin(result, translate(baseline, self.scale))
            why = f"no {translate(baseline, self.scale)} result of the same case"
        if base is None or not _ok(base):
            typed = read_result(base or {})
            return Figure(None, "—", why or f"{typed.label}: {typed.status}", [result])
        if value.quantity == "precision-speedup":
            mine, theirs = _median(result), _median(base)
            return _number(mine / theirs if mine and theirs else None, [result, base])
        stat = STATISTIC.get(str(value.keys.get("statistic")), "p50")
        mine = read_result(result).latency_ms.get(stat)
        theirs = read_result(base).latency_ms.get(stat)
        return _number(theirs / mine if mine and theirs else None, [result, base])

    def improvement(self, value: reference.Published) -> Figure:
        """How much faster one precision is than its baseline, in percent: the lowest or the
        highest (``bound``) over every configuration measured in both."""
        keys = value.keys
        precision = translate(str(keys.get("precision")), self.scale)
        baseline = translate(str(keys.get("baseline")), self.scale)
        found: list[tuple[float, dict[str, Any], dict[str, Any]]] = []
        for result in self.results:
            case = _case(result)
            if case.get("model") != keys.get("model") or case["precision"] != precision \
                    or case["task"] != keys.get("task", "train") or not _ok(result):
                continue
            base = self.twin(result, baseline, any_batch=True)
            if base is not None and _ok(base):
                mine, theirs = _median(result), _median(base)
                if mine and theirs:
                    found.append((100 * (mine / theirs - 1), result, base))
        if not found:
            return Figure(None, "not measured", f"no configuration measured in both {precision} "
                                                f"and {baseline}")
        pick = min if keys.get("bound") == "min" else max
        best = pick(found, key=lambda item: item[0])
        where = ", ".join(sorted({f"{_case(r).get('framework')} on {total_devices(r)}"
                                  for _, r, _ in found}))
        return Figure(best[0], _format(best[0]), f"{keys.get('bound')} over {len(found)} "
                      f"configuration(s) ({where} process(es)); here: "
                      f"{read_result(best[1]).label} over {read_result(best[2]).label}",
                      [best[1], best[2]])


def _batch(result: ResultLike) -> int:
    return int(_case(result).get("batch_size") or 0)


def _matches(case: Mapping[str, Any], keys: Mapping[str, Any], precision: str, compile_: bool,
             no_clip: bool, knobs: Mapping[str, Any]) -> bool:
    """Whether a case is the value's model, task, precision, XLA and clipping, at its knobs."""
    mine = case["knobs"] or {}
    return (case.get("model") == keys.get("model") and case["task"] == keys.get("task", "train")
            and case["precision"] == precision and bool(case["compile"]) == compile_
            and (mine.get("clip_grad_norm") == 0) == no_clip
            and all(mine.get(k) == v for k, v in knobs.items()))


def _number(value: float | None, results: list[dict[str, Any]]) -> Figure:
    return Figure(value, "—" if value is None else _format(value), None, results)


def _format(value: float) -> str:
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def ratio_text(measured: float | None, published: float | None) -> str:
    if measured is None or not published:
        return ""
    return f"{measured / published:.3g}×"


def _gpus_text(value: reference.Published) -> str:
    count = gpus(value)
    nodes = int(value.keys.get("nodes", 1))
    if count == 1:
        return "1 GPU"
    return f"{count} GPUs" + (f" ({nodes}×{count // nodes})" if nodes > 1 else "")


def _batch_text(value: reference.Published) -> str:
    if value.keys.get("largest_batch") and "batch_size" not in value.keys:
        return "bsz=max"
    if "batch_size" in value.keys:
        return f"bsz={value.keys['batch_size']}" + (
            " (max)" if value.keys.get("largest_batch") else "")
    return "bsz not stated"
