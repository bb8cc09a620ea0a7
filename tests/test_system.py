"""`dlperf system show|check` on this machine: its findings, and check failing beside a
CPU-burning neighbour."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

EXPECTED = {"cpu governor", "turbo/boost", "SMT (hyper-threading)", "ASLR",
            "transparent huge pages", "isolated CPUs", "NUMA layout", "CPU thermal throttling",
            "available memory", "load average", "other busy processes"}
BURNER = ("import ctypes; ctypes.CDLL(None).prctl(15, b'cpuburner', 0, 0, 0)\n"
          "while True: pass")


def system(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlperf.cli", "system", *args],
                          capture_output=True, text=True, timeout=120)


def test_show_lists_every_finding_with_a_level():
    proc = system("show", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    found = {f["name"]: f for f in data["findings"]}
    assert EXPECTED <= set(found)
    assert all(f["level"] in ("ok", "warn", "fail") for f in found.values())
    # a setting that is not ok says what it does to numbers and how to fix it
    for f in found.values():
        if f["level"] != "ok":
            assert f["effect"], f
    aslr = found["ASLR"]["value"]
    with open("/proc/sys/kernel/randomize_va_space") as handle:
        assert aslr == {"0": "off", "1": "partial", "2": "full"}[handle.read().strip()]


def test_check_fails_beside_a_cpu_burner():
    burner = subprocess.Popen([sys.executable, "-c", BURNER])
    try:
        time.sleep(0.5)
        proc = system("check", "--json")
    finally:
        burner.kill()
        burner.wait()
    assert proc.returncode == 1, proc.stdout
    data = json.loads(proc.stdout)
    assert data["fit"] is False
    busy = next(f for f in data["findings"] if f["name"] == "other busy processes")
    assert busy["level"] == "fail" and "cpuburner" in busy["value"]
    assert "--require-quiet" in busy["fix"]


def test_show_exits_0_even_when_unfit_and_prints_a_table():
    proc = system("show")
    assert proc.returncode == 0
    assert "benchmark host" in proc.stdout and "other busy processes" in proc.stdout
