"""``dlperf envs install dali``: NVIDIA DALI beside the torch of dlperf's own environment.

On a GPU machine DALI comes with torch's CUDA build (``requirements/torch-cuda.txt`` pins it,
``dlperf envs install torch --variant cuda``). On a CPU machine dlperf's environment is left as
``make setup`` made it (DALI's wheel is large, and ``make setup`` must stay quick): DALI's own
hashed lock, ``requirements/torch-dali.txt`` (``dlperf envs lock dali`` from ``torch-dali.in``),
is installed with ``uv pip install --target`` into ``<envs root>/torch-dali/site``, leaving out the
packages dlperf's environment already has, and a ``--loader dali`` worker appends that directory
to its ``sys.path`` (:mod:`dlperf.backends.torch.dali_site`). DALI then runs in its CPU-only mode
(``device_id=None``, CPU operators only). Like a framework environment, the overlay is built
beside the old one, swapped in only once ``nvidia.dali`` imports, and stamped with the hash of the
lock: reinstalling is a no-op while the lock is unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from dlperf.backends.torch import dali_site
from dlperf.envs import interpreters, manage, registry
from dlperf.envs.manage import InstallError, InstallResult
from dlperf.envs.registry import Framework
from dlperf.errors import UsageError

NAME = "dali"
# the overlay's lock, for the Python dlperf's own environment is built with (as OWN in lock.py)
LOCK = Framework(name=NAME, import_name="nvidia.dali", main=True, python="3.11",
                 requirements="torch-dali.txt")
IMPORT_CHECK = ("import sys; sys.path.append(sys.argv[1]); import nvidia.dali as d; "
                "from nvidia.dali.plugin import pytorch; print('DLPERF_VERSION=' + d.__version__)")


def overlay() -> Path:
    return Path(dali_site.overlay_dir())


def read_stamp() -> dict | None:
    try:
        return json.loads((overlay() / manage.STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def own_version(dist: str) -> str | None:
    """The version of ``dist`` in dlperf's own environment, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def missing_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """(lock lines to install, names dlperf's environment already provides). A package already
    there is taken from there (it comes first on the worker's path), so it is not fetched."""
    wanted, present = [], []
    for line in lines:
        name = line.split("==", 1)[0].strip()
        if own_version(name) is not None:
            present.append(name)
        else:
            wanted.append(line)
    return wanted, present


def import_version(site: Path) -> tuple[bool, str]:
    """Import DALI and its PyTorch plugin as a worker would: (ok, version or the error line)."""
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK, str(site)], capture_output=True,
                          text=True, timeout=manage.IMPORT_TIMEOUT_S)
    for line in done.stdout.splitlines():
        if line.startswith("DLPERF_VERSION="):
            return True, line.split("=", 1)[1].strip()
    lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
    return False, lines[-1] if lines else f"exit code {done.returncode}"


def current_stamp() -> dict | None:
    """The overlay's stamp when the overlay is installed from the current lock (installing
    would be a no-op, nothing fetched), else None."""
    python = "%d.%d.%d" % sys.version_info[:3]
    stamp = read_stamp()
    digest = LOCK.requirements_hash(interpreters.short(python))
    if stamp and stamp.get("hash") == digest and (overlay() / "site").is_dir():
        return stamp
    return None


def install(force: bool = False, verbose: bool = False,
            say: Callable[[str], None] = print) -> InstallResult:
    """DALI for ``--loader dali``: torch's CUDA build has it; elsewhere the hashed overlay."""
    start = time.monotonic()
    python = "%d.%d.%d" % sys.version_info[:3]
    if manage.status("torch").variant == "cuda":  # every pin of torch's cuda lock is there
        version = own_version(cuda_dist())
        return InstallResult(NAME, "main", sys.executable, python, version, 0.0)
    digest = LOCK.requirements_hash(interpreters.short(python))
    target = overlay()
    with manage._locked(dali_site.OVERLAY):
        stamp = current_stamp()
        if not force and stamp:
            return InstallResult(NAME, "up to date", str(target), python,
                                 stamp.get("framework_version"), time.monotonic() - start)
        wanted, present = missing_lines(LOCK.requirement_lines())
        staging = target.parent / f".{dali_site.OVERLAY}.new"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        pins = staging / "requirements.txt"
        pins.write_text("\n".join(wanted) + "\n")
        log = target.parent / f"{dali_site.OVERLAY}.{manage.LOG_NAME}"
        log.write_text("")
        say(f"{NAME}: uv pip install --target {target / 'site'} -r {LOCK.requirements_file} "
            f"({len(wanted)} packages; from dlperf's environment: {', '.join(present) or '-'}; "
            f"log: {log})")
        try:
            manage.install_logged(NAME, sys.executable, [
                "--no-deps", *manage.locked_install_options(LOCK),
                "--target", str(staging / "site"), "-r", str(pins)], log, verbose)
        except InstallError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        ok, version = import_version(staging / "site")
        if not ok:
            shutil.rmtree(staging, ignore_errors=True)
            raise InstallError(f"{NAME}: installed, but `import nvidia.dali` fails: {version}")
        retired = target.parent / f".{dali_site.OVERLAY}.old"
        shutil.rmtree(retired, ignore_errors=True)
        if target.exists():
            target.rename(retired)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
        shutil.move(str(log), str(target / manage.LOG_NAME))
        stamp = {"framework": NAME, "variant": "cpu", "hash": digest, "python": python,
                 "framework_version": version, "requirements": LOCK.requirement_lines(),
                 "from_dlperf_env": present,
                 "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (target / manage.STAMP_NAME).write_text(json.dumps(stamp, indent=2))
        return InstallResult(NAME, "installed", str(target), python, version,
                             time.monotonic() - start)


def cuda_dist() -> str:
    """The DALI distribution torch's cuda lock pins (what a GPU install gets)."""
    for line in registry.get("torch", "cuda").requirement_lines():
        if line.startswith("nvidia-dali-"):
            return line.split("==", 1)[0]
    raise UsageError("dali: requirements/torch-cuda.txt pins no nvidia-dali-* package")
