"""Run a sweep so that a kill at any moment loses at most the repeat in flight.

The database is the only state. Each case of the sweep is looked up by its identity hash
(:meth:`Case.key`) among the runs this sweep stored since its last ``--force``; a finished run is
kept, an unfinished one (killed, or stopped with Ctrl-C) is continued from its stored repeats
(``runner.run_case(run_id=..., done=...)``), a missing one is started. Every repeat is committed
as it finishes and ``UNIQUE(run_id, repeat_index)`` makes a second copy impossible, so
``--resume`` after SIGKILL redoes only the repeat that was in flight.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import models, runner
from dlperf import result as result_mod
from dlperf.errors import UsageError
from dlperf.launchers.launch import Launcher
from dlperf.spec import Case, declared_refusal
from dlperf.store import Store
from dlperf.studies import capacity, tuned
from dlperf.studies.sweep import Refused, Sweep, halved, with_configs
from dlperf.worker import steady

MODES = ("new", "resume", "force")
UNSUPPORTED_S = 5.0  # a worker that starts, imports its framework and refuses the case


# warm-up steps assumed for --warmup-steps auto: the steady window and a few to settle
AUTO_WARMUP_GUESS = steady.WINDOW + 3
GUESS_RATE_FLOPS = 2e10  # FLOP/s assumed for a CPU case nothing in the database resembles
GUESS_GPU_FP32_FLOPS = 6e12  # ... and for a GPU (a V100 trains ResNet-50 at ~40% of 15 TFLOP/s)
GUESS_GPU_LOW_FLOPS = 2e13
GUESS_OVERHEAD_S = 8.0  # process start, imports and build, per repeat, when nothing is known


def _since_key(name: str) -> str:
    return f"sweep_since:{name}"


@dataclass
class CaseState:
    """What the database holds for one case of the sweep."""

    case: Case
    run_id: int | None = None
    done: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] | None = None
    result: dict[str, Any] | None = None  # set when the stored run is finished

    @property
    def finished(self) -> bool:
        return self.result is not None

    def remaining_repeats(self) -> int:
        if self.finished:
            return 0
        if self.done and self.done[-1]["status"] != "ok":
            return 0
        return max(0, self.case.repeats - len(self.done))

    def describe(self) -> str:
        if self.finished:
            assert self.result is not None
            return f"stored ({self.result['status']})"
        if self.run_id is not None:
            return f"partial: {len(self.done)}/{self.case.repeats} repeats stored"
        return "to run"


def session_start(store: Store, name: str, mode: str) -> int:
    """The run id after which this sweep's runs count; refuses to mix sessions silently."""
    if mode not in MODES:
        raise UsageError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "force":
        since = store.max_run_id()
        store.set_meta(_since_key(name), str(since))
        return since
    since = int(store.get_meta(_since_key(name)) or 0)
    if mode == "new":
        stored = store.db.execute("SELECT COUNT(*) FROM runs WHERE sweep=? AND id>?",
                                  (name, since)).fetchone()[0]
        if stored:
            raise UsageError(f"sweep {name!r} already has {stored} run(s) in {store.path}; "
                             f"use --resume to finish it or --force to measure it again")
    return since


def state_of(store: Store, case: Case, sweep_name: str, since: int) -> CaseState:
    row = store.latest_run(case.key(), sweep_name, since)
    if row is None:
        return CaseState(case)
    # decoded by the store: a damaged row is one line naming it, not a traceback
    stored = store.decode(row) if row["result_json"] else None
    if stored is not None and not stored.get("interrupted"):
        return CaseState(case, run_id=row["id"], result=stored)
    env = store.decode(row, "env_json") if row["env_json"] else None
    return CaseState(case, run_id=row["id"], done=store.repeats(row["id"]), env=env)


class Estimator:
    """Seconds per repeat of a case, from what the database already measured.

    The same case measured before gives its own wall time; otherwise the case's FLOPs are
    divided by the FLOP rate that similar stored cases achieved, plus their per-repeat overhead
    (process start, build, first step). With nothing similar stored it is a rough guess, and says so.
    """

    def __init__(self, history: list[dict[str, Any]]) -> None:
        self.by_key: dict[str, float] = {}
        self.samples: list[tuple[dict[str, Any], float, float]] = []  # case, rate, overhead
        for stored in history:
            if stored.get("status") != "ok":
                continue
            walls = (stored.get("timings") or {}).get("wall_s") or []
            if walls:
                self.by_key[stored["case_key"]] = statistics.median(walls)
            rate = (stored.get("flops") or {}).get("achieved_per_s")
            timings = stored.get("timings") or {}
            if rate and walls and timings.get("window_s") and timings.get("warmup_s"):
                overhead = statistics.median(walls) - statistics.median(timings["window_s"]) \
                    - statistics.median(timings["warmup_s"])
                self.samples.append((stored["case"], rate, max(overhead, 0.0)))

    def _similar(self, case: Case) -> list[tuple[float, float]]:
        for fields in (("framework", "precision", "compile", "device"),
                       ("framework", "device"), ("framework",), ()):
            found = [(rate, overhead) for stored, rate, overhead in self.samples
                     if all(stored.get(f) == getattr(case, f) for f in fields)]
            if found:
                return found
        return []

    def repeat_seconds(self, case: Case) -> tuple[float, str]:
        """(seconds, how it was estimated)."""
        if case.key() in self.by_key:
            return self.by_key[case.key()], "measured"
        if declared_refusal(case) is not None:  # the worker refuses it before building
            return UNSUPPORTED_S, "declared unsupported"
        per_sample = models.get(case.model).flops_per_sample(
            dict(case.knobs), train=case.task == "train")
        similar = self._similar(case)
        if similar:
            rate = statistics.median(r for r, _ in similar)
            overhead = statistics.median(o for _, o in similar)
            how = "scaled"
        else:
            rate, overhead, how = GUESS_RATE_FLOPS, GUESS_OVERHEAD_S, "guess"
            if case.device == "cuda":
                rate = GUESS_GPU_FP32_FLOPS if case.precision in ("fp32", "tf32") \
                    else GUESS_GPU_LOW_FLOPS
        # each device computes its own batch, so time per step follows batch per device
        step_s = case.batch_size * per_sample / rate
        # auto: the steps after the first stop at warmup_max_steps, steady or not
        warmup = (case.warmup_steps - 1 if isinstance(case.warmup_steps, int)
                  else min(AUTO_WARMUP_GUESS, case.warmup_max_steps))  # "auto", the one text
        # the window is at least --steps and at least --min-duration; the harness stops a repeat
        # at its timeout, and a timed-out case runs no further repeat (see case_seconds)
        window_s = max(case.steps * step_s, case.min_duration_s)
        return min(overhead + warmup * step_s + window_s, case.timeout_s), how

    def case_seconds(self, state: CaseState) -> float:
        remaining = state.remaining_repeats()
        seconds, how = self.repeat_seconds(state.case)
        # the harness stops a case at its first failed repeat: a refusal or a timeout is one
        if remaining and (how == "declared unsupported" or seconds >= state.case.timeout_s):
            return seconds
        return seconds * remaining


class Eta:
    """Remaining time: the estimate of what is left, corrected by how the estimate has fared."""

    def __init__(self, total_estimate_s: float) -> None:
        self.remaining_estimate_s = total_estimate_s
        self.done_estimate_s = 0.0
        self.start = time.monotonic()
        self.last_advance = self.start

    def advance(self, estimate_s: float) -> None:
        self.remaining_estimate_s = max(0.0, self.remaining_estimate_s - estimate_s)
        self.done_estimate_s += estimate_s
        self.last_advance = time.monotonic()

    def add(self, estimate_s: float) -> None:
        self.remaining_estimate_s += estimate_s

    def seconds(self) -> float:
        """Counts down between repeats; each finished repeat re-calibrates it."""
        correction = 1.0
        if self.done_estimate_s > 0:
            correction = (self.last_advance - self.start) / self.done_estimate_s
        since = time.monotonic() - self.last_advance
        return max(0.0, self.remaining_estimate_s * correction - since)


class Observer:
    """What a display hears from a running sweep; the default hears nothing."""

    def planned(self, states: list[CaseState], estimator: Estimator) -> None: ...

    def case_started(self, state: CaseState, fallback: dict[str, Any] | None) -> None: ...

    def turn(self, case: Case, index: int) -> None:
        """An interleaved sweep is about to measure repeat ``index`` of ``case``."""

    def repeat_done(self, case: Case, record: dict[str, Any]) -> None: ...

    def case_done(self, case: Case, result: dict[str, Any], reused: bool) -> None: ...


@dataclass
class SweepOutcome:
    """A sweep's results in order (fallback cases after the case that ran out of memory)."""

    results: list[dict[str, Any]] = field(default_factory=list)
    reused: int = 0
    measured_cases: int = 0
    measured_repeats: int = 0
    timed_s: float = 0.0  # first step + warm-up + window of the repeats measured now
    wall_s: float = 0.0
    interrupted: bool = False
    failed_cases: list[str] = field(default_factory=list)  # labels whose last attempt failed

    @property
    def overhead(self) -> float | None:
        return self.wall_s / self.timed_s if self.timed_s > 0 else None


def _lock_path(db: Path, name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return db.with_name(f".{db.name}.sweep-{safe}.lock")


@contextlib.contextmanager
def exclusive(db: Path, name: str) -> Iterator[None]:
    """One process at a time per sweep and database; the kernel drops the lock if we die."""
    path = _lock_path(db, name)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise UsageError(f"sweep {name!r} is already running against {db} "
                             f"(pid {holder}); wait for it or stop it first") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _harness_failure(case: Case, index: int, error: BaseException) -> dict[str, Any]:
    """A repeat record for a case the harness could not even launch (e.g. no launcher yet)."""
    status = "unsupported" if isinstance(error, NotImplementedError) else "crash"
    return {"repeat": index, "status": status, "error": f"{type(error).__name__}: {error}",
            "wall_s": 0.0, "ranks": [], "monitor": {},
            "stderr_tail": traceback.format_exc()[-4000:]}


def next_fitting(case: Case, search: dict[str, Any]) -> Case | None:
    """After ``on_oom: search``, a measurement at the size found can still run out (a longer
    window, or allocator noise at the boundary): the next smaller size whose probe ran, if any."""
    below = [value for value, status in search.get("probes", [])
             if status == "ok" and value < case.batch_size]
    return dataclasses.replace(case, batch_size=max(below)) if below else None


class SweepRun:
    """One invocation of a sweep against a store."""

    def __init__(self, sweep: Sweep, store: Store, mode: str = "new",
                 launcher: Launcher | None = None, env: dict[str, Any] | None = None,
                 observer: Observer | None = None,
                 launchers: Callable[[Case], Launcher] | None = None) -> None:
        # config: best cases in their tuned settings (already done by `dlperf sweep`)
        self.sweep = with_configs(sweep, store.path)
        self.store = store
        self.launcher = launcher
        self.launchers = launchers  # a launcher per case (a Slurm step), made when it starts
        self.env = env or {}
        self.observer = observer or Observer()
        self.since = session_start(store, sweep.name, mode)
        self.estimator = Estimator(store.results())
        self.outcome = SweepOutcome()

    def states(self) -> list[CaseState]:
        return [state_of(self.store, case, self.sweep.name, self.since)
                for case in self.sweep.cases]

    def run(self) -> SweepOutcome:
        start = time.monotonic()
        with exclusive(self.store.path, self.sweep.name):
            self.observer.planned(self.states(), self.estimator)
            try:
                for cell in self.sweep.refused:  # no tuned configuration: said at once
                    self._refuse(cell)
                if self.sweep.order == "interleaved":
                    self._run_interleaved()
                else:
                    for case in self.sweep.cases:
                        self._run_with_fallbacks(case)
            except runner.Interrupted as stop:
                self.outcome.results.append(stop.result)
                self.outcome.interrupted = True
            finally:
                self.outcome.wall_s = time.monotonic() - start
        return self.outcome

    def _run_with_fallbacks(self, case: Case) -> None:
        current: Case | None = case
        fallback: dict[str, Any] | None = None
        while current is not None:
            found = self._ensure(current, fallback)
            self.outcome.results.append(found)
            search = fallback.get("search") if fallback else None
            if found["status"] == "oom" and self.sweep.on_oom == "search":
                if search is None:
                    retry, search = self._largest_batch(current)
                else:  # the search's largest size failed in the full measurement: step down
                    retry = next_fitting(current, search)
            else:
                retry = halved(current) if self.sweep.on_oom == "halve" else None
            if found["status"] != "oom" or retry is None:
                if found["status"] != "ok":
                    self.outcome.failed_cases.append(found["label"])
                return
            fallback = {"from_batch_size": current.batch_size,
                        "reason": f"batch size {current.batch_size} ran out of memory: "
                                  f"{found.get('error')}"}
            if search is not None:
                fallback["search"] = search
            current = retry

    def _launcher_for(self, case: Case) -> Launcher:
        if self.launcher:
            return self.launcher
        return self.launchers(case) if self.launchers else runner.default_launcher(case)

    def _refuse(self, cell: Refused) -> None:
        """A ``config: best`` case with no tune to read: an ``unsupported`` result with the
        reason, under the cell's own identity (the stored one when there is one)."""
        row = self.store.latest_run(cell.key, self.sweep.name, self.since)
        stored = self.store.decode(row) if row is not None and row["result_json"] else None
        if stored is not None:
            self.outcome.reused += 1
            self.observer.case_done(cell.case, stored, reused=True)
        else:
            run_id = int(row["id"]) if row is not None else self.store.start_run(
                cell.key, cell.label, cell.case.to_dict(), self.env, self.sweep.name)
            record = {"repeat": 0, "status": "unsupported", "error": cell.reason,
                      "wall_s": 0.0, "ranks": [], "monitor": {}, "stderr_tail": None}
            if not self.store.repeats(run_id):
                self.store.add_repeat(run_id, 0, record)
            stored = result_mod.aggregate(cell.case, [record], self.env, run_id=run_id)
            stored.update({"case_key": cell.key, "label": cell.label,
                           "config": {"from": "tune", "which": cell.which, "study": None,
                                      "error": cell.reason}})
            self.store.finish_run(run_id, stored)
            self.observer.case_done(cell.case, stored, reused=False)
        self.outcome.results.append(stored)
        self.outcome.failed_cases.append(stored["label"])

    def _marked(self, case: Case, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with the tune configuration its case was made from (``config: best``),
        stored with it."""
        marker = self.sweep.configs.get(case.key())
        if marker is not None and result.get("config") != marker:
            tuned.mark(result, marker, self.store)
        return result

    def _largest_batch(self, case: Case) -> tuple[Case | None, dict[str, Any]]:
        """``on_oom: search``: the largest batch below the failing one that fits (short probes,
        stored under the sweep name ``capacity``), and how it was found."""
        probe_case = dataclasses.replace(case, repeats=1, steps=capacity.PROBE_STEPS,
                                         warmup_steps=capacity.PROBE_WARMUP, min_duration_s=0.0)
        search = capacity.Search(case=probe_case, param="batch_size", start=case.batch_size,
                                 launcher=self._launcher_for)
        try:
            low, high = capacity.largest_below(search, case.batch_size, self.store, self.env)
        except capacity.Stopped as stop:
            return None, {"stopped": str(stop)}
        found = {"largest": low, "smallest_failing": high,
                 "probes": [[p.value, p.status] for p in search.probes]}
        return (dataclasses.replace(case, batch_size=low) if low else None), found

    def _record(self, case: Case, record: dict[str, Any]) -> None:
        if record.get("status") == "ok":
            self.outcome.timed_s += sum(record.get(k) or 0.0
                                        for k in ("first_step_s", "warmup_s", "window_s"))
        self.outcome.measured_repeats += 1
        self.observer.repeat_done(case, record)

    def _finish(self, case: Case, run_id: int, repeats: list[dict[str, Any]],
                env: dict[str, Any], fallback: dict[str, Any] | None) -> dict[str, Any]:
        final = runner.result_of(case, repeats, env, self.store, run_id)
        if fallback:
            final["fallback"] = fallback
        self.store.finish_run(run_id, final)
        return final

    def _reuse(self, case: Case, state: CaseState,
               fallback: dict[str, Any] | None) -> dict[str, Any]:
        """The case's finished result as stored (a fallback that led to it added)."""
        stored = state.result
        assert stored is not None
        if fallback and "fallback" not in stored:
            stored["fallback"] = fallback
            self.store.finish_run(int(stored.get("run_id") or state.run_id or 0), stored)
        self.outcome.reused += 1
        self._marked(case, stored)
        self.observer.case_done(case, stored, reused=True)
        return stored

    def _opened(self, state: CaseState) -> tuple[int, dict[str, Any]]:
        """The case's run in the database (the stored one, or a new one) and its environment."""
        env = state.env or self.env
        if state.run_id is not None:
            return state.run_id, env
        case = state.case
        return self.store.start_run(case.key(), case.label(), case.to_dict(), env,
                                    self.sweep.name), env

    def _failed_in_harness(self, case: Case, run_id: int,
                           error: BaseException) -> list[dict[str, Any]]:
        """The case's stored repeats and one more: the harness's failure (one failed case never
        stops a sweep)."""
        done = self.store.repeats(run_id)
        record = _harness_failure(case, len(done), error)
        self.store.add_repeat(run_id, len(done), record)
        self._record(case, record)
        return done + [record]

    def _ensure(self, case: Case, fallback: dict[str, Any] | None) -> dict[str, Any]:
        """The case's finished result: the stored one, the stored one continued, or a new one."""
        state = state_of(self.store, case, self.sweep.name, self.since)
        if state.result is not None:
            return self._reuse(case, state, fallback)
        run_id, env = self._opened(state)
        if state.remaining_repeats() == 0 and state.done:
            final = self._marked(case, self._finish(case, run_id, state.done, env, fallback))
            self.observer.case_done(case, final, reused=True)
            return final
        self.observer.case_started(state, fallback)
        self.outcome.measured_cases += 1
        try:
            launcher = self._launcher_for(case)
            final = runner.run_case(case, store=self.store, launcher=launcher, env=env,
                                    sweep=self.sweep.name, run_id=run_id, done=state.done,
                                    on_repeat=lambda record: self._record(case, record))
        except runner.Interrupted as stop:
            if fallback:
                stop.result["fallback"] = fallback
                self.store.finish_run(run_id, stop.result)
            self._marked(case, stop.result)
            raise
        except Exception as error:  # noqa: BLE001 - one failed case never stops a sweep
            final = self._finish(case, run_id, self._failed_in_harness(case, run_id, error),
                                 env, fallback)
        else:
            if fallback:
                final["fallback"] = fallback
                self.store.finish_run(run_id, final)
        self._marked(case, final)
        self.observer.case_done(case, final, reused=False)
        return final

    def _run_interleaved(self) -> None:
        """``order: interleaved``: rounds of one repeat of every case that needs more, in the
        sweep's order, until none does. The cases' results are made after the last round, in
        the sweep's order (a several-process case's speedup reads its 1-process baseline's
        result); a kill between rounds leaves every repeat stored for ``--resume``."""
        results: dict[str, dict[str, Any]] = {}
        turns: list[Turn] = []
        for case in self.sweep.cases:
            state = state_of(self.store, case, self.sweep.name, self.since)
            if state.result is not None:
                results[case.key()] = self._reuse(case, state, None)
                continue
            run_id, env = self._opened(state)
            turn = Turn(case, run_id, env, list(state.done))
            if not turn.complete:
                self.observer.case_started(state, None)
                self.outcome.measured_cases += 1
            turns.append(turn)
        try:
            while True:
                due = [turn for turn in turns if not turn.complete]
                if not due:
                    break
                for turn in due:
                    self._take_turn(turn)
            for turn in turns:
                final = self._marked(turn.case, self._finish(turn.case, turn.run_id,
                                                             turn.repeats, turn.env, None))
                self.observer.case_done(turn.case, final, reused=not turn.measured)
                results[turn.case.key()] = final
        finally:
            for case in self.sweep.cases:
                found = results.get(case.key())
                if found is not None:
                    self.outcome.results.append(found)
                    if found["status"] != "ok":
                        self.outcome.failed_cases.append(found["label"])

    def _take_turn(self, turn: "Turn") -> None:
        """One repeat of ``turn``'s case, stored as it finishes."""
        case = turn.case
        self.observer.turn(case, len(turn.repeats))
        started = time.monotonic()
        try:
            turn.complete = runner.measure_repeats(
                case, turn.repeats, self._launcher_for(case), self.store, turn.run_id,
                on_repeat=lambda record: self._record(case, record), count=1,
                elapsed_s=turn.elapsed_s)
        except KeyboardInterrupt:  # Ctrl-C, and SIGTERM/SIGHUP (see dlperf.cli)
            partial = runner.finish_partial(case, turn.repeats, turn.env, self.store,
                                            turn.run_id, None)
            raise runner.Interrupted(self._marked(case, partial)) from None
        except Exception as error:  # noqa: BLE001 - one failed case never stops a sweep
            turn.repeats = self._failed_in_harness(case, turn.run_id, error)
            turn.complete = True
        finally:
            turn.elapsed_s += time.monotonic() - started
            turn.measured = True


@dataclass
class Turn:
    """A case of an interleaved sweep: its run and the repeats it holds so far."""

    case: Case
    run_id: int
    env: dict[str, Any]
    repeats: list[dict[str, Any]]
    elapsed_s: float = 0.0  # its repeats' time in this session (a target interval's budget)
    measured: bool = False  # a repeat of it ran in this session
    complete: bool = False

    def __post_init__(self) -> None:
        self.complete = runner.needs_no_more(self.case, self.repeats, 0.0)
