"""The backend contract as one object: what a framework's backend package exports, ``BACKEND``.

A backend package (``dlperf.backends.<framework>``) must stay light: the harness reads it without
the framework installed. So its entry points are named, not imported: ``"module:function"``
strings that :func:`lazy` imports inside the worker when the worker first calls them.
``tests/backends/test_backend_contract.py`` resolves every one of them with ``ast`` (the module file
exists and defines the name: no framework imported), so a typo fails there, not inside a worker,
and cross-checks the registries that hang off this object (launchers, environments, fidelity
loops, the tests' framework lists).

Standard library and ``dlperf.worker.support`` only; valid Python 3.7.
"""

import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from dlperf.worker.support import Support


def lazy(target):
    # type: (str) -> Callable[..., Any]
    """A function that imports ``"package.module:name"`` when first called and calls it (the
    name is looked up at every call, so a test may replace it in its module)."""
    module, _, name = target.partition(":")

    def call(*args, **kwargs):
        # type: (*Any, **Any) -> Any
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = "%s from %s, imported when first called." % (name, module)
    return call


class Backend(object):
    """One framework's backend: its declaration and where each of its pieces lives.

    ``support``: the :class:`~dlperf.worker.support.Support` declaration (what it runs, and
    why not the rest); the package also names it ``SUPPORT``, which the harness reads.

    Entry points, each ``"module:name"``, called by the worker only:

    - ``resolve_device(requested)`` -> :func:`dlperf.worker.support.resolved_device`'s record,
      before anything is checked or built (required);
    - ``build(case)`` -> :class:`dlperf.worker.workload.Workload` (required);
    - ``build_info()`` -> ``{"version", "git", "build"}``: what the framework says it is (its
      version, git revision and build configuration), recorded in every result's environment
      identity (:mod:`dlperf.worker.identity`); a failure is kept as text there;
    - ``gather_results(result)`` -> every rank's result at global rank 0 (None elsewhere), as
      JSON bytes over the framework's own collectives: required where ``support.distributed``
      names a device, since a job's other ranks would otherwise never reach rank 0's node;
    - ``profiler``: the class (or, where the framework has none that works, the function saying
      why) that the workload's ``profiler()`` returns for ``--profile``
      (:class:`dlperf.worker.profile.Profiler`: the framework's own profiler and the table that
      sorts its operators into the shared categories); None: ``--profile`` is refused with the
      workload's default reason.

    ``process_place``: a light function of the package itself (standard library only) returning
    ``(rank, world size, local rank)`` from the variables its launcher sets, for a launcher that
    does not set torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (nor Horovod's or Open
    MPI's: :data:`dlperf.worker.placement.PLACE_VARIABLES`); None: those variables decide.

    ``launcher``: ``"dlperf.launchers.<module>:<MultiLauncher class>"``, the harness's launcher
    that starts the processes of a multi-process case (the worker never imports it;
    ``dlperf.launchers.registry`` does). Required exactly where ``support.distributed`` names a
    device: a declaration of data parallelism with no launcher would run one local process, so
    it is refused here, when the package is imported.

    The framework's environment is the ``src/dlperf/envs/frameworks.yaml`` entry of the same
    name (:attr:`environment`).
    """

    def __init__(self, support, resolve_device, build, build_info=None, gather_results=None,
                 profiler=None, process_place=None, launcher=None):
        # type: (Support, str, str, Optional[str], Optional[str], Optional[str], Optional[Callable[[], Tuple[int, int, int]]], Optional[str]) -> None
        self.support = support
        self.targets = {"resolve_device": resolve_device, "build": build,
                        "build_info": build_info, "gather_results": gather_results,
                        "profiler": profiler}  # type: Dict[str, Optional[str]]
        for role, target in self.targets.items():
            if target is not None and (":" not in target or not target.startswith("dlperf.")):
                raise ValueError("%s's %s: %r is not 'dlperf.module:name'"
                                 % (support.framework, role, target))
        if support.distributed and (launcher is None or gather_results is None):
            raise ValueError(
                "%s declares distributed devices (%s) but names no %s: its multi-process cases "
                "would run as one local process" % (
                    support.framework, ", ".join(support.distributed),
                    "launcher" if launcher is None else "gather_results"))
        if launcher is not None and not support.distributed:
            raise ValueError("%s names a launcher but declares no distributed devices"
                             % support.framework)
        self.launcher = launcher
        self.process_place = process_place
        self.resolve_device = lazy(resolve_device)
        self.build = lazy(build)
        self.build_info = lazy(build_info) if build_info else None
        self.gather_results = lazy(gather_results) if gather_results else None

    @property
    def framework(self):
        # type: () -> str
        return self.support.framework

    @property
    def environment(self):
        # type: () -> str
        """The ``frameworks.yaml`` entry its worker's interpreter comes from."""
        return self.support.framework
