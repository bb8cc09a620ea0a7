"""What a process killed by a signal failed of, in one wording for the runner, every framework
launcher's log reader and :mod:`dlperf.launchers.spawn`'s own lines.

The kernel's out-of-memory killer ends a process with SIGKILL and nothing else in a measurement
sends it, so SIGKILL reads as ``oom``; any other signal as a ``crash``.

Standard library only, valid Python 3.7: :mod:`dlperf.launchers.spawn` imports it.
"""

import signal
from typing import Tuple

OOM_KILLER = "most likely by the kernel's out-of-memory killer"


def signal_name(signum):
    # type: (int) -> str
    """``SIGKILL``, or ``signal N`` for a number Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal {}".format(signum)


def killed(who, signum):
    # type: (str, int) -> Tuple[str, str]
    """(status, message) for ``who`` (``worker``, ``rank 3:``) ended by signal ``signum``."""
    name = signal_name(signum)
    if signum == signal.SIGKILL:
        return "oom", "{} killed by {}, {}".format(who, name, OOM_KILLER)
    return "crash", "{} died from {}".format(who, name)
