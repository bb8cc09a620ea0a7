"""Per-framework virtual environments: where they live, whether they are current, installing them.

Layout under the cache root (``$DLPERF_ENVS``, else ``$XDG_CACHE_HOME/dlperf/envs``, else
``~/.cache/dlperf/envs``)::

    <root>/<framework>/             a venv with the framework's pinned requirement set (cpu)
    <root>/<framework>-cuda/        its GPU build's venv (``--variant cuda``)
    <root>/<framework>/dlperf-env.json   stamp: hash of the pins + interpreter, versions
    <root>/<framework>/install.log  the installer's output from the last install
    <root>/.<framework>.lock        serialises concurrent installs of one framework
    <root>/<framework>==<X>/        a version environment (``--version X``, :mod:`.versions`)
    <root>/<framework>==<X>.requirements.txt   its hashed lock, resolved when first installed

The stamp is written last, only after the framework imported successfully, so an interrupted
install leaves an environment that counts as not installed. ``install`` is a no-op while the
stamp's hash matches the requirement file, which keeps a second ``make test`` fast.

dlperf itself is never installed into these environments: the worker runs from the source tree
(``envs.worker_env`` puts it on PYTHONPATH) and needs only the standard library, numpy and the
framework.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dlperf.envs import interpreters, registry
from dlperf.envs.registry import Framework
from dlperf.errors import UsageError
from dlperf.worker.lifeline import HARNESS_PID

STAMP_NAME = "dlperf-env.json"
LOG_NAME = "install.log"
IMPORT_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 3600.0
# Quiet frameworks' C++ logging while we only ask for a version.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "3"}


class InstallError(Exception):
    """The installer or the import check failed; the message says where the log is."""


def root() -> Path:
    """The directory holding every framework environment."""
    if os.environ.get("DLPERF_ENVS"):
        return Path(os.environ["DLPERF_ENVS"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "dlperf" / "envs"


def checked_name(env_name: str) -> str:
    """``env_name`` when it names one entry directly in the cache root (resolved lexically: no
    ``/``, ``..``, or control character); else one line, so a name never becomes a path
    outside it."""
    base = os.path.abspath(root())
    inside = os.path.dirname(os.path.abspath(os.path.join(base, env_name or "."))) == base
    if not inside or any(ord(c) < 32 or c == "\x7f" for c in env_name):
        raise UsageError(f"environment {env_name!r} is not a name of one folder in {root()}")
    return env_name


def env_dir(env_name: str) -> Path:
    return root() / checked_name(env_name)


def env_python(env_name: str) -> Path:
    return env_dir(env_name) / "bin" / "python"


def read_stamp(env_name: str) -> dict[str, Any] | None:
    try:
        return json.loads((env_dir(env_name) / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")


def driver_present() -> bool:
    """An NVIDIA kernel driver is loaded (what every CUDA build needs underneath)."""
    return NVIDIA_DRIVER_FILE.exists()


def default_variant() -> str:
    return "cuda" if driver_present() else "cpu"


def select(name: str, variant: str | None = None) -> Framework:
    """The framework's variant to use: the one asked for (checked), else cuda where an NVIDIA
    driver is present and the framework publishes a CUDA build, else cpu."""
    if variant is None:
        fw = registry.get(name)
        wanted = default_variant()
        if wanted in fw.variants and registry.get(name, wanted).refused is None:
            return registry.get(name, wanted)
        return fw
    fw = registry.get(name, variant)
    if fw.refused:
        raise UsageError(f"--variant: {name} has no {variant} build: {fw.refused}")
    if variant == "cuda" and not driver_present():
        raise UsageError(f"--variant: cuda needs an NVIDIA driver and this machine has none "
                         f"({NVIDIA_DRIVER_FILE} is missing); use --variant cpu")
    return fw


def _main_variant(fw: Framework) -> str:
    """Which build sits in dlperf's own environment: cuda when every package of the cuda
    set is installed (torch's CUDA libraries, onnxruntime-gpu), else cpu."""
    if "cuda" not in fw.variants:
        return "cpu"
    pins = [line.split("==", 1)[0].strip() for line in
            registry.get(fw.name, "cuda").requirement_lines() if "==" in line]
    for dist in pins:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "cpu"
    return "cuda" if pins else "cpu"


@dataclass
class EnvStatus:
    """What ``dlperf envs list`` shows for one framework."""

    framework: str
    state: str  # "main" | "installed" | "outdated" | "not installed"
    path: str | None
    python: str | None
    version: str | None
    note: str = ""
    variant: str = "cpu"
    lock_hash: str | None = None  # the stamp's hash: of the installed lock and Python

    @property
    def usable(self) -> bool:
        return self.state in ("main", "installed", "outdated")


def _main_version(fw: Framework) -> str | None:
    for dist in (fw.import_name, fw.name):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def status(name: str, variant: str | None = None) -> EnvStatus:
    """Whether ``name``'s environment (of ``variant``, default: this machine's) exists and
    matches its pinned set (no subprocess)."""
    base = registry.get(name)
    fw = base if base.main else registry.get(name, variant or select(name).variant)
    if fw.main:
        version = _main_version(fw)
        return EnvStatus(name, "main" if version else "not installed", sys.executable,
                         "%d.%d.%d" % sys.version_info[:3], version,
                         "dlperf's own environment" if version else
                         f"{fw.import_name} is missing from dlperf's own environment",
                         _main_variant(fw))
    if fw.refused:
        return EnvStatus(name, "no such build", None, None, None, fw.refused, fw.variant)
    stamp = read_stamp(fw.env_name)
    if stamp is None or not env_python(fw.env_name).exists():
        return EnvStatus(name, "not installed", None, None, None, variant=fw.variant)
    state, note = "installed", ""
    if stamp.get("hash") != fw.requirements_hash(interpreters.short(stamp.get("python", "0.0"))):
        state, note = "outdated", f"requirements/{fw.requirements} changed since the install"
    return EnvStatus(name, state, str(env_dir(fw.env_name)), stamp.get("python"),
                     stamp.get("framework_version"), note, fw.variant, stamp.get("hash"))


def not_installed_message(name: str, variant: str = "cpu") -> str:
    flag = "" if variant == "cpu" else f" --variant {variant}"
    return f"framework {name} is not installed: run `dlperf envs install {name}{flag}`"


def interpreter(name: str, variant: str | None = None) -> str:
    """The Python that runs ``name``'s worker; UsageError (one line) if it is not installed.

    A framework with no registry entry is taken to live in dlperf's own environment.
    """
    if name not in registry.load() or registry.get(name).main:
        return sys.executable
    fw = select(name, variant)
    if read_stamp(fw.env_name) is None or not env_python(fw.env_name).exists():
        raise UsageError(not_installed_message(name, fw.variant))
    return str(env_python(fw.env_name))


def variant_of(name: str) -> str:
    """The variant a run of ``name`` uses on this machine (recorded with every result)."""
    if name not in registry.load():
        return "cpu"
    fw = registry.get(name)
    return _main_variant(fw) if fw.main else select(name).variant


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One install of a framework at a time (two `make test` runs, two engineers)."""
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / f".{checked_name(name)}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def site_packages(python: str) -> Path:
    """The site-packages directory of the environment ``python`` belongs to (dlperf's own for
    its own interpreter; else the venv's ``lib/pythonX.Y/site-packages``)."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return Path(sysconfig.get_paths()["purelib"])
    env = Path(python).parent.parent  # <env>/bin/python, not resolved: the venv, not its base
    found = sorted(env.glob("lib/python*/site-packages"))
    if not found:
        raise UsageError(f"{env} has no lib/python*/site-packages: is it a virtual environment?")
    return found[0]


def framework_variables(fw: Framework, python: str) -> dict[str, str]:
    """The registry's ``env:`` for ``fw``, expanded for the environment of ``python`` and put in
    front of this process's values: what its worker and its import check run with."""
    return fw.environment(site_packages(python), os.environ) if fw.env else {}


def worker_variables(name: str, python: str) -> dict[str, str]:
    """:func:`framework_variables` of the variant a run of ``name`` uses here ({} for a name
    the registry does not know)."""
    if name not in registry.load():
        return {}
    base = registry.get(name)
    return framework_variables(base if base.main else select(name), python)


def import_version(python: str, fw: Framework, timeout_s: float = IMPORT_TIMEOUT_S
                   ) -> tuple[bool, str]:
    """Import the framework with ``python`` as the worker would; (ok, version or error line)."""

    code = (f"import {fw.import_name} as m, dlperf.worker.loop; "
            f"print('DLPERF_VERSION=' + str(getattr(m, '__version__', '?')))")
    env = worker_env({**QUIET_ENV, **framework_variables(fw, python)})
    # the interpreter may be the user's (--python): bounded in time and in what is kept
    done = interpreters.run_bounded([python, "-c", code], timeout_s, env=env)
    if done.stopped == "time":
        return False, f"importing {fw.import_name} took over {timeout_s:g} s"
    if done.stopped == "output":
        return False, (f"importing {fw.import_name} printed more than "
                       f"{interpreters.OUTPUT_LIMIT // 2**20} MiB")
    for line in done.stdout.splitlines():
        if line.startswith("DLPERF_VERSION="):
            return True, line.split("=", 1)[1].strip()
    lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
    return False, lines[-1] if lines else f"exit code {done.returncode}"


def _install_main_variant(fw: Framework, verbose: bool, say: Callable[[str], None],
                          start: float) -> InstallResult:
    """A main framework's GPU build goes into dlperf's own environment (torch's CUDA wheel and
    its libraries, onnxruntime-gpu), from the hashed lock."""
    if _main_variant(fw) == fw.variant and not verbose:
        st = status(fw.name)
        return InstallResult(fw.name, "up to date", sys.executable, st.python or "",
                             st.version, time.monotonic() - start)
    log = root() / f"{fw.env_name}.{LOG_NAME}"
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"{fw.name}: uv pip install -r {fw.requirements_file} into dlperf's own environment "
        f"(log: {log})")
    install_logged(fw.name, sys.executable,
                   [*locked_install_options(fw), "-r", str(fw.requirements_file)], log, verbose)
    st = status(fw.name)
    return InstallResult(fw.name, "installed", sys.executable, st.python or "", st.version,
                         time.monotonic() - start)


def pip(python: str, command: str, *args: str) -> list[str]:
    """The command line of pip's ``command`` run by ``python`` (what compiles Horovod: ``pip
    wheel`` in the environment it builds against): no prompt, no progress bar, no version
    check."""
    return [python, "-m", "pip", command, "--disable-pip-version-check", "--no-input",
            "--progress-bar", "off", *args]


def uv() -> str:
    """uv's executable: a dependency of dlperf, its wheel puts it beside dlperf's Python."""
    try:
        from uv import find_uv_bin
        return str(find_uv_bin())
    except (ImportError, FileNotFoundError) as error:
        raise UsageError("uv is missing from dlperf's own environment: run `make setup` "
                         "(or pip install uv)") from error


def installer(python: str, *args: str) -> list[str]:
    """The command line that installs ``args`` (pip's install options and ``-r FILE``) into
    the environment of ``python``: uv's pip interface, the same hashed, wheels-only install
    as pip with about a quarter less CPU time (the eight environments `make test` installs
    first: 162-189 CPU-s against 228-256, docs/envs.md). Where the two differ it is told to do
    what pip does: bytecode compiled at install (the project's machines set
    PYTHONDONTWRITEBYTECODE, so no import would write it later), every index searched for the
    best match, no configuration file of the working directory's. Its files are hard-linked
    from uv's cache (``uv cache dir``) where that is on the same file system, so a second
    environment with the same wheel (a Horovod environment's framework) unpacks nothing."""
    return [uv(), "pip", "install", "--python", python, "--no-config", "--color", "never",
            "--no-progress", "--compile-bytecode", "--index-strategy", "unsafe-best-match",
            *args]


def install_logged(label: str, python: str, args: Sequence[str], log: Path, verbose: bool,
                   extra_env: dict[str, str] | None = None, what: str = "uv pip install") -> None:
    """Install ``args`` into ``python``'s environment with :func:`installer`, its output
    appended to ``log``; an InstallError that names ``what`` failed, its exit code and the
    log, then the log's last lines, when it fails (every install site says it the same way)."""
    code = _run_logged(installer(python, *args), log, verbose, extra_env)
    if code != 0:
        raise InstallError(f"{label}: {what} failed (exit {code}); see {log}\n{_tail(log)}")


def _run_logged(argv: list[str], log: Path, echo: bool,
                extra_env: dict[str, str] | None = None) -> int:
    """Run ``argv`` appending its output to ``log`` (and to our stdout when ``echo``), with
    ``extra_env`` added to our variables."""
    with open(log, "a") as handle:
        handle.write("$ " + " ".join(f"{k}={v}" for k, v in (extra_env or {}).items())
                     + (" " if extra_env else "") + " ".join(argv) + "\n")
        handle.flush()
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, stdin=subprocess.DEVNULL,
                                env={**env, **(extra_env or {})})
        assert proc.stdout is not None
        # the limit must hold while pip is still printing, not only once its output ends
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            proc.kill()

        watchdog = threading.Timer(INSTALL_TIMEOUT_S, expire)
        watchdog.start()
        try:
            for line in proc.stdout:
                handle.write(line)
                if echo:
                    sys.stdout.write(line)
            code = proc.wait()
        finally:
            watchdog.cancel()
        if expired:
            handle.write(f"killed: still running after {INSTALL_TIMEOUT_S:g} s\n")
        return code


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


@dataclass
class InstallResult:
    framework: str
    action: str  # "up to date" | "installed" | "main"
    path: str
    python: str
    version: str | None
    seconds: float


def install(name: str, python: str | None = None, force: bool = False, verbose: bool = False,
            say: Callable[[str], None] = print, variant: str | None = None) -> InstallResult:
    """Create (or refresh) ``name``'s environment from its pinned set; a no-op when current."""
    fw = select(name, variant)
    start = time.monotonic()
    if fw.main and fw.variant != "cpu":
        return _install_main_variant(fw, verbose, say, start)
    if fw.main:
        st = status(name)
        if not st.version:
            raise UsageError(f"{fw.import_name} belongs in dlperf's own environment: "
                             f"run `make setup` (pip install -e '.[{name}]')")
        return InstallResult(name, "main", sys.executable, st.python or "", st.version, 0.0)
    if fw.requirements_file is None:
        raise UsageError(f"framework {name} has no requirement file in the registry")
    name = fw.env_name
    with _locked(name):
        base, full = base_interpreter(fw, python)
        digest = fw.requirements_hash(interpreters.short(full))
        current = up_to_date(fw, name, digest, base if python else None, force, start)
        if current is not None:
            return current
        return build(Build(fw, name, base, full, digest, [framework_step(fw)]), verbose, say,
                     start)


def base_interpreter(fw: Framework, python: str | None) -> tuple[str, str]:
    """(path, full version) of the interpreter ``fw``'s environment is built from: ``python``
    when given (checked against the version the pins need), else found by that version."""
    if python:
        return interpreters.check(python, fw.python)
    return interpreters.find(fw.python or "%d.%d" % sys.version_info[:2])


def up_to_date(fw: Framework, name: str, digest: str, base: str | None, force: bool,
               start: float) -> InstallResult | None:
    """The result of a no-op install when environment ``name`` is current (its stamp holds
    ``digest`` and, when an interpreter was named, was built from ``base``), else None."""
    stamp = read_stamp(name)
    same_base = base is None or (stamp or {}).get("base_python") == base
    if (not force and stamp and stamp.get("hash") == digest and same_base
            and env_python(name).exists()):
        return InstallResult(fw.name, "up to date", str(env_dir(name)), stamp["python"],
                             stamp.get("framework_version"), time.monotonic() - start)
    return None


def framework_step(fw: Framework) -> list[str]:
    """pip's arguments installing ``fw``'s pinned set (hashed and wheels-only when locked)."""
    args = ["-r", str(fw.requirements_file)]
    if any("--hash=" in line for line in fw.requirement_lines()):
        args[0:0] = locked_install_options(fw)
    return args


#: a step of a build that is not one pip install: given the new interpreter, the log and whether
#: to echo it, it does its part or raises InstallError
Step = Callable[[str, Path, bool], None]


@dataclass
class Build:
    """One environment to build: ``steps`` are pip install arguments run in order, each with
    the variables it adds, or a :data:`Step` of its own; ``check`` (given the new interpreter
    and the log) returns facts for the stamp or raises InstallError."""

    fw: Framework
    name: str  # the environment's directory name
    base: str  # the interpreter it is created from
    full: str  # that interpreter's full version
    digest: str
    steps: list[list[str] | Step]
    step_env: list[dict[str, str]] | None = None
    check: Callable[[str, Path], dict[str, Any]] | None = None
    prepare: Callable[[Path], None] | None = None  # given the new venv, before the steps


def build(job: Build, verbose: bool, say: Callable[[str], None], start: float) -> InstallResult:
    """Create ``job``'s environment beside the working one and swap it in only once it
    imports: a failed rebuild (a pin that no longer installs, no network) leaves the old one
    usable. Call with the environment's install lock held."""
    fw, name = job.fw, job.name
    target = env_dir(name)
    staging = target.parent / f".{name}.new"
    if staging.exists():
        shutil.rmtree(staging)
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"{name}: creating {target} with Python {job.full} ({job.base})")
    log = target.parent / f"{name}.{LOG_NAME}"  # kept beside the envs if the build fails
    log.write_text("")
    python_new = str(staging / "bin" / "python")
    # with ensurepip's pip and setuptools, which the locks leave out where a framework uses
    # setuptools undeclared (Paddle imports it) and Horovod's build runs pip inside the venv
    if _run_logged([job.base, "-m", "venv", str(staging)], log, verbose) != 0:
        raise InstallError(f"{name}: creating the venv failed; see {log}\n{_tail(log)}")
    if job.prepare is not None:
        job.prepare(staging)
    for i, args in enumerate(job.steps):
        if callable(args):
            try:
                args(python_new, log, verbose)
            except InstallError:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            continue
        say(f"{name}: uv pip install {' '.join(a for a in args if a == '-r' or a[0] != '-')} "
            f"(log: {log})")
        try:
            install_logged(name, python_new, args, log, verbose,
                           (job.step_env or [{}] * len(job.steps))[i])
        except InstallError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    ok, version = import_version(python_new, fw)
    facts: dict[str, Any] = {}
    try:
        if not ok:
            raise InstallError(f"{name}: installed, but `import {fw.import_name}` fails: "
                               f"{version}")
        if job.check is not None:
            facts = job.check(python_new, log)
    except InstallError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _swap_in(staging, target)
    shutil.move(str(log), str(target / LOG_NAME))
    stamp = {"framework": fw.name, "variant": fw.variant, "hash": job.digest, "python": job.full,
             "base_python": job.base, "framework_version": version,
             "requirements": fw.requirement_lines(), **facts,
             "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = target / (STAMP_NAME + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=2))
    tmp.replace(target / STAMP_NAME)
    return InstallResult(fw.name, "installed", str(target), job.full, version,
                         time.monotonic() - start)


def _swap_in(staging: Path, target: Path) -> None:
    """Rename the built environment into place; its console scripts (``bin/horovodrun``...)
    were written with the staging directory in their ``#!`` line, which is rewritten."""
    retired = target.parent / f".{target.name}.old"
    if retired.exists():
        shutil.rmtree(retired)
    if target.exists():
        target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)
    old, new = f"#!{staging}/bin/", f"#!{target}/bin/"
    for script in (target / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as handle:
            head = handle.read(len(old))
        if head == old.encode():
            script.write_bytes(new.encode() + script.read_bytes()[len(old):])


def locked_install_options(fw: Framework) -> list[str]:
    """A hashed lock installs exactly its files (``--require-hashes``) and only wheels, so no
    package's build scripts run; the registry's ``sdists:`` names the few that publish no wheel
    for the environment's Python (TF 1.15's era), built from their hashed source archives."""
    options = ["--require-hashes", "--only-binary=:all:"]
    if fw.sdists:
        options.append("--no-binary=" + ",".join(fw.sdists))
    return options


SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the dlperf package


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: ours, with the source tree importable by any interpreter."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SOURCE_ROOT) + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[HARNESS_PID] = str(os.getpid())  # the worker ties its life to ours (worker.lifeline)
    env.update(extra or {})
    return env
