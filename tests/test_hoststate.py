"""Host state with every repeat: a real tiny repeat with and without a CPU-burning neighbour,
and --require-quiet giving up on a busy host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf import hoststate

BURNER = ("import ctypes; ctypes.CDLL(None).prctl(15, b'cpuburner', 0, 0, 0)\n"
          "while True: pass")
TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--num-classes",
        "10", "--batch-size", "2", "--warmup-steps", "3", "--steps", "20", "--min-duration", "4",
        "--repeats", "1"]


def run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *TINY, *extra,
                           "--db", str(tmp_path / "r.db"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    return proc, json.loads(out.read_text())


@pytest.fixture
def burner():
    proc = subprocess.Popen([sys.executable, "-c", BURNER])
    time.sleep(0.5)
    yield proc
    proc.kill()
    proc.wait()


def names(result: dict) -> list[str]:
    return [t["name"] for t in result["host"][0]["others"]["top"]]


def test_quiet_repeat_records_host_state_and_is_not_flagged(tmp_path):
    proc, result = run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (host,) = result["host"]
    for moment in ("before", "after"):
        state = host[moment]
        assert len(state["load_average"]) == 3
        assert state["memory_available_bytes"] > 0
        assert "cpu_mhz" in state and "thermal_throttle_events" in state
        assert state["gpu_throttle"] is None  # no NVIDIA driver on this machine
    assert 0.0 <= host["others"]["other_cpu_share"] <= hoststate.COMPETING_SHARE
    assert "cpuburner" not in names(result)
    assert not any("competed with other processes" in w for w in result["warnings"])


def test_repeat_beside_a_cpu_burner_is_flagged_with_its_name(tmp_path, burner):
    # one worker thread: two OpenMP threads on two cores beside a burner spin at every barrier,
    # which only makes the repeat slow (minutes), not the check stronger
    proc, result = run(tmp_path, "--threads-per-process", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    others = result["host"][0]["others"]
    assert names(result)[0] == "cpuburner"
    assert others["top"][0]["share"] > 0.2  # one core of two, shared with the worker
    (line,) = [w for w in result["warnings"] if "competed with other processes" in w]
    assert line.startswith("repeat 1: competed with other processes for ")
    assert "cpuburner" in line


def test_require_quiet_gives_up_on_a_busy_host(tmp_path, burner):
    start = time.monotonic()
    proc, result = run(tmp_path, "--require-quiet", "5")
    assert proc.returncode == 1
    assert result["status"] == "busy"
    assert result["error"].startswith("the host never became quiet within 5 s (--require-quiet)")
    assert "cpuburner" in result["error"]
    assert time.monotonic() - start < 120


def test_require_quiet_rejects_a_nonsense_wait(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *TINY, "--require-quiet",
                           "nan", "--db", str(tmp_path / "r.db")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlperf run: error: argument --require-quiet: 'nan' is not a finite number"]
