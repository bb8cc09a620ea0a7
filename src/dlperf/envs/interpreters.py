"""Find a Python interpreter of a given major.minor version on this machine.

Looked for, in order: dlperf's own interpreter, ``pythonX.Y`` on PATH (pyenv shims skipped: they
fail for versions pyenv is not set to), then pyenv's and the usual system install directories.
Every candidate is run once to confirm its version and that it has the ``venv`` module.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dlperf.errors import UsageError

PROBE = ("import sys, venv, ensurepip; "
         "print('%d.%d.%d' % sys.version_info[:3])")


def probe(python: str) -> str | None:
    """The full version of ``python`` if it runs and can create a venv with pip, else None."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items()
                                   if k not in ("PYTHONPATH", "PYTHONHOME")})
    except (OSError, subprocess.TimeoutExpired):
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
