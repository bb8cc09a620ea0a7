"""A finished `dlperf tune` study stored as the command leaves it, for the tests that read one
(tests/tune/test_tune_config.py, tests/commands/test_hardening_inputs.py)."""

from __future__ import annotations

from pathlib import Path

from dlperf.spec import Case
from dlperf.store import Store
from dlperf.tune import settings, stored

DEFAULT = {"threads": None, "option.memory_format": "", "batch_size": 2}
BEST = {"threads": 1, "option.memory_format": "channels_last", "batch_size": 4}
BEST_FIXED = {"threads": 1, "option.memory_format": "channels_last", "batch_size": 2}


def tiny_case(framework: str = "torch", **fields) -> Case:
    """The case `dlperf run --framework FW` + TINY describes (timing aside: a tune's identity
    leaves it out)."""
    return Case(**{"framework": framework, "model": "resnet50", "batch_size": 2,
                   "knobs": {"image_size": 32}, **fields})


def ab(ratio: float, low: float, high: float, a: float) -> dict:
    return {"ratio": ratio, "ci95": [low, high], "pairs": 4, "verdict": "faster",
            "a": {"median": a}, "b": {"median": a * ratio}}


def store_study(db: Path, case: Case, best: dict | None = None, fixed: dict | None = None,
                default: dict | None = None) -> str:
    """A finished study of ``case`` as `dlperf tune` leaves it: the space, five trials (the
    default, a pruned one, the best at fixed batch, a failed one, the best) and the outcome.
    Its key."""
    default = dict(default or DEFAULT)
    best = dict(best or BEST)
    fixed = dict(fixed or BEST_FIXED)
    space = {"knobs": {name: {"values": [default[name], best[name]] if default[name] != best[name]
                              else [default[name], "other"],
                              "why": f"why {name} may help"} for name in default},
             "batch_limit": None}
    key = stored.study_key(case, space)
    trials = [(0, default, "complete", 10.0, None),
              (1, {**default, "threads": 2}, "pruned", 8.0, None),
              (2, fixed, "complete", 11.5, None),
              (3, {**best, "batch_size": 8}, "failed", None, "oom: out of memory at batch 8"),
              (4, best, "complete", 13.0, None)]
    maths = settings.changes_math(best, default)
    outcome = {
        "knobs": space["knobs"], "batch_limit": None,
        "default": {"settings": default, "throughput": 10.0, "trial": 0},
        "best": {"settings": best, "changed": settings.changed(best, default),
                 "changes_math": maths, "throughput": 13.0, "trial": 4,
                 "ab": ab(1.28, 1.21, 1.35, 9.9)},
        "best_fixed": {"settings": fixed, "changed": settings.changed(fixed, default),
                       "changes_math": [], "throughput": 11.5, "trial": 2,
                       "ab": ab(1.12, 1.05, 1.19, 9.9)} if maths else None,
        "search_s": 512.0, "confirm_s": 96.0, "budget_s": 600.0,
        "trials": {"complete": 3, "pruned": 1, "failed": 1}, "device": "cpu",
        "unit": "samples/s"}
    with Store(db) as store:
        store.start_tune_study(key, stored.base_key(case), case.to_dict(), space, 600.0)
        for number, chosen, state, value, error in trials:
            store.add_tune_trial(key, number, {
                "settings": chosen, "state": state, "value": value, "error": error,
                "wall_s": 20.0,
                "rungs": [{"rung": 0, "value": value, "run_id": None, "repeats": 1,
                           "wall_s": 20.0}] if value is not None else []})
        store.finish_tune_study(key, outcome)
    return key
