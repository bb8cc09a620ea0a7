"""Resource timelines (issue 14): monitor samples placed in the worker's phases, window-only
means, the bound on stored points, and the report's per-case figure (size bound included)."""

from __future__ import annotations

import copy
import csv
import io
import json
import random

import pytest
from conftest import CUT_RESNET50_FLAGS, TINY_RESNET, dlperf, dlperf_main, gpus_listed, load

from dlperf.host import timeline
from dlperf.store import Store

# A report grows linearly with its cases (each timeline figure is drawn from at most
# PLOT_POINTS points a line), so 24 stored cases bound the 50-case report without drawing 50
# figures on a 2-core machine (the test suite's time is the scarce thing).
CASES_IN_BIG_REPORT = 24
FIFTY_CASE_REPORT_BYTES = 4_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real repeat whose window lasts long enough to hold monitor samples (ResNet-50 cut to
    a bottleneck a stage, conftest's CUT_RESNET50: what is checked is the timeline around the
    steps, whatever the network's depth)."""
    tmp = tmp_path_factory.mktemp("timeline")
    dlperf("run", *TINY_RESNET, *CUT_RESNET50_FLAGS, "--repeats", "1", "--min-duration", "2",
           "--db", str(tmp / "r.db"), "--json", str(tmp / "r.json"), check=True,
           env={"DLPERF_LOCK_DIR": str(tmp)})
    result = load(tmp / "r.json")
    return (result[0] if isinstance(result, list) else result), tmp / "r.db", tmp


def _weighted_window_mean(stored: dict, name: str) -> float:
    columns = stored["columns"]
    inside = [i for i, phase in enumerate(columns["phase"]) if phase == "window"]
    weights = [columns["n"][i] for i in inside]
    return sum(columns[name][i] * w for i, w in zip(inside, weights)) / sum(weights)


def test_real_repeat_has_phases_in_order_and_window_means(run):
    result, db, _ = run
    assert result["status"] == "ok", result.get("error")
    block = result["timeline"]
    stored = block["median"]
    names = [span["name"] for span in stored["phases"]]
    assert names == list(timeline.PHASES)
    for before, after in zip(stored["phases"], stored["phases"][1:]):
        assert before["end"] == pytest.approx(after["start"]) and after["end"] >= after["start"]
    window = stored["phases"][names.index("window")]
    assert window["end"] - window["start"] == pytest.approx(result["timings"]["window_s"][0],
                                                            abs=0.1)
    # every sample carries its phase, and phases only move forward in time
    order = [timeline.PHASES.index(p) for p in stored["columns"]["phase"]]
    assert order == sorted(order) and len(order) == len(stored["columns"]["t"])
    assert stored["columns"]["t"] == sorted(stored["columns"]["t"])
    means = block["window_means"][0]
    assert means["samples"] >= 2  # a 2 s window sampled every 0.5 s
    for name in timeline.HOST_FIELDS:
        # stored columns are rounded to 4 significant digits; the means come from raw samples
        assert means[name] == pytest.approx(_weighted_window_mean(stored, name), rel=1e-3,
                                            abs=1e-6), name
    assert 0 < means["cpu_tree_pct"] <= 100 and means["rss_bytes"] > 50e6
    assert 0 <= means["cpu_steal_pct"] <= 100  # the hypervisor's share, apart from the rest
    assert block["summary"]["cpu_tree_pct"] == pytest.approx(means["cpu_tree_pct"])
    # the repeat record in the database holds the same timeline
    with Store(db, readonly=True) as store:
        repeats = store.repeats(result["run_id"])
    assert dict(repeats[0]["timeline"]["window_means"], repeat=0) == means
    assert repeats[0]["phase_starts"]["window"] < repeats[0]["phase_starts"]["end"]


def test_csv_exports_window_means(run):
    result, db, _ = run
    # reports of the stored run go through dlperf's main in this process: what they print and
    # write is checked, not a fresh interpreter (test_fuzz_cli checks both answer alike)
    text = dlperf_main("report", "--db", str(db), "--format", "csv", check=True).stdout
    row = next(csv.DictReader(io.StringIO(text)))
    summary = result["timeline"]["summary"]
    assert float(row["window_cpu_tree_pct"]) == pytest.approx(summary["cpu_tree_pct"])
    assert float(row["window_rss_bytes"]) == pytest.approx(summary["rss_bytes"])
    assert float(row["window_cpu_steal_pct"]) == pytest.approx(summary["cpu_steal_pct"])
    if gpus_listed():  # the worker's GPU as NVML sampled it
        assert 0.0 <= float(row["window_gpu_util_pct"]) <= 100.0
    else:  # no GPU: empty, never zero
        assert row["window_gpu_util_pct"] == ""


def _long_raw(samples: int, seed: int = 0) -> tuple[dict, dict]:
    """A long repeat's raw samples (as the monitor hands them over) and the worker's marks."""
    rng = random.Random(seed)
    t0 = 1_700_000_000.0
    columns: dict = {"t": [0.25 + 0.5 * i for i in range(samples)], "n": [1] * samples}
    for name in timeline.HOST_FIELDS:
        columns[name] = [rng.uniform(0, 100) for _ in range(samples)]
    columns["gpu0_util_pct"] = [rng.uniform(0, 100) for _ in range(samples)]
    columns["gpu0_throttle_reasons"] = [rng.choice([0, 1, 4]) for _ in range(samples)]
    span = 0.5 * samples
    marks = {"build": t0 + 0.05 * span, "first_step": t0 + 0.2 * span,
             "warmup": t0 + 0.25 * span, "window": t0 + 0.4 * span, "end": t0 + 0.95 * span}
    return {"t0": t0, "interval_s": 0.5, "columns": columns}, marks


@pytest.mark.parallel
def test_long_repeat_is_averaged_down_within_phases():
    raw, marks = _long_raw(5000)
    stored = timeline.for_repeat(raw, marks)
    assert stored["downsampled"] and stored["raw_samples"] == 5000
    assert stored["points"] == len(stored["columns"]["t"]) <= timeline.MAX_POINTS
    # no point mixes phases: each phase keeps exactly its own raw samples
    full = timeline.for_repeat(raw, marks, max_points=10**9)
    for phase in timeline.PHASES:
        count = sum(n for n, p in zip(stored["columns"]["n"], stored["columns"]["phase"])
                    if p == phase)
        assert count == full["columns"]["phase"].count(phase), phase
    assert stored["window_means"] == full["window_means"]
    assert stored["window_means"]["cpu_tree_pct"] == pytest.approx(
        _weighted_window_mean(stored, "cpu_tree_pct"), rel=1e-3)
    # bit masks are combined, never averaged into meaningless numbers
    assert set(stored["columns"]["gpu0_throttle_reasons"]) <= {0, 1, 4, 5}
    assert stored["window_means"]["gpu0_throttle_reasons"] == 5


@pytest.mark.parallel
def test_monitor_memory_bound_keeps_weighted_means():
    raw, _ = _long_raw(1001, seed=1)
    merged = timeline.merge_pairs(raw["columns"])
    assert len(merged["t"]) == 501 and sum(merged["n"]) == 1001
    for name in ("cpu_tree_pct", "t"):
        before = sum(raw["columns"][name]) / 1001
        after = sum(v * n for v, n in zip(merged[name], merged["n"])) / 1001
        assert after == pytest.approx(before)


def test_html_report_draws_the_timeline(run):
    result, db, tmp = run
    out = tmp / "report.html"
    dlperf_main("report", "--db", str(db), "-o", str(out), check=True, timeout=300)
    html = out.read_text()
    assert "Resources over time" in html and html.count("<svg") == 1
    figure = html[html.index("<svg"):html.index("</svg>")]
    for text in ("CPU (% of machine)", "memory (RSS, GB)", "disk (MB/s, host)",
                 "network (MB/s, host, loopback left out)", "window", "build", "worker tree", "rest of host",
                 "hypervisor (steal)"):
        assert f">{text}<" in figure, text
    assert "Window means over every repeat: CPU worker tree" in html


def test_report_of_many_cases_stays_small_and_escapes_labels(run):
    """Many stored cases, each with a full-size timeline (600 points): a 50-case report stays
    a few MB."""
    result, _, tmp = run
    db = tmp / "many.db"
    raw, marks = _long_raw(4000)
    big = timeline.for_repeat(raw, marks)
    with Store(db) as store:
        for index in range(CASES_IN_BIG_REPORT):
            row = copy.deepcopy(result)
            row["case_key"] = f"{result['case_key']}-{index}"
            row["label"] = f"case {index} $x$ <b>{index}</b>"
            row["timeline"]["median"] = big
            run_id = store.start_run(row["case_key"], row["label"], row["case"], {}, None)
            row["run_id"] = run_id
            store.finish_run(run_id, row)
    out = tmp / "many.html"
    dlperf_main("report", "--db", str(db), "-o", str(out), check=True, timeout=300)
    html = out.read_text()
    assert html.count("<svg") == CASES_IN_BIG_REPORT
    assert out.stat().st_size * 50 / CASES_IN_BIG_REPORT < FIFTY_CASE_REPORT_BYTES, (
        out.stat().st_size)
    assert "<b>1</b>" not in html and "case 1 $x$ &lt;b&gt;1&lt;/b&gt;" in html
    assert json.loads(json.dumps(big))["points"] <= timeline.MAX_POINTS


LOOPBACK_TRAFFIC = """
import socket, time
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
peer, _ = server.accept()
block, sent, end = b"x" * (1 << 16), 0, time.monotonic() + 1.0
while sent < 32 << 20 or time.monotonic() < end:
    client.sendall(block)
    sent += len(block)
    got = 0
    while got < len(block):
        got += len(peer.recv(1 << 16))
"""


@pytest.mark.parallel
def test_the_monitors_network_counters_leave_loopback_out():
    """32 MB or more, for a second, between two sockets of one process over 127.0.0.1: the
    host's network, as the monitor reads it, carried none of it (another process's traffic on
    a real interface may pass, but not 16 MB in this test's second)."""
    import subprocess
    import sys

    from dlperf.host.monitor import Monitor

    proc = subprocess.Popen([sys.executable, "-c", LOOPBACK_TRAFFIC])
    with Monitor(proc.pid, interval=0.1) as watch:
        assert proc.wait(timeout=60) == 0
    summary = watch.summary()
    assert "lo" not in summary["net_by_interface"]
    for counters in summary["net_by_interface"].values():
        assert counters["tx_bytes"] < 16 << 20 and counters["rx_bytes"] < 16 << 20, summary
    rates = watch.timeline()["columns"]["net_tx_bytes_s"]
    assert sum(rate or 0.0 for rate in rates) * 0.1 < 16 << 20, rates
