"""Which interpreter runs a case's worker: the framework's pinned environment, a version
environment (``FW==X``, `dlperf envs install FW --version X`), or one the user brought
(``--python PATH``: a source build, a conda env).

A brought environment is the user's: dlperf checks that the framework imports in it and runs
its worker there from the source tree (PYTHONPATH), with bytecode writing off, so nothing in
it is installed, upgraded or compiled, and it stays byte-for-byte what it was.
"""

from __future__ import annotations

import functools
import os

from dlperf.envs import manage, registry
from dlperf.envs.versions import ENV_NAME as VERSION_ENV
from dlperf.errors import UsageError

# a brought environment's worker: the user's tree gets no __pycache__ of ours or the framework's
BYO_VARIABLES = {"PYTHONDONTWRITEBYTECODE": "1"}
# how long a brought interpreter may take to import its framework before it is refused
BYO_CHECK_TIMEOUT_S = 60.0


def is_version_env(env: str) -> bool:
    return bool(VERSION_ENV.fullmatch(env))


def version_env_python(env: str) -> str:
    """The interpreter of an installed version environment; one line naming the install
    command when it is not installed."""
    match = VERSION_ENV.fullmatch(env)
    assert match is not None
    if manage.read_stamp(env) is None or not manage.env_python(env).exists():
        raise UsageError(f"environment {env} is not installed: run `dlperf envs install "
                         f"{match.group(1)} --version {match.group(2)}`")
    return str(manage.env_python(env))


@functools.lru_cache(maxsize=None)
def checked_byo(framework: str, python: str) -> str:
    """``python`` if it is an interpreter in which ``framework`` (and dlperf's worker) imports;
    else one line saying what is wrong. Checked once per process."""
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise UsageError(f"--python: {python} is not an executable file")
    if framework not in registry.load():
        raise UsageError(f"--python: framework {framework} has no environment entry to check")
    ok, said = manage.import_version(python, registry.get(framework),
                                     timeout_s=BYO_CHECK_TIMEOUT_S)
    if not ok:
        raise UsageError(f"--python: {python} cannot run the {framework} worker: {said}")
    return python


def case_python(framework: str, env: str) -> str:
    """The Python that runs the worker of a case of ``framework`` in environment ``env``
    (a case's ``env`` field); UsageError (one line) when it cannot."""
    if not env:
        return manage.interpreter(framework)
    if is_version_env(env):
        return version_env_python(env)
    return checked_byo(framework, env)


def case_variables(framework: str, env: str, python: str) -> dict[str, str]:
    """The variables the worker runs with beyond dlperf's own: the registry's ``env:`` of the
    framework (expanded for that environment's site-packages) and, for a brought environment,
    no bytecode writing."""
    if not env or is_version_env(env):
        return manage.worker_variables(framework, python)
    try:
        declared = manage.worker_variables(framework, python)
    except UsageError:  # not a venv layout (a system or conda Python): nothing to expand
        declared = {}
    return {**declared, **BYO_VARIABLES}
