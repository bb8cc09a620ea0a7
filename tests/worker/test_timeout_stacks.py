"""Where a timed-out job was (dlperf.worker.stacks, dlperf.runner.worker_stacks): real processes
under the real runner, no framework: the worker that armed itself answers with its stacks, a
process of the job that did not is left unsignalled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlperf import runner
from dlperf.launchers import launch

pytestmark = pytest.mark.parallel

# a launcher-like parent (unarmed: SIGUSR1 would kill it, so it notes one instead) whose child
# arms itself and waits in a named function, as a rank waits in a collective
PARENT = """
import signal, subprocess, sys, time
folder = sys.argv[1]
signal.signal(signal.SIGUSR1, lambda *_: open(folder + "/parent-signalled", "w").close())
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], folder])
child.wait()
"""
CHILD = """
import sys, time
from dlperf.worker import stacks
stacks.arm(sys.argv[1])
def waiting_for_its_peer():
    time.sleep(120)
waiting_for_its_peer()
"""


def test_a_timed_out_job_says_where_each_armed_worker_was(tmp_path: Path):
    spec = launch.Launch([sys.executable, "-c", PARENT, str(tmp_path), CHILD])
    outcome = runner.execute(spec, tmp_path / "worker.log", timeout_s=3)
    assert outcome.timed_out
    lines = outcome.stacks.splitlines()
    assert lines[0].startswith("worker pid ") and "left out" not in outcome.stacks, lines
    assert "(most recent call first)" in lines[1], lines
    assert 'line 6 in waiting_for_its_peer' in lines[2] and "line 7 in <module>" in lines[3], lines
    assert not (tmp_path / "parent-signalled").exists()  # only a worker with a stacks file


def test_a_job_that_ends_in_time_is_not_signalled(tmp_path: Path):
    spec = launch.Launch([sys.executable, "-c", CHILD.replace("120", "0"), str(tmp_path)])
    outcome = runner.execute(spec, tmp_path / "worker.log", timeout_s=60)
    assert not outcome.timed_out and outcome.returncode == 0 and outcome.stacks == ""
    # its file holds the header it armed with and nothing else
    (armed,) = tmp_path.glob("stacks.*.txt")
    assert armed.read_text().splitlines() == [f"worker pid {armed.name.split('.')[1]}:"]


def test_a_deep_stack_keeps_each_thread_s_innermost_and_outermost_frames():
    """A thread 60 frames deep (a worker inside torch's imports when the timeout came) keeps
    its innermost frames and its outermost, where the repeat it was in shows; a short thread is
    kept whole."""
    frames = [f'  File "x.py", line {n} in f{n}' for n in range(60)]
    lines = (["worker pid 7:", "Thread 0x01 (most recent call first):", *frames[:3], "",
              "Current thread 0x02 (most recent call first):", *frames,
              '  File "dlperf/worker/__main__.py", line 9 in repeat'])
    cut = runner.shortened_stacks(lines)
    assert cut[:6] == lines[:6]  # the header and the short thread, whole
    main = cut[6:]
    assert main[0] == "Current thread 0x02 (most recent call first):"
    assert main[1:1 + runner.STACKS_INNER] == frames[:runner.STACKS_INNER]
    left = 61 - runner.STACKS_INNER - runner.STACKS_OUTER
    assert main[1 + runner.STACKS_INNER] == f"  ... {left} frames left out ..."
    assert main[-runner.STACKS_OUTER:] == lines[-runner.STACKS_OUTER:]
    assert main[-1].endswith("line 9 in repeat")
