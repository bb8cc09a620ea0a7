"""tests/resident.py, the framework phase's keeper of the libraries' pages, on real files: it
locks what a process brings into memory after it started, and only that; the kernel cannot
drop those pages while it runs and can once it ends; it ends with its parent; and where it may
not lock memory it says why and exits 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import resident

pytestmark = pytest.mark.parallel

KEEPER = Path(resident.__file__)
SIZE = 2 * 2**20


def library(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_bytes(os.urandom(SIZE))
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    return path


def cached(path: Path) -> int:
    """How many of ``path``'s pages are in the page cache (mincore on a mapping of its own)."""
    mapped = resident.lock_on_fault(path)
    assert mapped is not None
    return int(mapped.resident().sum())


def drop(path: Path) -> None:
    """Ask the kernel to drop ``path``'s clean pages from its cache (locked ones stay)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def kept_after_a_load(path: Path) -> bool:
    """Load ``path`` as a test's process would, let the keeper pass, ask the kernel to drop
    it: whether every page stayed."""
    path.read_bytes()
    time.sleep(0.2)
    drop(path)
    return cached(path) == SIZE // resident.PAGE


def wait_for(check, seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def start(folder: Path, *args: str) -> subprocess.Popen[str]:
    keeper = subprocess.Popen([sys.executable, str(KEEPER), "--every", "0.1", *args, str(folder)],
                              stdout=subprocess.PIPE, text=True)
    assert keeper.stdout is not None
    first = keeper.stdout.readline()
    assert first.startswith("resident: 2 libraries under"), first
    return keeper


def stop(keeper: subprocess.Popen[str]) -> str:
    keeper.terminate()
    out, _ = keeper.communicate(timeout=30)
    assert keeper.returncode == 0
    return out.strip()


def test_it_keeps_what_tests_bring_in_and_lets_it_go_when_it_ends(tmp_path):
    used = library(tmp_path, "libused.so.1")
    earlier = library(tmp_path, "libearlier.so")
    (tmp_path / "notes.txt").write_text("not a library")
    drop(used)
    if cached(used) != 0:
        pytest.skip("this filesystem keeps a file's pages after POSIX_FADV_DONTNEED")
    earlier.read_bytes()  # in memory before the keeper starts: not the tests' working set
    keeper = start(tmp_path)
    try:
        wait_for(lambda: kept_after_a_load(used))
        time.sleep(0.5)  # more passes: what was there before it started is still not taken
        drop(earlier)
        assert cached(earlier) == 0
    finally:
        out = stop(keeper)
    assert out == "resident: kept 2 MiB"
    drop(used)
    assert cached(used) == 0


def test_it_ends_with_its_parent(tmp_path):
    library(tmp_path, "liba.so")
    library(tmp_path, "libb.so")
    parent = subprocess.Popen(["sleep", "1"])
    keeper = start(tmp_path, "--parent", str(parent.pid))
    parent.wait()
    out, _ = keeper.communicate(timeout=30)
    assert keeper.returncode == 0 and out == "resident: kept 0 MiB\n"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
def test_where_it_may_not_lock_memory_it_says_why_and_exits_0(tmp_path):
    library(tmp_path, "liba.so")
    proc = subprocess.run(
        ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--", "sh", "-c",
         f'ulimit -l 0 && exec "{sys.executable}" "{KEEPER}" "{tmp_path}"'],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("resident: not keeping libraries in memory: "), proc.stdout
    assert "mlock2" in proc.stdout and proc.stderr == ""
