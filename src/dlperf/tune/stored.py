"""What a tune leaves in the results database, and what ``--config best`` reads back.

A *study* is one search of one base case: the case with its tunable settings taken out (its
*base key*: framework, model and its knobs, task, device, processes, data, scenario,
environment). Every trial is stored as it ends (its settings, state, throughput per rung and the
run ids of its measurements, which are ordinary stored runs), so a killed tune resumes where it
stopped; the study's *outcome* (the default, the best, the best at the default batch size and
precision, each with the interleaved ``ab`` that confirmed it) is stored when it ends.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dlperf.errors import UsageError
from dlperf.spec import Case, expected_device
from dlperf.store import Store
from dlperf import models
from dlperf.tune import settings as config

#: The sweep name of a tune's trial runs (reports leave them out of the results tables).
SWEEP = "tune"
#: Case fields that say *which* experiment a tune searched, not how it was configured or timed.
BASE_FIELDS = ("framework", "model", "task", "knobs", "device", "devices", "nnodes", "data",
               "loader", "data_only", "scenario", "server", "launcher", "controller", "env")
#: What ``--config`` takes: the unconstrained best, or the best at the case's own batch size and
#: precision (the like-for-like one; the same as ``best`` when that changed neither).
WHICH = ("best", "best-fixed")


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_identity(case: Case) -> dict[str, Any]:
    """The base fields, the device as this host resolves it (a tune with ``--device auto``
    serves a later ``--device cpu`` run on a host without a GPU)."""
    data = case.to_dict()
    out = {name: data[name] for name in BASE_FIELDS}
    out["device"] = expected_device(case)
    return out


def base_key(case: Case) -> str:
    """Equal for two cases that differ only in settings a tune searches (or in timing)."""
    return _digest(base_identity(case))


def study_key(case: Case, space: dict[str, Any]) -> str:
    """One search: the base case, its default configuration, the space and the window."""
    timing = {name: getattr(case, name) for name in ("warmup_steps", "steps", "min_duration_s")}
    return _digest({"base": base_identity(case), "space": space, "timing": timing,
                    "default": config.of_case(case, list(space.get("knobs", {})))})


def describe_base(case: Case) -> str:
    knobs = " ".join(f"{name}={value}" for name, value in sorted(case.knobs.items())
                     if value is not None)
    return f"{case.framework} {case.model} {case.task} on {expected_device(case)} ({knobs})"


def tune_command(case: Case, db: Any) -> str:
    """The ``dlperf tune`` command line that tunes this very case (its non-default knobs, task
    and device), so following a refusal's hint makes what ``--config best`` looks for."""
    defaults = models.get(case.model).defaults
    flags = [f"--knob {name}={value}" for name, value in sorted(case.knobs.items())
             if value is not None and defaults.get(name) != value]
    if case.task != "train":
        flags.append(f"--task {case.task}")
    if case.device != "auto":
        flags.append(f"--device {case.device}")
    if case.env:
        flags.append(f"--env {case.env}" if not case.env.startswith("/")
                     else f"--python {case.env}")
    return " ".join(["dlperf tune --framework", case.framework, "--model", case.model,
                     f"--batch-size {case.batch_size}", *flags, "--db", str(db)])


def outcomes(store: Store) -> list[dict[str, Any]]:
    """Every finished study, oldest first: its case, space, outcome and trials."""
    out = []
    for study in store.tune_studies():
        if study.get("outcome"):
            out.append({**study, "trials": store.tune_trials(study["study"])})
    return out


def latest_outcome(store: Store, case: Case) -> dict[str, Any] | None:
    finished = [study for study in store.tune_studies(base_key(case)) if study.get("outcome")]
    return finished[-1] if finished else None


def chosen_best(store: Store, case: Case, which: str = "best",
                flag: str = "--config") -> tuple[dict[str, Any], dict[str, Any]]:
    """The newest finished study of this case and the best ``which`` names in it (the best at
    fixed batch and precision is the best itself where that changed neither); one line naming
    what is missing (no tune of this case in the file, none finished, none that ran)."""
    if which not in WHICH:
        raise UsageError(f"{flag}: {which!r} is not one of {', '.join(WHICH)}")
    found = latest_outcome(store, case)
    if found is None:
        others = sorted({f"{s['framework']} {s['model']} {s['task']}"
                         for s in store.tune_studies() if s.get("outcome")})
        hint = (f"; it holds tuned results of: {'; '.join(others)} (a different model knob, "
                "device or environment is a different case)" if others else "")
        raise UsageError(f"{flag} {which}: {store.path} has no finished tune of "
                         f"{describe_base(case)}; run `{tune_command(case, store.path)}` "
                         f"first{hint}")
    outcome = found["outcome"]
    chosen = outcome.get("best_fixed" if which == "best-fixed" else "best") or outcome.get("best")
    if not chosen:
        raise UsageError(f"{flag} {which}: the newest tune of {describe_base(case)} in "
                         f"{store.path} (study {found['study']}) found no configuration that "
                         f"ran, not even the default; tune it again with --new")
    return found, chosen


def best_settings(store: Store, case: Case, which: str = "best",
                  flag: str = "--config") -> dict[str, Any]:
    """The configuration the newest finished tune of this case found (:func:`chosen_best`)."""
    return dict(chosen_best(store, case, which, flag)[1]["settings"])
