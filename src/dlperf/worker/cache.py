"""Files dlperf caches between runs (trained weights, ONNX exports), and why they can be trusted.

A cached file is reused only when the sha256 recorded beside it when it was made matches the
file's bytes now (a truncated, swapped or tampered file is made again, never loaded), and cache
directories are private (0700): a model file is code-adjacent data another user must not write.

Standard library only; valid Python 3.7.
"""

import hashlib
import json
import os
from typing import Any, Dict, Optional

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
