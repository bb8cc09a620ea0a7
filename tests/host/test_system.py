"""`dlperf system show|check` on this machine: its findings, and check failing beside a
CPU-burning neighbour."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from dlperf.host import system as host_system

# checks of the whole host's load and busy processes, and a neighbour it makes: `make test` runs
# this file last, alone on the machine
pytestmark = pytest.mark.whole_machine

EXPECTED = {"cpu governor", "turbo/boost", "SMT (hyper-threading)", "ASLR",
            "transparent huge pages", "proactive reclaim (DAMON)", "isolated CPUs", "NUMA layout",
            "CPU thermal throttling",
            "available memory", "load average", "other busy processes",
            "CPU steal (hypervisor)"}
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
    # the hypervisor's steal over the check's sample and since boot, against /proc/stat
    steal = found["CPU steal (hypervisor)"]
    match = re.fullmatch(r"(\d+\.\d)% over 2 s now; (\d+\.\d)% since boot", steal["value"])
    assert match, steal
    with open("/proc/stat") as handle:
        line = [int(v) for v in handle.readline().split()[1:9]]
    assert float(match.group(2)) == pytest.approx(100.0 * line[7] / sum(line), abs=0.15)
    now, since_boot = float(match.group(1)) / 100, float(match.group(2)) / 100

    def level(now: float, since_boot: float) -> str:
        return ("fail" if now > host_system.STEAL_FAIL else
                "warn" if max(now, since_boot) >= host_system.STEAL_WARN else "ok")

    # the value is rounded to 0.1%: either side of a threshold it rounds to is fine
    assert steal["level"] in {level(now + a, since_boot + b) for a in (-5e-4, 5e-4)
                              for b in (-5e-4, 5e-4)}


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


@pytest.mark.parallel
def test_steal_levels_make_the_host_unfit_only_when_sustained_now():
    """The steal finding from recorded numbers: above a competing process's 5% over the sample
    the check fails; history since boot, or 2% now, is worth knowing only."""
    unfit = host_system.steal(0.08, 2.0, 0.01)
    assert unfit.level == "fail" and unfit.value == "8.0% over 2 s now; 1.0% since boot"
    assert "dedicated cores" in unfit.fix and "bare metal" in unfit.fix and unfit.effect
    assert host_system.fit([unfit]) is False
    assert host_system.steal(0.03, 2.0, 0.0).level == "warn"
    assert host_system.steal(0.001, 2.0, 0.038).level == "warn"
    quiet = host_system.steal(0.001, 2.0, 0.001)
    assert quiet.level == "ok" and host_system.fit([quiet])
    assert host_system.steal(None, 2.0, None).value == "not exposed (no steal counter)"
