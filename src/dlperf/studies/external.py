"""Wrap a training command someone else wrote and measure it by its own log.

Official benchmark scripts (NVIDIA's, a framework's examples) print their speed in their own way.
DLPerf parsed those logs with copy-pasted extract scripts; here one of two rules applies, chosen
by flags, and the result is stored like any other case (median of repeats, each repeat a fresh run
of the command):

* **rate lines** (``--metric REGEX``, one group: a rate such as images/s). After skipping the
  warm-up lines, a repeat's throughput is the *harmonic* mean of the rates: each line reports the
  same number of samples, so total samples over total time is ``n / sum(1 / rate)``. An
  arithmetic mean of rates would overstate (the rule DESIGN.md forbids).
* **step counter plus time** (``--step-regex REGEX`` with one group: the step number,
  ``--samples-per-step N``, and optionally ``--time-regex REGEX`` whose group is a timestamp in
  the same line; without it, the moment dlperf read the line). Throughput = samples of the steps
  between the first line at or after the warm-up and the last line, over the time between them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import envs, models, runner, stats
from dlperf.errors import UsageError
from dlperf.host.monitor import Monitor
from dlperf.numbers import check_seconds, is_number
from dlperf.result import monitor_means, repeat_status
from dlperf.store import Store

SCHEMA = 1
OOM_MARKERS = ("out of memory", "outofmemory", "resourceexhausted", "resource exhausted",
               "cannot allocate memory", "can't allocate memory")
TAIL_LINES = 30


@dataclass(frozen=True)
class ExternalCase:
    """An external command and how to read its speed; what ``Case`` is for dlperf's own runs."""

    name: str
    command: tuple[str, ...]
    metric: str | None = None
    step_regex: str | None = None
    time_regex: str | None = None
    samples_per_step: float | None = None
    warmup: int = 1
    repeats: int = 7
    timeout_s: float = 3600.0
    unit: str = "samples/s"
    cwd: str | None = None
    # what the command measures, for reports and comparisons (free text where the catalogue
    # does not have it; batch size is per device)
    framework: str | None = None
    model: str | None = None
    batch_size: int | None = None
    precision: str = "fp32"
    compile: bool = False
    devices: int = 1
    nnodes: int = 1

    def __post_init__(self) -> None:
        if not self.command:
            raise UsageError("command: give the command after `--`, e.g. "
                             "dlperf external --name x --metric 'ips: ([\\d.]+)' -- python train.py")
        if bool(self.metric) == bool(self.step_regex):
            raise UsageError("--metric or --step-regex: give exactly one way to read the speed")
        for flag, pattern in (("--metric", self.metric), ("--step-regex", self.step_regex),
                              ("--time-regex", self.time_regex)):
            if pattern is None:
                continue
            try:
                compiled = re.compile(pattern)
            except re.error as error:
                raise UsageError(f"{flag}: not a valid regular expression ({error})") from None
            if compiled.groups < 1:
                raise UsageError(f"{flag}: the expression needs a group ( ... ) around the number")
        if self.time_regex and not self.step_regex:
            raise UsageError("--time-regex: only with --step-regex")
        if self.step_regex and not (self.samples_per_step and self.samples_per_step > 0):
            raise UsageError("--samples-per-step: required with --step-regex (global samples "
                             "one step processes), a positive number")
        for flag, value, low in (("--warmup", self.warmup, 0), ("--repeats", self.repeats, 1),
                                 ("--devices", self.devices, 1), ("--nnodes", self.nnodes, 1)):
            if value < low:
                raise UsageError(f"{flag}: {value} must be >= {low}")
        check_seconds("--timeout", self.timeout_s)
        if self.samples_per_step is not None and not is_number(self.samples_per_step):
            raise UsageError(f"--samples-per-step: {self.samples_per_step!r} must be a finite "
                             f"number > 0")

    def to_dict(self) -> dict[str, Any]:
        """The case in the shape of dlperf's own (so reports and compare treat it alike)."""
        return {
            "framework": self.framework or self.name, "model": self.model or "external",
            "task": "train", "batch_size": self.batch_size, "precision": self.precision,
            "compile": self.compile, "device": "auto", "devices": self.devices,
            "nnodes": self.nnodes, "data": "external", "knobs": {},
            "warmup_steps": self.warmup, "steps": None, "repeats": self.repeats, "seed": 0,
            "timeout_s": self.timeout_s,
            "external": {"name": self.name, "command": list(self.command),
                         "metric": self.metric, "step_regex": self.step_regex,
                         "time_regex": self.time_regex,
                         "samples_per_step": self.samples_per_step, "unit": self.unit,
                         "cwd": self.cwd},
        }

    def key(self) -> str:
        identity = self.to_dict()
        for name in ("repeats", "timeout_s"):
            identity.pop(name)
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def label(self) -> str:
        parts = ["external", self.name]
        if self.model:
            parts.append(self.model)
        if self.batch_size:
            parts.append(f"bs{self.batch_size}")
        if self.devices * self.nnodes > 1:
            parts.append(f"{self.nnodes}n{self.devices}d")
        return " ".join(parts)


@dataclass
class Line:
    text: str
    arrived: float  # time.monotonic() when dlperf read it


def parse_time(text: str) -> float:
    """Seconds from a log timestamp: a number (epoch or elapsed), ISO 8601, or HH:MM:SS[.f]."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
        raise ValueError(f"cannot read a time from {text!r} (not a finite number)")
    try:
        return dt.datetime.fromisoformat(text.replace(",", ".")).timestamp()
    except ValueError:
        pass
    match = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2}(?:[.,]\d+)?)", text)
    if match:
        hours, minutes, seconds = match.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds.replace(",", "."))
    raise ValueError(f"cannot read a time from {text!r} (want seconds, ISO 8601 or HH:MM:SS)")


def _number(text: str, what: str) -> float:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):  # a printed nan/inf is no measurement
        raise ValueError(f"{what}: {text!r} is not a finite number")
    return value


def from_rates(case: ExternalCase, lines: list[Line]) -> dict[str, Any]:
    """Harmonic mean of the rates printed after the warm-up lines."""
    assert case.metric is not None
    pattern = re.compile(case.metric)
    rates = [_number(m.group(1), "--metric") for line in lines
             if (m := pattern.search(line.text))]
    measured = rates[case.warmup:]
    if not measured:
        raise ValueError(f"no line matched --metric after skipping {case.warmup} warm-up "
                         f"line(s) ({len(rates)} matched in all)")
    if any(rate <= 0 for rate in measured):
        raise ValueError(f"--metric: a rate after the warm-up is not positive: {measured}")
    throughput = len(measured) / sum(1.0 / rate for rate in measured)
    return {"throughput": throughput, "rates": measured, "skipped": rates[:case.warmup],
            "window_s": None, "samples": None}


def from_steps(case: ExternalCase, lines: list[Line]) -> dict[str, Any]:
    """Samples between the first post-warm-up step line and the last, over the time between."""
    assert case.step_regex is not None and case.samples_per_step is not None
    step_pattern = re.compile(case.step_regex)
    time_pattern = re.compile(case.time_regex) if case.time_regex else None
    marks: list[tuple[float, float]] = []  # (step, seconds)
    for line in lines:
        match = step_pattern.search(line.text)
        if not match:
            continue
        step = _number(match.group(1), "--step-regex")
        if time_pattern is not None:
            found = time_pattern.search(line.text)
            if not found:
                raise ValueError(f"--time-regex: no timestamp in the step line {line.text!r}")
            seconds = parse_time(found.group(1))
        else:
            seconds = line.arrived
        marks.append((step, seconds))
    window = [(s, t) for s, t in marks if s >= case.warmup]
    if len(window) < 2:
        raise ValueError(f"need two step lines at or after step {case.warmup} (the warm-up); "
                         f"found {len(window)} of {len(marks)} step line(s)")
    (first_step, first_t), (last_step, last_t) = window[0], window[-1]
    if last_step <= first_step or last_t <= first_t:
        raise ValueError(f"steps or times do not increase from step {first_step:g} at "
                         f"{first_t:g} to step {last_step:g} at {last_t:g}")
    samples = (last_step - first_step) * case.samples_per_step
    window_s = last_t - first_t
    return {"throughput": samples / window_s, "window_s": window_s, "samples": samples,
            "steps": [first_step, last_step]}


def _classify(returncode: int | None, timed_out: bool, tail: str) -> tuple[str, str] | None:
    if timed_out:
        return "timeout", "the command exceeded the timeout and was stopped"
    text = tail.lower()
    if returncode not in (0, None) and any(marker in text for marker in OOM_MARKERS):
        return "oom", f"the command exited with {returncode}; its output says it ran out of memory"
    if returncode != 0:
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return "crash", f"the command exited with {returncode}: {last[:300]}"
    return None


def run_once(case: ExternalCase, index: int,
             echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the command once, read its output as it comes, and turn it into a repeat record."""
    lines: list[Line] = []
    # timestamps by arrival need unbuffered output; the lifeline takes the command's whole
    # process group down if this harness dies (no preexec_fn while threads run)
    env = envs.worker_env({"PYTHONUNBUFFERED": "1"})
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dlperf-external-") as tmp:
        log_path = Path(tmp) / "output.log"
        try:
            proc = subprocess.Popen([sys.executable, "-m", "dlperf.worker.lifeline", "--",
                                     *case.command], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=case.cwd, env=env, start_new_session=True)
        except OSError as error:
            return {"repeat": index, "status": "crash", "wall_s": 0.0, "monitor": {},
                    "error": f"cannot start {case.command[0]!r}: {error.strerror}"}

        def read() -> None:
            assert proc.stdout is not None
            with open(log_path, "w") as log:
                for raw in iter(proc.stdout.readline, b""):
                    text = raw.decode(errors="replace").rstrip("\r\n")
                    lines.append(Line(text, time.monotonic()))
                    log.write(text + "\n")
                    if echo:
                        echo(text)

        reader = threading.Thread(target=read, daemon=True)
        with Monitor(proc.pid) as watch:
            reader.start()
            timed_out = False
            try:
                proc.wait(timeout=case.timeout_s)
            except subprocess.TimeoutExpired:
                runner.kill_tree(proc.pid)
                proc.wait()
                timed_out = True
            except KeyboardInterrupt:
                runner.kill_tree(proc.pid)
                proc.wait()
                raise
            reader.join(timeout=10)
    wall_s = time.monotonic() - start
    tail = "\n".join(line.text for line in lines[-TAIL_LINES:])
    record: dict[str, Any] = {"repeat": index, "wall_s": wall_s, "monitor": watch.summary(),
                              "lines": len(lines)}
    failure = _classify(proc.returncode, timed_out, tail)
    if failure is None:
        try:
            record.update(from_rates(case, lines) if case.metric else from_steps(case, lines))
            record.update(status="ok", error=None)
        except ValueError as error:
            failure = ("crash", f"output not understood: {error}")
    if failure is not None:
        record.update(status=failure[0], error=failure[1], stderr_tail=tail)
    record["peak_host_bytes"] = record["monitor"].get("rss_peak_bytes")
    return record


def aggregate(case: ExternalCase, repeats: list[dict[str, Any]], env: dict[str, Any],
              run_id: int | None = None, interrupted: bool = False) -> dict[str, Any]:
    """The result object of DESIGN.md's contract, for an external command."""
    ok, failed, status, error = repeat_status(repeats)
    throughput = stats.summarize([r["throughput"] for r in ok])
    per_sample = None
    if case.model in models.CATALOGUE:
        per_sample = models.get(case.model).flops_per_sample({}, train=True)
    warnings = stats.spread_warnings(throughput, [])
    if interrupted:
        warnings.append(f"interrupted: {len(ok)} of {case.repeats} repeats finished")
    global_batch = case.batch_size * case.devices * case.nnodes if case.batch_size else None
    peaks = [r["peak_host_bytes"] for r in repeats if r.get("peak_host_bytes")]
    return {
        "schema": SCHEMA, "run_id": run_id, "case_key": case.key(), "label": case.label(),
        "case": case.to_dict(),
        "model": {"params": None, "flops_per_sample": per_sample},
        "status": status, "error": error, "unit": case.unit, "global_batch": global_batch,
        "throughput": throughput, "latency_ms": None,
        "timings": {"window_s": [r["window_s"] for r in ok if r.get("window_s")],
                    "wall_s": [r["wall_s"] for r in ok]},
        "memory": {"peak_host_bytes": max(peaks) if peaks else None, "peak_device_bytes": None},
        "flops": {"per_sample": per_sample,
                  "achieved_per_s": per_sample * throughput["median"]
                  if per_sample and throughput["median"] else None,
                  "peak_per_s": None, "mfu": None},
        "monitor": monitor_means(repeats),
        "warnings": warnings, "repeats_done": len(repeats), "interrupted": interrupted,
        "stderr_tail": failed[0].get("stderr_tail") if failed else None,
        "env": env,
    }


@dataclass
class ExternalRun:
    """Repeats of an external command, each stored as it finishes."""

    case: ExternalCase
    store: Store | None = None
    env: dict[str, Any] = field(default_factory=dict)
    on_repeat: Callable[[dict[str, Any]], None] | None = None
    echo: Callable[[str], None] | None = None

    def run(self) -> dict[str, Any]:
        case = self.case
        run_id = None
        if self.store is not None:
            run_id = self.store.start_run(case.key(), case.label(), case.to_dict(), self.env)
        repeats: list[dict[str, Any]] = []
        try:
            for index in range(case.repeats):
                record = run_once(case, index, self.echo)
                repeats.append(record)
                if self.store is not None and run_id is not None:
                    self.store.add_repeat(run_id, index, record)
                if self.on_repeat:
                    self.on_repeat(record)
                if record["status"] != "ok":
                    break
        except KeyboardInterrupt:
            partial = aggregate(case, repeats, self.env, run_id, interrupted=True)
            if self.store is not None and run_id is not None:
                self.store.finish_run(run_id, partial)
            raise runner.Interrupted(partial) from None
        final = aggregate(case, repeats, self.env, run_id)
        if self.store is not None and run_id is not None:
            self.store.finish_run(run_id, final)
        return final
