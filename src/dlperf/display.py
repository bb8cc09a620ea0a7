"""Terminal output: progress while measuring, and the results table people read."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console, JustifyMethod
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from dlperf.result import device_of
from dlperf.spec import Case

# Piped output (CI logs, `| tee`) has no terminal width; a table wrapped to 80 columns is unreadable.
# markup=False: every string printed is data (a stored error, a label, a host name) and is shown
# as it is; styles are applied with Text objects (see line()), never with [tags] in strings.
out = Console(width=None if Console().is_terminal else 180, markup=False, highlight=False)
err = Console(stderr=True, markup=False, highlight=False)


def line(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and (string, style) pairs, e.g. line(("failed", "red"), ": ", msg)."""
    return Text.assemble(*[(str(p[0]), p[1]) if isinstance(p, tuple) else str(p)
                           for p in parts])


def note(message: str) -> None:
    """A side remark on stderr (what the tool is doing besides the measurement)."""
    err.print(line(message))


def warn(message: str, console: Console | None = None) -> None:
    """A "! ..." note under a table, in yellow."""
    (console or out).print(line(("! " + message, "yellow")))


def human_bytes(value: float | None) -> str:
    if not value:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return "-"


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


@contextlib.contextmanager
def progress(case: Case) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A progress bar over the repeats; yields the callback the runner calls per repeat."""
    bar = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                   TextColumn("{task.completed}/{task.total} repeats"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=err, transient=True)

    def on_repeat(record: dict[str, Any]) -> None:
        if record["status"] == "ok":
            err.print(f"  repeat {record['repeat'] + 1}/{case.repeats}: "
                      f"{number(record['throughput'])} samples/s "
                      f"(window {record['window_s']:.2f} s, first step "
                      f"{record['first_step_s']:.2f} s)")
        else:
            err.print(line(f"  repeat {record['repeat'] + 1}/{case.repeats}: ",
                           (record["status"], "red"), f": {record['error']}"))
            logs_kept(record, "    ")
        bar.advance(task)

    with bar:
        task = bar.add_task(case.label(), total=case.repeats)
        yield on_repeat


def logs_kept(record: dict[str, Any], indent: str) -> None:
    """Where a failed repeat's logs were kept (:func:`dlperf.runner.keep_logs`), if they were:
    one line, never wrapped, so the path can be copied whole."""
    if record.get("logs"):
        err.print(line(f"{indent}its logs: {record['logs']}"), soft_wrap=True)


def new_table(title: str | None, columns: Sequence[tuple[str, JustifyMethod]]) -> Table:
    """A rich table with these (name, justify) columns: every table dlperf prints."""
    made = Table(title=title, show_lines=False)
    for name, justify in columns:
        made.add_column(name, justify=justify)
    return made


def environment_text(environment: dict[str, Any]) -> str:
    """The framework version a result was measured with, and the environment's name where it
    is not the framework's pinned one (``jax==0.9.2``, ``python:/path/to/python``)."""
    version = environment.get("framework_version") or "-"
    name = environment.get("name")
    return version if not name or name == environment.get("framework") else f"{version} ({name})"


def results_table(results: Sequence[dict[str, Any]], title: str | None = None) -> None:
    """One row per result: the device it ran on (resolved: ``cpu``, ``cuda:0 NVIDIA ...``), the
    median and the spread beside it, memory, and any failure."""
    labelled = any((r.get("environment") or {}).get("label") for r in results)
    table = new_table(title, (
        ("framework", "left"), ("version", "left"), *((("label", "left"),) if labelled else ()),
        ("model", "left"), ("task", "left"), ("precision", "left"),
        ("compile", "left"), ("device", "left"), ("devices", "right"), ("batch", "right"),
        ("samples/s (median)", "right"), ("95% CI", "right"), ("CV", "right"), ("n", "right"),
        ("TFLOP/s", "right"), ("MFU", "right"), ("peak mem", "right"), ("status", "left")))
    notes: list[str] = []
    for result in results:
        # a result stored bare (its aggregation failed) has no throughput, FLOPs or memory
        case, tp = result["case"], result.get("throughput") or {}
        flops, memory = result.get("flops") or {}, result.get("memory") or {}
        ci = tp.get("ci95")
        achieved = flops.get("achieved_per_s")
        status = Text(result["status"], style="" if result["status"] == "ok" else "red")
        if case.get("plant_slowdown"):  # calibration's planted slowdown: never a real case
            status.append(f" PLANTED -{case['plant_slowdown']:.0%}", style="magenta")
        if result["status"] != "ok":
            notes.append(f"{result['label']}: {result.get('error')}")
        for warning in result.get("warnings") or []:
            notes.append(f"{result['label']}: {warning}")
        environment = result.get("environment") or {}
        table.add_row(
            case["framework"], Text(environment_text(environment)),
            *((Text(environment.get("label") or ""),) if labelled else ()),
            case["model"], str(case.get("task", "-")), str(case.get("precision", "-")),
            "yes" if case.get("compile") else "no", Text(device_of(result)),
            str((case.get("devices") or 1) * (case.get("nnodes") or 1)),
            str(case.get("batch_size")), number(tp.get("median")),
            f"{number(ci[0])}–{number(ci[1])}" if ci else "-", percent(tp.get("cv")),
            str(tp.get("n", 0)), number(achieved / 1e12, 2) if achieved else "-",
            percent(flops.get("mfu")),
            human_bytes(memory.get("peak_device_bytes") or memory.get("peak_host_bytes")),
            status)
    out.print(table)
    for note in notes:
        warn(note)


def ranks_table(result: dict[str, Any]) -> None:
    """Each rank's own figures (median over repeats): the job runs at its slowest rank's pace."""
    table = Table(title="ranks (the job's window is its slowest rank's)", show_lines=False)
    for name in ("rank", "host", "threads", "samples/s (median)", "window s (median)",
                 "first step s", "all-reduce s", "slowest in", "peak host mem"):
        table.add_column(name, justify="left" if name == "host" else "right")
    for rank in result.get("ranks") or []:
        windows = [w for w in rank["window_s"] if w is not None]
        firsts = [f for f in rank["first_step_s"] if f is not None]
        reduces = [a for a in rank.get("allreduce_s") or [] if a is not None]
        table.add_row(str(rank["rank"]), str(rank.get("host") or "-"),
                      str(rank.get("threads") or "-"), number(rank["throughput_median"]),
                      number(statistics.median(windows), 3) if windows else "-",
                      number(statistics.median(firsts), 2) if firsts else "-",
                      number(statistics.median(reduces), 3) if reduces else "-",
                      f"{rank['slowest_in']}/{len(windows)}",
                      human_bytes(rank.get("peak_host_bytes")))
    out.print(table)
