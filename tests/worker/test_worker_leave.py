"""dlperf.worker.leave: a single-process worker's exit without the interpreter's teardown, in a
real interpreter: what anything outside could notice still happens (threads finish, an idle
thread pool is told to stop, atexit handlers run, buffered output arrives, the exit code is the
one asked for); the teardown itself (objects freed one by one, their finalizers) does not. In
dlperf's Python and in the Python 3.7 of the tensorflow1 environment (the worker side's oldest)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import pinned_env
from dlperf import envs

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from dlperf.worker.leave import leave

    class Noisy:
        def __del__(self):
            sys.stdout.write("finalized\\n")

    kept = Noisy()  # a module global: freed only by the interpreter's teardown
    pool = ThreadPoolExecutor(1)  # its idle thread waits for work until told to stop
    pool.submit(sys.stdout.write, "pool|").result()
    atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), sys.stdout.write("thread done|"))).start()
    sys.stdout.write("buffered|")  # no newline, stdout a pipe: still in the buffer
    leave(3)
    sys.stdout.write("after leave\\n")
""")


@pytest.mark.parametrize("python", ["dlperf", "tensorflow1"])
def test_leave_keeps_what_an_exit_shows_and_skips_the_teardown(python, tmp_path):
    interpreter = sys.executable if python == "dlperf" else pinned_env(python)
    marker = tmp_path / "atexit.txt"
    proc = subprocess.run([interpreter, "-c", SCRIPT, str(marker)], capture_output=True,
                          text=True, timeout=60, env=envs.worker_env())
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "pool|buffered|thread done|", proc.stdout  # no "finalized"
    assert marker.read_text() == "atexit ran"
    assert proc.stderr == ""


@pytest.mark.parallel
@pytest.mark.parametrize("case,place", [
    # the backend cannot even be imported: the launcher's own variables place the rank
    ({"framework": "no-such-framework"},
     {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}),
    # imported, then a failure before any framework loads: the backend's names (paddle's launch)
    ({"framework": "paddle", "devices": "two"},
     {"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_LOCAL_RANK": "1"}),
])
def test_a_rank_that_fails_at_once_writes_its_own_file_as_a_rank_of_its_job(case, place,
                                                                             tmp_path):
    """A rank whose repeat fails before anything is built still knows its place: it writes
    rank1.json (never rank 0's file, which its peer writes) with the job's world size, so it
    leaves as a rank of a job does, through the interpreter's own exit."""
    (tmp_path / "case.json").write_text(json.dumps(case))
    env = {**envs.worker_env(), **place}
    proc = subprocess.run([sys.executable, "-m", "dlperf.worker", "--case",
                           str(tmp_path / "case.json"), "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "rank0.json").exists()
    result = json.loads((tmp_path / "rank1.json").read_text())
    assert (result["rank"], result["world_size"], result["local_rank"]) == (1, 2, 1)
    assert result["status"] != "ok" and result["error"], result
