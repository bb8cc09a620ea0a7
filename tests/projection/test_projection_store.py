"""A projection's round trip: a real 1-device run and a real 2-process all-reduce model in one
database, `dlperf project` from them (the intra-node link measured), stored, and the report's
table of it, titled as projected and apart from the measured rows."""

from __future__ import annotations

import json

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf
from dlperf.store import Store

# one repeat: its interval is then its one figure, which the checks below allow; ResNet-50 cut
# to a bottleneck a stage (conftest's CUT_RESNET50): the projection reads the gradients' bytes
# from the result's own parameter count, whatever the network's depth
TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", *CUT_RESNET50_FLAGS,
        "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
        "--threads", "1"]


@pytest.mark.spans_cores
def test_a_projection_from_a_run_and_a_measured_model_is_stored_and_reported(tmp_path):
    db = tmp_path / "r.db"
    dlperf("run", *TINY, "--db", str(db), check=True)
    # sizes whose times the bandwidth term decides, so a loaded host still fits one
    dlperf("collectives", "--ops", "allreduce", "--nproc", "2", "--sizes", "2M:32M",
           "--iters", "3", "--warmup", "1", "--db", str(db), check=True)
    out = tmp_path / "p.json"
    proc = dlperf("project", "1", "--db", str(db), "--devices-per-node", "2", "--nnodes", "1",
                  "--json", str(out), check=True)
    assert "projected (not measured)" in proc.stdout
    assert "overlap not measured" in proc.stdout  # no 2-process result of the case stored
    made = json.loads(out.read_text())
    (point,) = made["points"]
    assert made["model"]["intra"]["source"].startswith("measured: torch gloo allreduce")
    # DDP's buckets (the cut network's whole gradient, under 25 MiB): priced from sizes near it
    assert made["model"]["intra"]["source"].endswith(" MiB messages")
    assert point["devices"] == 2
    span = point["throughput"]
    assert span["low"] <= span["value"] <= span["high"]
    # never faster than two devices each at the 1-device pace
    single = made["source"]["throughput_interval"][1]
    assert span["high"] <= 2 * single + 1e-9
    with Store(db, readonly=True) as store:
        (stored,) = store.projections()
        assert stored["id"] == made["id"] and stored["points"] == made["points"]
        assert len(store.results()) == 1  # a projection is no measured result
    report = dlperf("report", "--db", str(db), "--format", "md", check=True).stdout
    assert f"projected (not measured): {made['label']} — projection {made['id']}" in report
    assert "| throughput (samples/s, projected) | with the model's validated error |" in report
    wide = point["throughput_with_model_error"]
    assert wide["low"] < span["low"] and wide["high"] > span["high"]
    assert f"{wide['low']:,.1f}–{wide['high']:,.1f} (one-host (torch) check: " in report
    # torch's one-host cases: the Zen 3's, the Zen 5's and three Zen 4 runs' (the pinned has none)
    assert "1 x 2: " in proc.stdout and "(the one-host (torch) check: 8 cases" in proc.stdout
    # the HTML report draws it apart from the measured figures, beyond the measured point
    page = dlperf("report", "--db", str(db), "--format", "html", check=True).stdout
    assert f"projected (not measured), projection {made['id']}</figcaption>" in page
    # 4 nodes of 2: past every check made on a CPU (2 nodes, 2 devices at most), where only the
    # GPU study's reach: the interval keeps the CPU checks' errors, and says so
    far = tmp_path / "far.json"
    proc = dlperf("project", "1", "--db", str(db), "--devices-per-node", "2", "--nnodes", "4",
                  "--inter", "1gbit@50us", "--json", str(far), check=True)
    (point,) = json.loads(far.read_text())["points"]
    error = point["model_error"]
    assert error["check"] == "one-host (torch), emulated-hosts (torch) and published (torch)"
    assert error["past_its_device"] == {"device": "cpu", "nodes": 2, "devices": 2}
    assert error["beyond_validated"] is False and error["under"] <= -0.176
    assert "4 x 2: past every shape checked on a CPU (at most 2 nodes, 2 devices)" in \
        " ".join(proc.stdout.split())
    report = dlperf("report", "--db", str(db), "--format", "md", check=True).stdout
    assert ", past the shapes checked on a CPU (at most 2 nodes, 2 devices))" in report
