"""Shared helpers: run the real `dlperf` command in a subprocess, as a user would (or, for
validation that never gets past the command line, through its `main` in this process)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

# tests/ceiling.py: a test that costs more than its kind's ceiling (pyproject.toml) fails;
# tests/cpu_timeline.py: each test's wall and CPU time, where DLPERF_TEST_TIMELINE names a file
# tests/work_units.py: how the framework phase deals its tests (a file, or a framework's tests)
# tests/horovod_phase.py: the tests that wait for `make test`'s Horovod builds, marked `horovod`
pytest_plugins = ("ceiling", "cpu_timeline", "horovod_phase", "work_units")

# pytest keeps each test module, its asserts rewritten, as bytecode in __pycache__ and reads it
# back next time, unless writing bytecode is off (PYTHONDONTWRITEBYTECODE, which the project's
# machines set): then every pytest process rewrote every test module again, 6-7 s of each
# collection on a 2-core EPYC (`make test` collects 6 times). On for this process only: the
# processes the tests start keep the variable (`make test` compiles src/ and tests/ first).
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    """The host's measurement lock (host/measurelock.py) moves to a directory of this test run,
    inherited by every process a test starts: a benchmark or another test run elsewhere on the
    machine neither holds these tests up nor is held up by them. The tests of the lock itself
    give it a directory of their own. And XLA compiles quickly (below)."""
    if "DLPERF_LOCK_DIR" not in os.environ:
        os.environ.update(own_lock("run"))
    # XLA (JAX, and TensorFlow's jit_compile) compiles every test's step without LLVM's
    # optimisation passes, inherited by every worker: a tiny case's compile, not its few steps,
    # was most of its time, and what runs (the traced step, its HLO passes, its losses) is the
    # same. Its steps run slower (JAX ResNet-50 at image 32, batch 4: 0.87 s against 0.15 s),
    # its compile is a second shorter, and the JAX and TensorFlow test files still end sooner
    # with it: 340 s against 387 s (`make test`'s framework phase on those files alone). A
    # persistent JAX compilation cache (JAX_COMPILATION_CACHE_DIR) is not used: it saved 13 s
    # of 194, and a compile it wrote under `capacity`'s 1 GiB cap gave NaN losses where the
    # same probe without it trains. A user's own XLA_FLAGS wins, whole.
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=0"
        # And in JAX's and TensorFlow 2's processes (tests/site/sitecustomize.py: TensorFlow
        # 1.15's XLA aborts on a flag it does not know), XLA's elemental emitters instead of
        # its newer fusion emitters: the same HLO, the same losses to the last bit, a third
        # less compile (JAX ResNet-50's step 2.8 -> 1.8 s; the JAX tests of
        # test_env_jax_paddle.py and test_distributed_tf_jax.py 121 -> 80 CPU-s, 2026-12-06,
        # a 2-core Zen 4, alone).
        os.environ.setdefault(NEWER_XLA, "--xla_cpu_use_fusion_emitters=false")
    path = os.environ.get("PYTHONPATH", "")
    if str(SITE) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), path]))
    if os.environ.get(SHARE_CPUS) == "1" and os.environ.get("PYTEST_XDIST_WORKER"):
        share_cpus_among_workers()


#: this test process's measurement-lock directories (:func:`own_lock`), made on first use
_LOCK_ROOT: Path | None = None


def own_lock(name: str) -> dict[str, str]:
    """``{"DLPERF_LOCK_DIR": ...}``: the host's measurement lock in a new directory of ``name``'s
    own, for a test run, a pinned worker, or a module whose runs must neither wait for nor hold
    up a measuring test beside them. They all live under one directory per test process, removed
    when it ends (:func:`pytest_unconfigure`), so repeated runs leave nothing in /tmp."""
    global _LOCK_ROOT
    if _LOCK_ROOT is None:
        _LOCK_ROOT = Path(tempfile.mkdtemp(prefix="dlperf-test-locks-"))
    return {"DLPERF_LOCK_DIR": tempfile.mkdtemp(prefix=f"{name}-", dir=_LOCK_ROOT)}


def pytest_unconfigure(config: pytest.Config) -> None:
    """This process's lock directories go (a lock file is empty: nothing to keep)."""
    if _LOCK_ROOT is not None:
        shutil.rmtree(_LOCK_ROOT, ignore_errors=True)


#: set by `make test` for its middle phase: each pytest-xdist worker takes a slice of the CPUs
SHARE_CPUS = "DLPERF_TEST_SHARE_CPUS"
#: XLA flags for the interpreters whose XLA knows them (tests/site/sitecustomize.py reads it)
NEWER_XLA = "DLPERF_TEST_NEWER_XLA_FLAGS"
#: the folder of that sitecustomize, first on every started interpreter's PYTHONPATH
SITE = Path(__file__).resolve().parent / "site"


def share_cpus_among_workers() -> None:
    """This pytest-xdist worker pinned to its own contiguous slice of the CPUs, inherited by every
    process its tests start, and its own measurement lock. Two framework tests then run side by
    side without sharing a core (every framework sizes its thread pools by the affinity mask:
    one thread each on a 2-core host, where both would otherwise spin on both cores) and never
    wait for each other's lock. A ``spans_cores`` test gets every CPU back while it runs
    (:func:`pytest_runtest_protocol`); tests that need the whole machine are marked
    ``whole_machine`` and run after, one at a time, unpinned. A worker xdist starts in place of
    one that died (gw2, gw3, ... of two) takes the slice of the one it replaces, not an empty
    one (which ``sched_setaffinity`` refuses: every later test of the run then errored)."""
    from dlperf.worker.placement import share

    global _HOST_CPUS
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ["PYTEST_XDIST_WORKER"].lstrip("gw")) % workers
    _HOST_CPUS = frozenset(os.sched_getaffinity(0))
    os.sched_setaffinity(0, share(sorted(_HOST_CPUS), workers, index))
    os.environ.update(own_lock(f"gw{index}"))


#: every CPU this worker had before :func:`share_cpus_among_workers` pinned it; None unpinned
_HOST_CPUS: frozenset[int] | None = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A ``spans_cores`` test (a multi-process job, a rank per core) in a pinned worker runs, from
    its fixtures' setup to their teardown, with every CPU of the host: its ranks get a core each,
    as a user's would, beside the other worker's one-core test instead of after it. Its checks
    are of behaviour (ranks, all-reduce, stored rows, the speedup as computed from the stored
    medians), never of speed, so the neighbour costs time, not truth."""
    if _HOST_CPUS is None or item.get_closest_marker("spans_cores") is None:
        return (yield)
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _HOST_CPUS)
    try:
        return (yield)
    finally:
        os.sched_setaffinity(0, own)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``parallel`` test that runs torch in this process (the model tests' steps) uses this
    xdist process's share of the CPUs, not torch's default of every core: two processes side by
    side on a 2-core host each had 2 threads, and the waiting threads spin: tests/models' and
    tests/studies/test_accuracy.py's parallel tests on 2 xdist processes took 157 CPU-s (353 s)
    so, 61 (129 s) with a thread each, on a busy 2-core Zen 3. Such a test measures nothing;
    the processes it starts keep their own thread counts."""
    if item.get_closest_marker("parallel") is None or "torch" not in sys.modules:
        return
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    if torch.get_num_threads() > share:
        torch.set_num_threads(share)


@functools.lru_cache(maxsize=1)
def gpus_listed() -> tuple[str, ...]:
    """The GPUs `nvidia-smi -L` lists (none where it is missing or fails): what a test of a
    host-dependent reading expects to see."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    if proc.returncode != 0:
        return ()
    return tuple(line for line in proc.stdout.splitlines() if line.startswith("GPU "))


#: ResNet-50 cut to a bottleneck a stage (its ``max_blocks`` knob, docs/models.md): every operator
#: of the network at 10.1 M parameters, which a graph framework builds and traces in about half
#: the CPU time of the whole; for the tests that check something else than ResNet-50's depth
#: (a launcher, a link, a declared combination). The whole network's count is checked in each
#: framework's environment (tests/backends/test_env_*.py).
CUT_RESNET50 = {"max_blocks": 1}
CUT_RESNET50_FLAGS = [flag for name, value in CUT_RESNET50.items()
                      for flag in ("--knob", f"{name}={value}")]
#: the same as a sweep file's entries inside a flow mapping (``defaults: {..., <these>}``)
CUT_RESNET50_ENTRIES = ", ".join(f"{name}: {value}" for name, value in CUT_RESNET50.items())


def make_list(name: str) -> list[str]:
    """A ``NAME ?= a b c`` list of the Makefile (where `make test` declares what it installs)."""
    found = re.search(rf"^{name} \?= (.*)$", (Path(__file__).resolve().parents[1] / "Makefile")
                      .read_text(), re.M)
    assert found, f"the Makefile has no {name} ?= ..."
    return found.group(1).split()


# Smallest real cases: seconds per repeat on a 2-core CPU.
TINY_RESNET = ["--framework", "torch", "--model", "resnet50", "--image-size", "32",
               "--batch-size", "2", "--warmup-steps", "2", "--steps", "3"]
TINY_BERT = ["--framework", "torch", "--model", "bert-base", "--seq-len", "16",
             "--batch-size", "2", "--warmup-steps", "2", "--steps", "3"]


def tiny_bert_knobs(layers: int) -> dict[str, int]:
    """The narrow BERT's knobs, ``seq_len`` first: :func:`tiny_nets`' flags, and what a test's
    sweep file spells as YAML."""
    return {"seq_len": 16, "layers": layers, "hidden": 64, "heads": 2, "intermediate": 128,
            "vocab_size": 1000}


def tiny_nets(bert_layers: int) -> dict[str, list[str]]:
    """The other frameworks' tiny cases (no --framework): ResNet-50 at image 32, and a narrow BERT
    of ``bert_layers`` layers: the real step on small shapes."""
    knobs = tiny_bert_knobs(bert_layers)
    return {
        "resnet50": ["--model", "resnet50", "--image-size", "32", "--batch-size", "2"],
        "bert-base": ["--model", "bert-base", "--seq-len", str(knobs.pop("seq_len")),
                      "--batch-size", "2", *[flag for name, value in knobs.items()
                                             for flag in ("--knob", f"{name}={value}")]],
    }


def dlperf(*args: str, timeout: float = 900, check: bool = False, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env} if env else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"dlperf {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def _exit_status(code: object, stderr: io.StringIO) -> int:
    """What the interpreter makes of `SystemExit(code)`: None is 0, an int is itself, anything
    else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=stderr)
    return 1


class _StillRunning(BaseException):
    pass


def _print_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: Any = None, line: str | None = None) -> None:
    """A warning as the interpreter shows it: on (the captured) stderr. Under pytest, which
    records warnings, warnings.catch_warnings() alone would hand them to pytest instead."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _still_running(signum: int, frame: object) -> None:
    raise _StillRunning


def dlperf_main(*args: str, timeout: int = 60, check: bool = False, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`dlperf ARGS` through `dlperf.cli.main(argv)` in this process, the way `python -m
    dlperf.cli` runs it (:func:`main_in_process`). For bad input that must stop at validation,
    and for a fixture that runs the harness many times (tests/history: its workers are still
    fresh processes): it saves the ~0.5-3 s of imports a fresh interpreter pays per call.
    tests/commands/test_fuzz_cli.py checks that real processes answer exactly the same."""
    from dlperf import cli

    return main_in_process(cli.main, "dlperf", args, timeout=timeout, check=check, cwd=cwd,
                           env=env)


def script_main(script: str, *args: str, timeout: int = 300, check: bool = False,
                cwd: Path | None = None, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/SCRIPT.py ARGS`` through the script's ``main(argv)`` in this process
    (:func:`main_in_process`): a test that remakes a committed table from stored results asks
    the script for an answer, not for a fresh interpreter, whose imports (scipy.stats alone
    about 2 s on an AVX2-only EPYC) were most of such a test's time. A script's real process
    is still run where the process is what is checked (a pool of processes, which a fork of
    this one must not start; a refusal that names the script's own file)."""
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    module = importlib.import_module(script)
    return main_in_process(module.main, f"benchmarks/{script}.py", args, timeout=timeout,
                           check=check, cwd=cwd, env=env)


def main_in_process(main: Callable[[list[str]], object], name: str, args: tuple[str, ...],
                    timeout: int = 60, check: bool = False, cwd: Path | None = None,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``main(args)`` as an interpreter running the command ``name`` would run it: in ``cwd``
    with ``env`` added to the environment, stdout and stderr captured, SystemExit turned into
    the exit code, anything uncaught printed as a traceback with exit 1, a fresh interpreter's
    warning filters (a warning is a line on stderr); the signal handlers main installs are put
    back after. A call still going after ``timeout`` s: exit -1."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {signum: signal.getsignal(signum)
                for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)}
    saved = {var: os.environ.get(var) for var in env or {}}
    os.environ.update(env or {})
    # pytest-timeout's per-test limit is the same interval timer: saved, and given back after
    outer = signal.getitimer(signal.ITIMER_REAL)[0]
    started = time.monotonic()
    signal.signal(signal.SIGALRM, _still_running)
    signal.alarm(timeout)
    try:
        with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()
            for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning,
                             DeprecationWarning):
                warnings.filterwarnings("ignore", category=category)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = _print_warning  # put back as it was when the block ends
            try:
                code = _exit_status(main(list(args)), err)
            except SystemExit as stop:
                code = _exit_status(stop.code, err)
            except _StillRunning:
                code = -1
                err.write(f"still running after {timeout} s\n")
            except BaseException:  # the interpreter prints it and exits 1
                traceback.print_exc(file=err)
                code = 1
    finally:
        signal.alarm(0)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if outer > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
    proc = subprocess.CompletedProcess([name, *args], code, out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def load(path: Path) -> Any:
    return json.loads(Path(path).read_text())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


# One real sweep per session, shared by the sweep, report and compare tests (issue 3).
from sweep_session import fixture_db  # noqa: E402,F401
# One real tiny torch ResNet-50 run per session, read by test_run and test_device_shown.
from tiny_runs import tiny_resnet_run  # noqa: E402,F401


# A marker every child of a test inherits: the processes a test started, found by their environment.
TAG = "DLPERF_TEST_TAG"


def tagged_processes(value: str) -> list[psutil.Process]:
    """Processes other than this one whose environment carries the marker ``value``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(TAG) == value:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def assert_nothing_left(value: str, within_s: float = 20) -> None:
    """Every process marked ``value`` has exited within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while tagged_processes(value) and time.monotonic() < deadline:
        time.sleep(1)
    left = tagged_processes(value)
    assert not left, f"processes left behind: {[p.cmdline()[:6] for p in left]}"


@pytest.fixture
def tagged(monkeypatch, tmp_path):
    """A fresh marker in os.environ (inherited by every child); asserts none outlives the test.
    The host's measurement lock goes to this test's directory: other measurements on this
    machine hold up neither these runs nor the peers they rendezvous with."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG, value)
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(tmp_path))
    yield value
    assert_nothing_left(value)


def pinned_env(framework: str) -> str:
    """The framework's environment from its pinned set (`make test` installs every one first
    through `make envs`, so this is a no-op there); its interpreter."""
    from dlperf import envs

    done = envs.install(framework, say=lambda line: None)
    assert done.action in ("installed", "up to date"), done
    return envs.interpreter(framework)


def tiny_dataset(root: Path, count: int) -> Path:
    """A `dlperf data make-images` folder of ``count`` 40x30 JPEGs in 4 classes under ``root``."""
    out = root / "images"
    dlperf("data", "make-images", str(out), "--count", str(count), "--size", "40x30",
           "--classes", "4", "--jobs", "1", check=True)
    return out


def files_of(root: Path) -> list[Path]:
    """The JPEGs of a dataset folder, in a stable order."""
    return sorted((root / "train").rglob("*.JPEG"))


# the step bound the multi-process tests give --warmup-steps auto: one more than the steady rule's
# 5-step window, so a vote can end steady, while a vote that never agrees costs few steps
VOTE_MAX_STEPS = 6


def check_voted_warmup(result: dict, db: str | Path, max_steps: int) -> None:
    """``--warmup-steps auto`` on several ranks: every rank of every repeat took the same
    warm-up steps and stopped for the same reason, decided by a vote of all ranks (each rank's
    own record is in the repeat stored in the database)."""
    from dlperf.store import Store
    from dlperf.worker import steady

    with Store(db, readonly=True) as store:
        repeats = store.repeats(result["run_id"])
    assert len(repeats) == len(result["warmup"]["steps"]) >= 1
    for record, steps, stop in zip(repeats, result["warmup"]["steps"], result["warmup"]["stop"]):
        warmups = [rank["warmup"] for rank in record["ranks"]]
        assert len(warmups) == 2
        assert [w["steps"] + 1 for w in warmups] == [steps, steps]  # the first step included
        assert [w["stop"] for w in warmups] == [stop, stop]
        assert stop in ("steady", "max_steps", "max_seconds")
        assert all(w["vote"] == "all ranks" and len(w["verdicts"]) == 2 for w in warmups)
        assert warmups[0]["verdicts"] == warmups[1]["verdicts"]
        assert steady.agreed(warmups[0]["verdicts"]) == stop
        if stop != "max_seconds":  # every rank's own verdict on its own step times arrived
            own = [steady.verdict(w["step_times_s"], 0.0, max_steps) for w in warmups]
            assert sorted(own) == sorted(warmups[0]["verdicts"])
        assert steps - 1 <= max_steps and (stop != "max_steps" or steps - 1 == max_steps)
