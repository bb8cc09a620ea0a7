"""Each test's wall time beside its CPU time, to find the tests that wait (pytest plugin;
tests/conftest.py loads it; it does nothing unless ``DLPERF_TEST_TIMELINE`` names a file).

pytest's ``--durations`` says how long a test took, not whether it worked or waited. A framework
test that waits (a rendezvous that retries after a fixed sleep, a timeout it must see, a cold
library read from disk) holds its core idle, and on a 2-core machine that is half the machine.
With ``DLPERF_TEST_TIMELINE=FILE`` every test appends one JSON line to FILE where it runs (an
xdist worker or the only process): its id, the worker, its start and end (epoch seconds) and its
CPU seconds: this process's and its children's that were waited for (``getrusage``; a child
killed and never waited for is not counted). The controlling process ends with the tests that
waited most, wall minus CPU, and the test files that cost the most CPU (on a CPU-bound suite, a
file's share of the minutes). The lines of earlier runs in FILE are kept and not summed: each
run has its own ``run`` id.

    DLPERF_TEST_TIMELINE=/tmp/timeline.jsonl make test

It found OneFlow's own 10-s retry at start-up (backends/oneflow/workload.py's
``wait_for_master``): a 2-process OneFlow test took 113.6 s of wall time for 19.2 s of CPU.
"""

from __future__ import annotations

import json
import os
import resource
import time
import uuid
from collections.abc import Generator
from typing import Any

import pytest

#: the file the lines go to; unset, the plugin does nothing
ENV = "DLPERF_TEST_TIMELINE"
#: this run's id, set by the controlling process and inherited by its xdist workers
RUN_ENV = "DLPERF_TEST_TIMELINE_RUN"
#: how many tests the summary lists
SHOWN = 15


def cpu_seconds() -> float:
    """User and system CPU of this process and of its children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(ENV) and not hasattr(config, "workerinput"):
        os.environ[RUN_ENV] = uuid.uuid4().hex  # before the workers start: they inherit it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, Any, Any]:
    """One line per test where it runs: its setup, call and teardown together."""
    path = os.environ.get(ENV)
    if not path:
        return (yield)
    start, cpu = time.time(), cpu_seconds()
    try:
        return (yield)
    finally:
        row = {"run": os.environ.get(RUN_ENV, ""), "id": item.nodeid,
               "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "start": start,
               "end": time.time(), "cpu_s": round(cpu_seconds() - cpu, 3)}
        with open(path, "a") as handle:  # one short line per write: appends do not interleave
            handle.write(json.dumps(row) + "\n")


def rows_of_this_run(path: str) -> list[dict[str, Any]]:
    run = os.environ.get(RUN_ENV, "")
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("run") == run:
            rows.append(row)
    return rows


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if not path or hasattr(config, "workerinput"):
        return
    rows = rows_of_this_run(path)
    if not rows:
        return
    for row in rows:
        row["wall_s"] = row["end"] - row["start"]
    wall = sum(r["wall_s"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    terminalreporter.write_sep("=", f"the {min(SHOWN, len(rows))} tests that waited most "
                                    f"(wall - CPU; {ENV}={path})")
    terminalreporter.write_line(f"{len(rows)} tests: {wall:.1f} s of wall time, {cpu:.1f} s of "
                                f"CPU ({100 * cpu / wall if wall else 0:.0f} %)")
    for row in sorted(rows, key=lambda r: r["cpu_s"] - r["wall_s"])[:SHOWN]:
        terminalreporter.write_line(f"{row['wall_s']:8.2f}s wall {row['cpu_s']:8.2f}s CPU  "
                                    f"{row['id']}")
    by_file = files_by_cpu(rows)
    terminalreporter.write_sep("=", f"the {min(SHOWN, len(by_file))} test files that cost the "
                                    f"most CPU (of {len(by_file)})")
    for file, (count, file_wall, file_cpu) in by_file[:SHOWN]:
        share = 100 * file_cpu / cpu if cpu else 0
        terminalreporter.write_line(f"{file_cpu:8.1f} CPU-s ({share:4.1f} %) {file_wall:8.1f} "
                                    f"wall-s {count:4d} tests  {file}")


def files_by_cpu(rows: list[dict[str, Any]]) -> list[tuple[str, tuple[int, float, float]]]:
    """Each test file's tests, wall and CPU seconds, the costliest first: on a CPU-bound suite
    a file's CPU is its share of the minutes, and where to look first for a cut."""
    files: dict[str, tuple[int, float, float]] = {}
    for row in rows:
        file = row["id"].split("::", 1)[0]
        count, wall, cpu = files.get(file, (0, 0.0, 0.0))
        files[file] = (count + 1, wall + row["wall_s"], cpu + row["cpu_s"])
    return sorted(files.items(), key=lambda item: -item[1][2])
