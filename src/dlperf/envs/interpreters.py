"""Find a Python interpreter of a given major.minor version on this machine.

Looked for, in order: dlperf's own interpreter, ``pythonX.Y`` on PATH (pyenv shims skipped: they
fail for versions pyenv is not set to), then pyenv's and the usual system install directories.
Every candidate is run once to confirm its version and that it has the ``venv`` module.
"""

from __future__ import annotations

import glob
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlperf.errors import UsageError

PROBE = ("import sys, venv, ensurepip; "
         "print('%d.%d.%d' % sys.version_info[:3])")
PROBE_TIMEOUT_S = 60.0
# what is read of a child's stdout and stderr together, where dlperf does not control the child
OUTPUT_LIMIT = 1 << 20


@dataclass
class Bounded:
    """What :func:`run_bounded` saw: ``stopped`` is "time" or "output" when the child was
    killed for running or printing past its bound (``returncode`` then None)."""

    returncode: int | None
    stdout: str
    stderr: str
    stopped: str | None = None


def run_bounded(argv: list[str], timeout_s: float, limit: int = OUTPUT_LIMIT,
                env: dict[str, str] | None = None) -> Bounded:
    """Run ``argv`` (stdin closed) for at most ``timeout_s`` s, reading at most ``limit`` bytes
    of its output; past either bound its process group is killed. For programs dlperf does not
    control (a user's interpreter, a system tool): ``subprocess.run(capture_output=True)`` keeps
    all they print. OSError when it cannot start."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    read: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total, stopped, left_open = 0, None, False
    deadline = time.monotonic() + timeout_s
    try:
        with selectors.DefaultSelector() as waiting:
            for fd in read:
                waiting.register(fd, selectors.EVENT_READ)
            while waiting.get_map() and stopped is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = "time"
                    break
                ended = proc.poll() is not None
                events = waiting.select(min(left, 0.5))
                if ended and not events:
                    left_open = True  # it exited; something it started holds the pipes
                    break
                for key, _ in events:
                    data = os.read(key.fd, 65536)
                    if not data:
                        waiting.unregister(key.fd)
                        continue
                    read[key.fd].append(data[:max(0, limit - total)])
                    total += len(data)
                    if total > limit:
                        stopped = "output"
                        break
        if stopped is None:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped = "time"
    finally:
        if stopped is not None or left_open or proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its session: what it started goes too
            except (ProcessLookupError, PermissionError):
                pass
        proc.stdout.close()
        proc.stderr.close()
        proc.wait()
    out, err = (b"".join(chunks).decode(errors="replace") for chunks in read.values())
    return Bounded(None if stopped else proc.returncode, out, err, stopped)


def probe(python: str) -> str | None:
    """The full version of ``python`` if it runs and can create a venv with pip, else None."""
    try:
        done = run_bounded([python, "-c", PROBE], PROBE_TIMEOUT_S,
                           env={k: v for k, v in os.environ.items()
                                if k not in ("PYTHONPATH", "PYTHONHOME")})
    except OSError:
        return None
    lines = done.stdout.split()
    return lines[-1] if done.returncode == 0 and lines else None


def short(version: str) -> str:
    """'3.7.16' -> '3.7'."""
    return ".".join(version.split(".")[:2])


def _candidates(version: str) -> list[str]:
    exe = f"python{version}"
    found: list[str] = []
    base = getattr(sys, "_base_executable", None) or sys.executable
    if short("%d.%d" % sys.version_info[:2]) == version:
        found += [sys.executable, base]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and "shims" not in Path(folder).parts:
            path = shutil.which(exe, path=folder)
            if path:
                found.append(path)
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        # newest patch release first
        found += sorted(glob.glob(os.path.join(root, "versions", version + ".*", "bin", exe)),
                        reverse=True)
    for folder in ("/usr/local/bin", "/usr/bin", "/opt/homebrew/bin"):
        found.append(os.path.join(folder, exe))
    if "shims" in os.environ.get("PATH", ""):
        path = shutil.which(exe)
        if path:
            found.append(path)  # a shim last: it may still work
    unique: list[str] = []
    for path in found:
        if path not in unique and os.path.isfile(path) and os.access(path, os.X_OK):
            unique.append(path)
    return unique


def find(version: str) -> tuple[str, str]:
    """(path, full version) of a working interpreter with major.minor ``version``."""
    for path in _candidates(version):
        full = probe(path)
        if full and short(full) == version:
            return path, full
    raise UsageError(f"no Python {version} interpreter found (looked on PATH and in pyenv); "
                     f"install one or pass --python PATH")


def check(path: str, wanted: str | None) -> tuple[str, str]:
    """Validate a user-given interpreter; returns (absolute path, full version)."""
    resolved = shutil.which(path) or path
    full = probe(resolved)
    if full is None:
        raise UsageError(f"--python: {path} does not run, or lacks the venv/ensurepip modules")
    if wanted and short(full) != wanted:
        # allowed (the user knows best), but the pins were chosen for `wanted`
        print(f"dlperf envs: warning: the pinned set is meant for Python {wanted}; "
              f"{path} is {full}", file=sys.stderr)
    return os.path.abspath(resolved), full
