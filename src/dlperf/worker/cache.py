"""Files dlperf caches between runs (trained weights, ONNX exports), and why they can be trusted.

A cached file is reused only when the sha256 recorded beside it when it was made matches the
file's bytes now (a truncated, swapped or tampered file is made again, never loaded), and cache
directories are private (0700): a model file is code-adjacent data another user must not write.
A file is made under an exclusive lock beside it (two processes never make it at once) and
moved in whole from a temporary file, with its facts written after it.

Standard library only; valid Python 3.7.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

CHUNK = 1 << 20


def private_dir(path):
    # type: (str) -> str
    """``path`` as a directory only this user can enter (created 0700, tightened if it exists
    and is ours)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid == os.getuid():
        os.chmod(path, 0o700)
    return path


def file_sha256(path):
    # type: (str) -> str
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def verified_facts(path, meta):
    # type: (str, str) -> Optional[Dict[str, Any]]
    """The facts stored in ``meta`` when ``path`` still has the sha256 they record; else None
    (missing, unreadable, or changed since it was cached)."""
    try:
        with open(meta) as handle:
            facts = json.load(handle)
        recorded = facts.get("sha256")
        if not isinstance(recorded, str) or len(recorded) != 64:
            return None
        return facts if file_sha256(path) == recorded else None
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def locked(path):
    # type: (str) -> Iterator[None]
    """Hold the exclusive lock of the cached file ``path`` (``path.lock``, flock)."""
    with open(path + ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def store(path, suffix, write):
    # type: (str, str, Callable[[str], Any]) -> Tuple[Any, str]
    """Make ``path`` whole or not at all: ``write(tmp)`` fills a temporary file (named with
    ``suffix``, for writers that read it) in the same directory, which then replaces ``path``.
    (what ``write`` returned, the file's sha256)."""
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=os.path.dirname(path))
    os.close(fd)
    try:
        made = write(tmp)
        digest = file_sha256(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return made, digest


def save_facts(meta, facts):
    # type: (str, Dict[str, Any]) -> None
    """Write a cached file's facts (with its sha256) as JSON beside it, atomically."""
    with open(meta + ".tmp", "w") as handle:
        json.dump(facts, handle)
    os.replace(meta + ".tmp", meta)
