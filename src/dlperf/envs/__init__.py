"""Per-framework environments: pinned requirement sets, install, status, check.

Harness side (Python 3.10+). The worker never imports this package: it runs inside the
environment these functions create, from the source tree.

    interpreter(name)   the Python that runs a framework's worker (UsageError if not installed)
    status(name)        EnvStatus: installed? where, which Python, which framework version
    install(name, ...)  create/refresh from requirements/<file>; a no-op when current
    select(name, variant)  the cpu or cuda build to use (cuda where an NVIDIA driver is)
    worker_env(extra)   the environment of a worker process: ours, with the source tree importable
    worker_variables(name, python)  the registry's env: for its worker, expanded
    registry.names()    every framework with an environment entry
    horovod_interpreter(name, variant="cpu")  the Python of NAME+horovod (its bin/horovodrun
                        beside it); UsageError with the reason (refused) or the install command
    horovod_controllers(name, variant="cpu")  {'gloo'} or {'gloo', 'mpi'}: what that build has
    versions.install(name, version, ...)  the version environment NAME==VERSION from the lock
                        resolved for it (kept beside it); refusals are one-line UsageErrors
    versions.installed()  every version environment under root(), as `envs list` shows them
"""

from dlperf.envs import registry, versions
from dlperf.envs.horovod import controllers as horovod_controllers
from dlperf.envs.horovod import interpreter as horovod_interpreter
from dlperf.envs.manage import (SOURCE_ROOT, EnvStatus, InstallError, InstallResult,
                                default_variant, driver_present, env_dir, env_python, install,
                                interpreter, not_installed_message, root, select, status,
                                variant_of, worker_env, worker_variables)

__all__ = ["SOURCE_ROOT", "EnvStatus", "InstallError", "InstallResult", "default_variant",
           "driver_present", "env_dir", "env_python", "horovod_controllers", "horovod_interpreter",
           "install", "interpreter", "not_installed_message", "registry", "root", "select",
           "status", "variant_of", "versions", "worker_env", "worker_variables"]
