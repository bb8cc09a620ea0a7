"""Run one case: a fresh worker process per repeat, watched, timed out, classified, stored.

Every finished repeat is written to the database before the next starts, so a crash, a kill or
Ctrl-C loses at most the repeat in flight.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dlperf import envs, result, scaling, stats
from dlperf.host import hoststate, timeline
from dlperf.host.monitor import Monitor
from dlperf.launchers import exits, launch, registry
from dlperf.launchers.launch import LOST_PEER, Launcher
from dlperf.spec import AUTO_MIN_REPEATS, Case
from dlperf.store import Store
from dlperf.worker import stacks

STDERR_TAIL_LINES = 30
KILL_GRACE_S = 5.0
STACKS_WAIT_S = 3.0  # for the signalled workers to write their stacks, before they are stopped
# of each thread's stack, its innermost frames (where it was: faulthandler writes them first)
# and its outermost (which part of the repeat: building, warming up, timing), the middle left out
STACKS_INNER = 24
STACKS_OUTER = 12
STACKS_HEADER = "--- where each worker was at the timeout (its threads' Python stacks) ---"
STACKS_SAID = "where each worker was ends its output's tail"


class Interrupted(Exception):
    """Ctrl-C arrived; the result so far travels with it."""

    def __init__(self, partial: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.result = partial


@dataclass
class Outcome:
    """What became of one launched repeat before its rank files are read."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    monitor: dict[str, Any]
    host: dict[str, Any] | None = None
    samples: dict[str, Any] | None = None  # the monitor's raw timeline (dlperf.host.timeline)
    stacks: str = ""  # a timed-out job's workers' Python stacks (:func:`worker_stacks`)

    @property
    def failure_tail(self) -> str:
        """What a failed job's result keeps of its output: the log's tail, then, after a
        timeout, where each worker was."""
        return "\n".join(text for text in (self.log_tail, self.stacks and STACKS_HEADER,
                                            self.stacks) if text)

    @property
    def stacks_said(self) -> str:
        """What a timeout's error adds when the workers' stacks are kept."""
        return f"; {STACKS_SAID}" if self.stacks else ""


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def kill_tree(pid: int) -> None:
    """Stop a worker and everything it started (compile workers, launcher children)."""
    try:
        members = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        members = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in members:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(members, timeout=KILL_GRACE_S)
        if not alive:
            return
        members = alive


def worker_stacks(pid: int, folder: Path, wait_s: float = STACKS_WAIT_S) -> str:
    """Every thread's Python stack of each worker below ``pid`` that armed itself in ``folder``
    (:mod:`dlperf.worker.stacks`), asked for with its signal: where a job that ran out of time
    was. Only a process of this job with a stacks file is signalled; "" when there is none."""
    try:
        members = {p.pid for p in [psutil.Process(pid), *psutil.Process(pid).children(True)]}
    except psutil.Error:
        return ""
    files = {}
    for path in sorted(folder.glob(f"{stacks.PREFIX}*{stacks.SUFFIX}")):
        worker = stacks.pid_of(path.name)
        if worker in members:
            try:
                os.kill(worker, stacks.SIGNAL)
            except ProcessLookupError:
                continue
            files[worker] = path
    deadline = time.monotonic() + wait_s
    while files and time.monotonic() < deadline and not all(
            stacks.WRITTEN in path.read_text(errors="replace") for path in files.values()):
        time.sleep(0.05)
    time.sleep(0.1 if files else 0)  # the last thread's frames after its header
    texts = []
    for path in files.values():
        lines = path.read_text(errors="replace").rstrip().splitlines()
        if not any(stacks.WRITTEN in line for line in lines):
            lines.append("(no stack written: the worker did not answer)")
        texts.append("\n".join(shortened_stacks(lines)))
    return "\n".join(texts)


def shortened_stacks(lines: list[str]) -> list[str]:
    """A worker's stacks file cut thread by thread: each thread's :data:`STACKS_INNER` innermost
    frames and :data:`STACKS_OUTER` outermost, the frames between said in one line. A thread deep
    in an import when the timeout came (torch's, 50 frames) still shows the repeat it was in."""
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        left_out = len(block) - 1 - STACKS_INNER - STACKS_OUTER
        if left_out > 0:
            out.extend(block[:1 + STACKS_INNER] + [f"  ... {left_out} frames left out ..."]
                       + block[-STACKS_OUTER:])
        else:
            out.extend(block)
        block.clear()

    for line in lines:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            flush()
        block.append(line)
    flush()
    return out


def execute(spec: launch.Launch, log_path: Path, timeout_s: float) -> Outcome:
    """Run a launch to completion or timeout, in its own session so it can be killed whole."""
    before = hoststate.snapshot()
    others = hoststate.OtherProcesses()
    others.start()
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(spec.argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=envs.worker_env(spec.env),
                                start_new_session=True)
        where = ""
        with Monitor(proc.pid) as watch:
            try:
                proc.wait(timeout=timeout_s)
                timed_out = False
                kill_tree(proc.pid)  # whatever the worker left behind in its process group
            except subprocess.TimeoutExpired:
                where = worker_stacks(proc.pid, log_path.parent)
                kill_tree(proc.pid)
                proc.wait()
                timed_out = True
            except KeyboardInterrupt:
                kill_tree(proc.pid)
                proc.wait()
                raise
    host = {"before": before, "others": others.stop(proc.pid), "after": hoststate.snapshot()}
    return Outcome(proc.returncode, timed_out, time.monotonic() - start, _tail(log_path),
                   watch.summary(), host, watch.timeline(), where)


def signal_failure(returncode: int, log_tail: str = "", memory_limit_bytes: int | None = None,
                   rss_peak_bytes: int | None = None) -> tuple[str, str]:
    """A worker killed by a signal: SIGKILL is the OOM killer's (:func:`exits.killed`);
    SIGABRT after an uncaught C++ ``std::bad_alloc`` (XLA's CPU runtime allocating a step's
    buffers under ``--memory-limit`` aborts the process instead of raising) is out of memory
    too, and so is SIGSEGV, SIGBUS or SIGABRT under a memory limit that dlperf set (native code
    that does not check a failed ``malloc`` dies this way); anything else a crash."""
    name = exits.signal_name(-returncode)
    if returncode == -signal.SIGABRT and "std::bad_alloc" in log_tail:
        return "oom", (f"worker died from {name} after an uncaught std::bad_alloc: a C++ "
                       f"allocation in the framework ran out of memory")
    if memory_limit_bytes and -returncode in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
        seen = (f"; its peak resident memory seen was {rss_peak_bytes / 2**20:.0f} MiB"
                if rss_peak_bytes else "")
        return "oom", (f"worker died from {name} under the {memory_limit_bytes / 2**30:.2f} GiB "
                       f"memory limit{seen}: native code that does not check a refused "
                       f"allocation dies this way, so it counts as out of memory")
    return exits.killed("worker", -returncode)


def is_peer_symptom(rank_result: dict[str, Any],
                    symptoms: tuple[str, ...] = LOST_PEER) -> bool:
    """Whether a rank failed only because a peer went away: its error names one of the
    launch's ``symptoms`` (:attr:`~dlperf.launchers.launch.Launch.peer_symptoms`)."""
    text = str(rank_result.get("error") or "").lower()
    return any(symptom in text for symptom in symptoms)


def _rank_number(path: Path) -> int:
    digits = path.stem[len("rank"):]
    return int(digits) if digits.isdigit() else -1


def collect(case: Case, index: int, out_dir: Path, outcome: Outcome, ranks: int,
            explain: Callable[[str], tuple[str, str] | None] | None = None,
            memory_limit_bytes: int | None = None,
            peer_symptoms: tuple[str, ...] = LOST_PEER) -> dict[str, Any]:
    """Turn rank files plus the process outcome into one repeat record.

    With several ranks the failure shown is the cause: a rank's own failure first, then what the
    launcher's log says (``explain``: a rank killed by a signal writes no file), and only then a
    rank that merely lost its peers (its error names one of ``peer_symptoms``, the launch's).
    """
    def lost_a_peer(rank_result: dict[str, Any]) -> bool:
        return is_peer_symptom(rank_result, peer_symptoms)

    rank_results = []
    for path in sorted(out_dir.glob("rank*.json"), key=_rank_number):
        rank_results.append(json.loads(path.read_text()))
    record: dict[str, Any] = {"repeat": index, "wall_s": outcome.wall_s,
                              "monitor": outcome.monitor, "host": outcome.host,
                              "ranks": rank_results}
    failed = sorted((r for r in rank_results if r["status"] != "ok"), key=lost_a_peer)
    explained = None
    if explain is not None and not outcome.timed_out and (
            not failed or lost_a_peer(failed[0])) and (
            outcome.returncode != 0 or len(rank_results) < ranks):
        explained = explain((out_dir / "worker.log").read_text(errors="replace")
                            if (out_dir / "worker.log").exists() else outcome.log_tail)
    if outcome.timed_out:
        record.update(status="timeout",
                      error=f"repeat exceeded the timeout of {case.timeout_s:g} s "
                            f"(--timeout); the worker was stopped{outcome.stacks_said}")
    elif explained is not None:
        # a launcher that failed after the ranks wrote their results says so (msrun has, at the
        # end of a repeat that trained: its teardown, not the measurement, failed)
        done = sum(r["status"] == "ok" for r in rank_results)
        record.update(status=explained[0], error=explained[1] + (
            f" after {done} of {ranks} ranks' results" if done else ""))
    elif failed:
        cause = (" (it lost a peer: another rank failed first; with several nodes, see the "
                 "output of the others)" if lost_a_peer(failed[0]) else "")
        record.update(status=failed[0]["status"],
                      error=f"rank {failed[0]['rank']}: {failed[0]['error']}{cause}")
    elif outcome.returncode and outcome.returncode < 0:
        status, message = signal_failure(outcome.returncode, outcome.log_tail,
                                         memory_limit_bytes,
                                         (outcome.monitor or {}).get("rss_peak_bytes"))
        record.update(status=status, error=message)
    elif len(rank_results) < ranks or outcome.returncode != 0:
        last = outcome.log_tail.splitlines()[-1] if outcome.log_tail.strip() else "no output"
        # every rank may have written its result before its launcher failed (MindSpore's
        # msrun at the end of a repeat): say so rather than "no result"
        got = (f"after {len(rank_results)} of {ranks} ranks' results" if rank_results
               else "and no result")
        record.update(status="crash", error=f"worker exited with code {outcome.returncode} "
                                            f"{got}: {last[:300]}")
    else:
        record.update(status="ok", error=None)
    if record["status"] != "ok":
        record["stderr_tail"] = outcome.failure_tail
    if rank_results and record["status"] == "ok":
        record.update(result.merge_ranks(rank_results))
        record["timeline"] = timeline.for_repeat(outcome.samples, record.get("phase_starts"))
    elif rank_results:
        record["peak_host_bytes"] = max(r.get("peak_host_bytes") or 0 for r in rank_results)
    return record


def traces_dir(db: Path) -> Path:
    """Where the profiled repeats' traces of a results file are kept: beside it."""
    return db.parent / f"{db.stem}-traces"


def keep_trace(record: dict[str, Any], folder: Path | None, name: str) -> None:
    """Move a repeat's profile trace out of its worker folder, which is deleted, into
    ``folder`` as ``name``; without a folder (no results file) the trace is not kept."""
    trace = (record.get("profile") or {}).get("trace") or {}
    source = trace.get("path")
    if not source:
        return
    if folder is None:
        trace.update(path=None, note="not kept: no results file to keep it beside")
        return
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    shutil.move(source, target)
    trace["path"] = str(target.resolve())


def logs_dir(db: Path) -> Path:
    """Where a results file keeps its failed repeats' logs: beside it."""
    return db.parent / f"{db.stem}-logs"


#: the most of each log file a failed repeat keeps: its end, where a failure is told
LOG_KEEP_BYTES = 1 << 20


def keep_logs(record: dict[str, Any], work: Path, folder: Path | None, name: str,
              log_dir: str | None) -> None:
    """Copy a failed repeat's logs out of its worker folder, which is deleted, into
    ``folder/name``: the launch's whole output (``worker.log``, of which the result keeps 30
    lines) and the launcher's own log folder (``log_dir``: msrun's scheduler and workers' logs,
    Paddle's workerlog.N), each file's last MiB. The record then names the folder (``logs``).
    Nothing is kept for a successful or refused repeat, or without a results file."""
    if folder is None or record["status"] in ("ok", "unsupported"):
        return
    launcher_logs = work / log_dir if log_dir else None
    found = [work / "worker.log"] + (sorted(p for p in launcher_logs.rglob("*") if p.is_file())
                                     if launcher_logs is not None and launcher_logs.is_dir()
                                     else [])
    target = folder / name
    kept = False
    for source in found:
        try:
            with source.open("rb") as log:
                log.seek(max(source.stat().st_size - LOG_KEEP_BYTES, 0))
                tail = log.read()
        except OSError:  # gone or unreadable: the others are still worth keeping
            continue
        copy = target / source.relative_to(work)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(tail)
        kept = True
    if kept:
        record["logs"] = str(target.resolve())


def run_repeat(case: Case, index: int, launcher: Launcher,
               require_quiet_s: float | None = None, trace_dir: Path | None = None,
               trace_name: str = "", log_folder: Path | None = None) -> dict[str, Any]:
    """One repeat in fresh worker processes; with ``require_quiet_s``, only once the host has
    been idle (waiting at most that long; a host that never quiets fails the case as busy).
    A profiled repeat's trace goes to ``trace_dir``, named ``trace_name``-r<repeat>; a failed
    repeat's logs to ``log_folder``, named the same (:func:`keep_logs`)."""
    if require_quiet_s is not None:
        quiet, how = hoststate.wait_for_quiet(require_quiet_s)
        if not quiet:
            return {"repeat": index, "status": "busy", "error": how, "wall_s": 0.0,
                    "ranks": [], "launch": None}
    with tempfile.TemporaryDirectory(prefix="dlperf-") as tmp:
        work = Path(tmp)
        case_file = work / "case.json"
        case_file.write_text(json.dumps(case.to_dict()))
        spec = launcher(case, case_file, work)
        outcome = execute(spec, work / "worker.log", case.timeout_s)
        record = collect(case, index, work, outcome, spec.ranks, spec.explain,
                         spec.facts.get("memory_limit_bytes"), spec.peer_symptoms)
        record["launch"] = {**spec.facts, **spec.observed()} if spec.observed else spec.facts
        name = f"{trace_name or case.key()}-r{index + 1}"
        keep_trace(record, trace_dir, f"{name}.trace.json.gz")
        keep_logs(record, work, log_folder, name, spec.facts.get("log_dir"))
        return record


def enough(case: Case, repeats: list[dict[str, Any]], elapsed_s: float) -> bool:
    """Whether a case with a target interval (``--repeats auto``, ``--target-ci``) needs no
    more repeats: its interval is within the target (:func:`dlperf.stats.interval_reached`), or
    its time budget is spent. A fixed count never stops early."""
    if not case.target_ci:
        return False
    if case.max_time_s and elapsed_s >= case.max_time_s:
        return True
    values = [r["throughput"] for r in repeats if r.get("status") == "ok" and r.get("throughput")]
    return stats.interval_reached(values, case.target_ci, AUTO_MIN_REPEATS)


def default_launcher(case: Case) -> Launcher:
    """One local process, or the framework's own launcher for several (one node; several nodes
    need a :class:`launch.Rendezvous`, which ``dlperf run`` builds)."""
    return registry.launcher_for(case)


def run_case(case: Case, store: Store | None = None, launcher: Launcher | None = None,
             env: dict[str, Any] | None = None, sweep: str | None = None,
             on_repeat: Callable[[dict[str, Any]], None] | None = None,
             run_id: int | None = None, done: list[dict[str, Any]] | None = None,
             require_quiet_s: float | None = None) -> dict[str, Any]:
    """Measure ``case`` over its repeats and return the result object (DESIGN.md's contract).

    Stops at the first failed repeat: OOM, unsupported and crashes repeat themselves, and a
    timeout would only cost another timeout. ``run_id``/``done`` continue a stored run.
    """
    launcher = launcher or default_launcher(case)
    env = env or {}
    repeats = list(done or [])
    if store is not None and run_id is None:
        run_id = store.start_run(case.key(), case.label(), case.to_dict(), env, sweep)
    try:
        measure_repeats(case, repeats, launcher, store, run_id, on_repeat, require_quiet_s)
    except KeyboardInterrupt:  # Ctrl-C, and SIGTERM/SIGHUP (see dlperf.cli)
        partial = finish_partial(case, repeats, env, store, run_id, None)
        raise Interrupted(partial) from None
    except BaseException as error:  # a launcher, display or store error: keep what finished
        finish_partial(case, repeats, env, store, run_id, error)
        raise
    final = result_of(case, repeats, env, store, run_id)
    if store is not None and run_id is not None:
        store.finish_run(run_id, final)
    return final


def needs_no_more(case: Case, repeats: list[dict[str, Any]], elapsed_s: float) -> bool:
    """Whether ``case`` has its repeats: all of them, a failed one (the case stops there), or
    enough for its target interval (:func:`enough`)."""
    return (len(repeats) >= case.repeats
            or bool(repeats) and repeats[-1]["status"] != "ok"
            or enough(case, repeats, elapsed_s))


def measure_repeats(case: Case, repeats: list[dict[str, Any]], launcher: Launcher,
                    store: Store | None = None, run_id: int | None = None,
                    on_repeat: Callable[[dict[str, Any]], None] | None = None,
                    require_quiet_s: float | None = None, count: int | None = None,
                    elapsed_s: float = 0.0) -> bool:
    """Run the case's next repeats, each appended to ``repeats`` and stored as it finishes: all
    it still needs, or at most ``count`` (an interleaved sweep's turn). ``elapsed_s``: the time
    its earlier repeats took (a target interval's time budget counts it). True once the case
    needs no more (:func:`needs_no_more`)."""
    trace_dir = traces_dir(store.path) if store is not None and case.profile_steps else None
    log_folder = logs_dir(store.path) if store is not None else None
    trace_name = f"run{run_id}-{case.key()}"
    started = time.monotonic() - elapsed_s
    ran = 0
    while not needs_no_more(case, repeats, time.monotonic() - started):
        if count is not None and ran >= count:
            return False
        index = len(repeats)
        record = run_repeat(case, index, launcher, require_quiet_s, trace_dir, trace_name,
                            log_folder)
        repeats.append(record)
        ran += 1
        if store is not None and run_id is not None:
            store.add_repeat(run_id, index, record)
        if on_repeat:
            on_repeat(record)
    return True


def result_of(case: Case, repeats: list[dict[str, Any]], env: dict[str, Any],
              store: Store | None, run_id: int | None) -> dict[str, Any]:
    """The finished case's result: its repeats aggregated, its scaling over the stored
    baseline added (the caller stores it)."""
    final = result.aggregate(case, repeats, env, run_id=run_id)
    final.update(scaling.scaling(final, store))
    return final


def finish_partial(case: Case, repeats: list[dict[str, Any]], env: dict[str, Any],
                   store: Store | None, run_id: int | None,
                   error: BaseException | None) -> dict[str, Any]:
    """Store the repeats that finished before the run was cut short, marked ``interrupted``
    (and with the reason when it was an error), so no exit path leaves a run unfinished."""
    try:
        partial = result.aggregate(case, repeats, env, run_id=run_id, interrupted=True)
        partial.update(scaling.scaling(partial, store))
    except Exception as failure:  # e.g. an unreadable peaks file: store the bare facts
        partial = {"schema": result.SCHEMA, "run_id": run_id, "case_key": case.key(),
                   "label": case.label(), "case": case.to_dict(), "status": "crash",
                   "error": f"aggregating the finished repeats failed: {failure}",
                   "repeats_done": len(repeats), "interrupted": True}
    if error is not None:
        partial.setdefault("warnings", []).append(
            f"stopped by {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            [:300])
    if store is not None and run_id is not None:
        try:
            store.finish_run(run_id, partial)
        except Exception:  # the store itself failed (locked, gone): nothing more to save
            pass
    return partial

