"""Whether a dataset's files are in the page cache, and making them not (``--cold-cache``).

A real input pipeline reads its first pass from disk and later passes from memory, so a result
must say which it measured. Before the framework builds anything the worker (local rank 0, once
per node and repeat) syncs and writes 3 to ``/proc/sys/vm/drop_caches`` (page cache, dentries and
inodes; needs root and a writable /proc/sys). Where that is refused it evicts the dataset's own
files with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which any user who can open them may do. Either
way it then *checks* with ``mincore`` on a sample of the files how much of them is still resident,
and only calls the cache cold when the pages are really gone (tmpfs, for one, keeps them: there
they are the storage).

Standard library only, valid Python 3.7.
"""

import ctypes
import ctypes.util
import mmap
import os
from typing import Any, Dict, List, Optional

DROP_CACHES = "/proc/sys/vm/drop_caches"
SAMPLE_FILES = 64
COLD_AT_MOST = 0.05  # resident fraction of the sample at or below which the cache counts as cold

PROT_READ = 1
MAP_SHARED = 1


def sample(paths, count=SAMPLE_FILES):
    # type: (List[str], int) -> List[str]
    """Up to ``count`` paths spread evenly over ``paths`` (every class, not only the first)."""
    if len(paths) <= count:
        return list(paths)
    step = float(len(paths)) / count
    return [paths[int(i * step)] for i in range(count)]


def _libc():
    # type: () -> Any
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def resident_pages(path, libc=None):
    # type: (str, Any) -> Optional[List[int]]
    """(resident, total) pages of one file by ``mincore`` on a mapping that is never touched
    (so the check itself reads nothing in); None where the platform cannot say."""
    libc = libc or _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        length = os.fstat(fd).st_size
        if length == 0:
            return [0, 0]
        address = libc.mmap(None, length, PROT_READ, MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, length, vector) != 0:
                return None
            return [sum(byte & 1 for byte in vector), pages]
        finally:
            libc.munmap(address, length)
    finally:
        os.close(fd)


def resident_fraction(paths):
    # type: (List[str]) -> Optional[float]
    """Fraction of the pages of ``paths`` in the page cache, or None where mincore is missing."""
    try:
        libc = _libc()
        resident = total = 0
        for path in paths:
            counts = resident_pages(path, libc)
            if counts is None:
                return None
            resident += counts[0]
            total += counts[1]
    except (OSError, AttributeError, ValueError):
        return None
    return float(resident) / total if total else None


def cached_bytes():
    # type: () -> Optional[int]
    """The kernel's page cache size (``Cached`` in /proc/meminfo), or None."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("Cached:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def drop_all(path=DROP_CACHES):
    # type: (str) -> Optional[str]
    """sync, then drop page cache, dentries and inodes; None on success, else why not."""
    os.sync()
    try:
        with open(path, "w") as handle:
            handle.write("3\n")
    except OSError as error:
        return "cannot write {} ({})".format(path, error.strerror or error)
    return None


def evict(paths):
    # type: (List[str]) -> Optional[str]
    """Ask the kernel to drop the cached pages of each file; None on success, else why not."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return "posix_fadvise is not available on this platform"
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as error:
            return "cannot open {} ({})".format(path, error.strerror or error)
        try:
            os.fdatasync(fd)
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as error:
            return "posix_fadvise on {} failed ({})".format(path, error.strerror or error)
        finally:
            os.close(fd)
    return None


def make_cold(paths, drop_path=DROP_CACHES):
    # type: (List[str], str) -> Dict[str, Any]
    """Drop the page cache (else evict ``paths``), then check; the record for the result."""
    probe = sample(paths)
    record = {"requested": "cold", "resident_before": resident_fraction(probe),
              "cached_bytes_before": cached_bytes(),
              "sampled_files": len(probe)}  # type: Dict[str, Any]
    refused = drop_all(drop_path)
    if refused is None:
        record["method"] = "sync; echo 3 > {}".format(drop_path)
        record["scope"] = "the whole page cache, dentries and inodes"
    else:
        record["drop_caches_refused"] = refused
        failed = evict(paths)
        if failed is None:
            record["method"] = ("posix_fadvise(POSIX_FADV_DONTNEED) on each of the {} dataset "
                                "files".format(len(paths)))
            record["scope"] = "the dataset's files only; directory and inode caches stay warm"
        else:
            record["method"] = None
            record["note"] = "{}; {}".format(refused, failed)
    record["resident_after"] = resident_fraction(probe)
    record["cached_bytes_after"] = cached_bytes()
    after = record["resident_after"]
    if record["method"] is None:
        record["state"] = "warm"
        record["note"] = "could not drop the cache: " + record["note"]
    elif after is not None and after > COLD_AT_MOST:
        record["state"] = "warm"
        record["note"] = ("{:.0%} of the sampled dataset pages were still resident after the "
                          "drop (a filesystem whose pages are its storage, such as tmpfs, "
                          "cannot be made cold)".format(after))
    else:
        record["state"] = "cold"
        if after is None:
            record["note"] = "mincore unavailable: the drop succeeded but was not verified"
    return record


def observe(paths):
    # type: (List[str]) -> Dict[str, Any]
    """The cache left as it is (no ``--cold-cache``): how much of the dataset is resident. The
    state is what the first pass will meet: cold only when almost none of it is cached."""
    resident = resident_fraction(sample(paths))
    cold = resident is not None and resident <= COLD_AT_MOST
    note = "page cache left as it is (--cold-cache drops it)"
    if cold:
        note += "; almost none of the dataset was cached anyway"
    return {"requested": "warm", "state": "cold" if cold else "warm", "method": None,
            "resident_before": resident, "sampled_files": min(len(paths), SAMPLE_FILES),
            "note": note}
