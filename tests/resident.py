"""``python tests/resident.py [--parent PID] [--every S] [--limit-bytes N] DIR...``: keep the
pages of DIR's shared libraries that tests bring into memory there, for as long as this
process lives.

Why: the project's machines are VMs whose kernel runs DAMON proactive reclaim (a ``pageout``
scheme on page cache idle for about 60 s). `make test`'s framework phase starts thousands of
framework processes, several frameworks interleaved, so a framework's files were mostly
written out again between two of its tests, and its next process read them from disk: a
OneFlow test file took 37.6 s from a cold page cache against 30.2 s warm on a 2-core Zen 4,
and a TensorFlow import 4.6 s against 3.2 (its shared libraries and its ``.pyc`` files about
half of the difference each).

How: every ``*.so``/``*.so.N`` under the DIRs is mapped at start and locked on fault
(``mlock2(MLOCK_ONFAULT)``: nothing is read or locked ahead); every S seconds this process
touches the pages the tests' own processes have brought in since (``mincore``), which locks
exactly those: the working set the tests use, never the files' untouched pages (CUDA
libraries a CPU host never loads) nor what was in memory before it started (an install's
writes). Locked pages cannot be reclaimed; they are released when this process ends, which it
does on SIGTERM or when PID (its parent, by default) is gone. Nothing here changes what a test
runs or asserts; the kernel's reclaim settings are left alone. The ``.pyc`` files are not
kept: there are tens of thousands of them (more than a process may map), and asking the page
cache about each (``cachestat``) every 30 s took a tenth of a core.

Where locking is not permitted (no CAP_IPC_LOCK, a small RLIMIT_MEMLOCK) it prints why and
exits 0: the tests run as before, only slower. It stops taking new pages at --limit-bytes
(default: a third of the machine's memory), and maps at most four fifths of the kernel's limit
on a process's mappings.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import mmap
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAGE = mmap.PAGESIZE
MLOCK_ONFAULT = 1
MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.mlock2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


@dataclass
class Library:
    """One shared library mapped read-only and locked on fault; ``taken`` marks the pages touched (and
    so locked) here, ``before`` those that were in memory when it was mapped and have not left
    since (an install's writes, another run's pages: not the tests' working set until a test
    brings them in again)."""

    path: Path
    address: int
    size: int
    taken: np.ndarray = field(repr=False)
    before: np.ndarray = field(repr=False)

    @property
    def complete(self) -> bool:
        return bool(self.taken.all())

    def resident(self) -> np.ndarray:
        """Which pages of the file are in the page cache now (mincore's low bit)."""
        vector = np.zeros(len(self.taken), dtype=np.uint8)
        if _libc.mincore(self.address, self.size, vector.ctypes.data) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {self.path}")
        return (vector & 1).astype(bool)

    def take(self, budget: int) -> int:
        """Touch (and so lock) the pages brought in since the last pass, at most ``budget``
        pages; how many were taken."""
        resident = self.resident()
        self.before &= resident
        new = np.flatnonzero(resident & ~self.taken & ~self.before)[:max(0, budget)]
        if len(new):
            view = (ctypes.c_uint8 * self.size).from_address(self.address)
            np.frombuffer(view, dtype=np.uint8)[new * PAGE].sum()  # one read a page: a fault
            self.taken[new] = True
        return len(new)


def libraries(roots: list[Path]) -> list[Path]:
    """Every shared library under ``roots``, each file once (links followed to their target)."""
    seen: set[Path] = set()
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                if name.endswith(".so") or ".so." in name:
                    path = Path(dirpath, name).resolve()
                    if path.is_file():
                        seen.add(path)
    return sorted(seen)


def lock_on_fault(path: Path) -> Library | None:
    """``path`` mapped shared and read-only, locked on fault; None for an empty file. Its
    pages in memory now count as ``before``. PermissionError where this process may not lock
    memory."""
    size = path.stat().st_size
    if size == 0:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if address in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"mmap {path}")
    if _libc.mlock2(address, size, MLOCK_ONFAULT) != 0:
        code = ctypes.get_errno()
        raise PermissionError(code, f"mlock2 {path}: {os.strerror(code)}")
    pages = (size + PAGE - 1) // PAGE
    library = Library(path, address, size, np.zeros(pages, dtype=bool),
                      np.zeros(pages, dtype=bool))
    library.before = library.resident()
    return library


def default_limit() -> int:
    return os.sysconf("SC_PHYS_PAGES") * PAGE // 3


def mapping_limit() -> int:
    """Four fifths of the kernel's limit on one process's mappings, less those it has."""
    try:
        most = int(Path("/proc/sys/vm/max_map_count").read_text())
        have = len(Path("/proc/self/maps").read_text().splitlines())
    except (OSError, ValueError):
        return 0
    return max(0, most * 4 // 5 - have)


class Keeper:
    """The libraries mapped at start, their new pages taken at each pass within a budget."""

    def __init__(self, paths: list[Path], limit: int) -> None:
        self.budget = limit // PAGE
        self.kept: list[Library] = []
        for path in paths[:mapping_limit()]:
            try:
                library = lock_on_fault(path)
            except FileNotFoundError:
                continue
            if library is not None:
                self.kept.append(library)

    def take(self) -> None:
        """One pass: the pages the tests have brought in since the last."""
        for library in self.kept:
            if not library.complete:
                self.budget -= library.take(self.budget)

    def taken_bytes(self) -> int:
        return sum(int(library.taken.sum()) for library in self.kept) * PAGE


def keep(roots: list[Path], parent: int, every: float, limit: int) -> int:
    """Keep pages every ``every`` s until ``parent`` is gone or SIGTERM; one line when it
    starts and one when it ends."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        keeper = Keeper(libraries(roots), limit)
    except PermissionError as refused:
        print(f"resident: not keeping libraries in memory: {refused}", flush=True)
        return 0
    print(f"resident: {len(keeper.kept)} libraries under {', '.join(map(str, roots))}, "
          f"up to {limit / 2**30:.1f} GiB", flush=True)
    try:
        while _alive(parent):
            keeper.take()
            time.sleep(every)
    finally:
        print(f"resident: kept {keeper.taken_bytes() / 2**20:.0f} MiB", flush=True)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--parent", type=int, default=os.getppid())
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--limit-bytes", type=int, default=default_limit())
    args = parser.parse_args(argv)
    return keep([root for root in args.roots if root.is_dir()], args.parent, args.every,
                args.limit_bytes)


if __name__ == "__main__":
    sys.exit(main())
