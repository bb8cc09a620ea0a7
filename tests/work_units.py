"""How `make test`'s framework phase deals its tests to its two xdist processes (a pytest plugin;
tests/conftest.py loads it; it acts under ``--dist loadfile`` only).

A unit of work is what one process runs in one go, in collection order: a file by default (its
module fixtures made once); the files that share a session fixture, as one; and, new, one
framework's tests, from every file that has some (:func:`unit_of_test`).

Why by framework: the project's VMs write page cache idle for 60 s out to disk (DAMON's
``pageout``; `dlperf system show` names it), and a framework's next process then reads its
libraries from disk again. Dealt by file, the phase went from framework to framework: in one
empty-cache run on a 2-core Zen 4 (2026-12-02), 52 tests started a framework that had been idle
for over a minute, waiting 12 s each on average against 5 s for the others, and a third of the
phase's CPU time was I/O wait.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from horovod_phase import builds_pending, names_horovod

#: the prefix of a unit of tests that use a Horovod environment (tests/horovod_phase.py): dealt
#: after every other unit while `make test`'s Horovod builds, beside the phase, are under way,
#: and next once they have ended (:func:`horovod_units_first`)
HOROVOD_UNIT = "after Horovod's builds: "

#: the test files that read each session fixture (tests/sweep_session.py, tests/tiny_runs.py): a
#: session fixture is made once per xdist process, so the framework phase deals each group to one
#: process as one unit (test_suite_layout.py checks that these are exactly the files that use them)
SESSION_FIXTURE_FILES = {
    "fixture_db": ("tests/report/test_compare.py", "tests/report/test_report.py", "tests/studies/test_sweep.py"),
    "tiny_resnet_run": ("tests/report/test_device_shown.py", "tests/worker/test_run.py"),
}


#: the framework-phase files whose tests each run one of several frameworks, named by the test's
#: parameters or its name (``[tensorflow1-ring]``, ``test_jax_matrix``): each such test is dealt
#: to its framework's unit (:func:`unit_of_test`). Their module fixtures are per framework or
#: take a few seconds (a tiny image folder, `dlperf envs list`), so splitting costs little.
DEALT_BY_ENVIRONMENT = (
    "tests/backends/test_declared_matrix.py", "tests/backends/test_distributed_frameworks.py",
    "tests/backends/test_distributed_tf_jax.py", "tests/backends/test_env_horovod.py",
    "tests/backends/test_env_jax_paddle.py", "tests/backends/test_env_tensorflow.py",
    "tests/backends/test_horovod.py", "tests/backends/test_profile_jax_mindspore.py",
    "tests/backends/test_profile_paddle_mxnet_oneflow.py", "tests/data/test_data_multiprocess.py",
    "tests/data/test_data_pipeline_tf_jax.py", "tests/envs/test_env_versions.py",
    "tests/launchers/test_emulated_frameworks.py", "tests/projection/test_collectives.py",
)


@functools.lru_cache(maxsize=1)
def own_environments() -> frozenset[str]:
    """The frameworks with an environment of their own (the registry's; torch and ONNX Runtime
    live in dlperf's own, which every harness process keeps in memory)."""
    from dlperf.envs import registry

    return frozenset(name for name, fw in registry.load().items() if not fw.main)


def environment_named(text: str) -> str | None:
    """The one framework with an environment of its own that ``text`` names as a word (``-``,
    ``_``, ``[``, ``+``, ``=`` and the like separate words); None for none or several."""
    named = set(re.split(r"[^A-Za-z0-9]+", text)) & own_environments()
    return next(iter(named)) if len(named) == 1 else None


def unit_of_test(nodeid: str) -> str:
    """The framework phase's unit of work (what one xdist process runs in one go) a test belongs
    to: the files that share a session fixture, as one; else its framework's environment, where
    its parameters or its name say which (in DEALT_BY_ENVIRONMENT's files) or, elsewhere, its
    file's name does (``test_env_mxnet.py``, whole); else its file. The tests that use a
    Horovod environment (their ids name Horovod) make units of their own, dealt last while
    `make test`'s builds are under way."""
    file, _, rest = nodeid.partition("::")
    for files in SESSION_FIXTURE_FILES.values():
        if file in files:
            return "+".join(files)
    if file in DEALT_BY_ENVIRONMENT:
        name, _, params = rest.partition("[")
        environment = environment_named(params) or environment_named(name)
    else:
        environment = environment_named(file.rsplit("/", 1)[-1])
    unit = f"environment {environment}" if environment else file
    return f"{HOROVOD_UNIT}{unit}" if names_horovod(nodeid) else unit


def horovod_units_first(pending: bool, horovod_elsewhere: bool) -> bool:
    """Whether a process's next unit is a Horovod one, where any is left: not while `make test`'s
    Horovod builds are under way (``pending``; beside the phase, on the cycles its tests leave:
    their tests would wait for them), nor while the other process has one (their tests spend
    about half their time waiting for a peer, so one beside a unit of busy tests, not two); else
    yes, before the rest. Held back while the builds ran, they would otherwise all come last:
    the framework phase's tail (133-143 s, the cores about 56 % busy)."""
    return not pending and not horovod_elsewhere


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with units of :func:`unit_of_test` in place of files: a file's tests
    on one process (its module fixtures made once), the files that share a session fixture as
    one unit (the fixture's real runs, about 40 s of sweeps for ``fixture_db``, made once
    instead of on both processes), one framework's tests together, the Horovod units last
    while their builds are under way and first once they have ended, one process at a time."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class EnvironmentScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_test(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """The next unit for ``node``, the Horovod units placed first or last
            (:func:`horovod_units_first`)."""
            elsewhere = any(scope.startswith(HOROVOD_UNIT) and not all(work.values())
                            for other, units in self.assigned_work.items() if other is not node
                            for scope, work in units.items())
            first = horovod_units_first(builds_pending(), elsewhere)
            horovod = [s for s in self.workqueue if s.startswith(HOROVOD_UNIT)]
            for scope in (horovod[::-1] if first else horovod):  # their own order kept
                self.workqueue.move_to_end(scope, last=not first)
            super()._assign_work_unit(node)

    return EnvironmentScheduling(config, log)


