"""Processes the harness starts die with it, grandchildren included.

The harness cannot arrange this from outside without ``preexec_fn``, which Python documents as
unsafe while other threads run (the harness has rich and monitor threads). So each process
arranges its own death: ``tie_to_harness()`` in the worker asks the kernel for SIGTERM when its
parent dies (when the parent is the harness) and watches the harness's pid from a daemon thread,
which also covers ranks started by a launcher in between (torchrun). For a command that is not
ours (``dlperf external``, an emulated host's node), ``python -m dlperf.worker.lifeline --
COMMAND`` does the same and takes everything below it down: its process group and every
descendant, those in sessions of their own too (a node's ``dlperf run`` starts its launcher in a
new session, and torchrun outlived a SIGKILLed node by minutes when only the group went).

Standard library only; valid Python 3.7.
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

HARNESS_PID = "DLPERF_HARNESS_PID"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
POLL_S = 1.0


def _alive(pid):
    # type: (int) -> bool
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tie_to_harness(on_death=None):
    # type: (object) -> None
    """Die (SIGTERM to ourselves, or ``on_death()``) when the harness named in the environment
    goes away. A no-op outside dlperf."""
    text = os.environ.get(HARNESS_PID)
    if not text or not text.isdigit():
        return
    harness = int(text)
    if sys.platform.startswith("linux") and os.getppid() == harness:
        try:
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if not _alive(harness):
        os._exit(1)

    def watch():
        # type: () -> None
        while _alive(harness):
            time.sleep(POLL_S)
        if on_death is not None:
            on_death()  # type: ignore[operator]
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        os._exit(1)

    threading.Thread(target=watch, name="dlperf-lifeline", daemon=True).start()


def _children_by_parent():
    # type: () -> dict
    """{parent pid: [child pids]} from /proc (Linux; empty elsewhere)."""
    found = {}  # type: dict
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found.setdefault(int(fields[1]), []).append(int(entry))
    return found


def descendants(pid):
    # type: (int) -> list
    """Every process below ``pid``, children first."""
    children = _children_by_parent()
    below, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        below.append(child)
        todo.extend(children.get(child, []))
    return below


def kill_below(pid, rounds=5):
    # type: (int, int) -> None
    """SIGKILL every descendant of ``pid``, whatever its session, until none is left (a killed
    process starts nothing, and as the subreaper ``pid`` inherits any orphan of the round)."""
    for _ in range(rounds):
        below = descendants(pid)
        if not below:
            return
        for child in below:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass


def main(argv=None):
    # type: (object) -> int
    """``python -m dlperf.worker.lifeline -- COMMAND ...``: run COMMAND in this process group
    and take the group and every descendant down when the harness dies; exit with COMMAND's
    status."""
    args = list(sys.argv[1:] if argv is None else argv)  # type: ignore[arg-type]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m dlperf.worker.lifeline -- COMMAND ...\n")
        return 2

    def kill_group():
        # type: () -> None
        if threading.current_thread() is threading.main_thread():  # else a ValueError
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_below(os.getpid())
        os.killpg(os.getpgrp(), signal.SIGKILL)

    if sys.platform.startswith("linux"):  # orphans below stay below: kill_below finds them
        try:
            ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    tie_to_harness(kill_group)
    try:
        child = subprocess.Popen(args)
    except OSError as error:
        sys.stderr.write("cannot start %r: %s\n" % (args[0], error.strerror))
        return 127
    signal.signal(signal.SIGTERM, lambda *_: kill_group())
    code = child.wait()
    if code < 0:  # die of the same signal, so the harness sees what the command died of
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP take no handler: already default
            pass
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
