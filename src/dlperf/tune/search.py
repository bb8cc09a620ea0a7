"""The search: Optuna proposes configurations, dlperf's own runs measure them.

Each trial is a configuration of the declared knobs (:mod:`.knobs`). Its first rung is one
fresh-process repeat (a screening run); Optuna's successive-halving pruner then keeps it only
if it is among the best third of the trials that reached that rung, and a kept trial gets two
more repeats, its value the median of three. The default configuration is the first trial and
is never pruned, so every other is measured against it the same way. Optuna's TPE sampler
chooses the next configuration from the values so far (configurations already measured are not
measured again; the search ends when the space is exhausted or the budget says so).

Every repeat is an ordinary stored run (sweep ``tune``) and every ended trial a row of
``tune_trials``, so a killed tune replays its trials into a new Optuna study and goes on.
The best few are then confirmed (:mod:`.confirm`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from dlperf import runner
from dlperf.results.codec import read_result
from dlperf.spec import Case, SpecError, declared_refusal
from dlperf.store import Store
from dlperf.tune import budget as budgets
from dlperf.tune import settings as config
from dlperf.tune import stored
from dlperf.tune.knobs import Knob

SWEEP = stored.SWEEP  # the stored runs of a tune's trials
RUNGS = (1, 3)  # repeats measured by the end of each rung: the screening run, then two more
REDUCTION = 3  # successive halving keeps the best third at each rung
# a trial the pruner kept but the budget could not repeat: its one screening value stands, and
# it may still be the best (the interleaved confirmation against the default decides)
BUDGET_PRUNED = "the budget left was kept for the confirmation"
# a repeat of a configuration running past this many times the default's, for the samples it
# computes (a repeat is a fixed number of steps), and past the floor, cannot be the best: it is
# stopped and pruned (torch's amp-fp16 on a CPU without fp16 arithmetic ran 13x slower and took
# a quarter of a 10-minute search; TensorFlow's amp-bf16 without oneDNN 35 %)
SLOW_FACTOR = 5.0
SLOW_FLOOR_S = 120.0
# the floor for a configuration that compiles where the default does not: its start-up is not
# its throughput. tensorflow1's XLA repeat of ResNet-50 took 3x its default's on one 2-core
# Zen 4, and on another ran past the 2-minute floor in all three compiled trials of a
# 15-minute search (its default's repeat: 21 s), so that XLA, the best found before at 2.1x,
# was never measured
COMPILED_FLOOR_S = 300.0
SLOWER = "stopped: slower than"
MAX_REPEATS_IN_A_ROW = 12  # proposals of configurations already measured before the search ends
STATES = {"complete": optuna.trial.TrialState.COMPLETE,
          "pruned": optuna.trial.TrialState.PRUNED,
          "failed": optuna.trial.TrialState.FAIL,
          # a pair of values the backend declares it cannot run together (SUPPORT): not
          # measured, no time spent; Optuna is told it ran at 0 samples/s, the worst there is
          # (told as a failure, TPE ignored it and proposed MXNet's onednn=off with amp-bf16
          # again and again beside the best)
          "refused": optuna.trial.TrialState.COMPLETE}
REFUSED_VALUE = 0.0

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class Trial:
    """One configuration and what measuring it gave."""

    number: int
    settings: dict[str, Any]
    state: str  # complete, pruned, failed, refused (declared impossible, never measured)
    value: float | None = None  # samples/s: median of its repeats at the last rung it reached
    rungs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0

    def as_stored(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_stored(cls, row: dict[str, Any]) -> Trial:
        return cls(number=row["number"], settings=dict(row["settings"]), state=row["state"],
                   value=row["value"], rungs=list(row["rungs"]), error=row["error"],
                   wall_s=row["wall_s"])

    def repeat_walls(self) -> list[float]:
        """Seconds per repeat of each measured rung (a run's start-up included)."""
        return [rung["wall_s"] / rung["repeats"] for rung in self.rungs if rung.get("repeats")]


def told_value(trial: Trial) -> float | None:
    """What Optuna is told a trial's objective was: its value when complete, the worst for a
    refused one, none for a pruned or failed one (their state says it)."""
    if trial.state == "refused":
        return REFUSED_VALUE
    return trial.value if trial.state == "complete" else None


def settings_key(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)


def space_size(knobs: list[Knob]) -> int:
    return math.prod(len(knob.values) for knob in knobs)


def distributions(knobs: list[Knob]) -> dict[str, optuna.distributions.BaseDistribution]:
    return {knob.name: optuna.distributions.CategoricalDistribution(knob.values)
            for knob in knobs}


@dataclass
class Plan:
    """What one search measures: the default case, its knobs, the bound, and where to store."""

    study: str
    case: Case  # the default configuration, with the screening window (warm-up, steps)
    knobs: list[Knob]
    budget: budgets.Budget
    reserve_s: Callable[[list[Trial]], float]  # what confirming will cost, given the trials
    seed: int = 0
    max_trials: int | None = None

    @property
    def default(self) -> dict[str, Any]:
        return config.of_case(self.case, [knob.name for knob in self.knobs])


class Search:
    """The trials of one study, as they are measured (and replayed, after a kill)."""

    def __init__(self, plan: Plan, store: Store, env: dict[str, Any],
                 say: Callable[[str], None]) -> None:
        self.plan = plan
        self.store = store
        self.env = env
        self.say = say
        self.trials: list[Trial] = []
        self.study = optuna.create_study(
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=plan.seed, n_startup_trials=5),
            pruner=optuna.pruners.SuccessiveHalvingPruner(
                min_resource=RUNGS[0], reduction_factor=REDUCTION, min_early_stopping_rate=0))
        self.dists = distributions(plan.knobs)

    # -- resuming ---------------------------------------------------------------------------

    def replay(self, stored: list[dict[str, Any]]) -> None:
        """Give Optuna the trials a killed run of this study stored, in their order."""
        for row in stored:
            trial = Trial.from_stored(row)
            self.trials.append(trial)
            self.study.add_trial(optuna.trial.create_trial(
                params=trial.settings, distributions=self.dists,
                value=told_value(trial), state=STATES[trial.state],
                intermediate_values={rung["repeats_so_far"]: rung["value"]
                                     for rung in trial.rungs if rung.get("value") is not None}))
        if not stored:
            self.study.enqueue_trial(self.plan.default)

    # -- measuring --------------------------------------------------------------------------

    def measure(self, settings: dict[str, Any], repeats: int, cap_s: float | None
                ) -> tuple[dict[str, Any], Case]:
        """One stored run of ``repeats`` fresh-process repeats of the configuration; its time
        bounded by ``cap_s`` (:meth:`slow_cap_s`) and by what the budget has left beyond the
        confirmation's share (a trial slower than its estimate, torch's amp-fp16 at batch 32
        compiled, ran into that share and left the best unconfirmed)."""
        case = config.apply(self.plan.case, settings)
        left = self.plan.budget.left() - self.plan.reserve_s(self.trials)
        limit = min(case.timeout_s, left, cap_s or math.inf)
        case = dataclasses.replace(case, repeats=repeats, timeout_s=max(1.0, limit))
        return runner.run_case(case, store=self.store, env=self.env, sweep=SWEEP), case

    def far_slower(self, value: float) -> str | None:
        """Why a screening value cannot be the best (under 1/``SLOW_FACTOR`` of the default's
        throughput: TensorFlow's amp-bf16 without oneDNN at 6.5 against 57 samples/s was kept
        by the pruner, which cannot rank the second trial, and took 3.5 of 10 minutes), or None."""
        default = self.trials[0].value if self.trials else None
        if default is None or value * SLOW_FACTOR >= default:
            return None
        return (f"{SLOWER} the default: {value:,.2f} samples/s, under 1/{SLOW_FACTOR:g} of its "
                f"{default:,.2f}")

    def slow_cap_s(self, settings: config.Settings | None = None) -> float | None:
        """The longest a repeat of ``settings`` (the default's, if None) may run:
        ``SLOW_FACTOR`` times the default's repeat, times the samples it computes against the
        default's (batch 32 takes four times batch 8's window at the same throughput); at
        least ``SLOW_FLOOR_S``, or ``COMPILED_FLOOR_S`` where it compiles and the default does
        not. None before the default is measured."""
        default_s = self.default_repeat_s()
        if default_s is None:
            return None
        default = self.plan.case
        case = config.apply(default, settings) if settings else default
        # Case resolves an unset compile to the framework's default when it is made
        floor = COMPILED_FLOOR_S if case.compile and not default.compile else SLOW_FLOOR_S
        return max(floor, SLOW_FACTOR * default_s * case.batch_size / default.batch_size)

    def default_repeat_s(self) -> float | None:
        """Seconds per repeat of the default configuration (None before it is measured)."""
        walls = self.trials[0].repeat_walls() if self.trials else []
        return statistics.median(walls) if walls else None

    def rung(self, trial: Trial, repeats: int, values: list[float]) -> str | None:
        """Measure ``repeats`` more; the error of a failed run, else None (values extended)."""
        start = time.monotonic()
        try:
            cap = self.slow_cap_s(trial.settings)
            result, ran = self.measure(trial.settings, repeats, cap)
        except SpecError as error:  # a combination the backend's declarations refuse together
            trial.wall_s += time.monotonic() - start
            return f"refused: {error}"
        wall = time.monotonic() - start
        trial.wall_s += wall
        typed = read_result(result)
        measured = list(typed.throughput.repeats if typed.throughput else ())
        if typed.status == "timeout" and cap is not None and ran.timeout_s == cap:
            return (f"{SLOWER} the default: its repeat ran past {budgets.text(cap)} (the "
                    f"default's took {budgets.text(self.default_repeat_s() or 0.0)}; the limit "
                    f"is {SLOW_FACTOR:g}x that for the samples it computes, at least "
                    f"{budgets.text(SLOW_FLOOR_S)}, {budgets.text(COMPILED_FLOOR_S)} for a "
                    "compiled configuration of an uncompiled default)")
        if typed.status != "ok" or not measured:
            return f"{typed.status}: {typed.error}"
        values.extend(measured)
        trial.rungs.append({"rung": len(trial.rungs), "repeats": len(measured),
                            "repeats_so_far": len(values), "value": statistics.median(values),
                            "run_id": typed.run_id, "wall_s": wall})
        return None

    def estimate_trial_s(self) -> float | None:
        """A full trial (all rungs): the typical repeat so far times the repeats of a trial."""
        per_repeat = budgets.typical([w for t in self.trials for w in t.repeat_walls()])
        return None if per_repeat is None else per_repeat * RUNGS[-1]

    def affordable(self, seconds: float | None) -> bool:
        """Whether ``seconds`` more still leave the confirmation its time."""
        needed = (seconds or 0.0) + self.plan.reserve_s(self.trials)
        return self.plan.budget.fits(needed)

    def one(self) -> Trial | None:
        """Ask Optuna for a configuration and measure it; None when the search should end."""
        asked = self.study.ask(self.dists)
        settings = {knob.name: asked.params[knob.name] for knob in self.plan.knobs}
        earlier = next((t for t in self.trials
                        if settings_key(t.settings) == settings_key(settings)), None)
        if earlier is not None:  # measured already: Optuna learns the same answer, for free
            self.study.tell(asked, told_value(earlier), state=STATES[earlier.state])
            return Trial(asked.number, settings, earlier.state, earlier.value,
                         error=f"same configuration as trial {earlier.number}")
        why = declared_refusal(config.apply(self.plan.case, settings))
        if why is not None:  # the declarations say it cannot run: nothing to measure
            refused = Trial(asked.number, settings, "refused", error=f"declared: {why}")
            self.study.tell(asked, told_value(refused), state=STATES["refused"])
            return refused
        default = not self.trials
        trial = Trial(asked.number, settings, "failed")
        values: list[float] = []
        error = self.rung(trial, RUNGS[0], values)
        if error is None:
            asked.report(statistics.median(values), RUNGS[0])
            slow = None if default else self.far_slower(statistics.median(values))
            if slow is not None:  # successive halving keeps anything while few trials ran
                trial.state, trial.value, trial.error = "pruned", statistics.median(values), slow
            elif not default and asked.should_prune():
                trial.state, trial.value = "pruned", statistics.median(values)
            elif not default and not self.affordable(
                    (budgets.typical(trial.repeat_walls()) or 0.0) * (RUNGS[-1] - RUNGS[0])):
                trial.state, trial.value = "pruned", statistics.median(values)
                trial.error = BUDGET_PRUNED
            else:
                error = self.rung(trial, RUNGS[-1] - RUNGS[0], values)
        if error is not None and error.startswith(SLOWER):
            trial.state, trial.error = "pruned", error  # too slow to be the best: no value
        elif error is not None:
            trial.state, trial.error = "failed", error
        elif trial.state != "pruned":
            trial.state, trial.value = "complete", statistics.median(values)
            asked.report(trial.value, RUNGS[-1])
        self.study.tell(asked, told_value(trial), state=STATES[trial.state])
        return trial

    def run(self) -> list[Trial]:
        """Trials until the budget (less the confirmation's share), the space or
        ``max_trials`` ends the search. Each ended trial is stored and said."""
        size = space_size(self.plan.knobs)
        in_a_row = 0
        while True:
            distinct = len({settings_key(t.settings) for t in self.trials})
            if distinct >= size:
                self.say(f"every one of the {size} configurations was measured")
                break
            if self.plan.max_trials is not None and distinct >= self.plan.max_trials:
                self.say(f"--trials: {self.plan.max_trials} configurations measured")
                break
            if self.trials and not self.affordable(self.estimate_trial_s()):
                self.say("the budget left is the confirmation's")
                break
            trial = self.one()
            if trial is None:
                break
            in_a_row = in_a_row + 1 if trial.state == "refused" or \
                (trial.error or "").startswith("same ") else 0
            self.trials.append(trial)
            self.store.add_tune_trial(self.plan.study, trial.number, trial.as_stored())
            self.say(self.line(trial))
            if self.trials[0].state in ("failed", "refused"):
                break  # without the default there is nothing to compare with
            if in_a_row >= MAX_REPEATS_IN_A_ROW:
                self.say(f"the sampler proposed {in_a_row} measured or refused configurations "
                         f"in a row: the search has converged")
                break
        return self.trials

    def line(self, trial: Trial) -> str:
        """``[3m12s of 20m00s] trial 4 compile=on threads=1: 63.20 samples/s, complete``."""
        spent = budgets.text(self.plan.budget.spent())
        total = budgets.text(self.plan.budget.total_s)
        shown = config.describe(config.changed(trial.settings, self.plan.default)) \
            if trial.number else "the default"
        what = f"{trial.value:,.2f} samples/s" if trial.value is not None else "-"
        more = self.estimate_trial_s()
        left = self.plan.budget.left() - self.plan.reserve_s(self.trials)
        guess = (f"; about {max(0, int(left // more))} more full trials fit"
                 if more and left > 0 else "")
        note = f" ({trial.error})" if trial.error else ""
        return f"[{spent} of {total}] trial {trial.number} {shown}: {what}, {trial.state}" \
               f"{note}{guess}"


def best(trials: list[Trial], default: dict[str, Any],
         fixed: tuple[str, ...] = ()) -> Trial | None:
    """The fastest complete trial, or trial pruned only because the budget ended (one screening
    repeat: tensorflow1's XLA ran at 2.5x the default and was lost otherwise; the confirmation's
    interleaved pairs judge it); with ``fixed``, among those that keep these knobs at the
    default's values."""
    found = [t for t in trials if t.value is not None
             and (t.state == "complete" or t.error == BUDGET_PRUNED)
             and not (t.error or "").startswith("same ")
             and all(t.settings.get(name) == default.get(name) for name in fixed)]
    return max(found, key=lambda t: t.value or 0.0) if found else None
