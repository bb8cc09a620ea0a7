"""Which stored results a report shows, and their speedup over the matching 1-device result.

A report shows the newest finished result of each case (per sweep when a sweep is named). A
speedup is only ever a ratio of two measurements: throughput on N devices over throughput on one
device of the same configuration. With no such 1-device result the speedup stays ``None`` with a
note saying why; it is never defaulted to 1.0 or 0.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from dlperf.errors import UsageError
from dlperf.results.codec import read_result, to_dict
from dlperf.results.model import Result
from dlperf.scaling import NO_BASELINE, config  # the same rule `dlperf run` applies
from dlperf.store import Store

__all__ = ["NO_BASELINE", "load", "load_history", "total_devices", "with_scaling"]


def load(store: Store, sweep: str | None = None,
         leave_out: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Newest finished result per case and label (within ``sweep`` when given; without one,
    less the runs of the sweeps ``leave_out`` names), oldest case first: the results of one case
    under several labels (commits, builds) are its history, each kept."""
    if sweep is not None and sweep not in store.sweeps():
        known = ", ".join(store.sweeps()) or "none"
        raise UsageError(f"--sweep: no sweep named {sweep!r} in {store.path}; stored sweeps: "
                         f"{known}")
    where = "result_json IS NOT NULL"
    params: tuple[str, ...] = ()
    if sweep is not None:
        where, params = "result_json IS NOT NULL AND sweep=?", (sweep,)
    elif leave_out:
        where = (f"result_json IS NOT NULL AND (sweep IS NULL OR sweep NOT IN "
                 f"({', '.join('?' * len(leave_out))}))")
        params = tuple(leave_out)
    latest: dict[str, dict[str, Any]] = {}
    for row in store.runs(where, params):
        typed = store.result(row)
        result = to_dict(typed)
        result.setdefault("run_id", row["id"])
        result["sweep"] = row["sweep"]
        key = f"{row['case_key']}\0{typed.case['run_label'] or ''}"
        latest.pop(key, None)  # re-insert: the newest wins, in order
        latest[key] = result
    return list(latest.values())


def load_history(store: Store, sweep: str | None = None) -> list[dict[str, Any]]:
    """Every finished, successful result (within ``sweep`` when given) in run order: the
    history figure draws an experiment from all of them, not only the newest per case."""
    where = "result_json IS NOT NULL"
    params: tuple[str, ...] = ()
    if sweep is not None:
        where, params = "result_json IS NOT NULL AND sweep=?", (sweep,)
    out = []
    for row in store.runs(where, params):
        typed = store.result(row)
        if typed.status == "ok":
            result = to_dict(typed)
            result.setdefault("run_id", row["id"])
            out.append(result)
    return out


def total_devices(result: Result | Mapping[str, Any]) -> int:
    return read_result(result).devices


def config_key(result: Result | Mapping[str, Any]) -> str:
    """What must be equal for a 1-device result to be the baseline of an N-device one."""
    typed = read_result(result)
    source = (typed.case.get("external") or {}).get("name")
    return json.dumps([config(typed), source], sort_keys=True)


def native(result: Result | Mapping[str, Any]) -> bool:
    """Whether the framework's own data parallelism ran it (not Horovod): only such a 1-device
    result is a baseline, for every engine (:func:`dlperf.scaling.find_baseline`)."""
    return read_result(result).launcher == "native"


def with_scaling(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``results`` with ``speedup`` and ``scaling_efficiency`` filled where absent.

    Values a result already carries (the multi-device runner computes them when it stores the
    result) are kept; the others come from the 1-device result of the same configuration among
    ``results`` (the newest one), or stay None with ``speedup_note``.
    """
    baselines: dict[str, Result] = {}
    for typed in map(read_result, results):
        if typed.devices == 1 and typed.median and typed.launcher == "native":
            key = config_key(typed)
            current = baselines.get(key)
            if current is None or (typed.run_id or 0) >= (current.run_id or 0):
                baselines[key] = typed
    out = []
    for original in results:
        typed = read_result(original)
        result = copy.deepcopy(original)
        n = typed.devices
        value = typed.median
        if typed.speedup is not None:
            result.setdefault("scaling_efficiency", typed.speedup / n)
        elif value is None:
            result["speedup"] = None
            result["scaling_efficiency"] = None
        elif n == 1 and typed.launcher == "native":
            result["speedup"] = 1.0
            result["scaling_efficiency"] = 1.0
        else:
            base = baselines.get(config_key(typed))
            base_value = base.median if base else None
            if base is None or not base_value:
                result["speedup"] = None
                result["scaling_efficiency"] = None
                result["speedup_note"] = NO_BASELINE
            else:
                result["speedup"] = value / base_value
                result["scaling_efficiency"] = result["speedup"] / n
                result["speedup_baseline_run_id"] = base.run_id
        out.append(result)
    return out
