"""Where a CPU machine's NVIDIA DALI lives, and putting it within the worker's reach.

A GPU install gets DALI in dlperf's own environment with torch's CUDA build (the torch cuda lock
pins it). On a CPU machine dlperf's environment stays as ``make setup`` made it: ``dlperf envs
install dali`` puts DALI's pinned, hashed set in a directory of its own under the environments'
cache root, and a ``--loader dali`` worker appends that directory to ``sys.path``, so every
package dlperf's environment already has (torch, numpy) is still taken from there.

Standard library only; valid Python 3.7 (the worker and the harness both import it). The cache
root follows the same rule as ``dlperf.envs.manage.root``, which the worker cannot import.
"""

import os
import sys

OVERLAY = "torch-dali"  # its directory under the environments' cache root


def envs_root():
    # type: () -> str
    """``$DLPERF_ENVS``, else ``$XDG_CACHE_HOME/dlperf/envs``, else ``~/.cache/dlperf/envs``."""
    if os.environ.get("DLPERF_ENVS"):
        return os.path.expanduser(os.environ["DLPERF_ENVS"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "dlperf", "envs")


def overlay_dir():
    # type: () -> str
    return os.path.join(envs_root(), OVERLAY)


def site_dir():
    # type: () -> str
    """The ``pip install --target`` directory holding DALI and what it needs beyond dlperf's
    environment."""
    return os.path.join(overlay_dir(), "site")


def reach():
    # type: () -> bool
    """Append the installed overlay to ``sys.path`` (after site-packages, so it adds packages
    and shadows none); False when there is none."""
    site = site_dir()
    if not os.path.isdir(site):
        return False
    if site not in sys.path:
        sys.path.append(site)
    return True
