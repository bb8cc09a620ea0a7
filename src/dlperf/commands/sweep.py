"""``dlperf sweep FILE``: a whole matrix of cases, crash-safe and resumable."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from dlperf import display, models, outputs, session
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument
from dlperf.envs import selection
from dlperf.errors import UsageError
from dlperf.host import emulated, measurelock
from dlperf.launchers import emulated_sweep, registry, slurm, slurm_launch
from dlperf.numbers import duration
from dlperf.spec import Case
from dlperf.store import Store
from dlperf.studies.sweep import Sweep, load, with_configs
from dlperf.studies.sweep_runner import (CaseState, Estimator, Eta, Observer, SweepOutcome,
                                         SweepRun, state_of)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("sweep", help=HELP["sweep"])
    parser.add_argument("file", type=Path, help="sweep YAML file (see sweeps/)")
    add_db_argument(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="finish a sweep that was stopped: keep every stored repeat")
    mode.add_argument("--force", action="store_true",
                      help="measure every case again (older runs stay in the database)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cases and an estimated time; measure nothing")
    parser.add_argument("--json", type=Path, help="also write the result objects (a list)")
    parser.add_argument("--skip-multinode", action="store_true",
                        help="leave out the cases that need more nodes than this Slurm "
                             "allocation has (or any multi-node case outside Slurm) instead of "
                             "refusing the sweep; --resume inside a larger allocation adds them")
    parser.add_argument("--label", default="", metavar="TEXT",
                        help="tag every result of the sweep (a commit, a build id), unless its "
                             "case sets run_label: `dlperf history` and `dlperf gate` use it")
    parser.add_argument("--emulate-hosts", action="store_true",
                        help="run the multi-node cases across hosts emulated on this machine "
                             "(as root), as many as the largest case's nnodes, each case's "
                             "link shaping theirs (`dlperf run --emulate-hosts`)")
    measurelock.add_argument(parser)
    return parser


def knob_text(case: Case) -> str:
    """The knobs that differ from the catalogue's defaults."""
    defaults = models.get(case.model).defaults
    return " ".join(f"{k}={v}" for k, v in sorted(case.knobs.items()) if defaults.get(k) != v)


def plan_table(sweep: Sweep, states: list[CaseState], estimator: Estimator,
               fitted: slurm_launch.SweepFit | None = None) -> float:
    """Print the cases with what is stored and the time each still needs; return the total.
    Cases left out by --skip-multinode are listed after them, marked skipped."""
    skipped = fitted.refused if fitted is not None else []
    count = f"{len(sweep.cases)} case(s)" + (f" (+{len(skipped)} skipped)" if skipped else "")
    table = display.new_table(f"sweep {sweep.name}: {count} from {sweep.path}", (
        ("#", "right"), ("case", "left"), ("knobs", "left"), ("steps", "right"),
        ("repeats", "right"), ("in database", "left"), ("est. time", "right"),
        ("estimate from", "left")))
    total = 0.0
    kinds: set[str] = set()
    for index, state in enumerate(states, 1):
        case = state.case
        per_repeat, how = estimator.repeat_seconds(case)
        seconds = per_repeat * state.remaining_repeats()
        total += seconds
        if state.remaining_repeats():
            kinds.add(how)
        table.add_row(str(index), case.label(), knob_text(case),
                      f"{case.warmup_steps}+{case.steps}", str(case.repeats), state.describe(),
                      duration(seconds) if state.remaining_repeats() else "-",
                      how if state.remaining_repeats() else "")
    for index, case in enumerate(skipped, len(states) + 1):
        table.add_row(str(index), case.label(), knob_text(case),
                      f"{case.warmup_steps}+{case.steps}", str(case.repeats),
                      f"{fitted.skipped_reason(case)} (--skip-multinode)" if fitted
                      else "skipped", "-", "")
    display.out.print(table)
    if fitted is not None and fitted.allocation is not None:
        alloc = fitted.allocation
        display.out.print(f"Slurm job {alloc.job_id} ({alloc.nnodes} node(s)): every case runs "
                          f"as a Slurm job step (srun), one step per repeat", highlight=False)
    if sweep.on_oom == "halve":
        display.out.print("on_oom: halve — a case that runs out of memory is retried at half "
                          "the batch size (not in the estimate)")
    for note in sweep.notes:
        display.warn(note)
    caveat = " (rough guess: nothing similar is in the database yet)" if "guess" in kinds else ""
    display.out.print(f"estimated time: {duration(total)}{caveat}")
    return total


class EtaColumn(ProgressColumn):
    """The sweep's own ETA, from per-case estimates (repeats differ too much for rich's)."""

    def __init__(self, display_: "SweepDisplay") -> None:
        super().__init__()
        self.display = display_

    def render(self, task: Any) -> Text:
        eta = self.display.eta
        return Text(f"ETA {duration(eta.seconds())}" if eta else "ETA ?")


class SweepDisplay(Observer):
    """A progress bar over all repeats with the current case, repeat and an ETA."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.bar = Progress(TextColumn("{task.description}", style="bold", markup=False),
                            BarColumn(),
                            TextColumn("{task.completed}/{task.total} repeats"),
                            TimeElapsedColumn(), EtaColumn(self), console=display.err,
                            transient=True)
        self.task = self.bar.add_task("sweep", total=0)
        self.estimator: Estimator | None = None
        self.eta: Eta | None = None
        self.current: Case | None = None
        self.repeat = 0
        self.order = {case.key(): number for number, case in enumerate(sweep.cases, 1)}
        self.case_number = 0

    def __enter__(self) -> "SweepDisplay":
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def _describe(self) -> None:
        if self.current is None or self.eta is None:
            return
        self.bar.update(self.task, description=(
            f"[{self.case_number}/{len(self.sweep.cases)}] {self.current.label()} "
            f"repeat {min(self.repeat + 1, self.current.repeats)}/{self.current.repeats}"))

    def planned(self, states: list[CaseState], estimator: Estimator) -> None:
        self.estimator = estimator
        self.eta = Eta(sum(estimator.case_seconds(s) for s in states))
        self.bar.update(self.task, total=sum(s.remaining_repeats() for s in states))
        stored = sum(1 for s in states if s.finished)
        partial = sum(1 for s in states if not s.finished and s.run_id is not None)
        display.err.print(f"sweep {self.sweep.name}: {len(states)} case(s), {stored} stored, "
                          f"{partial} partly stored, estimated {duration(self.eta.remaining_estimate_s)}"
                          + ("; repeats interleaved: one of each case per round"
                             if self.sweep.order == "interleaved" else ""))

    def case_started(self, state: CaseState, fallback: dict[str, Any] | None) -> None:
        assert self.estimator is not None and self.eta is not None
        self.current = state.case
        self.repeat = len(state.done)
        if state.case.key() in self.order:
            self.case_number = self.order[state.case.key()]
        else:  # an on_oom retry: more work than planned
            self.bar.update(self.task, total=(self.bar.tasks[0].total or 0)
                            + state.remaining_repeats())
            self.eta.add(self.estimator.case_seconds(state))
        if state.done:
            display.err.print(f"  resuming {state.case.label()} at repeat {len(state.done) + 1} "
                              f"({len(state.done)} stored)")
        if fallback:
            display.warn(f"retrying at batch size {state.case.batch_size}: "
                         f"{fallback['reason']}", display.err)
        self._describe()

    def turn(self, case: Case, index: int) -> None:
        self.current = case
        self.repeat = index
        self.case_number = self.order.get(case.key(), self.case_number)
        self._describe()

    def repeat_done(self, case: Case, record: dict[str, Any]) -> None:
        assert self.estimator is not None and self.eta is not None
        self.eta.advance(self.estimator.repeat_seconds(case)[0])
        self.repeat += 1
        self.bar.advance(self.task)
        # interleaved, a case's repeats are apart: each line names its case
        which = f"{case.label()} " if self.sweep.order == "interleaved" else ""
        head = f"    {which}repeat {record['repeat'] + 1}/{case.repeats}: "
        if record["status"] == "ok":
            display.err.print(display.line(head, f"{display.number(record['throughput'])} "
                                                 f"samples/s"))
        else:
            display.err.print(display.line(head, (record["status"], "red"),
                                           f": {record['error']}"))
            display.logs_kept(record, "      ")
            # the case stops at its first failure: its other repeats will not run
            skipped = case.repeats - record["repeat"] - 1
            if skipped > 0:
                self.bar.update(self.task, total=(self.bar.tasks[0].total or 0) - skipped)
                self.eta.advance(self.estimator.repeat_seconds(case)[0] * skipped)
        self._describe()

    def case_done(self, case: Case, result: dict[str, Any], reused: bool) -> None:
        where = "stored" if reused else "measured"
        if result["status"] == "ok":
            tp = result["throughput"]
            display.err.print(display.line(
                "  ", ("ok", "green"), f" {case.label()}: {display.number(tp['median'])}"
                f" samples/s (median of {tp['n']}, CV {display.percent(tp.get('cv'))}) ({where})"))
        else:
            display.err.print(display.line("  ", (result["status"], "red"),
                                           f" {case.label()}: {result.get('error')} ({where})"))


def dry_run(sweep: Sweep, db: Path, resume: bool, force: bool,
            fitted: slurm_launch.SweepFit | None = None) -> int:
    states = [CaseState(case) for case in sweep.cases]
    history: list[dict[str, Any]] = []
    store = Store.peek(db)  # a dry run measures nothing: it reads, and creates no file
    if store is not None:
        with store:
            history = store.results()
            if not force:
                since = int(store.get_meta(f"sweep_since:{sweep.name}") or 0)
                states = [state_of(store, case, sweep.name, since) for case in sweep.cases]
                if not resume and any(s.run_id is not None for s in states):
                    display.warn(f"{db} already holds runs of sweep {sweep.name!r}: run with "
                                 f"--resume or --force")
    plan_table(sweep, states, Estimator(history), fitted)
    return 0


def runnable(sweep: Sweep, skip_multinode: bool,
             emulate_hosts: bool = False) -> tuple[Sweep, slurm_launch.SweepFit]:
    """The sweep's cases that can run here, and where; multi-node cases without the nodes
    refuse the sweep (one line, exit 2) unless ``skip_multinode`` leaves them out. With
    ``emulate_hosts`` every case runs here, the multi-node ones across emulated hosts (checked
    when they are brought up)."""
    if emulate_hosts:
        if os.environ.get(emulated.NODE_VARIABLE) or slurm.allocation(os.environ):
            raise UsageError("--emulate-hosts: run the sweep outside Slurm and outside emulated "
                             "hosts")
        emulated.check_request(emulated_sweep.host_count(sweep.cases),
                               sorted(os.sched_getaffinity(0)))
        emulated.own_name_resolution()
        lacking = emulated.missing(any(case.link for case in sweep.cases))
        if lacking:
            raise UsageError(lacking)
        for case in sweep.cases:
            if case.env:
                selection.case_python(case.framework, case.env)
        return sweep, slurm_launch.SweepFit(None, "emulated hosts")
    fitted = slurm_launch.fit(sweep.cases, os.environ)
    if fitted.refused and not skip_multinode:
        raise UsageError(slurm_launch.refusal(fitted, sweep.name, sweep.path,
                                              len(sweep.cases)))
    keep = [case for case in sweep.cases if case not in fitted.refused]
    for case in keep:
        # a launcher that cannot start here (Horovod's environment missing, MPI across nodes or
        # without Open MPI) refuses the sweep now, in one line, not as a stored failure
        registry.launcher_for(case)
        if case.env:  # a version environment not installed, a --python that cannot run it
            selection.case_python(case.framework, case.env)
    return dataclasses.replace(sweep, cases=keep), fitted


def labelled(sweep: Sweep, label: str) -> Sweep:
    """--label tags every case that does not carry its own ``run_label``."""
    if not label:
        return sweep
    return dataclasses.replace(sweep, cases=[
        case if case.run_label else dataclasses.replace(case, run_label=label)
        for case in sweep.cases])


def main(args: argparse.Namespace) -> int:
    # config: best cases in the tuned settings (from tune_db: or --db), before the plan
    sweep = with_configs(load(args.file), Path(args.db))
    outputs.check_writable("--json", args.json)
    sweep, fitted = runnable(labelled(sweep, args.label), args.skip_multinode,
                             args.emulate_hosts)
    db = Path(args.db)
    if args.dry_run:
        return dry_run(sweep, db, args.resume, args.force, fitted)
    mode = "resume" if args.resume else "force" if args.force else "new"
    outcome = execute(sweep, fitted, db, mode, wait=not args.no_wait,
                      emulate_hosts=args.emulate_hosts)
    if args.json:
        outputs.write_json(args.json, outcome.results)
    if outcome.interrupted:
        display.out.print("interrupted: finished repeats are stored; run again with --resume")
        raise KeyboardInterrupt
    return 1 if outcome.failed_cases else 0


def execute(sweep: Sweep, fitted: slurm_launch.SweepFit, db: Path, mode: str, wait: bool,
            emulate_hosts: bool = False) -> SweepOutcome:
    """Measure a prepared sweep (:func:`runnable`) as `dlperf sweep` does, with its progress,
    results table and summary; `dlperf reproduce` runs its study's sweep through here too."""
    started = dt.datetime.now().isoformat(timespec="seconds")
    # the host's lock first: a sweep that must wait (or give up) has touched no session state
    with session.measuring(db, wait=wait) as opened, contextlib.ExitStack() as up:
        watcher = SweepDisplay(sweep)
        alloc = fitted.allocation
        launchers = None
        if emulate_hosts:
            launchers = up.enter_context(emulated_sweep.launchers(
                sweep.cases, lambda text: display.err.print(text, soft_wrap=True)))
        elif alloc is not None:
            launchers = lambda case: slurm_launch.launcher(case, alloc)  # noqa: E731
            display.err.print(f"Slurm job {alloc.job_id} ({alloc.nnodes} node(s)): each repeat "
                              f"runs as a job step (srun)", highlight=False)
        run = SweepRun(sweep, opened.store, mode=mode, env=opened.env, observer=watcher,
                       launchers=launchers)
        with watcher:
            outcome = run.run()
    results = outcome.results
    display.results_table(results, title=f"sweep {sweep.name} ({db}), started {started}")
    for item in results:
        if item.get("fallback"):
            display.warn(f"{item['label']}: {item['fallback']['reason']}")
    overhead = outcome.overhead
    display.out.print(
        f"sweep {sweep.name}: {len(results)} result(s): {outcome.measured_cases} case(s) measured "
        f"now ({outcome.measured_repeats} repeats), {outcome.reused} taken from the database, "
        f"{len(outcome.failed_cases)} failed", highlight=False)
    display.out.print(
        f"wall time {duration(outcome.wall_s)} ({outcome.wall_s:.1f} s)"
        + (f"; timed work (first steps + warm-ups + windows) {outcome.timed_s:.1f} s; "
           f"overhead x{overhead:.2f} (wall time / timed work)" if overhead else ""),
        highlight=False)
    if fitted.refused:
        most = max(case.nnodes for case in fitted.refused)
        display.warn(f"skipped {len(fitted.refused)} multi-node case(s) (--skip-multinode): "
                     f"measure them with --resume inside a Slurm allocation of >= {most} nodes")
    return outcome
