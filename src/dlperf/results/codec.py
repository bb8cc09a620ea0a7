"""The one reader and the one writer of stored results.

Every schema version dlperf wrote is schema 1 with fields added over time (``dlperf.result``:
added, never renamed or removed). What an older row lacks is filled in here and nowhere
else, as the version that added it would have written it:

- ``device``: from rank 0's resolved-device record, else the backend's ``device``
  info and the host's GPUs (:func:`device_of`);
- case fields added since (``dlperf.spec.Case``): at the value they had before they existed;
- ``environment`` (its name, framework version and label): from the case and the worker's
  framework info;
- ``emulated_hosts``: a sweep's live in its launch facts.

The writer writes what it was given and adds nothing derived, so the stored JSON format never
changes: reading what it wrote gives the same Result.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from dlperf.results.model import (Flops, Profile, RankFigures, RankRecord, Repeat, Result, Roofline,
                                  Throughput)
from dlperf.worker.support import device_label


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _old_device(result: Mapping[str, Any], gpus: list[Mapping[str, Any]]
                ) -> dict[str, Any] | None:
    """The resolved-device record of a result stored before workers reported one: from what the
    backend put in its info (``device``: "cuda:0", "/GPU:0", "gpu(0)", "CUDA:0"...; the GPU's
    ``device_name``), None when it says nothing."""
    info = _object(_object(_object(result.get("env")).get("worker")).get("framework"))
    text = str(info.get("device") or "").lower()
    if not text:
        return None
    if not gpus or not any(word in text for word in ("cuda", "gpu")):
        return {"kind": "cpu", "index": None, "name": None, "reason": None}
    digits = "".join(c if c.isdigit() else " " for c in text).split()
    name = info.get("device_name")  # MXNet's was "gpu:0", no name
    return {"kind": "cuda", "index": int(digits[-1]) if digits else 0,
            "name": None if str(name or "").lower().startswith(("gpu", "cuda")) else name,
            "reason": None}


def device_of(result: Mapping[str, Any] | Result) -> str:
    """The device a result ran on, as every table, report row and comparison shows it: ``cpu``,
    or ``cuda:0 NVIDIA H100 80GB HBM3`` (kind, index, GPU name), from rank 0's resolved device.

    A result stored before that was recorded gets it from the backend's ``device`` info and the
    host's GPUs (``env.gpus``): ``cpu`` when the host had none or the case asked for the CPU;
    ``cuda`` when a GPU host's result says nothing (an external script, a failure before the
    worker reported)."""
    if isinstance(result, Result):
        return result.device
    if result.get("device"):
        return str(result["device"])
    env = _object(result.get("env"))
    gpus = [g for g in env.get("gpus") or [] if isinstance(g, Mapping)]
    names = [str(g.get("name") or "") for g in gpus]
    record = _object(env.get("worker")).get("device") or _old_device(result, gpus)
    if record:
        return device_label(record, names)
    requested = _object(result.get("case")).get("device") or "auto"
    return "cpu" if not gpus or requested == "cpu" else "cuda"


@functools.lru_cache(maxsize=1)
def _case_defaults() -> tuple[tuple[str, Any], ...]:
    from dlperf.spec import field_defaults  # the spec imports the catalogue: only when needed

    return tuple(field_defaults().items())


def case_with_defaults(case: Mapping[str, Any]) -> dict[str, Any]:
    """A stored case with every case field added since at the value it had before (a case from
    `dlperf external` keeps its own fields too)."""
    out = {name: dict(value) if isinstance(value, Mapping) else value
           for name, value in _case_defaults() if name not in case}
    out.update(case)
    return out


def _tuple(values: Any) -> tuple[Any, ...]:
    return tuple(values) if isinstance(values, (list, tuple)) else ()


def _int(value: Any) -> int | None:
    """A whole number as stored, else None: the reader never raises on what a file holds (the
    checks of :mod:`dlperf.report.reading` name a malformed field; a reader only reads)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return float(value[0]), float(value[1])
    return None


def _throughput(data: Any) -> Throughput | None:
    if not isinstance(data, Mapping):
        return None
    return Throughput(median=data.get("median"), mean=data.get("mean"), min=data.get("min"),
                      max=data.get("max"), cv=data.get("cv"), iqr=data.get("iqr"),
                      ci95=_interval(data.get("ci95")), n=_int(data.get("n")) or 0,
                      repeats=_tuple(data.get("repeats")))


def _rank(data: Mapping[str, Any]) -> RankFigures:
    return RankFigures(
        rank=_int(data.get("rank")) or 0, host=data.get("host"), local_rank=data.get("local_rank"),
        threads=data.get("threads"), cpus=data.get("cpus"),
        throughput=_tuple(data.get("throughput")), window_s=_tuple(data.get("window_s")),
        first_step_s=_tuple(data.get("first_step_s")), build_s=_tuple(data.get("build_s")),
        allreduce_s=_tuple(data.get("allreduce_s")), slowest_in=_int(data.get("slowest_in")) or 0,
        peak_host_bytes=_int(data.get("peak_host_bytes")) or 0,
        throughput_median=data.get("throughput_median"))


def _profile(data: Any) -> Profile | None:
    if not isinstance(data, Mapping):
        return None
    return Profile(categories=_object(data.get("categories")), step_s=data.get("step_s"),
                   measured_step_s=data.get("measured_step_s"), overhead=data.get("overhead"),
                   unmapped=_tuple(data.get("unmapped")), raw=data,
                   coverage=data.get("coverage"), tool=_object(data.get("tool")),
                   why_not=data.get("unavailable") or data.get("error"))


def _flops(data: Any) -> Flops | None:
    if not isinstance(data, Mapping):
        return None
    return Flops(per_sample=data.get("per_sample"), achieved_per_s=data.get("achieved_per_s"),
                 mfu=data.get("mfu"))


def _roofline(data: Any) -> Roofline | None:
    if not isinstance(data, Mapping):
        return None
    return Roofline(intensity=data.get("intensity"), ridge=data.get("ridge"),
                    bound=data.get("bound"), of_roof=data.get("of_roof"),
                    roof_note=data.get("roof_note"), peak_flops_per_s=data.get("peak_flops_per_s"),
                    bandwidth_bytes_per_s=data.get("bandwidth_bytes_per_s"),
                    roof_flops_per_s=data.get("roof_flops_per_s"))


def read_result(data: Mapping[str, Any] | Result) -> Result:
    """A stored result (a decoded ``result_json``, a result file, :func:`dlperf.result.aggregate`'s
    object) as the current version reads it; a Result as it is. ``data`` is not changed, and any
    JSON object reads: what is not of its type is left out (None, empty), while the checks of
    :mod:`dlperf.report.reading` (the store's decode, compare's files) name it to the user."""
    if isinstance(data, Result):
        return data
    case = _object(data.get("case"))
    environment = _object(data.get("environment"))
    framework = _object(_object(_object(data.get("env")).get("worker")).get("framework"))
    launch = data.get("launch") if isinstance(data.get("launch"), Mapping) else None
    return Result(
        raw=data, run_id=data.get("run_id"), case_key=data.get("case_key"),
        label=str(data.get("label") or ""), case=case_with_defaults(case),
        status=str(data.get("status") or ""), error=data.get("error"), device=device_of(data),
        params=_object(data.get("model")).get("params"),
        throughput=_throughput(data.get("throughput")),
        ranks=tuple(_rank(r) for r in _tuple(data.get("ranks")) if isinstance(r, Mapping)),
        launch=launch,
        emulated_hosts=data.get("emulated_hosts") or _object(launch).get("emulated_hosts"),
        environment_name=str(environment.get("name") or case.get("framework") or ""),
        framework_version=environment.get("framework_version") or framework.get("version"),
        run_label=environment.get("label"),
        speedup=data.get("speedup"), scaling_efficiency=data.get("scaling_efficiency"),
        speedup_baseline=data.get("speedup_baseline"), speedup_note=data.get("speedup_note"),
        profile=_profile(data.get("profile")), roofline=_roofline(data.get("roofline")),
        cpu_flags=frozenset(flag for flag in _tuple(_object(_object(data.get("env")).get("cpu"))
                                                    .get("flags")) if isinstance(flag, str)),
        unit=str(data.get("unit") or "samples/s"), latency_ms=_object(data.get("latency_ms")),
        iteration_ms=data.get("iteration_ms"),
        peak_host_bytes=_object(data.get("memory")).get("peak_host_bytes"),
        peak_device_bytes=_object(data.get("memory")).get("peak_device_bytes"),
        global_batch=_int(data.get("global_batch")), flops=_flops(data.get("flops")),
        warnings=tuple(str(w) for w in _tuple(data.get("warnings"))),
        fallback_from_batch_size=_int(_object(data.get("fallback")).get("from_batch_size")),
        config_which=_object(data.get("config")).get("which") or None,
        config_study=_object(data.get("config")).get("study"),
        env=_object(data.get("env")), timeline=_object(data.get("timeline")))


def to_dict(result: Result | Mapping[str, Any]) -> dict[str, Any]:
    """A result as a reader of the JSON contract takes it: the stored object, with the derived
    ``device`` where an older row had none (reading it again gives the same Result)."""
    out = dict(result.raw if isinstance(result, Result) else result)
    if not out.get("device"):
        out["device"] = device_of(result)
    return out


def write_result(result: Result | Mapping[str, Any]) -> str:
    """The ``result_json`` text of a result (the one writer: :meth:`dlperf.store.Store.finish_run`):
    the object as it was built or read, nothing derived added, so the format never changes."""
    return json.dumps(dict(result.raw if isinstance(result, Result) else result))


def read_repeat(data: Mapping[str, Any]) -> Repeat:
    """A repeat's record (the runner's, stored as ``repeats.detail_json``)."""
    ranks = tuple(RankRecord(rank=_int(r.get("rank")) or 0, status=str(r.get("status") or ""),
                             window_s=r.get("window_s"), window_samples=r.get("window_samples"),
                             peak_host_bytes=r.get("peak_host_bytes"), raw=r)
                  for r in _tuple(data.get("ranks")) if isinstance(r, Mapping))
    return Repeat(repeat=data.get("repeat"), status=str(data.get("status") or ""),
                  error=data.get("error"), throughput=data.get("throughput"),
                  window_s=data.get("window_s"), params=data.get("params"), ranks=ranks,
                  raw=data)
