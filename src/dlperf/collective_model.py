"""The latency-bandwidth model of a collective path, fitted to what ``dlperf collectives`` stored.

Per (framework, path, operation, processes per node, nodes, link, environment) the newest stored
run's median time per message size is fitted by Hockney's alpha-beta model, t(m) = alpha + m x
beta: alpha the start-up latency, 1/beta the algorithm bandwidth the large messages approach,
and nccl-tests' bus bandwidth factor of the operation times 1/beta the bus bandwidth (the link
speed the operation achieved, whatever the ranks). The fit is derived from the stored rows each
time it is read, never stored beside them: the rows are the one record.

The least squares are weighted by 1/t, so they minimise the *relative* error of every size: the
microsecond latencies of small messages count as much as the seconds of large ones (unweighted,
the largest sizes alone would decide alpha too). Both parameters are kept non-negative; a
latency-bound range (no growth with size) fits beta = 0 and has no bandwidth.

A path's cost a byte is not the same at every size (over a shaped link a small message rides
the token bucket's burst; TensorFlow's gRPC ring moves 1 MiB at 7.5 ms a MiB and 32 MiB at
11.7 over 1 Gbit/s), so one line over the whole range prices the sizes at its ends wrongly.
Where an engine sends messages of one size (:meth:`Model.near`: PyTorch's 25 MiB buckets,
TensorFlow's one pack of the whole gradient), a projection prices them with the fit over the
measured sizes within :data:`NEAR_FACTOR` of it (docs/projection.md, "The sizes a message is
priced from").

The fit prices each size at its calls' median; how well those calls pin it is their own spread
(:meth:`Model.calls_at`): a seeded bootstrap 95 % interval of the median, as every measured
figure's (:func:`dlperf.stats.bootstrap_ci`). A path whose calls scatter (OneFlow's all-reduce
over a shaped link took 0.64-1.35 times its median at one size, call to call, where gloo's took
1.00-1.06) is priced no more surely than that, and a projection carries it (docs/projection.md,
"How surely a link is priced").

:func:`newest_matching` is what a projection calls (any rank count of the framework's default
path); it raises :class:`NoModel`, naming the command that measures the missing key.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dlperf import stats
from dlperf.errors import UsageError
from dlperf.store import DEFAULT_DB, Store
from dlperf.worker.collectives import bus_factor


#: a message of one size is priced from the measured sizes within this factor of it, either side
#: (two doublings: five sizes of a 1M:32M range around its middle)
NEAR_FACTOR = 4.0

#: a message this many times the largest measured size is priced beyond what was measured
BEYOND_FACTOR = 2.0


class NoModel(UsageError):
    """No stored measurement for a key; the message names the command that measures it."""


@dataclasses.dataclass(frozen=True)
class Key:
    """What a model is of: a framework's collective path, one operation, the job's shape and
    network (``link``: the emulated hosts' link rate, None where not shaped) and environment
    (``env``: "" the framework's pinned one, else a version environment or interpreter)."""

    framework: str
    path: str
    op: str
    nproc: int  # processes per node
    nnodes: int = 1
    link: str | None = None
    env: str = ""

    @property
    def ranks(self) -> int:
        return self.nproc * self.nnodes

    def describe(self) -> str:
        shape = f"{self.nproc} processes" + (f" x {self.nnodes} nodes" if self.nnodes > 1
                                             else "")
        where = f", link {self.link}" if self.link else ""
        env = f", env {self.env}" if self.env else ""
        return f"{self.framework} {self.path} {self.op} on {shape}{where}{env}"

    def command(self, db: str | Path) -> str:
        """The `dlperf collectives` command line that measures this key into ``db``."""
        words = ["dlperf", "collectives", "--framework", self.framework, "--path", self.path,
                 "--ops", self.op, "--nproc", str(self.nproc)]
        if self.nnodes > 1:
            words += ["--emulate-hosts", str(self.nnodes)] + (
                ["--link", self.link] if self.link else [])
        if self.env:
            words += ["--python" if self.env.startswith("/") else "--env", self.env]
        if str(db) != DEFAULT_DB:
            words += ["--db", str(db)]
        return " ".join(shlex.quote(word) for word in words)


@dataclasses.dataclass(frozen=True)
class Fit:
    """t(m) = alpha_s + m x beta_s (m in bytes), and its relative errors at the fitted sizes."""

    alpha_s: float
    beta_s: float  # seconds per byte
    median_error: float  # |fitted / measured - 1|, median over the sizes
    max_error: float

    def seconds(self, nbytes: float) -> float:
        return self.alpha_s + nbytes * self.beta_s


def fit(sizes: Sequence[float], times: Sequence[float]) -> Fit:
    """Non-negative least squares of alpha + m x beta to ``times`` (seconds) at ``sizes``
    (bytes), each residual relative to its measured time. Two unknowns: the unconstrained
    solution where both are >= 0, else the better of alpha alone and beta alone."""
    m = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if m.size != t.size or len(set(m.tolist())) < 2:
        raise ValueError("the fit needs times at two or more different sizes")
    if not (np.all(t > 0) and np.all(m > 0)):
        raise ValueError("sizes and times must be > 0")
    design = np.column_stack([1 / t, m / t])  # each row divided by its time: relative errors
    ones = np.ones_like(t)
    (alpha, beta), *_ = np.linalg.lstsq(design, ones, rcond=None)
    if alpha < 0 or beta < 0:
        only_alpha = (float(np.sum(1 / t) / np.sum(1 / t ** 2)), 0.0)
        only_beta = (0.0, float(np.sum(m / t) / np.sum((m / t) ** 2)))
        alpha, beta = min((only_alpha, only_beta), key=lambda ab: float(
            np.sum((design @ np.array(ab) - 1) ** 2)))
    errors = np.abs((alpha + beta * m) / t - 1)
    return Fit(float(alpha), float(beta), float(np.median(errors)), float(errors.max()))


@dataclasses.dataclass(frozen=True)
class CallSpread:
    """The 95 % interval of one size's median call, relative to that median (``low`` <= 0 <=
    ``high``): how far the price read there may be off, by the calls alone."""

    nbytes: int
    calls: int
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def text(self) -> str:
        size = (f"{self.nbytes / 2**20:.3g} MiB" if self.nbytes >= 2**20
                else f"{self.nbytes / 2**10:.3g} KiB")
        return (f"its {self.calls} calls at {size} put their median within "
                f"{self.low:+.1%}/{self.high:+.1%} (95 %)")


@dataclasses.dataclass(frozen=True)
class Model:
    """A key's fit over its newest stored run, and where that run was measured."""

    key: Key
    run: int
    fit: Fit
    sizes: tuple[int, ...]  # the message sizes fitted, bytes
    host: str
    emulated: bool
    device: str
    measured_at: str
    framework_version: str | None
    split: bool = False  # fitted over a parameter server's split keys alone (fitted_rows)
    times: tuple[float, ...] = ()  # the median seconds at each size, as fitted
    near_bytes: float | None = None  # fitted over the sizes near a message of this size (near)
    calls: tuple[tuple[float, ...], ...] = ()  # each size's calls, seconds, as measured

    @property
    def factor(self) -> float:
        """nccl-tests' bus bandwidth factor of the operation on the key's ranks."""
        return bus_factor(self.key.op, self.key.ranks)

    @property
    def alpha_us(self) -> float:
        return self.fit.alpha_s * 1e6

    @property
    def busbw_gbs(self) -> float | None:
        """The bus bandwidth large messages approach (GB/s, 1e9 bytes), None when the fit has
        no bandwidth term (a latency-bound range)."""
        return self.factor / self.fit.beta_s / 1e9 if self.fit.beta_s > 0 else None

    def seconds(self, nbytes: float) -> float:
        """The fitted time of one operation on an ``nbytes`` message."""
        return self.fit.seconds(nbytes)

    def _near(self, nbytes: float) -> list[int]:
        """The indices of the measured sizes within :data:`NEAR_FACTOR` of ``nbytes``; the two
        nearest it (on a log scale) where fewer lie that close."""
        kept = [i for i, size in enumerate(self.sizes)
                if nbytes / NEAR_FACTOR <= size <= nbytes * NEAR_FACTOR]
        if len(kept) < 2:
            kept = sorted(sorted(range(len(self.sizes)),
                                 key=lambda i: abs(math.log(self.sizes[i] / nbytes)))[:2])
        return kept

    def near(self, nbytes: float) -> Model:
        """The model refitted over the measured sizes within :data:`NEAR_FACTOR` of an
        ``nbytes`` message, for an engine whose messages all have that size; the two sizes
        nearest it (on a log scale) where fewer lie that close. Its own fit where it holds no
        times, where the near sizes are all it was fitted over, or where they show no
        bandwidth (their times do not grow with size)."""
        if not self.times or nbytes <= 0:
            return self
        kept = self._near(nbytes)
        if len(kept) == len(self.sizes):
            return dataclasses.replace(self, near_bytes=nbytes)
        refit = fit([self.sizes[i] for i in kept], [self.times[i] for i in kept])
        if refit.beta_s <= 0:  # no bandwidth among the near sizes: the whole range's fit
            return dataclasses.replace(self, near_bytes=nbytes)
        # two sizes fit exactly: the misfit the whole range showed stays the price's error
        refit = dataclasses.replace(refit, max_error=max(refit.max_error, self.fit.max_error))
        calls = tuple(self.calls[i] for i in kept) if self.calls else ()
        return dataclasses.replace(self, fit=refit, sizes=tuple(self.sizes[i] for i in kept),
                                   times=tuple(self.times[i] for i in kept), calls=calls,
                                   near_bytes=nbytes)

    def calls_at(self, nbytes: float) -> CallSpread | None:
        """How surely the calls price an ``nbytes`` transfer: of the measured sizes near it
        (:meth:`_near`), the one whose median's 95 % interval is widest, relative to that
        median; None where no size holds two calls or more (a model built by hand, or one
        call a size)."""
        if not self.calls or nbytes <= 0:
            return None
        found = []
        for i in self._near(nbytes):
            calls = self.calls[i]
            interval = stats.bootstrap_ci(calls)
            median = float(np.median(np.asarray(calls, dtype=float))) if calls else 0.0
            if interval is None or median <= 0:
                continue
            found.append(CallSpread(self.sizes[i], len(calls), interval[0] / median - 1,
                                    interval[1] / median - 1))
        return max(found, key=lambda spread: spread.high - spread.low, default=None)

    def beyond(self, nbytes: float) -> bool:
        """Whether an ``nbytes`` message is past :data:`BEYOND_FACTOR` times the largest size
        measured: its price is the fit's extrapolation."""
        return bool(self.sizes) and nbytes > BEYOND_FACTOR * max(self.sizes)

    def sizes_text(self) -> str:
        """The sizes fitted, as a range in MiB: ``16-32 MiB``."""
        low, high = min(self.sizes), max(self.sizes)
        return f"{low / 2**20:.3g}-{high / 2**20:.3g} MiB"


def fitted_rows(key: Key, rows: list[dict]) -> list[dict]:
    """The rows a key's model is fitted over: a parameter server's push and pull over the key
    sizes its servers split (its engine's ``Wire.split_bytes``) where two or more such sizes
    were measured; every row otherwise."""
    if key.op != "pushpull":
        return rows
    from dlperf import spec

    device = str(rows[0].get("device") or "cpu") if rows else "cpu"
    split = spec.wire_of(key.framework, None, "cuda" if device.startswith("cuda")
                         else "cpu").split_bytes
    kept = [row for row in rows if split is None or row["bytes"] >= split]
    return kept if len({row["bytes"] for row in kept}) >= 2 else rows


def _model(key: Key, rows: list[dict]) -> Model:
    """The fit of one run's rows (all of ``key``; :func:`fitted_rows`)."""
    kept = sorted(fitted_rows(key, rows), key=lambda row: row["bytes"])
    split, rows = len(kept) < len(rows), kept
    first = rows[0]
    return Model(key=key, run=first["run"],
                 fit=fit([row["bytes"] for row in rows], [row["time_us"] / 1e6 for row in rows]),
                 sizes=tuple(row["bytes"] for row in rows), host=first["host"],
                 emulated=bool(first["emulated"]), device=first["device"],
                 measured_at=first["created_at"],
                 framework_version=first["detail"].get("framework_version"), split=split,
                 times=tuple(row["time_us"] / 1e6 for row in rows),
                 calls=tuple(tuple(float(t) for t in row.get("times") or ()) for row in rows))


def key_of(row: dict) -> Key:
    return Key(row["framework"], row["path"], row["op"], row["nproc"], row["nnodes"],
               row["link"], row["env"])


def models(store: Store) -> list[Model]:
    """Every stored key's model (from its newest run), in the order the keys were first
    measured; a key whose newest run has fewer than two sizes has none."""
    newest: dict[Key, list[dict]] = {}
    for row in store.collectives():
        key = key_of(row)
        held = newest.get(key)
        if held is None or row["run"] > held[0]["run"]:
            newest[key] = [row]
        elif row["run"] == held[0]["run"]:
            held.append(row)
    return [_model(key, rows) for key, rows in newest.items()
            if len({row["bytes"] for row in rows}) >= 2]


def newest_matching(db: str | Path, wanted: Callable[[Key], bool], missing: Key) -> Model:
    """Of the stored keys ``wanted`` accepts, the model measured last; :class:`NoModel` (one
    line naming the `dlperf collectives` command that measures ``missing``) when ``db`` holds
    none."""
    error = NoModel(f"no collective model of {missing.describe()} in {db}: measure it with "
                    f"`{missing.command(db)}`")
    if not Path(db).is_file():
        raise error
    with Store(db, readonly=True) as store:
        found = [model for model in models(store) if wanted(model.key)]
    if not found:
        raise error
    return max(found, key=lambda model: model.run)


def model_for(db: str | Path, key: Key) -> Model:
    """The model of exactly ``key`` from the newest run stored in ``db``."""
    return newest_matching(db, lambda other: other == key, key)
