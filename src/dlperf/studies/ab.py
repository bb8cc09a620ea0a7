"""``dlperf ab``: two cases measured alternately in fresh processes, compared by their ratio.

Two runs far apart see different machines (another job, a warmer CPU, a page cache); two runs
interleaved A, B, B, A, A, B … see the same drift on both sides. Each side is a whole dlperf
measuring command (``run ...`` or ``external ... -- COMMAND``) run with one repeat per turn; the
answer is each side's median, the ratio of medians B / A with a percentile-bootstrap 95% interval
over *pairs* (pairs are resampled together, so drift shared by a pair cancels), and a verdict:
``same`` when the interval includes 1 or the ratio is within the threshold, ``inconclusive``
when a ratio beyond the threshold has no interval or too few pairs to trust one (fewer than
AUTO_MIN_PAIRS: :func:`why_inconclusive`), else B ``faster`` / ``slower``. Each side names the
device its turns ran on (the results' resolved device), so a ratio of a CPU and a GPU side never
passes for a code change.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.errors import UsageError
from dlperf.result import device_of, throughput_median
from dlperf.stats import (DEFAULT_ALPHA, PAIRED_TEST, median_or_none, repeats_needed, row_medians,
                          unreachable)

MEASURING = ("run", "external")
OWNED_FLAGS = ("--repeats", "--db", "--json")
BOOTSTRAP_SAMPLES = 10000
# ratios within this are "same"; DEFAULT_PAIRS: the pairs `dlperf ab` (and `gate --remeasure`)
# run unless told. docs/calibration.md has this verdict's false alarms and power on A/A and
# planted pairs drawn from real interleaved repeats
DEFAULT_THRESHOLD = 0.02
DEFAULT_PAIRS = 6
INCONCLUSIVE = "inconclusive"
# a verdict's level: its interval is the 95 % one, and each direction ("slower", "faster") is
# held to the chance that every pair moves that way (stats.reaches, PAIRED_TEST, one-sided)
ALPHA = DEFAULT_ALPHA
# `--pairs auto`: pairs until the verdict is settled (settled()), at least AUTO_MIN_PAIRS (the
# fewest whose verdict can be trusted: 5; docs/calibration.md) and at most AUTO_PAIRS
AUTO_MIN_PAIRS = repeats_needed(PAIRED_TEST, ALPHA, sides=1)
AUTO_PAIRS = 20


def split_sides(tokens: Sequence[str]) -> list[list[str]]:
    """``-- run A... -- run B...``: a ``--`` followed by a measuring subcommand starts a side;
    any other ``--`` belongs to the side (``external ... -- COMMAND``)."""
    sides: list[list[str]] = []
    for index, token in enumerate(tokens):
        starts = token == "--" and index + 1 < len(tokens) and tokens[index + 1] in MEASURING
        if starts:
            sides.append([])
        elif not sides:
            raise UsageError("sides: expected `-- run FLAGS -- run FLAGS` (or `external ... -- "
                             f"COMMAND` for a side), got {token!r} first")
        else:
            sides[-1].append(token)
    if len(sides) != 2:
        raise UsageError(f"sides: need exactly two (A and B), each `-- run FLAGS` or `-- external "
                         f"FLAGS -- COMMAND`; got {len(sides)}")
    for side in sides:
        own = [t for t in side for flag in OWNED_FLAGS if t == flag or t.startswith(flag + "=")]
        if own:
            raise UsageError(f"sides: {own[0]} is set by dlperf ab (one repeat per turn, its own "
                             f"database); leave it out")
    return sides


@dataclass
class Turn:
    side: str  # "A" or "B"
    pair: int
    throughput: float | None
    status: str
    error: str | None = None
    device: str | None = None  # where the turn ran (resolved), None when it wrote no result


@dataclass
class Comparison:
    pairs: int  # asked for; with auto, the most
    turns: list[Turn] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD
    seed: int = 0
    auto: bool = False  # stop once settled()

    def settled(self) -> bool:
        """Whether the pairs so far decide either way: the ratio's 95 % interval lies wholly
        beyond the threshold (faster or slower) or wholly within it (the same), over
        AUTO_MIN_PAIRS pairs or more."""
        a, b = self.complete_pairs()
        if a.size < AUTO_MIN_PAIRS or not np.all(a > 0):
            return False
        ci = ratio_ci(a, b, self.seed)
        if ci is None:
            return False
        low, high = 1.0 - self.threshold, 1.0 + self.threshold
        return ci[1] < low or ci[0] > high or (ci[0] >= low and ci[1] <= high)

    def values(self, side: str) -> list[float]:
        return [t.throughput for t in sorted(self.turns, key=lambda t: t.pair)
                if t.side == side and t.throughput is not None]

    def devices(self, side: str) -> list[str]:
        """The devices ``side``'s turns ran on, in order of first use (one, unless it moved)."""
        seen: list[str] = []
        for turn in self.turns:
            if turn.side == side and turn.device and turn.device not in seen:
                seen.append(turn.device)
        return seen

    def complete_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        by_pair: dict[int, dict[str, float]] = {}
        for t in self.turns:
            if t.throughput is not None:
                by_pair.setdefault(t.pair, {})[t.side] = t.throughput
        full = [p for p in sorted(by_pair) if len(by_pair[p]) == 2]
        return (np.array([by_pair[p]["A"] for p in full], dtype=float),
                np.array([by_pair[p]["B"] for p in full], dtype=float))

    def summary(self) -> dict[str, Any]:
        a, b = self.complete_pairs()
        out: dict[str, Any] = {"pairs": int(a.size), "pairs_asked": self.pairs,
                               "threshold": self.threshold,
                               "a": {**_side(a), "devices": self.devices("A")},
                               "b": {**_side(b), "devices": self.devices("B")},
                               "ratio": None, "ci95": None, "verdict": "n/a",
                               "method": "ratio of medians B/A; percentile bootstrap over pairs "
                                         f"({BOOTSTRAP_SAMPLES} resamples, seed {self.seed})"}
        if self.auto:
            out["pairs_policy"] = {"most": self.pairs, "taken": int(a.size),
                                   "settled": self.settled()}
        failed = [t for t in self.turns if t.status != "ok"]
        if failed:
            out["failed"] = [{"side": t.side, "pair": t.pair + 1, "status": t.status,
                              "error": t.error} for t in failed]
        if a.size == 0 or not np.all(a > 0):
            return out
        ratio = float(np.median(b) / np.median(a))
        out["ratio"] = ratio
        ci = ratio_ci(a, b, self.seed)
        out["ci95"] = list(ci) if ci else None
        out["verdict"] = verdict(ratio, ci, self.threshold, int(a.size))
        if out["verdict"] == INCONCLUSIVE:
            out["why_inconclusive"] = why_inconclusive(int(a.size))
        return out


def _side(values: np.ndarray) -> dict[str, Any]:
    """One side's median and values, as the summary shows them."""
    return {"median": median_or_none(values.tolist()), "values": values.tolist()}


def ratio_ci(a: np.ndarray, b: np.ndarray, seed: int = 0, level: float = 0.95,
             n_resamples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(B)/median(A), resampling whole pairs."""
    if a.size < 2:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n_resamples, a.size))
    ratios = row_medians(b[idx]) / row_medians(a[idx])
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


def verdict(ratio: float, ci: tuple[float, float] | None, threshold: float, pairs: int) -> str:
    """``same`` within the threshold or where the interval includes 1; ``inconclusive`` beyond
    it when there is no interval or too few ``pairs`` to trust one (:func:`why_inconclusive`);
    else B ``faster`` / ``slower``."""
    if abs(ratio - 1.0) <= threshold:
        return "same"
    if ci is not None and ci[0] <= 1.0 <= ci[1]:
        return "same"
    if ci is None or why_inconclusive(pairs):
        return INCONCLUSIVE
    return "faster" if ratio > 1.0 else "slower"


def why_inconclusive(pairs: int) -> str | None:
    """Why ``pairs`` complete pairs cannot carry a verdict of a change (None when they can):
    with fewer than AUTO_MIN_PAIRS, every pair moving one way by chance alone is as likely as
    ALPHA, and the bootstrap interval then excludes 1."""
    short = unreachable(PAIRED_TEST, pairs, pairs, ALPHA, sides=1)
    return None if short is None else f"{short}; rerun with --pairs {AUTO_MIN_PAIRS} or more"


def order(pairs: int) -> list[tuple[int, str]]:
    """A B, B A, A B, …: each side goes first in half the pairs, so a drift within a pair
    does not always favour the same side."""
    turns = []
    for pair in range(pairs):
        first, second = ("A", "B") if pair % 2 == 0 else ("B", "A")
        turns += [(pair, first), (pair, second)]
    return turns


def run_side(argv: list[str], workdir: Path, tag: str, timeout_s: float | None = None
             ) -> tuple[float | None, str, str | None, str | None]:
    """One turn: the side's dlperf command with one repeat, in a fresh process: its throughput,
    status, error and the device it ran on."""
    out = workdir / f"{tag}.json"
    command = [sys.executable, "-m", "dlperf.cli", argv[0], "--repeats", "1",
               "--db", str(workdir / "ab.db"), "--json", str(out), *argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)
    if done.returncode == 2:
        line = (done.stderr.strip().splitlines() or ["bad input"])[-1]
        raise UsageError(f"side {tag[0]}: {line}")
    if not out.exists():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, "crash", f"exit {done.returncode}: {tail}", None
    result = json.loads(out.read_text())
    if isinstance(result, list):  # a command that writes a list of results
        result = result[0]
    value = throughput_median(result)
    if value is None or not math.isfinite(value):
        return None, result.get("status") or "crash", result.get("error"), device_of(result)
    return float(value), "ok", None, device_of(result)


def compare(sides: list[list[str]], pairs: int, threshold: float = DEFAULT_THRESHOLD,
            say: Callable[[Turn], None] | None = None, auto: bool = False) -> Comparison:
    """Run the turns in order; the first failed turn of a side ends the comparison; with
    ``auto``, so does a settled verdict (:meth:`Comparison.settled`) after a whole pair."""
    result = Comparison(pairs=pairs, threshold=threshold, auto=auto)
    with tempfile.TemporaryDirectory(prefix="dlperf-ab-") as tmp:
        for pair, side in order(pairs):
            value, status, error, device = run_side(sides[0 if side == "A" else 1], Path(tmp),
                                                    f"{side}{pair}")
            turn = Turn(side, pair, value, status, error, device)
            result.turns.append(turn)
            if say:
                say(turn)
            if status != "ok":
                break
            if auto and result.turns[-2:] and len({t.pair for t in result.turns[-2:]}) == 1 \
                    and result.settled():
                break
    return result
