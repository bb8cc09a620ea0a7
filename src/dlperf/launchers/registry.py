"""Which launcher starts a case: one local process, or its framework's own multi-process launcher.

:data:`MULTI_PROCESS` maps each framework to its :class:`~dlperf.launchers.launch.MultiLauncher`,
read from the ``launcher`` its backend's contract names (``BACKEND``,
:class:`dlperf.backends.contract.Backend`, which refuses a ``distributed`` declaration without
one). This is the only place a launcher is picked by framework.
"""

from __future__ import annotations

import importlib
import os

from dlperf import spec
from dlperf.errors import UsageError
from dlperf.host import allocators, emulated
from dlperf.launchers import horovod
from dlperf.launchers.launch import Launcher, MultiLauncher, Rendezvous, local
from dlperf.spec import Case


def _multi_process() -> dict[str, type[MultiLauncher]]:
    """Every backend's declared launcher class, imported (its ``"module:Class"``)."""
    out: dict[str, type[MultiLauncher]] = {}
    for framework in spec.frameworks():
        target = spec.contract(framework).launcher
        if target is not None:
            module, _, name = target.partition(":")
            launcher = getattr(importlib.import_module(module), name)
            if not (isinstance(launcher, type) and issubclass(launcher, MultiLauncher)):
                raise TypeError(f"{framework}'s launcher {target} is not a MultiLauncher")
            out[framework] = launcher
    return out


MULTI_PROCESS: dict[str, type[MultiLauncher]] = _multi_process()


def launcher_for(case: Case, rendezvous: Rendezvous | None = None,
                 python: str | None = None) -> Launcher:
    """:func:`~dlperf.launchers.launch.local` for one process; else the framework's own
    :class:`~dlperf.launchers.launch.MultiLauncher`. A ``--launcher horovod`` case gets
    :class:`~dlperf.launchers.horovod.HorovodLaunch` for any process count (one process under
    horovodrun is a case of its own); it raises UsageError (one line) where Horovod cannot
    start: its environment missing, ``--controller mpi`` without Open MPI, several nodes.

    A framework without one (its backend declares no ``distributed`` devices) gets ``local``:
    its worker refuses the case from ``SUPPORT`` before building anything, so the result is
    ``unsupported`` with the backend's own reason, as for any other undeclared combination.

    A case whose allocator is not installed here is refused (UsageError) before anything runs:
    every launcher preloads it; so is a case with a link rate outside a node of emulated hosts
    (:mod:`dlperf.launchers.emulated`), where nothing would shape it."""
    if case.allocator:
        allocators.library(case.allocator)
    if case.link and not os.environ.get(emulated.NODE_VARIABLE):
        raise UsageError(f"link: {case.link} is shaped between emulated hosts only; measure it "
                         f"with `dlperf run --emulate-hosts N --link {case.link}`, or `dlperf sweep "
                         f"FILE --emulate-hosts`")
    if case.launcher == "horovod":
        return horovod.HorovodLaunch(case, rendezvous, python)
    multi = MULTI_PROCESS.get(case.framework)
    if case.devices * case.nnodes == 1 or multi is None:
        return local
    launcher = multi(rendezvous, python)
    launcher.check(case)
    return launcher
