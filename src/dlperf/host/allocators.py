"""The memory allocators a case may preload into its workers, and where they are on this machine.

Why: a framework's CPU training allocates and frees large tensors every step (activations,
gradients, optimizer temporaries). glibc's malloc serves big blocks with mmap and returns them
on free, and trims and fragments its arenas across threads, so a step can spend measurable time
in page faults and in the kernel. jemalloc and tcmalloc keep freed blocks in per-thread caches
and reuse them; PyTorch's and Intel's CPU performance guides recommend either one, preloaded
with ``LD_PRELOAD``. A case's ``allocator`` names one; the launcher preloads the library found
here (:func:`library`) into the worker processes and records it in the launch facts.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping

from dlperf.errors import UsageError

ALLOCATORS = ("jemalloc", "tcmalloc")

# the shared libraries each allocator ships as, best first (tcmalloc's minimal build has no heap
# profiler or checker: the allocator alone)
SONAMES = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so",
                 "libtcmalloc.so"),
}
# the Debian package that installs each
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}

_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")


def _library_dirs() -> list[str]:
    """The usual shared-library directories, this architecture's multiarch one first."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/local/lib", "/usr/lib64",
            "/lib64", "/usr/lib", "/lib"]
    return list(dict.fromkeys(dirs))


def _ldconfig_cache() -> dict[str, str]:
    """soname -> path from the dynamic linker's cache (``ldconfig -p``), this machine's word
    size only; empty when ldconfig is not there."""
    ldconfig = shutil.which("ldconfig") or next(
        (path for path in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(path)), None)
    if ldconfig is None:
        return {}
    try:
        text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10,
                              check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    wide = platform.architecture()[0] == "64bit"
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _LDCONFIG_LINE.match(line)
        if match is None:
            continue
        soname, flags, path = match.groups()
        if ("64" in flags) != wide and "x32" not in flags:  # the other word size's copy
            continue
        found.setdefault(soname, path)
    return found


def _find(name: str, cache: dict[str, str]) -> str | None:
    """The first of the allocator's libraries in the linker's cache or a usual directory, with
    its links resolved (the file a process maps, as ``/proc/PID/maps`` names it)."""
    for soname in SONAMES[name]:
        path = cache.get(soname)
        if path and os.path.isabs(path) and os.path.isfile(path):
            return os.path.realpath(path)
        for directory in _library_dirs():
            candidate = os.path.join(directory, soname)
            if os.path.isfile(candidate):
                return os.path.realpath(candidate)
    return None


def available() -> dict[str, str]:
    """Each allocator installed here, by name, with the absolute path of its shared library."""
    cache = _ldconfig_cache()
    found = {name: _find(name, cache) for name in ALLOCATORS}
    return {name: path for name, path in found.items() if path}


def library(name: str, found: Mapping[str, str] | None = None) -> str:
    """The absolute path of allocator ``name``'s shared library among those ``found`` (default:
    :func:`available`); UsageError (one line, with the package that installs it) when it is not
    installed here."""
    if name not in ALLOCATORS:
        raise UsageError(f"allocator: {name!r} is not one of {', '.join(ALLOCATORS)}")
    path = (available() if found is None else found).get(name)
    if path is None:
        raise UsageError(f"allocator: {name} is not installed on this machine (Debian: "
                         f"apt-get install {PACKAGES[name]})")
    return path


def preload(path: str, current: str | None) -> str:
    """``LD_PRELOAD`` with ``path`` in front of its ``current`` value (kept, not replaced)."""
    return f"{path}:{current}" if current else path
