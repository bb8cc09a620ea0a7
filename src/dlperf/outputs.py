"""Output files: checked before anything is measured, written atomically after.

A result that took an hour must not be lost because ``--json`` named a missing directory: the
path is checked when the command starts, and a write that still fails is one line, not a
traceback (the result is in the database already).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlperf import numbers
from dlperf.errors import UsageError


def check_writable(flag: str, path: Path | None) -> Path | None:
    """``path`` can be created or replaced: its directory exists and is writable, and it is not
    a directory itself. None (flag not given) passes."""
    if path is None:
        return None
    if str(path) in ("", "-"):
        raise UsageError(f"{flag}: {str(path)!r} is not a file name")
    if path.is_dir():
        raise UsageError(f"{flag}: {path} is a directory; name a file to write")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{flag}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: directory {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag}: {path} exists and is not writable")
    return path


def write_text(flag: str, path: Path, text: str) -> None:
    """Write through a temporary file beside ``path`` and rename; never leave the temporary."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{flag}: cannot write {path} ({error.strerror or error})") from None


def write_json(path: Path, payload: Any, flag: str = "--json", **options: Any) -> None:
    """Strict JSON (no NaN: :func:`dlperf.numbers.dumps`), indented, written atomically; a
    failure is one line naming ``flag``."""
    write_text(flag, path, numbers.dumps(payload, indent=2, **options))
