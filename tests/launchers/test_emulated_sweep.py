"""`dlperf sweep FILE --emulate-hosts` for real: a tiny ResNet-50 sweep whose 2-node cases run
across two emulated hosts, once unshaped and once over 1 Gbit/s links (the link as a sweep axis),
beside its 1-process baseline on this machine. Each repeat of a 2-node case is one step over the
hosts (dlperf.launchers.emulated_step); the bytes each host's interface carried during the
repeat are kept with the repeat; the report puts the link and the measured all-reduce bus
bandwidth beside the scaling efficiency, and a shaped link's bandwidth stays under its rate.

The arithmetic of the bus bandwidth and the report's check of it run without hosts (parallel).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import TAG, assert_nothing_left, dlperf, dlperf_main
from dlperf import scaling
from dlperf.report.tables import Report, link_cells
from dlperf.store import Store
from two_hosts import RESNET50_GRADIENT_BYTES, skip_without_emulation

SWEEP = """
name: emulated-tiny
defaults: {framework: torch, model: resnet50, device: cpu, image_size: 32, batch_size: 2,
           threads: 1, warmup_steps: 1, steps: 2, repeats: 1, timeout: 400}
include:
  - {nnodes: 1}
  - {nnodes: 2}
  - {nnodes: 2, link: 1gbit}
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    skip_without_emulation()
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "s.yaml").write_text(SWEEP)
    proc = dlperf("sweep", str(folder / "s.yaml"), "--emulate-hosts", "--db",
                  str(folder / "r.db"), env={TAG: "emulated-sweep"}, timeout=1200)
    assert_nothing_left("emulated-sweep")
    return proc, folder / "r.db"


@pytest.mark.spans_cores
def test_the_two_node_cases_run_across_the_hosts_with_each_repeats_traffic(swept):
    proc, db = swept
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "emulated hosts: 2 (dlperf-h0 198.1" in proc.stderr
    with Store(db, readonly=True) as store:
        results = {(r["case"]["nnodes"], r["case"].get("link") or ""): r
                   for r in store.results()}
        repeats = {key: store.repeats(r["run_id"]) for key, r in results.items()}
    assert sorted(results) == [(1, ""), (2, ""), (2, "1gbit")]
    assert all(r["status"] == "ok" for r in results.values())
    assert results[(1, "")]["ranks"][0]["host"] not in ("dlperf-h0", "dlperf-h1")
    for link in ("", "1gbit"):
        result = results[(2, link)]
        assert [rank["host"] for rank in result["ranks"]] == ["dlperf-h0", "dlperf-h1"]
        (record,) = repeats[(2, link)]
        block = record["launch"]["emulated_hosts"]
        assert block["link"] == (link or None) and block["count"] == 2
        assert block["bytes_over"].startswith("this repeat")
        for host in block["hosts"]:  # 3 training steps' gradients and the probe's, each way
            for way in ("tx_bytes", "rx_bytes"):
                assert host[way] >= 3 * RESNET50_GRADIENT_BYTES, host
            assert host["lo_tx_bytes"] < 0.05 * host["tx_bytes"], host
        assert result["launch"]["launcher"] == "torchrun"
        assert result["launch"]["master"] == f"{block['hosts'][0]['address']}:29500"
    for namespace in (h["namespace"] for h in block["hosts"]):
        assert not Path("/run/netns", namespace).exists()


@pytest.mark.spans_cores
def test_a_shaped_links_all_reduce_stays_under_its_rate_and_the_report_shows_it(swept):
    _, db = swept
    with Store(db, readonly=True) as store:
        shaped = next(r for r in store.results() if r["case"].get("link") == "1gbit")
    bandwidth = scaling.allreduce_bus_bandwidth(shaped)
    assert bandwidth is not None
    # at most the rate (plus the bucket's burst and the timer), and near it: the shaper set the pace
    assert 0.5e9 <= bandwidth * 8 <= 1.05e9, bandwidth * 8
    report = dlperf("report", "--db", str(db), "--sweep", "emulated-tiny", "--format", "md",
                    check=True).stdout
    table = report[report.index("scaling of torch"):]
    assert "| link | all-reduce bus bw (measured) |" in table
    row = next(line for line in table.splitlines() if "| 1gbit |" in line)
    assert "Gbit/s" in row and "%" in row.split("|")[-2], row  # its scaling efficiency
    assert "more than the link carries" not in report


def constructed(n: int, params: int, allreduce_s: list[list[float]], link: str = "") -> dict:
    """A stored result as the report reads it: ``allreduce_s[rank][repeat]``."""
    return {"case": {"devices": 1, "nnodes": n, "link": link}, "model": {"params": params},
            "ranks": [{"rank": k, "allreduce_s": times} for k, times in enumerate(allreduce_s)]}


@pytest.mark.parallel
def test_bus_bandwidth_is_the_slowest_ranks_median_times_the_rings_factor():
    # repeats' slowest ranks 0.6 and 1.0 s: median 0.8 s; 2 ranks: 2(n-1)/n = 1; 4 kB buffer
    result = constructed(2, 1000, [[0.5, 1.0], [0.6, 0.9]])
    assert scaling.allreduce_bus_bandwidth(result) == pytest.approx(4000 / 0.8)
    # 4 ranks: 2(n-1)/n = 1.5; one repeat, slowest 2 s
    four = constructed(4, 1000, [[1.0], [2.0], [1.5], [None]])
    assert scaling.allreduce_bus_bandwidth(four) == pytest.approx(4000 * 1.5 / 2.0)
    assert scaling.allreduce_bus_bandwidth(constructed(1, 1000, [[None]])) is None


@pytest.mark.parallel
def test_a_bandwidth_above_the_links_rate_gets_a_note():
    report = Report([], [], [], [])
    # 4 MB in 0.01 s over 2 ranks: 3.2 Gbit/s on a 1 Gbit/s link
    fast = constructed(2, 1_000_000, [[0.01], [0.01]], link="1gbit")
    link, bandwidth = link_cells(report, fast)
    assert link.text == "1gbit" and bandwidth.text == "3.2 Gbit/s" and bandwidth.notes
    assert "more than the link carries" in report.notes[0]
    slow = constructed(2, 1_000_000, [[0.1], [0.1]], link="1gbit")  # 0.32 Gbit/s: fine
    assert link_cells(report, slow)[1].notes == []


@pytest.mark.parallel
def test_emulated_sweep_refusals_are_one_line(tmp_path, monkeypatch):
    single = tmp_path / "one.yaml"
    single.write_text("name: one\ndefaults: {framework: torch, model: resnet50, batch_size: 2}\n"
                      "include:\n  - {nnodes: 1}\n")
    proc = dlperf_main("sweep", str(single), "--emulate-hosts", "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and "no case of this sweep has nnodes of 2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    two = tmp_path / "two.yaml"
    two.write_text(SWEEP)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    proc = dlperf_main("sweep", str(two), "--emulate-hosts", "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and "needs root" in proc.stderr, proc.stderr
    assert not (tmp_path / "r.db").exists()
    monkeypatch.undo()
    # without --emulate-hosts a link cannot be shaped: refused before anything runs
    proc = dlperf_main("sweep", str(two), "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and "--emulate-hosts" in proc.stderr, proc.stderr
