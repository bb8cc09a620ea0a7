"""Failures of a framework itself, seen only in loaded test phases and never alone, after which
a test that checks a path (not the failure) runs its case once more: a real failure of the path
fails twice, and the first failure is printed for the next look at its cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: msrun's last line when a process it started ended badly; dlperf's error names the process and
#: its exit code from msrun's lines before it (dlperf.launchers.mindspore.exited)
MSRUN_END_FAILURE = "Distributed job exited with exception"


def msrun_failed_after_the_results(result: dict[str, Any] | None) -> bool:
    """MindSpore's msrun exiting 1 at the end of a repeat whose ranks had written their results
    (twice in two whole framework phases on a 2-core Zen 3, once on a Xeon in 2026-12-04's CI;
    not reproduced in 55 runs beside one or two busy cores): a crash whose error is msrun's,
    after the ranks' results."""
    result = result or {}
    return result.get("status") == "crash" and msrun_said_it(str(result.get("error")))


def msrun_said_it(text: str) -> bool:
    """Whether an error (or a node's line) is msrun's failure after the ranks' results."""
    return "ranks' results" in text and ("msrun's " in text or MSRUN_END_FAILURE in text)


def kept_logs(result: dict[str, Any] | None, chars: int = 3000) -> str:
    """The end of each log a failed repeat kept beside its results file (dlperf.runner.keep_logs:
    msrun's scheduler.log and worker_N.log among them), for a failure's message; "" if none."""
    folder = (result or {}).get("logs")
    if not folder or not Path(folder).is_dir():
        return ""
    return "".join(f"\n--- {path.relative_to(folder)} ---\n{path.read_text(errors='replace')[-chars:]}"
                   for path in sorted(Path(folder).rglob("*")) if path.is_file())


#: MXNet's own signal handler's line when a process of it segfaults
MXNET_SEGFAULT = "Segmentation fault: 11"


def mxnet_horovod_job_failed_in_mxnet(result: dict[str, Any] | None) -> bool:
    """A two-node MXNet job under Horovod 0.28.1 that failed in MXNet 1.9.1 or Horovod, not in
    the path a test checks: a rank dead of MXNet's own "Segmentation fault: 11" (then SIGABRT)
    at the job's end, once in over 300 such jobs beside other distributed tests on a 2-core
    Zen 4 (2026-12-05, never alone; Horovod's MXNet allgather, with which dlperf gathers the
    ranks' results, has a history of such crashes: horovod#1409, #1669, #3931); or the job
    ending at its own --timeout, as one hung once in CI (2026-12-05, not reproduced in those
    300)."""
    result = result or {}
    if result.get("status") == "crash":
        return MXNET_SEGFAULT in str(result.get("stderr_tail"))
    return result.get("status") == "timeout" and "(--timeout)" in str(result.get("error"))
