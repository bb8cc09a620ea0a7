"""Where a worker was when its repeat ran out of time.

A repeat past ``--timeout`` is stopped whole; until now its result said only that. A hung
collective, a rank that never reached its peers or a compile that never ended then left nothing
to look at (a stopped launcher prints its own traceback, not its ranks'). So each worker arms
itself (:func:`arm`): on :data:`SIGNAL` it writes every thread's Python stack (faulthandler,
safe in a signal handler, and it answers while the main thread is blocked in native code such
as a collective's wait) to a file of its own in the repeat's folder, named by its pid. Before it
stops a timed-out job the harness signals the workers whose files it finds there, and only
those (a process that did not arm itself would die of the signal), and keeps what they wrote
(``dlperf.runner.worker_stacks``).

Standard library only; valid Python 3.7.
"""

import faulthandler
import os
import signal

SIGNAL = signal.SIGUSR1
PREFIX = "stacks."
SUFFIX = ".txt"
#: what faulthandler writes once a thread's stack is written (the file's first line is ours)
WRITTEN = "(most recent call first)"

_files = []  # the open files faulthandler writes to: kept open as long as the worker lives


def path_of(out_dir, pid):
    # type: (str, int) -> str
    return os.path.join(out_dir, "{}{}{}".format(PREFIX, pid, SUFFIX))


def pid_of(name):
    # type: (str) -> int
    """The pid in a stacks file's name; -1 for any other name."""
    middle = name[len(PREFIX):-len(SUFFIX)] if (name.startswith(PREFIX)
                                                 and name.endswith(SUFFIX)) else ""
    return int(middle) if middle.isdigit() else -1


def arm(out_dir):
    # type: (str) -> None
    """On :data:`SIGNAL`, write every thread's Python stack to this worker's file in
    ``out_dir``; the file exists from now on, which is what tells the harness to signal it."""
    handle = open(path_of(out_dir, os.getpid()), "w")
    handle.write("worker pid {}:\n".format(os.getpid()))
    handle.flush()
    faulthandler.register(SIGNAL, file=handle, all_threads=True)
    _files.append(handle)
