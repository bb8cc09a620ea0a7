"""How many CPUs this process may use, and what follows from it: the default count of a dataset
pipeline's loader workers and a framework's OpenMP pool. The worker side (backends) and the harness
(launchers, sysinfo, tune) count alike from here, without importing the backends package.

Standard library only; valid Python 3.7.
"""

import os
from typing import Any, Dict, Optional, Tuple

#: The most loader workers a dataset pipeline starts by default.
DEFAULT_MAX_WORKERS = 4


def available_cpus():
    # type: () -> int
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_workers():
    # type: () -> int
    """min(4, the CPUs this worker may run on): enough to feed a small model, never more loader
    workers than cores (torch's DataLoader advice; every dataset pipeline here uses it)."""
    return max(1, min(DEFAULT_MAX_WORKERS, available_cpus()))


def loader_workers(case):
    # type: (Dict[str, Any]) -> Tuple[int, Optional[int]]
    """(how many loader workers to start, how many the case asked for: None = the default,
    :func:`default_workers`)."""
    requested = case.get("loader_workers")
    return (default_workers() if requested is None else int(requested)), requested


def default_omp_threads(marker):
    # type: (str) -> None
    """Set ``OMP_NUM_THREADS`` to every available CPU unless the user set it, and set
    ``marker`` so the backend can record that dlperf chose it. For a framework that sizes its
    CPU pools from that variable once, at import, and would otherwise take fewer cores than the
    other frameworks get."""
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(available_cpus())
        os.environ[marker] = "1"
