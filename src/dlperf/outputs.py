"""Output files: checked before anything is measured, written atomically after.

A result that took an hour must not be lost because ``--json`` named a missing directory: the
path is checked when the command starts, and a write that still fails is one line, not a
traceback (the result is in the database already).

What a path names decides how it is written: a regular file (or a new one) through a temporary
beside it and a rename; a link through to what it resolves to, the same way, the link itself
kept; a device or a FIFO (``/dev/null``, ``/dev/stdout`` on a terminal or a pipe) opened and
written in place, never renamed over.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from dlperf import numbers
from dlperf.errors import UsageError


def _atomic_target(path: Path) -> Path | None:
    """The regular file (existing or not) an atomic write replaces: ``path``, or what the link
    ``path`` resolves to; None for a device, FIFO or other node, written in place."""
    try:
        mode = os.stat(path).st_mode  # follows links, /proc's descriptor links included
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return None
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_writable(flag: str, path: Path | None) -> Path | None:
    """``path`` can be written: a file (or a link to one) whose directory exists and is
    writable, or a writable device or FIFO; not a directory or a socket. None (flag not given)
    passes."""
    if path is None:
        return None
    if str(path) in ("", "-"):
        raise UsageError(f"{flag}: {str(path)!r} is not a file name")
    if path.is_dir():
        raise UsageError(f"{flag}: {path} is a directory; name a file to write")
    try:
        target = _atomic_target(path)
    except OSError as error:
        raise UsageError(f"{flag}: cannot use {path} ({error.strerror or error})") from None
    if target is None:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            raise UsageError(f"{flag}: {path} is a socket; name a file, a device or a FIFO")
        if not os.access(path, os.W_OK):
            raise UsageError(f"{flag}: {path} exists and is not writable")
        return path
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{flag}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: directory {parent} is not writable")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{flag}: {path} exists and is not writable")
    return path


def _mode_for(target: Path) -> int:
    """The permissions a replaced file keeps, or a new file's under the process's umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(flag: str, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as the module says (a FIFO waits for its reader); never leave
    the temporary."""
    tmp = None
    try:
        target = _atomic_target(path)
        if target is None:
            with open(path, "w") as handle:
                handle.write(text)
            return
        # made exclusively (O_EXCL): never a name a link placed beforehand could redirect
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
        tmp = Path(name)
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        tmp.replace(target)
    except OSError as error:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise UsageError(f"{flag}: cannot write {path} ({error.strerror or error})") from None


def show_markdown(text: str, path: Path | None, flag: str = "--markdown") -> None:
    """A table printed, and written to ``path`` (``flag``'s file) where one is given, ending in
    a newline: what the benchmarks' table scripts give back."""
    print(text)
    if path:
        write_text(flag, path, text + "\n")


def write_json(path: Path, payload: Any, flag: str = "--json", **options: Any) -> None:
    """Strict JSON (no NaN: :func:`dlperf.numbers.dumps`), indented, written as
    :func:`write_text` writes; a failure is one line naming ``flag``."""
    write_text(flag, path, numbers.dumps(payload, indent=2, **options))
