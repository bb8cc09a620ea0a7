"""How good `dlperf history`'s change points are: a labelled corpus, scored beside other methods.

    python benchmarks/history_corpus.py [--cv 0.04 | --pool cal.db] [--json h.json] [--markdown h.md]

The corpus is synthetic and seeded: series of ``--points`` results, each result the median of k
repeats (``--repeats``, 3 and 5), with 0, 1 or 2 planted steps of one size (``--sizes``: 2, 3, 5
and 10 %, up or down at random) at known indices at least ``GAP`` results from the ends and
from each other. A repeat is the level times a noise factor: normal with the CV ``--cv``, or
(``--pool cal.db``, never both) resampled from the unplanted fresh-process repeats that
``benchmarks/calibration.py collect`` stored (its ``pools()``), divided by their median, so the
series carry this machine's measured noise, tails and all.

Methods, each given a series' medians and repeats and returning the indices of the first result
after each change:

* dlperf: ``changepoints.detect`` (PELT candidates, confirmed on the repeats);
* PELT alone: dlperf's own candidates (``changepoints.candidates``), i.e. without confirmation;
* ruptures PELT with a BIC penalty (``2 sigma^2 ln n``: a change adds a location and a mean);
* ruptures Binseg and Window (width ``WINDOW``), ``l2``, dlperf's sigma penalty;
* E-divisive (numpy): the idea behind Apache Otava (once DataStax's hunter) and MongoDB's
  signal-processing-algorithms, written small, not their code: the best split of a segment by
  the energy statistic, kept when a permutation test (``--permutations`` shuffles of the
  segment) gives p < ``EDIV_ALPHA``; splitting continues until one is not kept.

Only dlperf's detector reads the repeats; the others see the log of the medians. Where a
penalty needs the noise, sigma is dlperf's ``noise_sigma``.

Scoring: a detection within ``--tolerance`` results (default 1) of a planted change is a true
positive, each planted change and each detection matched at most once (nearest first); every
other detection is a false alarm. Per method, repeat count and step size: precision, recall and
false alarms per 100 results (series with no step make the "none" column: false alarms only).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.history import changepoints
from dlperf.store import StoreError

SIZES = (0.02, 0.03, 0.05, 0.10)
GAP = 5  # results between a planted step and an end or another step
LEVEL = 100.0  # throughput before any step (the scale cancels in every method)
WINDOW = 6  # ruptures Window's width: 3 results each side
EDIV_ALPHA = 0.05
DEFAULT_CV = 0.04  # the repeats' CV without a measured pool
MIN_POOL = 10  # fresh-process repeats a --pool must hold to be resampled

Noise = Callable[[np.random.Generator, int], np.ndarray]  # (rng, k) -> k factors around 1
Method = Callable[[Sequence[float], Sequence[Sequence[float]]], list[int]]


@dataclass(frozen=True)
class Series:
    """One labelled series: each result's median and repeats, and where its level moved."""

    medians: list[float]
    repeats: list[list[float]]
    changes: list[int]  # index of the first result at the new level
    size: float  # relative size of each step (0: no step)
    k: int  # repeats per result


def normal_noise(cv: float) -> Noise:
    def draw(rng: np.random.Generator, k: int) -> np.ndarray:
        return rng.normal(1.0, cv, k)
    return draw


def pool_noise(pool: Sequence[float]) -> Noise:
    """Factors resampled from real repeats, each divided by the pool's median."""
    factors = np.asarray(pool, dtype=float) / float(np.median(pool))

    def draw(rng: np.random.Generator, k: int) -> np.ndarray:
        return rng.choice(factors, k, replace=True)
    return draw


def make_series(rng: np.random.Generator, points: int, k: int, size: float, steps: int,
                noise: Noise) -> Series:
    """A series with ``steps`` planted changes of ``size`` (each up or down at random)."""
    changes = plant_indices(rng, points, steps)
    levels = np.full(points, LEVEL)
    for index in changes:
        levels[index:] *= 1.0 + size * rng.choice((-1.0, 1.0))
    repeats = [[float(v) for v in level * noise(rng, k)] for level in levels]
    return Series([float(np.median(r)) for r in repeats], repeats, changes, size if steps else 0.0,
                  k)


def plant_indices(rng: np.random.Generator, points: int, steps: int) -> list[int]:
    """``steps`` sorted indices in [GAP, points - GAP], each at least GAP from the other."""
    if steps == 0:
        return []
    while True:  # rejection: the space is wide for the lengths the CLI allows
        picked = sorted(int(i) for i in rng.integers(GAP, points - GAP + 1, steps))
        if all(b - a >= GAP for a, b in zip(picked, picked[1:])):
            return picked


def corpus(seed: int, points: int, ks: Sequence[int], sizes: Sequence[float], per_cell: int,
           noise: Noise) -> list[Series]:
    """For each repeat count: ``per_cell`` series with no step, and per size ``per_cell`` with
    one step and ``per_cell`` with two."""
    rng = np.random.default_rng(seed)
    out = []
    for k in ks:
        out += [make_series(rng, points, k, 0.0, 0, noise) for _ in range(per_cell)]
        for size in sizes:
            for steps in (1, 2):
                out += [make_series(rng, points, k, size, steps, noise) for _ in range(per_cell)]
    return out


# -- methods -----------------------------------------------------------------------------------

def _signal(medians: Sequence[float]) -> np.ndarray:
    return np.log(np.asarray(medians, dtype=float)).reshape(-1, 1)


def _sigma_penalty(medians: Sequence[float]) -> float:
    """dlperf's penalty (changepoints.candidates'), for the other ruptures searches."""
    sigma = changepoints.noise_sigma(medians)
    return changepoints.PENALTY_SIGMAS * sigma ** 2 * math.log(len(medians))


def _inner(ends: list[int], points: int) -> list[int]:
    return [int(e) for e in ends if e < points]


def dlperf_detect(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
    return [c.index for c in changepoints.detect(medians, repeats)]


def pelt_alone(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
    return changepoints.candidates(medians, changepoints.noise_sigma(medians))


def _ruptures() -> Any:
    """ruptures, imported when a search of its runs: with scipy it takes 1.5-2 CPU-s, which
    every pytest process collecting tests/history/test_history_corpus.py paid."""
    import ruptures

    return ruptures


def pelt_bic(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
    penalty = 2.0 * changepoints.noise_sigma(medians) ** 2 * math.log(len(medians))
    algo = _ruptures().Pelt(model="l2", min_size=changepoints.MIN_SIZE, jump=1)
    return _inner(algo.fit(_signal(medians)).predict(pen=penalty), len(medians))


def binseg(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
    algo = _ruptures().Binseg(model="l2", min_size=changepoints.MIN_SIZE, jump=1)
    return _inner(algo.fit(_signal(medians)).predict(pen=_sigma_penalty(medians)), len(medians))


def window(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
    algo = _ruptures().Window(width=WINDOW, model="l2", min_size=changepoints.MIN_SIZE, jump=1)
    return _inner(algo.fit(_signal(medians)).predict(pen=_sigma_penalty(medians)), len(medians))


def energy_split(x: np.ndarray, min_size: int) -> tuple[int, float]:
    """The split of ``x`` with the largest energy statistic (Szekely-Rizzo, alpha 1):
    m n / (m + n) (2 E|X-Y| - E|X-X'| - E|Y-Y'|); prefix sums of the distance matrix make every
    split one pass."""
    n = x.size
    dist = np.abs(x[:, None] - x[None, :])
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = dist.cumsum(0).cumsum(1)
    tau = np.arange(min_size, n - min_size + 1)
    m, r = tau.astype(float), (n - tau).astype(float)
    within_x = prefix[tau, tau]
    across = prefix[tau, n] - within_x
    within_y = prefix[n, n] - within_x - 2 * across
    q = m * r / n * (2 * across / (m * r) - within_x / (m * (m - 1)) - within_y / (r * (r - 1)))
    best = int(np.argmax(q))
    return int(tau[best]), float(q[best])


def e_divisive(permutations: int, seed: int = 0) -> Method:
    """E-divisive on the log medians: split the segment whose best split is strongest, while its
    permutation p-value stays under EDIV_ALPHA."""
    min_size = changepoints.MIN_SIZE

    def detect(medians: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[int]:
        rng = np.random.default_rng(seed)
        x = np.log(np.asarray(medians, dtype=float))
        bounds = [0, x.size]
        while True:
            best: tuple[float, int, int, int] | None = None  # (q, split, left, right)
            for left, right in zip(bounds, bounds[1:]):
                if right - left < 2 * min_size:
                    continue
                split, q = energy_split(x[left:right], min_size)
                if best is None or q > best[0]:
                    best = (q, left + split, left, right)
            if best is None:
                break
            q, split, left, right = best
            segment = x[left:right]
            beaten = sum(energy_split(rng.permutation(segment), min_size)[1] >= q
                         for _ in range(permutations))
            if (beaten + 1) / (permutations + 1) >= EDIV_ALPHA:
                break
            bounds = sorted([*bounds, split])
        return bounds[1:-1]
    return detect


def methods(permutations: int) -> dict[str, Method]:
    return {
        "dlperf (PELT + confirmation on repeats)": dlperf_detect,
        "PELT alone (dlperf's penalty)": pelt_alone,
        "ruptures PELT l2 (BIC)": pelt_bic,
        "ruptures Binseg l2 (dlperf's penalty)": binseg,
        f"ruptures Window l2 (width {WINDOW})": window,
        "E-divisive (numpy, permutation test)": e_divisive(permutations),
    }


# -- scoring -----------------------------------------------------------------------------------

def match(planted: Sequence[int], found: Sequence[int], tolerance: int) -> tuple[int, int, int]:
    """(true positives, false alarms, missed): nearest pairs within ``tolerance`` first, each
    planted change and each detection used once."""
    pairs = sorted((abs(p - f), i, j) for i, p in enumerate(planted) for j, f in enumerate(found)
                   if abs(p - f) <= tolerance)
    used_p: set[int] = set()
    used_f: set[int] = set()
    for _, i, j in pairs:
        if i not in used_p and j not in used_f:
            used_p.add(i)
            used_f.add(j)
    hits = len(used_p)
    return hits, len(found) - hits, len(planted) - hits


def summarise(tp: int, fp: int, fn: int, points: int) -> dict[str, Any]:
    """Counts and rates of one cell; precision or recall is None where nothing was found or
    planted."""
    return {"tp": tp, "fp": fp, "fn": fn, "points": points,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
            "false_alarms_per_100": 100.0 * fp / points if points else None}


def size_key(size: float) -> str:
    return f"{size:.0%}" if size else "none"


def score(series: Sequence[Series], found: dict[str, list[list[int]]],
          tolerance: int) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """method -> repeats (str k) -> step size ("none", "2%", ..., "all") -> summarise()."""
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for name, detections in found.items():
        cells: dict[tuple[int, str], list[int]] = {}
        for s, hits in zip(series, detections):
            counts = (*match(s.changes, hits, tolerance), len(s.medians))
            for key in (size_key(s.size), "all"):
                cell = cells.setdefault((s.k, key), [0, 0, 0, 0])
                for i, v in enumerate(counts):
                    cell[i] += v
        by_k: dict[str, dict[str, dict[str, Any]]] = {}
        for (k, key), (tp, fp, fn, points) in cells.items():
            by_k.setdefault(str(k), {})[key] = summarise(tp, fp, fn, points)
        out[name] = by_k
    return out


def run_methods(series: Sequence[Series], chosen: dict[str, Method]) -> dict[str, list[list[int]]]:
    return {name: [sorted(method(s.medians, s.repeats)) for s in series]
            for name, method in chosen.items()}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def markdown(scored: dict[str, dict[str, dict[str, dict[str, Any]]]], sizes: Sequence[float],
             ks: Sequence[int]) -> str:
    """Per repeat count: a row per method; per step size precision / recall, then false alarms
    per 100 results on the series with no step and over all series."""
    keys = [size_key(s) for s in sizes]
    head = ("| method | " + " | ".join(f"{k} P / R" for k in keys)
            + " | false alarms /100 (no step) | false alarms /100 (all) |")
    lines = []
    for k in ks:
        lines += [f"\n**{k} repeats per result**\n", head, "|---|" + "---:|" * (len(keys) + 2)]
        for name, by_k in scored.items():
            cells = by_k[str(k)]
            pr = [f"{_pct(cells[key]['precision'])} / {_pct(cells[key]['recall'])}"
                  for key in keys]
            none = cells.get("none")
            fa_none = "—" if none is None else f"{none['false_alarms_per_100']:.2f}"
            lines.append(f"| {name} | " + " | ".join(pr) + f" | {fa_none} | "
                         f"{cells['all']['false_alarms_per_100']:.2f} |")
    return "\n".join(lines)


# -- command -----------------------------------------------------------------------------------

def _refuse(line: str) -> int:
    print(line, file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40, help="results per series (default 40)")
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 5],
                        help="repeats per result (default 3 5)")
    parser.add_argument("--sizes", type=float, nargs="+", default=list(SIZES),
                        help="planted step sizes, fractions (default 0.02 0.03 0.05 0.10)")
    parser.add_argument("--series", type=int, default=20,
                        help="series per cell: per repeat count, none / size x 1 step / 2 steps")
    parser.add_argument("--cv", type=float, default=None,
                        help=f"the repeats' coefficient of variation (default {DEFAULT_CV}; "
                             "not with --pool)")
    parser.add_argument("--pool", type=Path,
                        help="a benchmarks/calibration.py collect database: noise resampled from "
                             "its unplanted repeats")
    parser.add_argument("--tolerance", type=int, default=1,
                        help="results a detection may be off a planted change (default 1)")
    parser.add_argument("--permutations", type=int, default=199,
                        help="E-divisive's permutation test (default 199)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)

    least = 3 * GAP  # two steps GAP apart, each GAP from an end
    if args.points < least:
        return _refuse(f"--points: at least {least} (two steps {GAP} results apart and from the "
                       f"ends); got {args.points}")
    if any(k < 1 for k in args.repeats):
        return _refuse(f"--repeats: whole numbers of at least 1; got {args.repeats}")
    if any(not 0 < s < 1 for s in args.sizes):
        return _refuse(f"--sizes: fractions between 0 and 1 (0.05 is 5 %); got {args.sizes}")
    if args.series < 1:
        return _refuse(f"--series: at least 1; got {args.series}")
    if args.tolerance < 0:
        return _refuse(f"--tolerance: 0 or more results; got {args.tolerance}")
    if args.permutations < 1:
        return _refuse(f"--permutations: at least 1; got {args.permutations}")
    if args.pool is not None and args.cv is not None:
        return _refuse("--cv: not with --pool (the pool's repeats are the noise)")
    if args.pool is not None:
        if not args.pool.is_file():
            return _refuse(f"--pool: no such file {args.pool}")
        import calibration  # beside this file; only a --pool run needs it (and its imports)

        try:
            base, _ = calibration.pools(args.pool)
        except StoreError as error:  # its message names --db: this command's flag is --pool
            return _refuse(f"--pool: {str(error).removeprefix('--db: ')}")
        if len(base) < MIN_POOL:
            return _refuse(f"--pool: at least {MIN_POOL} unplanted repeats to resample; "
                           f"{args.pool} has {len(base)}")
        noise, source = pool_noise(base), f"{len(base)} repeats from {args.pool}"
    else:
        args.cv = DEFAULT_CV if args.cv is None else args.cv
        if not 0 < args.cv < 0.5:
            return _refuse(f"--cv: a fraction between 0 and 0.5 (0.04 is 4 %); got {args.cv}")
        noise, source = normal_noise(args.cv), f"normal, CV {args.cv:.1%}"

    series = corpus(args.seed, args.points, args.repeats, args.sizes, args.series, noise)
    scored = score(series, run_methods(series, methods(args.permutations)), args.tolerance)
    text = markdown(scored, args.sizes, args.repeats)
    print(f"{len(series)} series of {args.points} results; noise: {source}; "
          f"tolerance ±{args.tolerance}; seed {args.seed}")
    print(text)
    if args.json:
        config = {"points": args.points, "repeats": args.repeats, "sizes": args.sizes,
                  "series_per_cell": args.series, "noise": source, "tolerance": args.tolerance,
                  "permutations": args.permutations, "seed": args.seed}
        args.json.write_text(json.dumps({"config": config, "methods": scored}, indent=2))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
