"""`dlperf system`'s proactive-reclaim finding: read from a DAMON sysfs tree laid out as the
kernel's (every state it reads), and on this host against its own /sys."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from dlperf.host import system

pytestmark = pytest.mark.parallel


def kdamond(admin: Path, index: int, state: str, action: str, age: int, aggr_us: int) -> None:
    base = admin / str(index)
    context = base / "contexts" / "0"
    scheme = context / "schemes" / "0"
    (scheme / "access_pattern" / "age").mkdir(parents=True)
    (context / "monitoring_attrs" / "intervals").mkdir(parents=True)
    (base / "state").write_text(state + "\n")
    (scheme / "action").write_text(action + "\n")
    (scheme / "access_pattern" / "age" / "min").write_text(f"{age}\n")
    (context / "monitoring_attrs" / "intervals" / "aggr_us").write_text(f"{aggr_us}\n")


def test_a_running_pageout_scheme_is_named_with_its_idle_age(tmp_path):
    admin, module = tmp_path / "kdamonds", tmp_path / "damon_reclaim"
    kdamond(admin, 0, "on", "pageout", 12, 5_000_000)
    kdamond(admin, 1, "off", "pageout", 1, 5_000_000)  # stopped: writes nothing out
    kdamond(admin, 2, "on", "stat", 1, 5_000_000)  # watches, writes nothing out
    found = system.proactive_reclaim(str(admin), str(module))
    assert (found.name, found.value, found.level) == (
        "proactive reclaim (DAMON)", "pageout of memory idle for 60 s", "warn")
    assert "read from disk again" in found.effect and found.fix.startswith("echo off")


def test_damon_reclaim_module_and_the_states_without_pageout(tmp_path):
    admin, module = tmp_path / "kdamonds", tmp_path / "damon_reclaim"
    assert system.proactive_reclaim(str(admin), str(module)).value == "not exposed"
    kdamond(admin, 0, "off", "pageout", 12, 5_000_000)
    assert (system.proactive_reclaim(str(admin), str(module)).value,
            system.proactive_reclaim(str(admin), str(module)).level) == ("off", "ok")
    module.mkdir()
    (module / "enabled").write_text("Y\n")
    (module / "min_age").write_text("120000000\n")
    found = system.proactive_reclaim(str(admin), str(module))
    assert found.value == "pageout of memory idle for 120 s"
    assert found.fix.startswith(f"echo N | sudo tee {module}/enabled")


def test_this_hosts_finding_is_what_its_sysfs_says():
    running = [Path(state).parent for state in glob.glob(f"{system.DAMON_ADMIN}/[0-9]*/state")
               if Path(state).read_text().strip() == "on"]
    pageout = [scheme for kdamond in running
               for scheme in kdamond.glob("contexts/[0-9]*/schemes/[0-9]*")
               if (scheme / "action").read_text().strip() == "pageout"]
    reclaim = Path(system.DAMON_RECLAIM, "enabled")
    found = system.proactive_reclaim()
    if pageout or (reclaim.exists() and reclaim.read_text().strip() == "Y"):
        assert found.level == "warn" and found.value.startswith("pageout of memory idle for ")
    else:
        assert found.level == "ok" and found.value in ("off", "not exposed")
