"""One measurement at a time on this host.

Two measurements on one machine corrupt each other's timings. Every measuring command (run,
infer, external, accuracy, sweep; `ab` through its turns) holds this host-wide lock while it
measures: a second one waits, saying for whom, or with ``--no-wait`` exits 2. The lock is a
``flock`` on a file, so the kernel drops it when its holder dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dlperf.errors import UsageError

ENV_DIR = "DLPERF_LOCK_DIR"


def lock_path() -> Path:
    return Path(os.environ.get(ENV_DIR) or tempfile.gettempdir()) / "dlperf-measure.lock"


def _holder(handle: object) -> str:
    try:
        info = json.loads(Path(lock_path()).read_text() or "{}")
    except (OSError, ValueError):
        return "another process"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid', '?')} ({info.get('command', '?')}, since {since})"


@contextlib.contextmanager
def held(wait: bool = True, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the host's measurement lock for the block; wait for it unless ``wait`` is false."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            if not wait:
                raise UsageError(f"--no-wait: another measurement is running on this host: "
                                 f"{holder}") from None
            (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
                f"waiting for the host's measurement lock, held by {holder}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "since": time.time(),
                                 "command": " ".join(["dlperf", *sys.argv[1:3]])}))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_argument(parser: object) -> None:
    parser.add_argument("--no-wait", action="store_true",  # type: ignore[attr-defined]
                        help="exit 2 instead of waiting when another measurement is running")
