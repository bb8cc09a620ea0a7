"""A single-process worker's exit, without the interpreter's teardown.

Once its result file is written a worker has nothing left to do, yet a normal exit spent most
of a second freeing the framework's modules and objects one by one (measured on a 2-core EPYC,
ResNet-50 at image 32: torch 0.9 s, TensorFlow 1.1, MindSpore 0.5, Paddle 0.3): wall time that
every fresh-process repeat paid and the harness waited for. :func:`leave` does what a normal exit
does that anything outside the process could notice, in the interpreter's order (threading's
shutdown: its exit hooks, then the wait for threads that are not daemons; then the ``atexit``
handlers: multiprocessing's children, logging, a framework's own shutdown), flushes stdout and
stderr, and ends with ``os._exit``.

A rank of a job of several processes exits normally instead: its peers and its launcher may
depend on its framework's teardown (a scheduler's heartbeat, MPI's finalize).
"""

import atexit
import os
import sys
import threading


def leave(code):
    # type: (int) -> None
    """Exit with ``code`` once the threads and exit handlers are done; never returns."""
    # the interpreter's own first two steps of an exit: threading's exit hooks (a thread pool
    # tells its idle threads to stop) and the wait for every thread that is not a daemon, then
    # the atexit handlers
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing more can be said there
            pass
    os._exit(code)
