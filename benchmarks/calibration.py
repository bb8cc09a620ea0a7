"""How often dlperf's verdicts are wrong on this machine's real noise, beside other tools' rules.

    python benchmarks/calibration.py collect --db cal.db --cycles 20     # measure (alone, quiet)
    python benchmarks/calibration.py judge --db cal.db [--json c.json] [--markdown c.md]

``collect`` measures one tiny case in fresh processes (`dlperf run --repeats 1`, one process
per repeat), interleaved with the same case under planted slowdowns (`--plant-slowdown`: 1, 2,
3, 5 and 10 %): cycle after cycle, A, P1, P2, ... so that drift in the host touches every pool
alike. ``judge`` then draws random splits: two disjoint sets of n repeats from the unplanted pool
(A/A: any "slower" is a false alarm) and n unplanted against n planted (the power against a
change of known size), and applies each verdict to each draw:

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
* a conbench-style lookback z-score: (candidate median - baseline mean) / baseline sd < -5.

The other tools' rules are their documented ideas written small, not their code. Every rule
counts its "slower" verdicts only (a false "faster" is not counted, for any of them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from dlperf.commands.gate import MAX_SLOWDOWN, repeats_verdict
from dlperf.history import changepoints
from dlperf.report.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_pair
from dlperf.store import Store
from dlperf.studies import ab

PLANTED = (0.01, 0.02, 0.03, 0.05, 0.10)
CASE = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--batch-size", "2",
        "--warmup-steps", "3", "--steps", "6", "--threads-per-process", "1"]

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
    bound = b.mean() - scipy_stats.t.ppf(0.975, n - 1) * b.std(ddof=1) * np.sqrt(1 + 1 / n)
    return float(np.median(cand)) < bound


def conbench_z(base: Values, cand: Values, limit: float = 5.0) -> bool:
    b = np.asarray(base, dtype=float)
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
}
# rules whose two sides are pairs, measured side by side: their planted draws take both repeats
# from the same cycles
PAIRED = frozenset({"dlperf ab (pairs)"})


def rates(base_pool: Values, planted: Mapping[float, Values], n: int,
          draws: int, seed: int = 0, rules: dict[str, Rule] | None = None,
          paired: frozenset[str] = PAIRED) -> dict[str, dict[str, float]]:
    """Per rule (default :data:`RULES`): the false-alarm rate (A/A: two disjoint n-sets of the
    base pool) and the power against each planted pool (n base against n planted), over
    ``draws`` random draws. A rule in ``paired`` gets its planted draws cycle by cycle (the
    same positions of both pools, which :func:`pools` keeps in measuring order)."""
    rng = np.random.default_rng(seed)
    base = np.asarray(base_pool, dtype=float)
    if base.size < 2 * n:
        raise SystemExit(f"A/A needs {2 * n} unplanted repeats; the pool has {base.size}")
    chosen = RULES if rules is None else rules
    out: dict[str, dict[str, float]] = {name: {} for name in chosen}
    for name, rule in chosen.items():
        alarms = 0
        for _ in range(draws):
            order = rng.permutation(base.size)
            alarms += rule(base[order[:n]], base[order[n:2 * n]])
        out[name]["false_alarm"] = alarms / draws
        for share, pool in sorted(planted.items()):
            cand = np.asarray(pool, dtype=float)
            if cand.size < n:
                continue
            if name in paired:
                cycles = min(base.size, cand.size)
                picks = (rng.choice(cycles, n, replace=False) for _ in range(draws))
                hits = sum(rule(base[at], cand[at]) for at in picks)
            else:
                hits = sum(rule(rng.choice(base, n, replace=False),
                                rng.choice(cand, n, replace=False)) for _ in range(draws))
            out[name][f"power_{share:.0%}"] = hits / draws
    return out


def pools(db: Path) -> tuple[list[float], dict[float, list[float]]]:
    """Every stored repeat's throughput, by planted share (0: the base pool), each pool in
    measuring order (oldest first: cycle by cycle, which the paired rules rely on)."""
    found: dict[float, list[float]] = {}
    with Store(db, readonly=True) as store:
        for result in store.results():
            if result.get("status") != "ok":
                continue
            share = float(result["case"].get("plant_slowdown") or 0.0)
            found.setdefault(share, []).extend(result["throughput"]["repeats"])
    base = found.pop(0.0, [])
    return base, found


def collect(args: argparse.Namespace) -> int:
    shares = [0.0, *(args.shares or PLANTED)]
    for cycle in range(args.cycles):
        for share in shares:
            extra = ["--plant-slowdown", f"{share:g}"] if share else []
            proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *CASE,
                                   "--repeats", "1", *extra, "--db", str(args.db)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
        print(f"cycle {cycle + 1}/{args.cycles} done", file=sys.stderr)
    return 0


def table(found: dict[int, dict[str, dict[str, float]]]) -> str:
    columns = ["false alarm"] + [f"power {s:.0%}" for s in PLANTED]
    keys = ["false_alarm"] + [f"power_{s:.0%}" for s in PLANTED]
    lines = []
    for n, by_rule in sorted(found.items()):
        lines += [f"\n**{n} repeats a side**\n", "| verdict | " + " | ".join(columns) + " |",
                  "|---|" + "---:|" * len(columns)]
        for name, values in by_rule.items():
            cells = [f"{values[k]:.1%}" if k in values else "—" for k in keys]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def judge(args: argparse.Namespace) -> int:
    base, planted = pools(args.db)
    found = {n: rates(base, planted, n, args.draws, args.seed) for n in args.repeats}
    text = table(found)
    print(f"pools: {len(base)} unplanted repeats; planted: "
          + ", ".join(f"{s:.0%}: {len(v)}" for s, v in sorted(planted.items())))
    print(text)
    if args.json:
        args.json.write_text(json.dumps({str(n): v for n, v in found.items()}, indent=2))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect", help="measure the pools (alone, on a quiet machine)")
    c.add_argument("--db", type=Path, required=True)
    c.add_argument("--cycles", type=int, default=20)
    c.add_argument("--shares", type=float, nargs="+", default=None,
                   help=f"planted slowdowns beside the unplanted case (default {PLANTED})")
    j = sub.add_parser("judge", help="false alarms and power of every verdict")
    j.add_argument("--db", type=Path, required=True)
    j.add_argument("--repeats", type=int, nargs="+", default=[3, 5, 7])
    j.add_argument("--draws", type=int, default=2000)
    j.add_argument("--seed", type=int, default=0)
    j.add_argument("--json", type=Path)
    j.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    return collect(args) if args.step == "collect" else judge(args)


if __name__ == "__main__":
    sys.exit(main())
