"""How a repeat's worker processes are started.

A launcher turns a case into the command line that runs ``python -m dlperf.worker`` once per
rank. The runner owns the process (timeouts, Ctrl-C, failure classes); the launcher only says what
to run and with which environment, so a multi-process launcher drops in beside the local one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import envs
from dlperf.spec import Case
from dlperf.worker.lifeline import HARNESS_PID

SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the directory holding the dlperf package


@dataclass
class Launch:
    """A command to run for one repeat, and the variables it adds to the environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1  # rank result files this launch writes on this node
    # reads the launcher's whole log when no rank wrote a failure: (status, message) or None
    explain: Callable[[str], tuple[str, str] | None] | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # how it was launched, kept in the result


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores() -> int:
    """CPUs this process may run on (an affinity mask or cpuset counts, not the whole machine)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def threads_per_process(case: Case) -> int | None:
    """The case's explicit threads; else, with several processes on a node, the node's cores
    divided among them (at least one each); else None: the framework's own default."""
    if case.threads is not None:
        return case.threads
    if case.devices > 1:
        return max(1, usable_cores() // case.devices)
    return None


def thread_env(threads: int | None) -> dict[str, str]:
    """The variables that size OpenMP / MKL pools (and so torch's intra-op threads)."""
    return {} if threads is None else {name: str(threads) for name in THREAD_VARIABLES}


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: ours, with the source tree importable by any interpreter."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SOURCE_ROOT) + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[HARNESS_PID] = str(os.getpid())  # the worker ties its life to ours (worker.lifeline)
    env.update(extra or {})
    return env


def worker_argv(python: str, case_file: Path, out_dir: Path) -> list[str]:
    return [python, "-m", "dlperf.worker", "--case", str(case_file), "--out-dir", str(out_dir)]


def local(case: Case, case_file: Path, out_dir: Path, python: str | None = None) -> Launch:
    """One worker process on this machine, run by the framework's environment's interpreter
    (dlperf's own for torch); UsageError if that environment is not installed."""
    if case.devices * case.nnodes != 1:
        raise NotImplementedError(
            f"{case.framework} has no multi-process launcher yet (devices={case.devices}, "
            f"nnodes={case.nnodes}); torch cases use dlperf.torchrun")
    threads = threads_per_process(case)
    python = python or envs.interpreter(case.framework)
    declared = envs.worker_variables(case.framework, python)  # the registry's env:, expanded
    facts = {"launcher": "local", "processes": 1, "threads_per_process": threads,
             "env_variant": envs.variant_of(case.framework)}
    if declared:
        facts["framework_env"] = declared
    return Launch(worker_argv(python, case_file, out_dir),
                  env={**declared, **thread_env(threads)}, facts=facts)
