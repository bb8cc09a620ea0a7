"""The result object: per-repeat records folded into DESIGN.md's JSON contract.

Schema 1. Fields may be added; renaming or removing one needs a new ``SCHEMA``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlperf import models, stats
from dlperf.explain import roofline
from dlperf.host import hoststate, timeline
from dlperf.host.peak import PRECISION_DTYPE, ceiling
from dlperf.results.codec import device_of, read_repeat, read_result
from dlperf.results.model import Repeat, Result
from dlperf.spec import AUTO_MIN_REPEATS, VERSION_ENV, Case, environment_name

__all__ = ["SCHEMA", "UNIT", "aggregate", "auto_cpu_note", "device_kind_name", "device_of",
           "merge_ranks", "monitor_means", "repeat_status", "throughput_median", "walk_ranks"]

SCHEMA = 1
UNIT = "samples/s"


def throughput_median(result: dict[str, Any] | Result | None) -> float | None:
    """The median throughput of a successful result; None for a failed one, or for none."""
    return read_result(result).median if result else None


def merge_ranks(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One repeat's job-level figures: global samples over the slowest rank's window."""
    slowest = max(ranks, key=lambda r: r["window_s"])
    samples = sum(r["window_samples"] for r in ranks)
    device_peaks = [r["peak_device_bytes"] for r in ranks if r.get("peak_device_bytes")]
    return {
        "throughput": stats.throughput(samples, slowest["window_s"]),
        "samples": samples,
        "window_s": slowest["window_s"],
        "build_s": max(r["build_s"] for r in ranks),
        "first_step_s": max(r["first_step_s"] for r in ranks),
        "warmup_s": max(r["warmup_s"] for r in ranks),
        "drift": stats.half_drift(slowest.get("halves")),
        "drift_p": stats.drift_p(slowest.get("step_times_s"), slowest.get("halves")),
        # how the slowest rank warmed up (auto: steps taken, why it stopped, CV and drift)
        "warmup": {k: v for k, v in (slowest.get("warmup") or {}).items()
                   if k != "step_times_s"} or None,
        "warmup_steps_done": slowest.get("warmup_steps_done"),
        "loss_first": ranks[0]["loss_first"],
        "loss_last": ranks[0]["loss_last"],
        "params": ranks[0]["params"],
        "peak_host_bytes": max(r.get("peak_host_bytes") or 0 for r in ranks),
        "peak_device_bytes": max(device_peaks) if device_peaks else None,
        # "window": the peak over the timed window (reset after the warm-up); "start": the
        # framework cannot reset it, so it counts the first steps' workspaces too
        "peak_device_since": ranks[0].get("peak_device_since") if device_peaks else None,
        # wall-clock phase starts of the rank that set the window (places monitor samples)
        "phase_starts": slowest.get("phase_starts"),
        # rank 0's profiled steps after the window (dlperf.worker.profile), when asked for
        "profile": ranks[0].get("profile"),
        # calibration's planted sleep in every timed step (plant_slowdown), seconds
        "planted_s": slowest.get("planted_s"),
    }


def walk_ranks(repeats: list[Repeat]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One walk over every repeat's ranks: what the first rank that reported it saw inside the
    framework's environment (any repeat: a failed one too), and every rank's own figures over
    the successful repeats, rank by rank.

    The environment comes with the device the rank resolved (``device``: the backend's
    :func:`~dlperf.worker.support.resolved_device` record). A rank's throughput is its own
    samples over its own window; ``slowest_in`` counts the repeats whose job figure that rank's
    window set (the job waits for the slowest rank).
    """
    worker: dict[str, Any] = {}
    by_rank: dict[int, dict[str, Any]] = {}
    for record in repeats:
        if not worker:
            first = next((r.raw for r in record.ranks if r.raw.get("env")), None)
            if first is not None:
                worker = {**first["env"], "framework": first.get("info") or {},
                          "placement": first.get("placement"), "device": first.get("device")}
        if not record.ok:
            continue
        ranks = [r for r in record.ranks if r.status == "ok" and r.window_s]
        slowest = max(ranks, key=lambda r: r.window_s or 0.0).rank if ranks else None
        for rank in ranks:
            raw = rank.raw
            placement = raw.get("placement") or {}
            entry = by_rank.setdefault(rank.rank, {
                "rank": rank.rank, "host": raw.get("host"), "local_rank": raw.get("local_rank"),
                "threads": placement.get("threads", (raw.get("info") or {}).get("num_threads")),
                "cpus": placement.get("cpus"),
                "throughput": [], "window_s": [], "first_step_s": [], "build_s": [],
                "allreduce_s": [], "slowest_in": 0, "peak_host_bytes": 0})
            entry["throughput"].append(stats.throughput(raw["window_samples"], raw["window_s"]))
            for field in ("window_s", "first_step_s", "build_s", "allreduce_s"):
                entry[field].append(raw.get(field))
            entry["slowest_in"] += rank.rank == slowest
            entry["peak_host_bytes"] = max(entry["peak_host_bytes"], rank.peak_host_bytes or 0)
    figures = []
    for number in sorted(by_rank):
        entry = by_rank[number]
        entry["throughput_median"] = float(np.median(entry["throughput"]))
        figures.append(entry)
    return worker, figures


def _values(repeats: list[dict[str, Any]], field: str) -> list[Any]:
    return [r[field] for r in repeats if r.get(field) is not None]


def _peak(repeats: list[dict[str, Any]], field: str) -> int | None:
    values = _values(repeats, field)
    return max(values) if values else None


def monitor_means(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of each monitored quantity over the repeats that reported it (maxima and peaks: the
    largest)."""
    out: dict[str, Any] = {}
    keys = {k for r in repeats for k in (r.get("monitor") or {})}
    for key in sorted(keys):
        values = [r["monitor"][key] for r in repeats
                  if (r.get("monitor") or {}).get(key) is not None]
        if not values:
            out[key] = None
        elif all(isinstance(value, dict) for value in values):  # per interface: each its mean
            out[key] = monitor_means([{"monitor": value} for value in values])
        elif key.endswith("_max") or key.endswith("_peak_bytes"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def _latencies(repeats: list[dict[str, Any]]) -> list[list[float]]:
    """Per-iteration latencies of each repeat, every rank's pooled (inference only)."""
    return [[value for rank in record.get("ranks", []) for value in rank.get("latencies_s") or []]
            for record in repeats]


def _server(repeats: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The load the server scenario offered and what came of it (first rank of first repeat)."""
    for record in repeats:
        for rank in record.get("ranks", []):
            if rank.get("server"):
                return dict(rank["server"])
    return None


def auto_cpu_note(framework: str, requested: str, env: dict[str, Any],
                  device: dict[str, Any] | None) -> str | None:
    """One line when ``--device auto`` put ``framework`` on the CPU of a host that has a GPU
    (``env["gpus"]``, from NVML: :mod:`dlperf.host.sysinfo`), with the backend's reason
    (``device``: the worker's resolved-device record); None otherwise. A CPU figure beside GPU
    ones must never pass as the framework's GPU speed."""
    gpus = [g for g in env.get("gpus") or [] if isinstance(g, dict)]
    if requested != "auto" or not gpus or not device or device.get("kind") != "cpu":
        return None
    names = sorted({str(g.get("name") or "GPU") for g in gpus})
    why = device.get("reason") or "the backend gave no reason"
    return (f"--device auto ran {framework} on the cpu although this host has "
            f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''} ({', '.join(names)}): {why}")


def environment_block(case: Case, worker: dict[str, Any]) -> dict[str, Any]:
    """Which environment measured the case, as history, gate and the reports group results:
    its name (the framework's pinned one, ``FW==X``, or ``python:PATH``), the framework's
    version and git revision as it states them, the hash of the installed package set, and the
    user's label. The framework's build description stays in ``env.worker.identity``."""
    found = worker.get("identity") or {}
    return {"name": environment_name(case.framework, case.env), "framework": case.framework,
            "framework_version": found.get("framework_version")
            or (worker.get("framework") or {}).get("version"),
            "git": found.get("git"), "packages_hash": found.get("packages_hash"),
            "packages": found.get("packages"),
            "python": found.get("python") or worker.get("python_executable"),
            "python_version": found.get("python_version") or worker.get("python"),
            "byo": bool(case.env) and not VERSION_ENV.fullmatch(case.env),
            "label": case.run_label or None}


def device_kind_name(label: str) -> str:
    """A device label without its index (``cuda NVIDIA H100 80GB HBM3``, ``cpu``): what a
    1-device baseline must share with an N-device result, whose rank 0 may sit on any GPU."""
    kind, _, rest = label.partition(" ")
    return " ".join([kind.partition(":")[0], rest]).strip()


def _passes(rank: dict[str, Any], per_epoch: int, global_batch: int) -> dict[str, Any]:
    """Which passes over the dataset one rank's window covered, and the throughput of its steps
    in the first pass and in later ones. Step k (0-based, the first step included) takes batch
    k, so it belongs to epoch k // batches_per_epoch; the window starts at step
    ``warmup_steps_done``. Per-step times are the loop's host marks: exact on a CPU and in
    data-only runs, approximate on an asynchronous device."""
    start, times = int(rank.get("warmup_steps_done") or 0), rank.get("step_times_s") or []
    first = [t for i, t in enumerate(times) if (start + i) // per_epoch == 0]
    later = [t for i, t in enumerate(times) if (start + i) // per_epoch >= 1]
    return {"epochs": [start // per_epoch, (start + len(times) - 1) // per_epoch] if times else [],
            "first_pass_steps": len(first), "later_pass_steps": len(later),
            "first_pass_throughput": stats.throughput(len(first) * global_batch, sum(first))
            if first and sum(first) > 0 else None,
            "later_pass_throughput": stats.throughput(len(later) * global_batch, sum(later))
            if later and sum(later) > 0 else None}


def _cache(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The page cache each repeat met: what each node's local rank 0 did and saw."""
    per_repeat = [[r["page_cache"] for r in record.get("ranks", []) if r.get("page_cache")]
                  for record in repeats]
    states = {c["state"] for nodes in per_repeat for c in nodes}
    first: dict[str, Any] = next((c for nodes in per_repeat for c in nodes), {})
    return {"requested": first.get("requested"),
            "state": states.pop() if len(states) == 1 else ("mixed" if states else None),
            "method": first.get("method"), "note": first.get("note"),
            "repeats": per_repeat}


def data_block(case: Case, repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the samples came from: synthetic, or a dataset folder through the backend's input
    pipeline (with a model, or alone), its settings, the page cache and the passes timed."""
    if case.data == "synthetic":
        return {"mode": "synthetic"}
    ok = [record for record in repeats if record["status"] == "ok"]
    info: dict[str, Any] = next((r["info"]["data"] for record in ok for r in record.get("ranks", [])
                 if isinstance((r.get("info") or {}).get("data"), dict)), {})
    block: dict[str, Any] = {"mode": "data-only" if case.data_only else "data+compute",
                             "path": case.data, "dataset": info.get("manifest"),
                             "cache": _cache(repeats)}
    block["loader"] = {k: v for k, v in info.items()
                       if k not in ("path", "manifest", "batches_fetched", "epochs_started")}
    per_epoch = info.get("batches_per_epoch")
    if per_epoch:
        passes = [_passes(record["ranks"][0], per_epoch, case.global_batch) for record in ok
                  if record.get("ranks")]
        block["passes"] = {
            "first_pass_in_window": [p["first_pass_steps"] > 0 for p in passes],
            "spans_epochs": [len(set(p["epochs"])) > 1 for p in passes],
            "repeats": passes,
        }
    return block


def peak_units(case: Case, env: dict[str, Any]) -> int:
    """How many probed peaks a job ran on: GPUs (one probe = one GPU), else nodes (one probe =
    every core of a node, shared by its CPU worker processes)."""
    on_gpus = bool(env.get("gpus")) and case.device != "cpu"
    return case.devices * case.nnodes if on_gpus else case.nnodes


def flops_block(per_sample: float | None, achieved: float | None, case: Case,
                env: dict[str, Any]) -> dict[str, Any]:
    """Achieved FLOP/s against this machine's measured matmul peak (`dlperf sysinfo --probe`).

    MFU is the job's achieved rate over the peak of all it ran on: one probed GPU's peak times
    the job's GPUs; on CPUs the probe already used every core of the node, which the node's
    worker processes share, so the node's peak times the nodes.

    A rate above the probed peak means the probe is not this machine's ceiling for that
    precision (one GEMM kernel, or a probe taken on a busy host): MFU is then left out and the
    block says why, never a utilisation above 100%.
    """
    found = ceiling(case.precision, env) if env.get("cpu") else None
    peak, dtype = found if found else (None, None)
    wanted = PRECISION_DTYPE.get(case.precision)
    mfu = achieved / (peak * peak_units(case, env)) if achieved and peak else None
    source = ("not probed: run `dlperf sysinfo --probe`" if not peak else
              "dlperf sysinfo --probe (matmul)" if dtype == wanted
              else f"dlperf sysinfo --probe (matmul, {dtype}: the {wanted} GEMM here is slower "
                   f"or not probed)")
    if mfu is not None and mfu > 1.0:
        source = (f"dlperf sysinfo --probe (matmul): the probed {case.precision} peak is below "
                  f"the achieved rate ({mfu:.0%} of it), so it is no ceiling and MFU is left "
                  f"out; re-probe on a quiet machine with `dlperf sysinfo --probe`")
        mfu = None
    return {"per_sample": per_sample, "achieved_per_s": achieved, "peak_per_s": peak,
            "peak_source": source, "mfu": mfu}


def measurement_warnings(ok: list[dict[str, Any]], throughput: dict[str, Any]) -> list[str]:
    """Spread, warm-up and host flags of the successful repeats. A noisy or unsteady flag names
    the CPU the hypervisor took (steal) during the repeats it concerns; a repeat that lost more
    than ``hoststate.STEAL_SHARE`` to it is flagged on its own unless such a flag named it."""
    named: set[int] = set()

    def explain(indices: list[int]) -> str | None:
        records = [ok[i] for i in indices if i < len(ok)]
        named.update(r["repeat"] for r in records
                     if (hoststate.repeat_steal(r) or 0.0) >= hoststate.STEAL_NOTE)
        return hoststate.stolen(records)

    warnings = stats.spread_warnings(throughput, [r.get("drift") for r in ok],
                                     [r.get("drift_p") for r in ok], explain)
    warnings += stats.warmup_warnings(_values(ok, "warmup"))
    for record in ok:
        lines = [hoststate.competing(record.get("host") or {}),
                 None if record["repeat"] in named else hoststate.steal_line(record)]
        warnings += [f"repeat {record['repeat'] + 1}: {line}" for line in lines if line]
    return warnings


def profile_block(ok: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The profile of the repeat whose profiled step time is the median of those that
    profiled (its categories, top operators and trace belong together), with every repeat's
    profiled step time; else the first repeat's reason (unavailable, or the profiler's error)."""
    blocks = [r["profile"] for r in ok if r.get("profile")]
    if not blocks:
        return None
    done = sorted((b for b in blocks if b.get("categories")), key=lambda b: b["step_s"])
    if not done:
        return blocks[0]
    return {**done[(len(done) - 1) // 2], "repeats_step_s": [b["step_s"] for b in done]}


def repeat_status(repeats: list[dict[str, Any]], interrupted: bool = False
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str, str | None]:
    """The successful repeats, the failed ones, and the run's status and error: the first
    failure's, else ok (a crash when no repeat finished; one stopped by Ctrl-C or SIGTERM
    before its first repeat ended says so, not as if the case had failed on its own)."""
    ok = [r for r in repeats if r["status"] == "ok"]
    failed = [r for r in repeats if r["status"] != "ok"]
    status = failed[0]["status"] if failed else ("ok" if ok else "crash")
    none = "interrupted before any repeat finished" if interrupted else "no repeat finished"
    error = failed[0]["error"] if failed else (None if ok else none)
    return ok, failed, status, error


def repeats_policy(case: Case, values: list[float]) -> dict[str, Any] | None:
    """What ``--repeats auto`` (a target interval) did: None for a fixed count."""
    if not case.target_ci:
        return None
    return {"target_ci": case.target_ci, "most": case.repeats,
            "max_time_s": case.max_time_s or None, "taken": len(values),
            "half_width": stats.half_width(values) if len(values) > 1 else None,
            "reached": stats.interval_reached(values, case.target_ci, AUTO_MIN_REPEATS)}


def planted_block(case: Case, ok: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Calibration only: the planted slowdown's share and each repeat's sleep per step."""
    if not case.plant_slowdown:
        return None
    return {"share": case.plant_slowdown, "sleep_s": _values(ok, "planted_s")}


def policy_warning(case: Case, policy: dict[str, Any]) -> str:
    """One line: the target interval was not reached, and which budget ended first."""
    width = policy["half_width"]
    return (f"repeats: the 95% interval of the median is "
            f"{'unknown' if width is None else f'±{width:.1%}'} after {policy['taken']} "
            f"repeats, wider than the target ±{case.target_ci:.1%}: the budget "
            f"({case.repeats} repeats"
            + (f" or {case.max_time_s:g} s" if case.max_time_s else "") + ") ended first")


def aggregate(case: Case, repeats: list[dict[str, Any]], env: dict[str, Any],
              run_id: int | None = None, interrupted: bool = False) -> dict[str, Any]:
    """Fold per-repeat records into the result contract."""
    ok, failed, status, error = repeat_status(repeats, interrupted)
    throughput = stats.summarize(_values(ok, "throughput"), seed=case.seed)
    spec = models.get(case.model)
    train = case.task == "train"
    # --data-only runs no model: no FLOPs, no parameters, nothing to compare with the catalogue
    per_sample = None if case.data_only else spec.flops_per_sample(dict(case.knobs), train=train)
    achieved = per_sample * throughput["median"] if throughput["median"] and per_sample else None
    built_params = ok[0]["params"] if ok and not case.data_only else None
    catalogue_params = spec.params(dict(case.knobs))
    warnings = measurement_warnings(ok, throughput)
    if built_params is not None and built_params != catalogue_params:
        warnings.append(f"backend built {built_params:,} parameters, the catalogue says "
                        f"{catalogue_params:,}")
    if interrupted:
        warnings.append(f"interrupted: {len(ok)} of {case.repeats} repeats finished")
    policy = repeats_policy(case, _values(ok, "throughput"))
    if policy and not policy["reached"] and status == "ok" and not interrupted:
        warnings.append(policy_warning(case, policy))
    worker, ranks = walk_ranks([read_repeat(r) for r in repeats])
    note = auto_cpu_note(case.framework, case.device, env, worker.get("device"))
    if note:
        warnings.insert(0, note)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": run_id,
        "case_key": case.key(),
        "label": case.label(),
        "case": case.to_dict(),
        "device": None,  # the resolved device: filled in below, from the worker's record
        "model": {"params": built_params, "catalogue_params": catalogue_params,
                  "flops_per_sample": per_sample},
        "status": status,
        "error": error,
        "unit": UNIT,
        "global_batch": case.global_batch,
        "throughput": throughput,
        "repeats_policy": policy,  # --repeats auto: what it took (None: a fixed count)
        "planted": planted_block(case, ok),
        "latency_ms": stats.latency_ms(_latencies(ok)) if case.task == "infer" else None,
        # one iteration of the whole job at the median throughput (DLPerf's "latency per
        # iteration" of Wide & Deep and the capacity tables)
        "iteration_ms": 1000.0 * case.global_batch / throughput["median"]
        if throughput["median"] else None,
        "timings": {key: _values(ok, key)
                    for key in ("build_s", "first_step_s", "warmup_s", "window_s", "wall_s")},
        "warmup": {"steps": _values(ok, "warmup_steps_done"),
                   "stop": [(w or {}).get("stop") for w in _values(ok, "warmup")]},
        "loss": {"first": _values(ok, "loss_first"), "last": _values(ok, "loss_last")},
        "memory": {"peak_host_bytes": _peak(repeats, "peak_host_bytes"),
                   "peak_device_bytes": _peak(ok, "peak_device_bytes"),
                   "peak_device_since": next(iter(_values(ok, "peak_device_since")), None)},
        "flops": flops_block(per_sample, achieved, case, env),
        "roofline": None,  # below, from the flops block
        "monitor": monitor_means(repeats),
        # per repeat: means over the window's monitor samples; the median repeat's samples
        "timeline": timeline.summarize(ok),
        "server": _server(ok) if case.scenario == "server" else None,
        "profile": profile_block(ok) if case.profile_steps else None,
        "data": data_block(case, repeats),
        "warnings": warnings,
        "repeats_done": len(repeats),
        "interrupted": interrupted,
        "stderr_tail": failed[0].get("stderr_tail") if failed else None,
        "logs": failed[0].get("logs") if failed else None,  # kept beside the db: keep_logs
        "env": {**env, "worker": worker},
        "environment": environment_block(case, worker),
        "ranks": ranks,
        "launch": next((r["launch"] for r in repeats if r.get("launch")), None),
        # per repeat: load, frequency, throttling, memory pressure before/after; others' CPU,
        # the hypervisor's steal and I/O wait over the repeat
        "host": [r.get("host") for r in repeats],
    }
    result["roofline"] = roofline.block(case, result["flops"], env, throughput["median"],
                                        peak_units(case, env))
    # the resolved device (rank 0's), beside the requested one in ``case``
    result["device"] = device_of(result)
    return result
