"""Is training input-bound? ``dlperf run --data both:DIR``, the study behind the real-data flags
(which :mod:`dlperf.commands._flags` defines).

``--data DIR`` trains on a dataset folder through the backend's real input pipeline (decode,
augment, batch, copy to the device) instead of one synthetic batch made on the device;
``--data-only`` measures that pipeline alone. ``--data both:DIR`` measures the same case twice,
compute-only (synthetic) and data+compute, stores both and reports their ratio: below
:data:`INPUT_BOUND_BELOW` the input pipeline, not the model, sets the pace.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlperf.errors import UsageError
from dlperf.result import throughput_median
from dlperf.spec import Case
from dlperf.store import Store

BOTH = "both:"
INPUT_BOUND_BELOW = 0.9


def is_both(data: str) -> bool:
    """Whether ``--data`` asks for the study (``both:DIR``, or ``both`` missing its folder)."""
    return data == "both" or data.startswith(BOTH)


def folder_of(data: str, data_only: bool) -> str:
    """The dataset folder of ``both:DIR``; UsageError when it is missing or cannot be compared."""
    folder = data[len(BOTH):] if data.startswith(BOTH) else ""
    if not folder:
        raise UsageError("--data: both needs the dataset directory, as both:DIR")
    if data_only:
        raise UsageError("--data-only: both:DIR compares training on synthetic data with "
                         "training on the folder; --data-only trains nothing")
    return folder


def both_cases(fed: Case) -> tuple[Case, Case]:
    """(compute-only, data+compute): ``fed`` (training on the folder) and the same case on
    synthetic data."""
    compute = dataclasses.replace(fed, data="synthetic", loader_workers=None, data_only=False,
                                  cold_cache=False, loader="native")
    return compute, fed


def comparison(compute: dict[str, Any], fed: dict[str, Any]) -> dict[str, Any]:
    """data+compute throughput over compute-only, with the verdict; null figures when either
    case failed."""
    base, mine = throughput_median(compute), throughput_median(fed)
    ratio = mine / base if mine and base else None
    if ratio is None:
        verdict = "unknown: a case did not measure ok"
    elif ratio < INPUT_BOUND_BELOW:
        verdict = "input-bound"
    else:
        verdict = "not input-bound"
    return {"compute_only_throughput": base, "data_compute_throughput": mine, "ratio": ratio,
            "input_bound_below": INPUT_BOUND_BELOW, "verdict": verdict,
            "compute_only_run_id": compute.get("run_id"),
            "compute_only_case_key": compute.get("case_key")}


def describe(block: dict[str, Any]) -> str:
    if block["ratio"] is None:
        return f"data+compute vs compute-only: {block['verdict']}"
    return (f"data+compute / compute-only = {block['ratio']:.2f}: {block['verdict']} "
            f"(input-bound below {block['input_bound_below']:g})")


def record_verdict(results: list[dict[str, Any]], store: Store) -> dict[str, Any]:
    """Add the comparison to the data+compute result (``results``: compute-only, then
    data+compute) and store it with that result; the comparison block."""
    compute, fed = results
    block = comparison(compute, fed)
    fed.setdefault("data", {})["vs_compute_only"] = block
    if fed.get("run_id") is not None:
        store.finish_run(fed["run_id"], fed)
    return block
