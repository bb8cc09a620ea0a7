"""One measurement at a time per host: a second measuring command waits for the first, saying
for whom, or with --no-wait exits 2 before touching anything."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlperf.host import measurelock

# the lock's waits between whole measuring commands: `make test` runs this file last, alone on the
# machine
pytestmark = pytest.mark.whole_machine

TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--num-classes",
        "10", "--batch-size", "2", "--warmup-steps", "2", "--steps", "3", "--repeats", "1"]


def env(lock_dir: Path) -> dict[str, str]:
    return dict(os.environ, DLPERF_LOCK_DIR=str(lock_dir))


def holder(lock_dir: Path) -> subprocess.Popen[str]:
    """A process holding the lock (as `dlperf run` does) until its stdin closes."""
    code = ("import sys; from dlperf.host import measurelock\n"
            "with measurelock.held():\n"
            "    print('held', flush=True); sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env(lock_dir))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_no_wait_exits_2_naming_the_holder_and_stores_nothing(tmp_path):
    lock = holder(tmp_path)
    try:
        for command in (["run", *TINY], ["infer", *TINY[:8], "--batch-sizes", "1"],
                        ["sweep", "sweeps/quick-cpu.yaml"]):
            db = tmp_path / f"{command[0]}.db"
            proc = subprocess.run([sys.executable, "-m", "dlperf.cli", *command, "--no-wait",
                                   "--db", str(db)], capture_output=True, text=True,
                                  timeout=120, env=env(tmp_path),
                                  cwd=Path(__file__).resolve().parents[2])
            assert proc.returncode == 2, (command, proc.stderr)
            (line,) = proc.stderr.strip().splitlines()
            assert "--no-wait: another measurement is running on this host: " \
                   f"pid {lock.pid}" in line
            assert not db.exists()  # refused before any database or session state
    finally:
        lock.stdin.close()
        lock.wait()


def test_second_run_waits_then_measures(tmp_path):
    lock = holder(tmp_path)
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli", "run", *TINY, "--db",
                             str(tmp_path / "r.db"), "--json", str(out)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env(tmp_path))
    waiting = f"waiting for the host's measurement lock, held by pid {lock.pid}"
    said: list[str] = []
    told = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if waiting in line:
                told.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # it says whom it waits for; a moment later it still waits, its result not written
        assert told.wait(120), "".join(said)
        time.sleep(1)
        assert proc.poll() is None and not out.exists()
    finally:
        lock.stdin.close()
        lock.wait()
    assert proc.wait(timeout=600) == 0, "".join(said)
    reader.join(60)
    assert out.exists()


def test_lock_is_released_when_its_holder_is_killed(tmp_path):
    lock = holder(tmp_path)
    lock.kill()
    lock.wait()
    with measurelock_env(tmp_path):
        with measurelock.held(wait=False):
            pass


class measurelock_env:
    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir

    def __enter__(self) -> None:
        self.old = os.environ.get(measurelock.ENV_DIR)
        os.environ[measurelock.ENV_DIR] = str(self.lock_dir)

    def __exit__(self, *exc: object) -> None:
        if self.old is None:
            os.environ.pop(measurelock.ENV_DIR, None)
        else:
            os.environ[measurelock.ENV_DIR] = self.old
