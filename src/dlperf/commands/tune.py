"""``dlperf tune``: the fastest configuration of one framework (or every installed one) for a
case, searched within a time budget, confirmed against the default, stored for ``--config
best``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, envs, outputs, session
from dlperf.commands import HELP
from dlperf.commands._flags import add_case_arguments, add_db_argument, case_from_args
from dlperf.envs import selection
from dlperf.errors import UsageError
from dlperf.host import measurelock
from dlperf.report import reading
from dlperf.report import tune as tune_report
from dlperf.spec import Case, expected_device, frameworks, support
from dlperf.store import Store
from dlperf.studies.ab import AUTO_MIN_PAIRS
from dlperf.tune import budget as budgets
from dlperf.tune import knobs as space
from dlperf.tune import settings as config
from dlperf.tune import stored

ALL = "all"
# the fewest pairs whose verdict `dlperf ab` trusts (fewer say "inconclusive":
# docs/calibration.md), so that a confirmation within budget can say "faster"
DEFAULT_PAIRS = AUTO_MIN_PAIRS
SCREEN_STEPS = 20  # a trial's window: long enough to rank configurations, short enough for many


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "tune", help=HELP["tune"],
        description="Searches the knobs the framework's backend declares (precision, compile "
                    "mode, its options, threads, allocator, batch size), screening each "
                    "configuration with one fresh-process repeat, keeping the best third "
                    "(successive halving) for two more, then confirming the best against the "
                    "default with interleaved pairs (dlperf ab). Every trial is stored in --db; "
                    "the same command resumes a killed tune.")
    add_case_arguments(parser)
    for action in parser._actions:
        if action.dest == "framework":
            action.choices = [*frameworks(), ALL]
            action.help = "a framework, or all: every installed one that runs --model"
    parser.set_defaults(steps=SCREEN_STEPS)
    parser.add_argument("--budget", default="20m",
                        help="the whole tune's time, a hard bound (e.g. 20m, 2h, 90s; "
                             "default 20m); with --framework all, shared equally")
    parser.add_argument("--search", default="", metavar="KNOB,...",
                        help="search only these knobs (default: every knob the backend "
                             "declares; the list is printed first)")
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS,
                        help=f"interleaved pairs confirming the best (default {DEFAULT_PAIRS})")
    parser.add_argument("--trials", type=int, default=None,
                        help="measure at most this many configurations (default: the budget "
                             "decides)")
    parser.add_argument("--new", action="store_true",
                        help="a new search even when --db holds a finished one of this case "
                             "(default: show it)")
    add_db_argument(parser)
    parser.add_argument("--json", type=Path, help="write the outcome(s) here")
    measurelock.add_argument(parser)
    return parser


def say(message: str) -> None:
    display.out.print(Text(message))


def chosen_frameworks(args: argparse.Namespace) -> list[str]:
    """The framework asked, or every installed one that builds the model."""
    if args.framework != ALL:
        return [args.framework]
    names = []
    for name in frameworks():
        declared = support(name)
        if args.model not in declared.models or args.task not in declared.tasks \
                or not envs.status(name).usable:
            continue
        names.append(name)
    if not names:
        raise UsageError(f"--framework all: no installed framework runs --model {args.model} "
                         f"--task {args.task} (`dlperf envs list`)")
    return names


def capacity_limit(store: Store | None, case: Case) -> int | None:
    """The largest batch size a stored `dlperf capacity` search ran for this case, if any."""
    if store is None:
        return None
    key = stored.base_key(case)
    sizes = []
    for result in store.results("sweep='capacity' AND status='ok'"):
        try:
            found = reading.case_of(result["case"])
        except UsageError as error:
            raise UsageError(f"{store.flag}: {store.path}: run {result.get('run_id')}: "
                             f"{error}") from None
        if stored.base_key(found) == key:
            sizes.append(found.batch_size)
    return max(sizes) if sizes else None


def check(args: argparse.Namespace) -> float:
    seconds = budgets.parse(args.budget)
    if not 2 <= args.pairs <= 100:
        raise UsageError(f"--pairs: {args.pairs} must be between 2 and 100")
    if args.trials is not None and args.trials < 2:
        raise UsageError(f"--trials: {args.trials} must be at least 2 (the default and one "
                         f"other)")
    outputs.check_writable("--json", args.json)
    return seconds


def main(args: argparse.Namespace) -> int:
    total = check(args)
    names = chosen_frameworks(args)
    cases = []
    for name in names:
        case = case_from_args(argparse.Namespace(**{**vars(args), "framework": name}))
        if case.model not in support(name).models:
            why = support(name).refusal(case.to_dict(), "cpu")
            raise UsageError(f"--model: {why}")
        selection.case_python(case.framework, case.env)
        cases.append(case)
    wanted = [name.strip() for name in args.search.split(",") if name.strip()]
    share = total / len(cases)
    if share < budgets.MIN_BUDGET_S:
        raise UsageError(f"--budget: {args.budget} shared by {len(cases)} frameworks leaves "
                         f"{budgets.text(share)} each, too small for one trial; give at least "
                         f"{budgets.text(budgets.MIN_BUDGET_S * len(cases))}")
    # every refusal comes before the database is written, or created
    with Store.peek(args.db) or contextlib.nullcontext() as db:
        plans = [plan_of(case, wanted, db, share) for case in cases]
    outcomes, code = [], 0
    for case, (knobs, limit) in zip(cases, plans):
        outcome, failed = tune_one(case, knobs, limit, share, args)
        outcomes.append(outcome)
        code = max(code, 1 if failed else 0)
    if args.json:
        outputs.write_json(args.json, outcomes if len(outcomes) > 1 else outcomes[0])
    return code


def plan_of(case: Case, wanted: list[str], db: Store | None, budget_s: float
            ) -> tuple[list[space.Knob], int | None]:
    """The knobs to search for ``case`` (refusing a name the backend does not declare)."""
    limit = capacity_limit(db, case)
    knobs = space.restrict(space.space(case, limit), wanted, case.framework)
    if not knobs:
        raise UsageError(f"--search: {case.framework} declares no knob with two values for "
                         f"{case.model} {case.task} on this host; nothing to tune")
    return knobs, limit


def space_record(knobs: list[space.Knob], limit: int | None) -> dict[str, Any]:
    return {"knobs": {knob.name: {"values": list(knob.values), "why": knob.why}
                      for knob in knobs}, "batch_limit": limit}


def pair_costs(trials: list[Any], chosen: list[int | None]) -> list[float | None]:
    """Each comparison's pair cost, from the runs of the default (trial 0) and of the chosen
    trial (None: none found yet, the typical run of every trial stands in)."""
    from dlperf.tune import confirm

    walls = {trial.number: trial.repeat_walls() for trial in trials}
    return [confirm.pair_s(walls.get(0, []), walls.get(number, []) if number is not None
                           else [w for ws in walls.values() for w in ws])
            for number in chosen]


def leading(trials: list[Any], default: dict[str, Any], comparisons: int) -> list[int | None]:
    """The trials the confirmation would compare now: the best, and the best at the default's
    batch and precision where a knob changes the math."""
    from dlperf.tune import search

    found = [search.best(trials, default)]
    if comparisons == 2:
        found.append(search.best(trials, default, config.CHANGES_MATH))
    return [trial.number if trial else None for trial in found]


def tune_one(case: Case, knobs: list[space.Knob], limit: int | None, budget_s: float,
             args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Search, confirm and store one framework's tune; (its outcome, whether it failed)."""
    from dlperf.tune import confirm, search  # Optuna: only when a tune runs

    record = space_record(knobs, limit)
    key = stored.study_key(case, record)
    earlier, old = None, []
    with Store.peek(args.db) or contextlib.nullcontext() as db:  # read-only: lock first
        if db is not None:
            earlier = db.tune_study(key)
            if earlier and earlier.get("outcome") and args.new:
                key = f"{key}-{len(db.tune_studies(stored.base_key(case))) + 1}"
                earlier = db.tune_study(key)
            old = db.tune_trials(key)
    if earlier and earlier.get("outcome"):
        say(f"{case.framework}: {args.db} holds a finished tune of this case (study {key}); "
            f"shown below (--new searches again)")
        show(earlier["outcome"], case)
        return earlier["outcome"], False
    budget = budgets.Budget(budget_s, spent_before_s=sum(row["wall_s"] for row in old))
    comparisons = 2 if any(knob.changes_math for knob in knobs) else 1

    def reserve(trials: list[search.Trial]) -> float:
        chosen = leading(trials, plan.default, comparisons)
        return confirm.reserve_s(pair_costs(trials, chosen), args.pairs, budget_s)

    plan = search.Plan(study=key, case=dataclasses.replace(case, repeats=1), knobs=knobs,
                       budget=budget, reserve_s=reserve, seed=case.seed,
                       max_trials=args.trials)
    say(f"tuning {case.label()} within {budgets.text(budget_s)} (study {key}"
        + (f", resuming after {len(old)} trials" if old else "") + "); knobs:")
    for knob in knobs:
        values = ", ".join(config.value_text(value) for value in knob.values)
        say(f"  {knob.name}: {values} — {knob.why}")
    for line in space.left_out(case, knobs):
        say(f"  left out, declared impossible: {line}")
    with session.measuring(args.db, wait=not args.no_wait) as opened:
        opened.store.start_tune_study(key, stored.base_key(case), case.to_dict(), record,
                                      budget_s)
        found = search.Search(plan, opened.store, opened.env, say)
        found.replay(old)
        trials = found.run() if budget.left() > 0 else found.trials
    default = plan.default
    outcome = outcome_of(trials, default, record, budget, expected_device(case))
    if outcome["default"]["throughput"] is None:
        first = trials[0] if trials else None
        why = first.error if first else "no trial ran"
        if first is not None and first.state == "failed" and "timeout" in (why or ""):
            raise UsageError(f"--budget: {args.budget} is too small for one trial of "
                             f"{case.label()}: the default configuration's screening run "
                             f"did not finish within it ({why})")
        say(f"{case.framework}: the default configuration failed ({why}); nothing to compare")
    else:
        confirm_start = budget.spent()
        waiting = [which for which in ("best", "best_fixed")
                   if outcome.get(which) is not None and outcome[which]["trial"] != 0]
        for done, which in enumerate(waiting):
            chosen = outcome[which]
            costs = pair_costs(trials, [outcome[w]["trial"] for w in waiting[done:]])
            pairs = confirm.affordable_pairs(costs, budget.left(), args.pairs)
            say(f"confirming {which.replace('_', ' ')} ({config.describe(chosen['changed'])}) "
                f"against the default: {pairs} interleaved pairs"
                + (f" (of --pairs {args.pairs}: what the budget left allows)"
                   if pairs < args.pairs else ""))
            chosen["ab"] = confirm.confirm(plan.case, default, chosen["settings"], pairs,
                                           budget, say)
            chosen["ab"]["pairs_asked"] = args.pairs
        outcome["confirm_s"] = budget.spent() - confirm_start
    with Store(args.db) as db:
        db.finish_tune_study(key, outcome)
    show(outcome, case)
    return outcome, outcome["default"]["throughput"] is None


def entry(trial: Any, default: dict[str, Any]) -> dict[str, Any]:
    return {"settings": dict(trial.settings), "trial": trial.number,
            "throughput": trial.value,
            "changed": config.changed(trial.settings, default),
            "changes_math": config.changes_math(trial.settings, default), "ab": None}


def outcome_of(trials: list[Any], default: dict[str, Any], record: dict[str, Any],
               budget: budgets.Budget, device: str) -> dict[str, Any]:
    """What the study found, in the shape stored and reported (``tune_studies.outcome``)."""
    from dlperf.tune import search

    first = trials[0] if trials else None
    top = search.best(trials, default)
    fixed = search.best(trials, default, config.CHANGES_MATH)
    best = entry(top, default) if top else None
    best_fixed = entry(fixed, default) if fixed and top and top.number != fixed.number and \
        best and best["changes_math"] else None
    counts = {state: sum(1 for t in trials if t.state == state
                         and not (t.error or "").startswith("same "))
              for state in ("complete", "pruned", "failed", "refused")}
    return {"knobs": record["knobs"], "batch_limit": record["batch_limit"],
            "default": {"settings": dict(default), "trial": 0,
                        "throughput": first.value if first and first.state == "complete"
                        else None},
            "best": best, "best_fixed": best_fixed,
            "search_s": budget.spent(), "confirm_s": 0.0, "budget_s": budget.total_s,
            "trials": counts, "device": device, "unit": "samples/s"}


def show(outcome: dict[str, Any], case: Case) -> None:
    table = Table(title=f"dlperf tune: {case.framework} {case.model} {case.task}")
    for name in ("configuration", "settings", "samples/s (search)", "speedup vs default"):
        table.add_column(name, overflow="fold")
    table.add_row("default", Text(config.describe(outcome["default"]["settings"])),
                  display.number(outcome["default"]["throughput"]), "1")
    for which, title in (("best", "best"), ("best_fixed", "best at the default batch and "
                                                          "precision")):
        chosen = outcome.get(which)
        if chosen is None:
            continue
        marked = title + (" (changes the mathematics: "
                          + ", ".join(chosen["changes_math"]) + ")"
                          if chosen["changes_math"] else "")
        table.add_row(marked, Text(config.describe(chosen["changed"])),
                      display.number(chosen["throughput"]),
                      Text(tune_report.speedup_text(chosen)))
    display.out.print(table)
    counts = outcome["trials"]
    say(f"{counts['complete']} configurations measured in full, {counts['pruned']} pruned, "
        f"{counts['failed']} failed"
        + (f", {counts['refused']} proposed and left out (declared impossible)"
           if counts.get("refused") else "") + f"; search {budgets.text(outcome['search_s'])} of "
        f"{budgets.text(outcome['budget_s'])}; `dlperf run ... --config best` reuses the best")
