"""What an engine's all-reduce puts on the wire (dlperf.worker.support.Wire): each backend's
declaration against the bytes its training steps put on the emulated hosts' links in every
stored 2-host result (benchmarks/data), the reading of those counters on constructed results,
and `dlperf project` pricing a link given as a rate with the declaration, and saying where a
stored result disagrees with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import dlperf
from dlperf import scaling, spec
from dlperf.host import emulated
from dlperf.worker.support import RING_WIRE, Wire

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import projection_validation as pv  # noqa: E402

pytestmark = pytest.mark.parallel

DATA = ROOT / "benchmarks" / "data"
FRAMEWORKS = DATA / "link-rates-frameworks-zen4-2026-12-02" / "results.json"
#: stored results whose engine then sent other than it declares now, with what they sent: the
#: check must see these as they were
BEFORE_A_FIX = {
    # JAX's step all-reduced each gradient twice until 3fa7a15 (docs/projection.md)
    ("link-rates-frameworks-zen4-2026-12-02", "jax"): 2.0,
}
#: stored results whose links carried more than their engine sends, for a reason not found: the
#: check keeps them at what they carried. Paddle at 5 Gbit/s (2026-12-06): 1.18-1.20 in all three
#: repeats, where its other rates' results of that run carried 0.96-0.99 and torch's gloo over
#: the same 5 Gbit/s link 1.03; a bulk TCP transfer through the same shaper retransmitted
#: nothing (a diagnostic); the projection priced that link from its measured collectives (-2.2 %)
UNEXPLAINED = {
    ("link-rates-unseen-zen4-2026-12-06", "paddle resnet50 train bs8 fp32 2n1d 1thr 5gbit-link"):
    1.19,
}
#: how far a result's median share may be from what its engine sends (the stored ones: 9 %)
TOLERANCE = 0.15


def engine_of(result: dict) -> str:
    case = result["case"]
    launcher = case.get("launcher") or "native"
    return case["framework"] if launcher == "native" else f"{launcher} ({case['framework']})"


def declared(result: dict) -> float:
    return spec.wire_of(result["case"]["framework"], result["case"].get("launcher"),
                        "cpu").share


def test_every_engine_puts_its_declared_bytes_on_the_wire():
    seen: dict[str, list[float]] = {}
    for path in sorted(DATA.glob("*/results.json")):
        for result in json.loads(path.read_text()):
            share = scaling.wire_share(result)
            if share is None:
                continue
            expected = UNEXPLAINED.get((path.parent.name, result["label"])) or BEFORE_A_FIX.get(
                (path.parent.name, result["case"]["framework"]), declared(result))
            assert abs(share / expected - 1) <= TOLERANCE, (path.parent.name, result["label"],
                                                            share, expected)
            seen.setdefault(engine_of(result), []).append(share)
    assert set(seen) == {"torch", "horovod (torch)", "tensorflow", "tensorflow1", "jax",
                         "paddle", "mxnet", "oneflow", "mindspore", "caffe2"}
    # the one engine that declares otherwise sends about twice a ring's bytes (1.91-1.99 on the
    # Zen 4; on the Zen 5, 1.92-1.99 but its 10 Gbit/s case's 1.72, within the tolerance, which
    # its collectives run over the same link, 779 MiB a host, does not share)
    assert spec.support("mindspore").wire_for("cpu").share == 2.0
    assert all(1.70 <= s <= 2.05 for s in seen["mindspore"]), seen["mindspore"]
    assert sorted(seen["mindspore"])[1] >= 1.85  # one low reading, not a trend


def constructed(names: list[str], column: str, rate: float) -> dict:
    """A 2-host result as stored, cut to what the reading needs: 1M parameters (a ring sends
    4 MB a host a step at 2 ranks), two repeats at 8 and 16 samples/s of a 16-sample step (2 s
    and 1 s), the window's network rate the same in both."""
    return {"case": {"framework": "torch", "devices": 1, "nnodes": 2, "precision": "fp32"},
            "model": {"params": 1_000_000}, "global_batch": 16, "status": "ok",
            "throughput": {"median": 12.0, "repeats": [8.0, 16.0]},
            "monitor": {"net_by_interface": {name: {} for name in names}},
            "launch": {"emulated_hosts": {"emulated": True, "count": 2}},
            "timeline": {"window_means": [{"repeat": 0, column: rate},
                                          {"repeat": 1, column: rate}]}}


def test_the_share_is_read_from_the_window_as_the_namespace_counts_it():
    frame = 1514 / 1448  # bytes of frame a byte of payload
    # a sweep's monitor: the bridge's ports, whose received bytes both hosts sent: 8 MB/s of
    # frames over a 2 s step is 8 MB of payload per host, 2x the ring's 4 MB; 1 s: 1x
    ports = [f"{emulated.PREFIX}abc123v0", f"{emulated.PREFIX}abc123v1",
             f"{emulated.PREFIX}abc123br"]
    sweep = constructed(ports, "net_rx_bytes_s", 8e6 * frame)
    assert scaling.wire_shares(sweep) == pytest.approx([2.0, 1.0])
    assert scaling.wire_share(sweep) == pytest.approx(1.5)
    # a run's: node 0's own interface, whose sent bytes are its own: 4 MB/s is 8 MB a 2 s step
    run = constructed([emulated.INTERFACE], "net_tx_bytes_s", 4e6 * frame)
    assert scaling.wire_shares(run) == pytest.approx([2.0, 1.0])
    # nothing to read: one host, several processes a host, or interfaces that are no host's
    one = constructed(ports, "net_rx_bytes_s", 8e6)
    one["case"]["nnodes"] = 1
    two = constructed(ports, "net_rx_bytes_s", 8e6)
    two["case"]["devices"] = 2
    assert scaling.wire_share(one) is None and scaling.wire_share(two) is None
    assert scaling.wire_share(constructed(["eth0"], "net_rx_bytes_s", 8e6)) is None


def test_the_report_says_whose_links_the_network_columns_count():
    from dlperf.report import timelines

    ports = [f"{emulated.PREFIX}abc123v0", f"{emulated.PREFIX}abc123v1"]
    sweep = constructed(ports, "net_rx_bytes_s", 8e6 * 1514 / 1448)
    run = constructed([emulated.INTERFACE], "net_tx_bytes_s", 1e6)
    host = constructed(["eth0"], "net_rx_bytes_s", 1e6)
    assert scaling.links_counted(sweep) == scaling.BRIDGE_PORTS
    assert scaling.links_counted(run) == scaling.NODE_0_LINK
    assert scaling.links_counted(host) is None
    # a run on this host alone while another job's emulated hosts were up: their bridge's
    # ports were interfaces of this namespace, but the run crossed none of them
    beside = constructed(["eth0", *ports], "net_rx_bytes_s", 1e6)
    del beside["launch"]
    assert scaling.links_counted(beside) is None and scaling.wire_share(beside) is None
    assert timelines.network_of(beside) == "host, loopback left out"
    assert [timelines.network_of(r) for r in (sweep, run, host)] == [
        "every emulated host's link", "node 0's link", "host, loopback left out"]
    said = timelines.caption(sweep)
    assert f"over {scaling.BRIDGE_PORTS}" in said
    assert "on the wire a step 1.50x a ring all-reduce's bytes a host" in said
    plain = timelines.caption(host)
    assert "network rx — / tx —." in plain and "on the wire" not in plain


def test_a_wire_share_is_a_positive_number_with_its_source():
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError, match="a wire share must be a number > 0"):
            Wire(bad, "x")
    with pytest.raises(ValueError, match="names its source"):
        Wire(2.0, "")
    assert Wire(2.0, "measured").describe() == "2x a ring's bytes on the wire (measured)"
    assert spec.support("torch").wire_for("cpu") is RING_WIRE
    # a job's engine: Horovod's ring whatever the framework; a framework with no backend here
    assert spec.wire_of("mindspore", "native", "cpu").share == 2.0
    assert spec.wire_of("mindspore", "horovod", "cpu") is RING_WIRE
    assert spec.wire_of("nosuch", None, "cpu") is RING_WIRE


def stored(tmp_path: Path, keep) -> Path:
    """A database of FRAMEWORKS' results that ``keep`` keeps (pv.load, a data folder's file)."""
    chosen = tmp_path / "chosen.json"
    chosen.write_text(json.dumps([r for r in json.loads(FRAMEWORKS.read_text()) if keep(r)]))
    db = tmp_path / "r.db"
    pv.load(chosen, db, "link-rates-frameworks")
    return db


def project(db: Path, framework: str, tmp_path: Path) -> tuple[dict, str]:
    """`dlperf project` of ``framework``'s 1-process result to 2 nodes over 1 Gbit/s."""
    run = next(r for r in pv.results(db, None) if r["case"]["framework"] == framework
               and (r["case"].get("nnodes") or 1) == 1)
    out = tmp_path / f"{framework}.json"
    proc = dlperf("project", str(run["run_id"]), "--db", str(db), "--devices-per-node", "1",
                  "--nnodes", "2", "--intra", "1000gbit", "--inter", "1gbit", "--no-store",
                  "--json", str(out), check=True)
    return json.loads(out.read_text()), proc.stdout + proc.stderr


def test_a_link_given_as_a_rate_carries_the_engines_own_bytes(tmp_path):
    db = stored(tmp_path, lambda r: r["case"]["framework"] in ("mindspore", "paddle"))
    for framework, share in (("mindspore", 2.0), ("paddle", 1.0)):
        made, said = project(db, framework, tmp_path)
        params = made["model"]["gradient_bytes"]
        # 2 nodes of 1: the ring between them sends the whole gradient once, at 1 Gbit/s, times
        # the share; the start's one process sends nothing
        (point,) = made["points"]
        assert point["allreduce_s"]["value"] == pytest.approx(share * params / (1e9 / 8))
        carrying = "carrying 2x a ring's bytes on the wire (MCCL's ring" in made["model"]["text"]
        assert carrying == (framework == "mindspore")
        assert "on the wire a step, where the engine declares" not in said  # they agree


def test_a_stored_result_that_sends_other_than_its_engine_declares_is_named(tmp_path):
    # JAX's 2-host results from before its step was fixed sent each gradient twice
    db = stored(tmp_path, lambda r: r["case"]["framework"] == "jax")
    made, said = project(db, "jax", tmp_path)
    named = [w for w in made["warnings"] if "a ring's bytes on the wire a step" in w]
    assert len(named) == 4, made["warnings"]  # unshaped, 10 Gbit/s, 1 Gbit/s, 100 Mbit/s
    assert all("where the engine declares 1x" in w for w in named)
    assert "put 1.9" in named[0]
    assert "links given as a rate are priced at the declaration" in " ".join(said.split())
