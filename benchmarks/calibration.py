"""How often dlperf's verdicts are wrong on this machine's real noise, beside other tools' rules.

    python benchmarks/calibration.py collect --db cal.db --cycles 20     # measure (alone, quiet)
    python benchmarks/calibration.py judge --db cal.db [--json c.json] [--markdown c.md]

Both take ``--pool NAME`` (repeatable; default every pool declared in :data:`POOLS`: a name and
the ``dlperf run`` flags of its case). ``collect`` measures each pool's case in fresh processes
(`dlperf run --repeats 1`, one process per repeat), beside the same case under planted slowdowns
(``--plant-slowdown``: 1, 2, 3, 5 and 10 %): cycle after cycle, and in each cycle every pool in
turn (its A, P1, P2, ..., then the next pool's), so that drift in the host touches every pool
alike. A pool whose framework's environment is not installed is left out, with one line naming
`dlperf envs install FW`. A stored result belongs to the pool whose case it is (its experiment,
:func:`pool_key`: the case without label, environment and planted share): nothing of ours is
stored beside it, and a database collected before the pools were declared (``torch-resnet50``
alone) judges as before.

``judge`` then, pool by pool, draws random splits: two disjoint sets of n repeats from the
unplanted pool (A/A: any "slower" is a false alarm) and n unplanted against n planted (the power
against a change of known size), and applies each verdict to each draw:

* dlperf ``compare`` (its threshold and alpha, Mann-Whitney and Welch: ``compare_pair``);
* dlperf ``gate`` on stored repeats (``repeats_verdict``: one-sided test and --max-slowdown);
* dlperf ``ab`` (``Comparison.summary``'s verdict: the ratio's bootstrap interval over pairs and
  its 2 % threshold) on n pairs: A/A pairs two disjoint n-sets of the unplanted pool; planted
  pairs an unplanted and a planted repeat of the same cycle (measured side by side);
* dlperf ``history`` (``changepoints.evaluate``: PELT and its Mann-Whitney confirmation) on a
  series of 2n one-repeat results: n unplanted then n others (A/A: unplanted again; planted: a
  step down to the planted pool), "slower" when a change point down is confirmed;
* a relative threshold on the medians alone (TorchBench's approach; at 7 % and the 30 % it
  moved to);
* asv's default factor alone (a ratio beyond 1.1);
* a Bencher-style t-test threshold: the candidate's median below the baseline's 95 %
  prediction interval (mean - t x sd x sqrt(1 + 1/n));
* a conbench-style lookback z-score: (candidate median - baseline mean) / baseline sd < -5;
* dlperf ``gate --remeasure``: ``ab``'s verdict with gate's --max-slowdown as its threshold
  (``remeasured_verdict``). Its re-measured repeats are fresh-process repeats of the stored case,
  which is what a pool holds, so a draw from the pool is the honest simulation of what they
  measure. What a draw of random cycles does not capture is when they are measured: n pairs
  one after another, each side first in every other pair (``ab.order``). So its A/A pairs are
  2n consecutive unplanted repeats taken in that order (:func:`remeasure_pairs`), and its planted
  pairs the unplanted and planted repeats of n consecutive cycles.

The other tools' rules are their documented ideas written small, not their code. Every rule
counts its "slower" verdicts only (a false "faster" is not counted, for any of them). Last, the
pooled summary: per verdict, each pool's false-alarm rate, the worst and the mean, and the power
averaged over the pools.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.cli import Parser, build_parser, one_line
from dlperf.commands._flags import case_from_args
from dlperf.commands.gate import MAX_SLOWDOWN, repeats_verdict
from dlperf.envs import manage
from dlperf.errors import UsageError
from dlperf.history import changepoints
from dlperf.history.series import experiment_key
from dlperf.outputs import check_writable
from dlperf.report.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_pair
from dlperf.results.codec import read_result
from dlperf.spec import Case
from dlperf.store import Store, StoreError
from dlperf.studies import ab

PROG = "calibration.py"
PLANTED = (0.01, 0.02, 0.03, 0.05, 0.10)
# a repeat's length: 3 warm-up and 6 timed steps on one thread per process
STEPS = ["--warmup-steps", "3", "--steps", "6", "--threads-per-process", "1"]
RESNET50 = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", *STEPS]
POOLS: dict[str, list[str]] = {
    # the case collect measured before the pools were declared: such a database is this pool
    "torch-resnet50": ["--framework", "torch", *RESNET50],
    # BERT-Base itself (MLM + NSP) on short sequences
    "torch-bert": ["--framework", "torch", "--model", "bert-base", "--seq-len", "16",
                   "--batch-size", "2", *STEPS],
    # a framework in its own environment: paddle starts fastest of those installed here
    "paddle-resnet50": ["--framework", "paddle", *RESNET50],
    # a multi-process job: two ranks under torchrun on the CPU, one thread each
    "torch-resnet50-2proc": ["--framework", "torch", *RESNET50, "--device", "cpu",
                             "--devices", "2"],
}
DEFAULT_POOL = "torch-resnet50"
REMEASURE = "dlperf gate --remeasure (pairs)"

Values = Sequence[float] | np.ndarray
Rule = Callable[[Values, Values], bool]  # (baseline, candidate) -> "slower"


def _result(values: Values) -> dict[str, Any]:
    return {"status": "ok", "label": "x", "throughput": {"median": float(np.median(values)),
                                                         "repeats": list(values)}}


def dlperf_compare(test: str) -> Rule:
    def rule(base: Values, cand: Values) -> bool:
        return compare_pair("x", _result(base), _result(cand), DEFAULT_THRESHOLD, DEFAULT_ALPHA,
                            test).verdict == "slower"
    return rule


def dlperf_gate(test: str, limit: float = MAX_SLOWDOWN) -> Rule:
    def rule(base: Values, cand: Values) -> bool:
        ratio = float(np.median(cand) / np.median(base))
        return repeats_verdict(list(base), list(cand), ratio, limit, test)[0] == "slower"
    return rule


def dlperf_ab(threshold: float = ab.DEFAULT_THRESHOLD) -> Rule:
    """`dlperf ab`'s verdict on the pairs (base[i], cand[i]), as its summary gives it."""
    def rule(base: Values, cand: Values) -> bool:
        found = ab.Comparison(pairs=len(base), threshold=threshold)
        for pair, (a, b) in enumerate(zip(base, cand)):
            found.turns += [ab.Turn("A", pair, float(a), "ok"), ab.Turn("B", pair, float(b), "ok")]
        return bool(found.summary()["verdict"] == "slower")
    return rule


def dlperf_history(base: Values, cand: Values) -> bool:
    """`dlperf history`'s change points on base's results then cand's, one repeat each."""
    values = [float(v) for v in (*base, *cand)]
    return any(c.confirmed and c.relative_change < 0
               for c in changepoints.evaluate(values, [[v] for v in values]))


def relative(threshold: float) -> Rule:
    def rule(base: Values, cand: Values) -> bool:
        return float(np.median(cand) / np.median(base)) < 1.0 - threshold
    return rule


def asv_factor(base: Values, cand: Values) -> bool:
    return float(np.median(base) / np.median(cand)) > 1.1


def bencher_t(base: Values, cand: Values) -> bool:
    b = np.asarray(base, dtype=float)
    n = b.size
    if n < 2:  # one baseline repeat has no spread: no interval, so never "slower"
        return False
    from scipy import stats as scipy_stats  # here: 1.4 s of imports a bad flag need not pay

    bound = b.mean() - scipy_stats.t.ppf(0.975, n - 1) * b.std(ddof=1) * np.sqrt(1 + 1 / n)
    return float(np.median(cand)) < bound


def conbench_z(base: Values, cand: Values, limit: float = 5.0) -> bool:
    b = np.asarray(base, dtype=float)
    if b.size < 2:  # one baseline repeat has no spread: no z-score, so never "slower"
        return False
    sd = b.std(ddof=1)
    return sd > 0 and (float(np.median(cand)) - b.mean()) / sd < -limit


RULES: dict[str, Rule] = {
    "dlperf compare (Mann-Whitney)": dlperf_compare("mannwhitney"),
    "dlperf compare (Welch)": dlperf_compare("welch"),
    "dlperf gate (Mann-Whitney)": dlperf_gate("mannwhitney"),
    "dlperf gate (Welch)": dlperf_gate("welch"),
    "relative 7% (TorchBench-style)": relative(0.07),
    "relative 30% (TorchBench-style)": relative(0.30),
    "factor 1.1 (asv-style)": asv_factor,
    "t-test threshold (Bencher-style)": bencher_t,
    "z-score 5 (conbench-style)": conbench_z,
    "dlperf ab (pairs)": dlperf_ab(),
    "dlperf history (change points)": dlperf_history,
    # last, so that the rows above draw what they drew before it was added (one generator)
    REMEASURE: dlperf_ab(MAX_SLOWDOWN),
}
# rules whose two sides are pairs, measured side by side: their planted draws take both repeats
# from the same cycles
PAIRED = frozenset({"dlperf ab (pairs)"})
# rules whose pairs are measured one after another (a re-measurement): their draws take
# consecutive repeats, in ab's order (remeasure_pairs)
CONSECUTIVE = frozenset({REMEASURE})


def remeasure_pairs(window: Values, n: int) -> tuple[np.ndarray, np.ndarray]:
    """2n consecutive repeats of one case as a re-measurement's n pairs (A, B): the turns in
    ``ab.order`` (A B, B A, ...), so each side comes first in every other pair."""
    a, b = np.empty(n), np.empty(n)
    for value, (pair, side) in zip(window, ab.order(n)):
        (a if side == "A" else b)[pair] = value
    return a, b


def rates(base_pool: Values, planted: Mapping[float, Values], n: int,
          draws: int, seed: int = 0, rules: dict[str, Rule] | None = None,
          paired: frozenset[str] = PAIRED,
          consecutive: frozenset[str] = CONSECUTIVE) -> dict[str, dict[str, float]]:
    """Per rule (default :data:`RULES`): the false-alarm rate (A/A: two disjoint n-sets of the
    base pool) and the power against each planted pool (n base against n planted), over
    ``draws`` random draws. A rule in ``paired`` gets its planted draws cycle by cycle (the
    same positions of both pools, which :func:`pools_of` keeps in measuring order); one in
    ``consecutive`` gets consecutive repeats: 2n for A/A (:func:`remeasure_pairs`) and n cycles
    for power."""
    rng = np.random.default_rng(seed)
    base = np.asarray(base_pool, dtype=float)
    if base.size < 2 * n:
        raise SystemExit(f"A/A needs {2 * n} unplanted repeats; the pool has {base.size}")
    chosen = RULES if rules is None else rules
    out: dict[str, dict[str, float]] = {name: {} for name in chosen}
    for name, rule in chosen.items():
        alarms = 0
        for _ in range(draws):
            if name in consecutive:
                start = int(rng.integers(0, base.size - 2 * n + 1))
                alarms += rule(*remeasure_pairs(base[start:start + 2 * n], n))
                continue
            order = rng.permutation(base.size)
            alarms += rule(base[order[:n]], base[order[n:2 * n]])
        out[name]["false_alarm"] = alarms / draws
        for share, pool in sorted(planted.items()):
            cand = np.asarray(pool, dtype=float)
            if cand.size < n:
                continue
            cycles = min(base.size, cand.size)
            if name in consecutive:
                starts = (int(rng.integers(0, cycles - n + 1)) for _ in range(draws))
                hits = sum(rule(base[at:at + n], cand[at:at + n]) for at in starts)
            elif name in paired:
                picks = (rng.choice(cycles, n, replace=False) for _ in range(draws))
                hits = sum(rule(base[at], cand[at]) for at in picks)
            else:
                hits = sum(rule(rng.choice(base, n, replace=False),
                                rng.choice(cand, n, replace=False)) for _ in range(draws))
            out[name][f"power_{share:.0%}"] = hits / draws
    return out


@dataclass
class Pool:
    """One pool's repeats, each list in measuring order (oldest first: cycle by cycle, which the
    paired and consecutive rules rely on): unplanted, and by planted share."""

    base: list[float] = field(default_factory=list)
    planted: dict[float, list[float]] = field(default_factory=dict)
    results: int = 0  # stored results, planted ones included


@cache
def declared_case(flags: tuple[str, ...]) -> Case:
    """The case ``dlperf run FLAGS`` measures, read by run's own parser."""
    return case_from_args(build_parser("run").parse_args(["run", *flags]))


def pool_key(case: Mapping[str, Any]) -> str:
    """The experiment a case belongs to whatever its planted share (and label, environment)."""
    return experiment_key({**case, "plant_slowdown": 0.0})


def stored_pools(db: Path) -> dict[str, Pool]:
    """Every stored successful repeat's throughput, by experiment (:func:`pool_key`) and
    planted share, in measuring order."""
    found: dict[str, Pool] = {}
    with Store(db, readonly=True) as store:
        for result in store.results():
            if result.get("status") != "ok":
                continue
            pool = found.setdefault(pool_key(read_result(result).case), Pool())
            pool.results += 1
            share = float(result["case"].get("plant_slowdown") or 0.0)
            into = pool.planted.setdefault(share, []) if share else pool.base
            into.extend(result["throughput"]["repeats"])
    return found


def pools_of(db: Path, declared: Mapping[str, Sequence[str]]) -> tuple[dict[str, Pool], int]:
    """The stored repeats of each declared pool (its case) that has any, in declared order;
    and how many successful results are of no declared pool."""
    found = stored_pools(db)
    keys = {name: pool_key(declared_case(tuple(flags)).to_dict())
            for name, flags in declared.items()}
    other = sum(p.results for key, p in found.items() if key not in keys.values())
    return {name: found[key] for name, key in keys.items() if key in found}, other


def pools(db: Path) -> tuple[list[float], dict[float, list[float]]]:
    """One pool's repeats, unplanted and by planted share (``benchmarks/history_corpus.py
    --pool`` resamples their noise): the default pool's (a database collected before the pools
    were declared holds only it), or those of the one case a database holds."""
    found = stored_pools(db)
    default = pool_key(declared_case(tuple(POOLS[DEFAULT_POOL])).to_dict())
    key = default if default in found or len(found) != 1 else next(iter(found))
    pool = found.get(key, Pool())
    return pool.base, pool.planted


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def measurable(declared: Mapping[str, Sequence[str]]) -> dict[str, Sequence[str]]:
    """The pools whose framework's environment is installed; one line for each left out."""
    out = {}
    for name, flags in declared.items():
        framework = declared_case(tuple(flags)).framework
        if manage.status(framework).usable:
            out[name] = flags
        else:
            say(f"{PROG}: pool {name} left out: {manage.not_installed_message(framework)}")
    return out


def collect(db: Path, cycles: int, shares: Sequence[float],
            declared: Mapping[str, Sequence[str]]) -> int:
    """``cycles`` cycles, each measuring every pool in turn, unplanted then each share."""
    chosen = measurable(declared)
    if not chosen:
        say(f"{PROG}: no pool to measure")
        return 1
    for cycle in range(cycles):
        for flags in chosen.values():
            for share in (0.0, *shares):
                extra = ["--plant-slowdown", f"{share:g}"] if share else []
                proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *flags,
                                       "--repeats", "1", *extra, "--db", str(db)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return proc.returncode
        say(f"cycle {cycle + 1}/{cycles} done ({', '.join(chosen)})")
    return 0


def judge(found: Mapping[str, Pool], repeats: Sequence[int], draws: int,
          seed: int = 0, jobs: int = 1) -> dict[str, Any]:
    """Every rule's rates, pool by pool (each pool drawn with the same seed), at each n of
    ``repeats`` its unplanted repeats allow (``too_few`` lists the others), and the summary.
    ``jobs`` processes share the (pool, n) draws: each is seeded alike, so the rates are the
    same whatever the number of processes."""
    fits = {name: [n for n in repeats if len(pool.base) >= 2 * n] for name, pool in found.items()}
    tasks = [(name, n) for name, ns in fits.items() for n in ns]
    calls = [(found[name].base, found[name].planted, n, draws, seed) for name, n in tasks]
    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as processes:
            done = dict(zip(tasks, processes.map(rates, *zip(*calls))))
    else:
        done = dict(zip(tasks, (rates(*call) for call in calls)))
    judged: dict[str, Any] = {}
    for name, pool in found.items():
        judged[name] = {
            "repeats": len(pool.base),
            "planted": {f"{s:.0%}": len(v) for s, v in sorted(pool.planted.items())},
            "rates": {str(n): done[name, n] for n in fits[name]},
            "too_few": [n for n in repeats if n not in fits[name]]}
    return {"pools": judged, "summary": summary(judged)}


def summary(judged: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per n and rule: each pool's false-alarm rate, their worst and mean, and each power
    averaged over the pools that have it."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, entry in judged.items():
        for n, by_rule in entry["rates"].items():
            for rule, values in by_rule.items():
                row = out.setdefault(n, {}).setdefault(rule, {"false_alarm": {}})
                row["false_alarm"][name] = values["false_alarm"]
                for key, value in values.items():
                    if key != "false_alarm":
                        row.setdefault(key, []).append(value)
    for by_rule in out.values():
        for row in by_rule.values():
            alarms = list(row["false_alarm"].values())
            row["false_alarm_worst"], row["false_alarm_mean"] = max(alarms), float(np.mean(alarms))
            for key in [k for k in row if k.startswith("power_")]:
                row[f"{key}_mean"] = float(np.mean(row.pop(key)))
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


def _power_keys(rows: Sequence[Mapping[str, Any]], suffix: str = "") -> list[str]:
    """The power columns the rows hold, by planted share."""
    keys = {k for row in rows for k in row if k.startswith("power_") and k.endswith(suffix)}
    return sorted(keys, key=lambda k: float(k[len("power_"):].split("%")[0]))


def _table(title: str, columns: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    return [f"\n**{title}**\n", "| verdict | " + " | ".join(columns) + " |",
            "|---|" + "---:|" * len(columns),
            *(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows)]


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def table(found: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """One pool's tables, one per n: false alarm and the power against each planted share."""
    lines = []
    for n, by_rule in sorted(found.items(), key=lambda item: int(item[0])):
        keys = ["false_alarm", *_power_keys(list(by_rule.values()))]
        columns = [k.replace("_", " ") for k in keys]
        lines += _table(f"{n} repeats a side", columns,
                        [(rule, [_cell(v.get(k)) for k in keys]) for rule, v in by_rule.items()])
    return "\n".join(lines)


def summary_table(pooled: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """The pooled summary, one table per n: each pool's false alarms, worst, mean power."""
    lines = []
    for n, by_rule in pooled.items():
        names = list(next(iter(by_rule.values()))["false_alarm"])
        powers = _power_keys(list(by_rule.values()), "_mean")
        columns = ([f"false alarm {name}" for name in names] + ["worst false alarm"]
                   + [f"power {k[len('power_'):-len('_mean')]} (mean)" for k in powers])
        rows = [(rule, [_cell(row["false_alarm"].get(name)) for name in names]
                 + [_cell(row["false_alarm_worst"])] + [_cell(row.get(k)) for k in powers])
                for rule, row in by_rule.items()]
        lines += _table(f"{n} repeats a side, all pools", columns, rows)
    return "\n".join(lines)


def render(judged: Mapping[str, Any]) -> str:
    """Markdown: each pool's counts and tables, then the pooled summary."""
    parts = []
    for name, entry in judged["pools"].items():
        planted = ", ".join(f"{s}: {c}" for s, c in entry["planted"].items()) or "none"
        parts.append(f"\n### pool {name}\n\n{entry['repeats']} unplanted repeats; planted: "
                     f"{planted}")
        if entry["too_few"]:
            parts.append(f"\nnot judged at {', '.join(map(str, entry['too_few']))} repeats a "
                         f"side: A/A needs twice as many unplanted repeats")
        parts.append(table(entry["rates"]))
    parts += ["\n### all pools", summary_table(judged["summary"])]
    return "\n".join(parts).lstrip("\n") + "\n"


def chosen_pools(names: list[str] | None) -> dict[str, list[str]]:
    return {name: POOLS[name] for name in (names or POOLS)}


def run_judge(args: argparse.Namespace) -> int:
    declared = chosen_pools(args.pool)
    found, other = pools_of(args.db, declared)
    if other:
        say(f"{PROG}: {other} result(s) in {args.db} are of no pool judged here, left out")
    if not found:
        raise UsageError(f"--db: {args.db} holds no result of the pools "
                         f"{', '.join(declared)}; measure them with `collect`")
    for name in declared:
        if name not in found:
            say(f"{PROG}: pool {name}: no result in {args.db}")
    judged = judge(found, args.repeats, args.draws, args.seed, args.jobs)
    text = render(judged)
    print(text, end="")
    if args.json:
        args.json.write_text(json.dumps(judged, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True, parser_class=Parser)
    c = sub.add_parser("collect", help="measure the pools (alone, on a quiet machine)")
    j = sub.add_parser("judge", help="false alarms and power of every verdict, pool by pool")
    for each in (c, j):
        each.add_argument("--db", type=Path, required=True)
        each.add_argument("--pool", action="append", choices=list(POOLS), metavar="NAME",
                          help=f"repeat for several (default all: {', '.join(POOLS)})")
    c.add_argument("--cycles", type=int, default=20)
    c.add_argument("--shares", type=float, nargs="*", default=None,
                   help=f"planted slowdowns beside each unplanted case (default {PLANTED}; "
                        f"none given: A/A only)")
    j.add_argument("--repeats", type=int, nargs="+", default=[3, 5, 7])
    j.add_argument("--draws", type=int, default=2000)
    j.add_argument("--seed", type=int, default=0)
    j.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes sharing the draws (default: one per CPU); the rates do not "
                        "depend on it")
    j.add_argument("--json", type=Path)
    j.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.step == "collect":
        if args.cycles < 1:
            parser.error(f"--cycles: at least 1; got {args.cycles}")
        args.shares = PLANTED if args.shares is None else args.shares
        if any(not 0 < s <= 0.5 for s in args.shares):
            parser.error(f"--shares: fractions above 0 and at most 0.5 (0.05 is 5 %); got "
                         f"{args.shares}")
    else:
        if any(n < 1 for n in args.repeats) or args.draws < 1:
            parser.error(f"--repeats and --draws: at least 1; got {args.repeats} and "
                         f"{args.draws}")
        if args.jobs < 1:
            parser.error(f"--jobs: at least 1; got {args.jobs}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if args.step == "collect":
            return collect(args.db, args.cycles, args.shares, chosen_pools(args.pool))
        check_writable("--json", args.json)
        check_writable("--markdown", args.markdown)
        return run_judge(args)
    except (UsageError, StoreError) as error:
        say(f"{PROG}: error: {one_line(error)}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
