"""A killed harness takes everything it started with it, grandchildren included, without
preexec_fn: the worker and `dlperf external`'s lifeline arrange their own death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def new_mark() -> str:
    """A sleep's length nobody else runs: each test its own, as pytest-xdist may run this file's
    tests side by side (two tests sharing one mark each counted the other's sleeps)."""
    return f"301.{uuid.uuid4().int % 10**8:08d}"


def leftovers(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if mark in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_sigkilled_external_harness_leaves_no_grandchild(tmp_path):
    mark = new_mark()
    script = ("import subprocess, time\n"
              f"subprocess.Popen(['sleep', '{mark}'])\n"
              f"time.sleep({mark})\n")
    harness = subprocess.Popen(
        [sys.executable, "-m", "dlperf.cli", "external", "--name", "sleeper", "--metric",
         r"rate ([\d.]+)", "--repeats", "1", "--db", str(tmp_path / "r.db"), "--",
         sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)})  # a SIGKILLed harness leaves its folder
    def grandchild_started() -> bool:
        return any(p.info["cmdline"] == ["sleep", mark] for p in leftovers(mark))

    deadline = time.monotonic() + 60
    while not grandchild_started() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert grandchild_started(), "the command never started its grandchild"
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 15
    while leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = leftovers(mark)
    for proc in alive:
        proc.kill()
    assert not alive, [p.info["cmdline"] for p in alive]


def test_lifeline_passes_the_commands_exit_and_signal_through():
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "..", "src"))
    done = subprocess.run([sys.executable, "-m", "dlperf.worker.lifeline", "--", sys.executable,
                           "-c", "import sys; print('hi'); sys.exit(3)"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout) == (3, "hi\n")
    done = subprocess.run([sys.executable, "-m", "dlperf.worker.lifeline", "--", sys.executable,
                           "-c", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"],
                          env=env, timeout=60)
    assert done.returncode == -signal.SIGABRT
    # SIGKILL takes no handler: passed through all the same (a killed emulated host's node)
    done = subprocess.run([sys.executable, "-m", "dlperf.worker.lifeline", "--", sys.executable,
                           "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                          env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL


def test_a_dead_harness_takes_down_what_its_command_started_in_a_session_of_its_own(tmp_path):
    """A node's `dlperf run` starts its launcher (torchrun) in a new session, out of the
    lifeline's process group: when the harness dies, the lifeline kills it all the same, and a
    process its parent orphaned first (re-parented to the lifeline, the subreaper) too."""
    mark = new_mark()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "..", "src"))
    harness = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    command = ("import subprocess, sys, time\n"
               f"subprocess.Popen(['sleep', '{mark}'], start_new_session=True)\n"
               # an orphan: its parent (a new session's shell) exits at once
               f"subprocess.Popen(['setsid', 'sh', '-c', 'sleep {mark} & exit 0'])\n"
               f"time.sleep({mark})\n")
    lifeline = subprocess.Popen([sys.executable, "-m", "dlperf.worker.lifeline", "--",
                                 sys.executable, "-c", command],
                                env={**env, "DLPERF_HARNESS_PID": str(harness.pid)},
                                start_new_session=True)  # as its callers start it
    try:
        deadline = time.monotonic() + 60
        while len([p for p in leftovers(mark) if p.info["cmdline"] == ["sleep", mark]]) < 2 and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        sleepers = [p for p in leftovers(mark) if p.info["cmdline"] == ["sleep", mark]]
        assert len(sleepers) == 2, "the command never started both sleeps"
        assert all(os.getsid(p.pid) != os.getsid(lifeline.pid) for p in sleepers)
        harness.kill()
        harness.wait()
        assert lifeline.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 15
        while leftovers(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = leftovers(mark)
        assert not alive, [p.info["cmdline"] for p in alive]
    finally:
        harness.kill()
        lifeline.kill()
        for proc in leftovers(mark):
            proc.kill()
