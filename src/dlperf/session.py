"""A measuring session: what every command that measures opens before its first case.

The host's measurement lock (two measurements on one machine corrupt each other's timings), the
results database, the machine's description that every result carries (``sysinfo``) and its
matmul peaks, which MFU needs (probed once per machine; the probe is a measurement, so it runs
under the lock). One order for all: a command that must wait for the lock, or gives up with
``--no-wait``, has touched no database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlperf import display
from dlperf.host import measurelock, peak, sysinfo
from dlperf.store import Store


@dataclass(frozen=True)
class Session:
    """The open database and the description of the machine the results are stored with."""

    store: Store
    env: dict[str, Any]


@contextlib.contextmanager
def measuring(db: str | Path, wait: bool, probe_peaks: bool = True,
              db_first: bool = False) -> Iterator[Session]:
    """Hold the lock (waiting for it unless ``wait`` is false) and open ``db`` for the block.

    ``probe_peaks``: make sure this machine's matmul peaks are known (the commands whose
    results report MFU). ``db_first``: check the database, read-only, before waiting for the
    lock, for a command whose bad ``--db`` should fail at once rather than after the wait
    (accuracy); it is opened for writing only once the lock is held.
    """
    with contextlib.ExitStack() as stack:
        if db_first:  # checked read-only: a command that then gives up has written nothing
            peeked = Store.peek(db)
            if peeked is not None:
                peeked.close()
        stack.enter_context(measurelock.held(wait))
        store = stack.enter_context(Store(db))
        env = sysinfo.capture()
        if probe_peaks:
            peak.ensure(env, say=display.note)
        yield Session(store, env)
