"""Processes the harness starts die with it, grandchildren included.

The harness cannot arrange this from outside without ``preexec_fn``, which Python documents as
unsafe while other threads run (the harness has rich and monitor threads). So each process
arranges its own death: ``tie_to_harness()`` in the worker asks the kernel for SIGTERM when its
parent dies (when the parent is the harness) and watches the harness's pid from a daemon thread,
which also covers ranks started by a launcher in between (torchrun). For a command that is not
ours (``dlperf external``), ``python -m dlperf.worker.lifeline -- COMMAND`` does the same and
takes its whole process group down with it.

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


def main(argv=None):
    # type: (object) -> int
    """``python -m dlperf.worker.lifeline -- COMMAND ...``: run COMMAND in this process group
    and take the group down when the harness dies; exit with COMMAND's status."""
    args = list(sys.argv[1:] if argv is None else argv)  # type: ignore[arg-type]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m dlperf.worker.lifeline -- COMMAND ...\n")
        return 2

    def kill_group():
        # type: () -> None
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGKILL)

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
