"""`dlperf project`'s model (dlperf.projection) on constructed inputs, each term against a hand
calculation, and the command's refusals and its published-table mode (no worker starts)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from conftest import dlperf_main
from dlperf import models, scaling
from dlperf.errors import UsageError
from dlperf.projection.links import (MIB, PARAMETER_SERVER, RING, Link, allreduce_s,
                                     flat_ring_allreduce_s, gradient_bytes, link_bytes,
                                     link_of_model, path_and_wire_s, pushpull_s,
                                     ring_allreduce_s)
from dlperf.projection.model import (SERVERS_LEFT_OUT, Inputs, Point, Projection, Shape,
                                     not_modelled, project)
from dlperf.projection.overlap import (BACKWARD_SHARE, Overhead, Overlap, Seen, at_batch,
                                       fitted, overhead_fit, overhead_under_whole_step,
                                       overlap_from, overlaps_whole_step, window_from)
from dlperf.projection.span import Span
from dlperf.studies import collectives as study
from dlperf.worker.support import Packing

pytestmark = pytest.mark.parallel

GBIT = 1e9 / 8  # bytes/s
LINK = Link(10 * GBIT, 0.0, "given")  # 10 Gbit/s, no latency: the hand calculations below


def test_a_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_message():
    # 100 MB over 4 ranks at 10 Gbit/s: 2*3/4 * 100e6 / 1.25e9 = 0.12 s
    assert ring_allreduce_s(100e6, 4, LINK) == pytest.approx(0.12)
    # 2 ranks: the whole message once; latency 2(n-1) hops
    slow = Link(10 * GBIT, 1e-3, "given")
    assert ring_allreduce_s(100e6, 2, slow) == pytest.approx(0.08 + 0.002)
    assert ring_allreduce_s(100e6, 1, slow) == 0.0


def test_across_nodes_one_ring_runs_through_every_process_at_its_slowest_hop():
    intra, inter = Link(100 * GBIT, 1e-6, "given"), Link(10 * GBIT, 5e-6, "given")
    # 8 per node x 4 nodes, 100 MB: one ring of 32; every edge, the node's one edge out over
    # its NIC too, carries 2 * 31/32 * 100e6, at the NIC's 1.25e9: 0.155 s, and 62 steps of the
    # slower hop's 5 us (a hierarchical all-reduce's NIC would carry 2 * 3/4: 0.12 s)
    assert flat_ring_allreduce_s(100e6, 8, 4, intra, inter) == pytest.approx(
        2 * 31 * 5e-6 + 0.155)
    # one process a node: the ring is the nodes', all of it over the NICs
    assert flat_ring_allreduce_s(100e6, 1, 4, intra, inter) == pytest.approx(
        2 * 3 * 5e-6 + 2 * 3 / 4 * 100e6 / (10 * GBIT))
    # a node's own link slower than its NIC sets the pace instead
    slow = Link(1 * GBIT, 0.0, "given")
    assert flat_ring_allreduce_s(100e6, 2, 2, slow, inter) == pytest.approx(
        2 * 3 * 5e-6 + 1.5 * 100e6 / GBIT)
    # 2 nodes of 2, as the emulated hosts' counters measured it: 1.5 messages a NIC
    assert link_bytes(RING, 2, 2) == pytest.approx(1.5)
    assert link_bytes(RING, 1, 2) == pytest.approx(1.0)


def test_each_all_reduce_pays_its_latency_and_the_bytes_cost_the_same_however_cut():
    lat = Link(10 * GBIT, 1e-3, "given")
    one = allreduce_s(60e6, 1, 2, 1, lat, None)
    three = allreduce_s(60e6, 3, 2, 1, lat, None)
    # 2 ranks: 2 hops of 1 ms each per all-reduce, and 60 MB over 1.25 GB/s once in all
    assert one == pytest.approx(2e-3 + 60e6 / 1.25e9)
    assert three - one == pytest.approx(2 * 2 * 1e-3)  # two more all-reduces, 2 hops each
    # across 2 nodes of 4: each all-reduce pays the ring's 2 * 7 steps of its slower hop
    inter = Link(1 * GBIT, 1e-2, "given")
    two = allreduce_s(60e6, 2, 4, 2, lat, inter)
    assert two == pytest.approx(2 * flat_ring_allreduce_s(30e6, 4, 2, lat, inter))
    assert allreduce_s(60e6, 2, 4, 2, lat, inter) - allreduce_s(
        60e6, 1, 4, 2, lat, inter) == pytest.approx(2 * 7 * 1e-2)


def test_a_parameter_server_carries_each_workers_bytes_through_the_nodes_nic():
    intra, inter = Link(100 * GBIT, 0.0, "given"), Link(10 * GBIT, 1e-3, "given")
    # 2 nodes of 1 worker, 100 MB: each NIC carries its push of the other server's half and
    # its server's reply to the other worker, 2 * 1 * 1/2 * 100e6 / 1.25e9 = 0.08 s (a ring's
    # bytes), plus the push's and the pull's latency
    assert pushpull_s(100e6, 1, 2, intra, inter) == pytest.approx(0.08 + 2e-3)
    assert ring_allreduce_s(100e6, 2, Link(10 * GBIT, 0.0, "g")) == pytest.approx(0.08)
    # 4 workers on each of 4 nodes: 2 * 4 * 3/4 * 100e6 / 1.25e9 = 0.48 s a NIC, where the
    # ring's edge out of the node carries 2 * 15/16 * 100e6 / 1.25e9 = 0.15 s
    assert pushpull_s(100e6, 4, 4, intra, inter) == pytest.approx(0.48 + 2e-3)
    # one node of 4 workers: its server takes 4 x 100 MB each way over the node's link,
    # 4 * 100e6 / 12.5e9 = 0.032 s, where a ring's 2 * 3/4 * 100e6 / 12.5e9 = 0.012 s
    assert pushpull_s(100e6, 4, 1, intra, None) == pytest.approx(0.032)
    assert pushpull_s(100e6, 1, 1, intra, None) == 0.0  # one worker: nothing
    # the server's own node's share over its link is slower than its NIC: it sets the time
    slow_inside = Link(0.1 * GBIT, 0.0, "given")
    assert pushpull_s(100e6, 2, 2, slow_inside, inter) == pytest.approx(
        2 * 100e6 / 2 / (0.1 * GBIT))
    # what each link carries, in messages: a ring's 2(n-1)/n, a server's d on one node and
    # 2d(N-1)/N a NIC across nodes; the ratio turns a probe's ring-counted bus bandwidth into
    # the server's link at that shape (the same probe time either way)
    ring, ps = RING, PARAMETER_SERVER
    assert link_bytes(ring, 4, 1) == pytest.approx(1.5)
    assert link_bytes(ring, 4, 4) == pytest.approx(2 * 15 / 16)
    assert link_bytes(ps, 4, 1) == 4.0
    assert link_bytes(ps, 4, 4) == pytest.approx(6.0)
    assert link_bytes(ps, 1, 2) == link_bytes(ring, 1, 2) == 1.0
    probe_bw = 1e9  # a ring's 2(2-1)/2 x 100 MB in 0.1 s on 2 processes of one node
    as_server = Link(probe_bw * link_bytes(ps, 2, 1) / link_bytes(
        ring, 2, 1), 0.0, "probe")
    assert pushpull_s(100e6, 2, 1, as_server, None) == pytest.approx(0.1)
    # a step's keys are pipelined: one round trip's latencies for the step however many keys,
    # the bytes as one (a ring's all-reduces each pay theirs)
    for keys in (1, 161):
        assert allreduce_s(100e6, keys, 1, 2, intra, inter,
                           PARAMETER_SERVER) == pytest.approx(0.08 + 2e-3)
    assert allreduce_s(100e6, 2, 2, 1, inter, None) == pytest.approx(
        0.08 + 2 * 2 * 1e-3)


def test_a_measured_push_and_pull_becomes_the_servers_link():
    """Read back at its own shape, the parameter-server model gives the measured time."""
    from dlperf import collective_model as cm

    fit = cm.Fit(alpha_s=2e-4, beta_s=1 / 1e8, median_error=0.01, max_error=0.04)
    across = cm.Model(cm.Key("mxnet", "kvstore", "pushpull", 1, 2, "1gbit"), 1, fit,
                      (1024, 2048), "vm", False, "cpu", "now", None)
    link = link_of_model(across)
    assert link.bandwidth == pytest.approx(1e8)  # 2 * 1 * (2-1)/2 / beta
    assert link.latency == pytest.approx(1e-4) and link.error == 0.04  # alpha over push + pull
    fast = Link(1000 * GBIT, 0.0, "given")
    assert pushpull_s(32e6, 1, 2, fast, link) == pytest.approx(2e-4 + 32e6 / 1e8)
    inside = cm.Model(cm.Key("mxnet", "kvstore", "pushpull", 2), 1, fit, (1024, 2048), "vm",
                      False, "cpu", "now", None)
    link = link_of_model(inside)
    assert link.bandwidth == pytest.approx(2e8)  # its server takes both workers' bytes
    assert pushpull_s(32e6, 2, 1, link, None) == pytest.approx(2e-4 + 32e6 / 1e8)
    broadcast = cm.Model(cm.Key("mxnet", "kvstore", "broadcast", 2), 1, fit, (1024, 2048),
                         "vm", False, "cpu", "now", None)
    with pytest.raises(UsageError, match="parameter server's push and pull"):
        link_of_model(broadcast)


def test_mxnet_declares_its_parameter_server_and_its_projection_says_so():
    from dlperf import spec

    wire = spec.wire_of("mxnet", "native", "cpu")
    assert wire.exchange == PARAMETER_SERVER and wire.share == 1.0
    assert spec.wire_of("mxnet", "horovod", "cpu").exchange == RING
    assert spec.wire_of("torch", "native", "cpu").exchange == RING
    made = dataclasses.replace(inputs(Overlap(0.0, "run 3", 0.0, window_s=0.0)),
                               exchange=wire.exchange)
    ps = Projection("x", {}, made, [])
    assert "through a parameter server on each node" in ps.model_text()
    stored = ps.to_dict()["model"]
    assert stored["exchange"] == "parameter-server"
    assert "a parameter server's bottleneck" not in stored["not_modelled"]
    assert SERVERS_LEFT_OUT in stored["not_modelled"]
    assert "a parameter server's bottleneck" in not_modelled(RING)


def test_a_packing_counts_the_all_reduces_of_a_step():
    mib = MIB
    ddp = Packing("DDP", bucket_bytes=25 * mib)
    # 60 MiB in 25 MiB buckets: two full ones and a 10 MiB rest
    assert ddp.messages(60 * mib, None) == 3 and ddp.messages(25 * mib, None) == 1
    assert ddp.messages(1, 161) == 1
    assert Packing("TF", whole=True).messages(60 * mib, 161) == 1
    # one per gradient tensor, or per 32 (TF 1.15's merge scope): ResNet-50's 161 tensors
    assert Packing("XLA", tensors=1).messages(60 * mib, 161) == 161
    assert Packing("TF1", tensors=32).messages(60 * mib, 161) == 6
    assert Packing("XLA", tensors=1).messages(60 * mib, None) is None  # the model counts none
    assert "25 MiB buckets (DDP)" == ddp.describe()
    for bad in ({}, {"bucket_bytes": 0}, {"tensors": 1, "whole": True}, {"tensors": 1.5}):
        with pytest.raises(ValueError):
            Packing("x", **bad)


def test_a_mode_s_own_packing_wins_over_its_device_kind_s():
    """A key ``cpu/compile=on`` declares one compile mode's packing; the device kind's serves the
    other; a key that names neither mode, or an unknown device kind, is refused."""
    from dlperf.worker.support import Support

    kind, graph = Packing("eager", tensors=10), Packing("graph", whole=True)
    support = Support("x", ("resnet50",), {"cpu": {"train": ("fp32",)}}, {False: "e", True: "g"},
                      packing={"cpu": kind, "cpu/compile=on": graph})
    assert support.packing_for("cpu", True) is graph
    assert support.packing_for("cpu", False) is kind
    assert support.packing_for("cuda", False) is None
    only_eager = Support("x", ("resnet50",), {"cpu": {"train": ("fp32",)}}, {False: "e"},
                         packing={"cpu/compile=off": kind})
    assert only_eager.packing_for("cpu", False) is kind
    assert only_eager.packing_for("cpu", True) is None
    for bad, says in (("cpu/compiled", "after the device kind, one of compile=on, compile=off"),
                      ("tpu/compile=on", "unknown device kind 'tpu'")):
        with pytest.raises(ValueError, match=says):
            Support("x", ("resnet50",), {"cpu": {"train": ("fp32",)}}, {False: "e"},
                    packing={bad: kind})


def test_the_catalogue_counts_the_gradient_tensors():
    """ResNet-50: 53 convolutions, a batch norm's two after each, the classifier's two; BERT-Base
    as the catalogue lays it out (query, key and value apart); each against the parameters'
    own layout, the same walk the parameter count makes."""
    assert models.get("resnet50").gradient_tensors() == 3 * 53 + 2 == 161
    assert models.get("resnet50").gradient_tensors({"max_blocks": 1}) == 3 * 17 + 2
    assert models.get("bert-base").gradient_tensors() == 5 + 16 * 12 + 9 == 206
    assert models.get("bert-base").gradient_tensors({"layers": 2}) == 5 + 32 + 9
    assert models.get("gpt").gradient_tensors() is None  # not counted: per-tensor engines refuse


#: docs/projection.md's packing table: the start of each row's engine cell -> (framework, compile)
#: whose declaration the row states; "horovod" is Horovod's own (dlperf.backends.horovod)
DOCUMENTED_PACKINGS = {
    "PyTorch DDP": ("torch", False), "Paddle `DataParallel`": ("paddle", False),
    "TensorFlow `MultiWorkerMirroredStrategy`": ("tensorflow", False),
    "TensorFlow 1.15": ("tensorflow1", False), "JAX `shard_map`": ("jax", True),
    "MXNet kvstore": ("mxnet", False), "OneFlow eager": ("oneflow", False),
    "Caffe2 `data_parallel_model`": ("caffe2", False), "Horovod": ("horovod", False),
}


def test_the_documented_packings_are_the_declared_ones():
    """Each row of docs/projection.md's packing table states what its engine's declaration
    counts for ResNet-50 (161 gradient tensors, 102 MB of fp32 gradients) and where it is set;
    every declaration on a CPU has its row."""
    from pathlib import Path

    from dlperf import spec
    from dlperf.backends.horovod import PACKING as HOROVOD

    text = (Path(__file__).resolve().parents[2] / "docs" / "projection.md").read_text()
    head = "| engine | packing | all-reduces a ResNet-50 step"
    lines = text[text.index(head):].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in lines[:next(i for i, line in enumerate(lines) if not line.strip())]]
    gradient = 25557032 * 4
    seen = set()
    for engine, _, count, _ in rows:
        key = next((k for k in DOCUMENTED_PACKINGS if engine.startswith(k)), None)
        if key is None:
            assert engine.startswith("OneFlow's `nn.Graph`, MindSpore"), engine  # the undeclared
            continue
        framework, compiled = DOCUMENTED_PACKINGS[key]
        packing = HOROVOD if framework == "horovod" else \
            spec.support(framework).packing_for("cpu", compiled)
        assert packing is not None, engine
        assert packing.messages(gradient, 161) == int(count), engine
        seen.add((framework, compiled))
    for framework in spec.frameworks():  # a declaration serving both modes needs one row
        support = spec.support(framework)
        for compiled in support.modes:
            packing = support.packing_for("cpu", compiled)
            assert packing is None or any(
                support.packing_for("cpu", mode) is packing
                for fw, mode in seen if fw == framework), (framework, compiled)


def test_gradient_bytes_follow_the_precision():
    assert gradient_bytes(1000, "fp32") == 4000
    assert gradient_bytes(1000, "amp-bf16") == 4000  # autocast keeps fp32 gradients
    assert gradient_bytes(1000, "bf16") == 2000


def inputs(overlap: Overlap, compute: Span = Span(0.1, 0.1, 0.1)) -> Inputs:
    # 25 MB of gradients in one all-reduce: 2 ranks at 10 Gbit/s all-reduce in 0.02 s
    return Inputs(compute, 8, 25_000_000, 1, "one", LINK, LINK, overlap)


def test_the_overlap_hides_its_share_and_the_interval_spans_its_range():
    none = project(inputs(Overlap(0.0, "given")), Shape(2, 1))
    assert none.allreduce_s.value == pytest.approx(0.02)
    assert none.step_s.value == pytest.approx(0.12)
    assert none.throughput.value == pytest.approx(16 / 0.12)
    assert none.speedup.value == pytest.approx(2 * 0.1 / 0.12)
    assert none.efficiency.value == pytest.approx(0.1 / 0.12)
    half = project(inputs(Overlap(0.5, "given")), Shape(2, 1))
    assert half.step_s.value == pytest.approx(0.11)
    unknown = project(inputs(Overlap(None, "not measured")), Shape(2, 1))
    assert (unknown.step_s.low, unknown.step_s.high) == (pytest.approx(0.1),
                                                         pytest.approx(0.12))
    # the 1-device measurement's interval carries through
    spread = project(inputs(Overlap(0.0, "given"), Span(0.1, 0.09, 0.11)),
                     Shape(2, 1))
    assert spread.step_s.low == pytest.approx(0.11) and spread.step_s.high == pytest.approx(0.13)


def test_the_overlap_a_multi_process_result_shows():
    # 1 device 0.10 s, 2 processes 0.11 s, the model's all-reduce there 0.02 s: half hidden
    found = overlap_from(0.11, 0.10, 0.02, "run 7")
    assert found.value == pytest.approx(0.5) and found.source == "run 7"
    assert found.overhead == 0.0
    # 0.20 s: the whole all-reduce exposed (overlap 0) and 0.08 s beyond it, 80 % of the step
    slow = overlap_from(0.20, 0.10, 0.02, "x")
    assert slow.value == 0.0 and slow.overhead == pytest.approx(0.8)
    assert overlap_from(0.09, 0.10, 0.02, "x").value == 1.0


def test_the_multi_process_overhead_scales_every_multi_process_target():
    # 10 % overhead on the 0.1 s step: 0.11 s of compute, then the 0.02 s all-reduce exposed
    point = project(inputs(Overlap(0.0, "given", overhead=0.1)), Shape(2, 1))
    assert point.step_s.value == pytest.approx(0.13)
    assert point.throughput.value == pytest.approx(16 / 0.13)
    # the start's own shape gains nothing: it is what was measured
    same = project(inputs(Overlap(0.0, "given", overhead=0.1)), Shape(1, 1))
    assert same.step_s.value == pytest.approx(0.1)


def test_the_overlap_window_hides_its_seconds_of_any_all_reduce():
    # a 15 ms window: of the 20 ms all-reduce 5 ms is exposed, 0.1 + 0.005 s a step
    point = project(inputs(Overlap(0.75, "given", window_s=0.015)), Shape(2, 1))
    assert point.step_s.value == pytest.approx(0.105)
    # a window longer than the all-reduce hides all of it; the share 0.75 does not apply
    whole = project(inputs(Overlap(0.75, "given", window_s=0.05)), Shape(2, 1))
    assert whole.step_s.value == pytest.approx(0.1)
    # one result alone: the hidden part of its own all-reduce is the window (0.11 s step of a
    # 0.10 s 1-device step with 0.02 s all-reduce: 0.01 s hidden)
    assert overlap_from(0.11, 0.10, 0.02, "x").window_s == pytest.approx(0.01)


def test_the_window_from_a_long_all_reduce_and_the_overhead_from_a_short_one():
    # 1-device step 0.5 s; unshaped: step 0.62 s, all-reduce 0.1 s; shaped: step 1.1 s,
    # all-reduce 0.8 s. H = 0.12 + 0.8 - 0.6 = 0.32 s (>= 0.1: the short one is hidden, so
    # its whole 0.12 s excess is overhead: 24 % of the step)
    short = Seen(0.62, 0.5, 0.1, "unshaped")
    made = window_from(Seen(1.1, 0.5, 0.8, "shaped"), short)
    assert made.window_s == pytest.approx(0.32)
    assert made.overhead == pytest.approx(0.24)
    assert made.value == pytest.approx(0.32 / 0.8)
    assert "window: shaped" in made.source and "overhead: unshaped" in made.source
    # a window past the backward pass, 2/3 of the step as the overhead stretches it
    # (2/3 x 0.62 = 0.4133 s), is cut to it: shaped step 0.9 s would say 0.52 s
    capped = window_from(Seen(0.9, 0.5, 0.8, "shaped"), short)
    assert capped.window_s == pytest.approx(2 / 3 * 0.62)
    assert capped.overhead == pytest.approx(0.24)
    # a window shorter than the short one's all-reduce exposes the rest of it: unshaped
    # all-reduce 0.3 s, H = 0.12 + 0.8 - 0.75 = 0.17 s; 0.13 s of it exposed, more than the
    # 0.12 s excess: no overhead
    exposed = window_from(Seen(1.25, 0.5, 0.8, "shaped"),
                          Seen(0.62, 0.5, 0.3, "unshaped"))
    assert exposed.window_s == pytest.approx(0.17) and exposed.overhead == 0.0
    # the target: 0.5 x 1.24 + max(0, A - 0.32) with the 2-rank 10 Gbit/s link's 20 ms
    # all-reduce hidden; 0.4 s of all-reduce exposes 0.08 s
    slow = Link(25_000_000 / 0.4, 0.0, "given")
    at = Inputs(Span(0.5, 0.5, 0.5), 8, 25_000_000, 1, "one", slow, None, made)
    assert project(at, Shape(2, 1)).step_s.value == pytest.approx(0.62 + 0.08)


def test_the_window_carries_its_sources_spread_into_the_interval():
    # the same two results as above with intervals: unshaped step 0.60-0.64 s, shaped step
    # 1.05-1.15 s and its all-reduce probe 0.7-0.9 s. Least window: 0.10 + 0.7 - 0.65 = 0.15 s;
    # most: 0.14 + 0.9 - 0.55 = 0.49 s, cut to the backward pass (2/3 x 0.62 = 0.4133 s)
    short = Seen(0.62, 0.5, 0.1, "unshaped", (0.60, 0.64))
    long = Seen(1.1, 0.5, 0.8, "shaped", (1.05, 1.15), (0.7, 0.9))
    made = window_from(long, short)
    assert made.window_s == pytest.approx(0.32)
    assert made.window_ends == pytest.approx((0.15, 2 / 3 * 0.62))
    # the overhead: the unshaped step's excess, its all-reduce hidden, 0.12 s (24 % of the
    # 1-device step), and at its step's interval ends 0.10 and 0.14 s (20 % and 28 %)
    assert made.overhead == pytest.approx(0.24)
    assert made.overhead_range == pytest.approx((0.20, 0.28))
    assert made.overhead_ends == pytest.approx((0.20, 0.24, 0.28))
    # a 0.5 s all-reduce at the target: 0.18 s exposed at the window, 0.35 s at its least,
    # 0.0867 s at its most; the step's interval is the overhead's ends plus these
    slow = Link(25_000_000 / 0.5, 0.0, "given")
    at = Inputs(Span(0.5, 0.5, 0.5), 8, 25_000_000, 1, "one", slow, None, made)
    step = project(at, Shape(2, 1)).step_s
    assert step.value == pytest.approx(0.62 + 0.18)
    assert step.low == pytest.approx(0.60 + 0.5 - 2 / 3 * 0.62)
    assert step.high == pytest.approx(0.64 + 0.35)
    # without intervals the window has no ends, and the step none from it
    assert window_from(Seen(1.1, 0.5, 0.8, "shaped"),
                       Seen(0.62, 0.5, 0.1, "unshaped")).window_ends is None
    # one result alone: 0.11 s step (0.105-0.12) of a 0.10 s 1-device step, its all-reduce
    # 0.02 s (0.015-0.025): hidden 0.01 s, at least 0 (0.015 - 0.02), at most 0.02 (0.025 -
    # 0.005), its whole all-reduce: the step bounds the window from below only, so the most
    # is the backward pass, 2/3 x 0.10 s (a 0.03 s all-reduce then hides whole)
    one = overlap_from(0.11, 0.10, 0.02, "x", (0.105, 0.12), (0.015, 0.025))
    assert one.window_s == pytest.approx(0.01)
    assert one.window_ends == pytest.approx((0.0, 2 / 3 * 0.10))
    assert one.exposed(0.03) == pytest.approx((0.0, 0.02, 0.03))
    # one whose step shows part of it at every end keeps its most: 0.125-0.15 s
    shown = overlap_from(0.13, 0.10, 0.04, "x", (0.125, 0.15))
    assert shown.window_ends == pytest.approx((0.0, 0.015))
    # its overhead, what the whole all-reduce does not explain: none at 0.11 s, 0.0 at its
    # fast end, 0.12 - 0.10 - 0.02 = 0 at its slow end; a slower step's slow end shows one
    assert one.overhead == 0.0 and one.overhead_range is None
    slower = overlap_from(0.13, 0.10, 0.02, "x", (0.125, 0.15))
    assert slower.overhead == pytest.approx(0.1)  # 0.13 - 0.10 - 0.02 = 0.01 s of 0.10
    assert slower.overhead_range == pytest.approx((0.05, 0.3))
    text = Projection("x", {}, at, []).model_text()
    assert "window 320 ms" in text and "150-413.3 ms at its sources' interval ends" in text


def test_an_overhead_from_another_batch_spans_its_share_and_fixed_readings():
    # measured at a 0.1 s 1-device step as 50 % (0.05 s); the start's step is 0.2 s: as a
    # share 0.1 s, as a fixed time 0.05 s = 25 % of it; the window is kept in seconds
    seen = Overlap(0.0, "x", overhead=0.5, window_s=0.0)
    carried = at_batch(seen, 0.1, 0.2)
    assert carried.overhead == 0.5 and carried.overhead_fixed == pytest.approx(0.25)
    assert carried.window_s == 0.0
    assert at_batch(seen, 0.2, 0.2) is seen  # the same batch: one reading
    # its source's spread, 40-60 %, carried as both readings: 20-60 % of the start's step
    ranged = dataclasses.replace(seen, overhead_range=(0.4, 0.6))
    assert at_batch(ranged, 0.1, 0.2).overhead_ends == pytest.approx((0.2, 0.5, 0.6))
    point = project(inputs(carried, Span(0.2, 0.2, 0.2)), Shape(2, 1))
    # the 20 ms all-reduce exposed: 0.2 x 1.5 + 0.02 (value), 0.2 x 1.25 + 0.02 (fast end)
    assert point.step_s.value == pytest.approx(0.32)
    assert (point.step_s.low, point.step_s.high) == (pytest.approx(0.27), pytest.approx(0.32))


def test_the_path_and_the_wire_together():
    # wire 0.855 s, path 0.372 s: 90 % of the path in series adds 0.3348 s
    assert path_and_wire_s(0.855, 0.372, 0.9) == pytest.approx(1.1898)
    assert path_and_wire_s(0.855, 0.372, 1.0) == pytest.approx(0.855 + 0.372)
    assert path_and_wire_s(0.855, 0.372, 0.0) == pytest.approx(0.855)  # slower
    assert path_and_wire_s(0.0855, 0.097, 0.05) == pytest.approx(0.097)  # path
    # measured 0.42 s over a 0.0855 s wire with a 0.372 s path: (0.42 - 0.0855) / 0.372
    assert scaling.serial_share(0.42, 0.0855, 0.372) == pytest.approx(0.3345 / 0.372)
    assert scaling.serial_share(0.08, 0.0855, 0.097) == 0.0  # faster than the wire
    assert scaling.serial_share(2.0, 0.0855, 0.372) == 1.0


def test_a_stored_projection_gains_the_window_and_keeps_the_old_fields():
    made = Projection("x", {}, inputs(Overlap(0.4, "run 3", 0.1, window_s=0.008,
                                              overhead_fixed=0.05)), [])
    overlap = made.to_dict()["model"]["overlap"]
    assert overlap == {"value": 0.4, "source": "run 3", "overhead": 0.1, "window_s": 0.008,
                       "whole_step": False, "window_ends": None, "overhead_fixed": 0.05,
                       "overhead_s": None, "overhead_ends": None, "overhead_range": None}
    assert "window 8 ms (40% of its all-reduce)" in made.model_text()
    assert "+5.0% read as a fixed time per step" in made.model_text()


def test_a_parameter_servers_step_across_nodes_is_the_longer_of_compute_and_exchange():
    # 100 MB of gradients through a server on each of 2 nodes, 1 worker a node: each NIC carries
    # 2d(N-1)/N = 1.0 x the message, 100e6 B at 1e8 B/s = 1.0 s (the node's own share, 50 MB at
    # 10 Gbit/s, 0.04 s, is beside it); the compute 0.3 s, hidden under it whole
    slow = Link(1e8, 0.0, "given")
    whole = Overlap(1.0, "x", 0.0, window_s=0.3, whole_step=True)

    def at(link: Link) -> Point:
        made = Inputs(Span(0.3, 0.3, 0.3), 8, 100_000_000, 161, "keys", LINK, link, whole,
                      exchange=PARAMETER_SERVER)
        return project(made, Shape(1, 2))

    point = at(slow)
    assert point.allreduce_s.value == pytest.approx(1.0)
    assert point.step_s.value == pytest.approx(1.0)  # max(0.3, 1.0)
    assert point.step_s.low == pytest.approx(1.0)
    # the slow end as if only the backward pass (2/3 of 0.3 s) hid it: 0.3 + 1.0 - 0.2
    assert point.step_s.high == pytest.approx(1.1)
    # a fast link: 0.1 s of exchange under a 0.3 s step, the step is the compute's
    fast = at(Link(1e9, 0.0, "given"))
    assert fast.step_s.value == pytest.approx(0.3) and fast.step_s.high == pytest.approx(0.3)
    # the same overlap read as a ring's window of 0.3 s exposes 1.0 - 0.3 = 0.7 s beyond 0.3 s
    ring = project(Inputs(Span(0.3, 0.3, 0.3), 8, 100_000_000, 161, "keys", LINK,
                          slow, dataclasses.replace(whole, whole_step=False),
                          exchange=PARAMETER_SERVER), Shape(1, 2))
    assert ring.step_s.value == pytest.approx(1.0)
    assert "window the whole step" in Projection(
        "x", {}, Inputs(Span(0.3, 0.3, 0.3), 8, 1, 1, "one", LINK, slow, whole), []).model_text()


def test_a_whole_step_window_reads_only_the_overhead():
    # the short result's step (0.54 s) is longer than its exchange (0.275 s): all of its excess
    # over the 1-device step (0.31 s) is overhead, 0.23 s = 74 % of the step, whatever the long
    # result shows (no window is read from it)
    short = Seen(0.54, 0.31, 0.275, "unshaped")
    long = Seen(9.9, 0.31, 8.6, "100mbit")
    made = window_from(long, short, whole_step=True)
    assert made.whole_step and made.overhead == pytest.approx(0.23 / 0.31)
    assert made.window_s == pytest.approx(0.54) and made.value == 1.0
    # a step no longer than its exchange is the exchange's: no overhead can be read from it
    assert overhead_under_whole_step(Seen(1.0, 0.3, 1.2, "x")) == 0.0
    one = overlap_from(1.0, 0.3, 1.2, "x", whole_step=True)
    assert one.whole_step and one.overhead == 0.0
    # read as a ring's, the same two give a window kept within the backward pass instead
    ring = window_from(long, short)
    assert not ring.whole_step and ring.window_s <= BACKWARD_SHARE * 0.54
    # only a parameter server's exchange, and only read across nodes
    assert overlaps_whole_step(PARAMETER_SERVER, 2)
    assert not overlaps_whole_step(PARAMETER_SERVER, 1)
    assert not overlaps_whole_step(RING, 2)


def test_a_measured_model_becomes_a_rings_link():
    from dlperf import collective_model as cm

    key = cm.Key("torch", "gloo", "allreduce", 2)
    fit = cm.Fit(alpha_s=1e-4, beta_s=1 / 1e9, median_error=0.01, max_error=0.05)
    model = cm.Model(key, 1, fit, (1024, 2048), "vm", False, "cpu", "now", None)
    link = link_of_model(model)
    assert link.bandwidth == pytest.approx(1e9)  # factor 2(n-1)/n = 1 at 2 ranks
    assert link.latency == pytest.approx(1e-4 / 2)  # alpha over the ring's 2(n-1) hops
    assert link.error == 0.05


def test_a_target_below_the_start_is_refused():
    start = Inputs(Span(0.1, 0.1, 0.1), 8, 1, 1, "one", LINK, LINK, Overlap(0, "x"),
                   Shape(4, 1))
    with pytest.raises(UsageError, match="below what was measured"):
        project(start, Shape(2, 1))


@pytest.mark.parametrize("args, words", [
    (["--intra", "fast@1us"], "--intra: 'fast' is not a link rate"),
    (["--intra", "10gbit@soon"], "--intra: 'soon' is not a latency"),
    (["--nnodes", "0"], "--nnodes"),
    # a link that does not parse is named before the default measured --intra is looked up
    (["--intra", "measured", "--inter", "10xbit"], "--inter: '10xbit' is not a link rate"),
    (["--intra", "measured", "--inter", "measured:fast"], "--inter: 'fast' is not a link rate"),
    # a published study's links are its hardware's, never this machine's models
    (["--intra", "measured"], "--published: give the study's links as --intra RATE@LATENCY"),
    (["--intra", "400gbit@2us", "--inter", "measured:1gbit"],
     "--published: give the study's links as --intra RATE@LATENCY"),
])
def test_bad_input_is_one_line(args, words, tmp_path):
    proc = dlperf_main("project", "--published", "dlperf-report-v1/resnet50-fp32", "--inter",
                       "100gbit@5us", *(["--intra", "400gbit@2us"] if "--intra" not in args
                                        else []), *args, "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.db").exists()


def test_a_missing_collective_model_names_the_command(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(ONE_DEVICE))
    proc = dlperf_main("project", str(tmp_path / "one.json"), "--devices-per-node", "2",
                       "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2, proc.stderr
    assert "no collective model of torch gloo allreduce on one host" in proc.stderr
    assert "dlperf collectives --framework torch --path gloo --ops allreduce --nproc 2" \
        in proc.stderr
    assert not (tmp_path / "r.db").exists()


def test_a_link_that_does_not_parse_is_named_before_a_missing_model(tmp_path):
    """--intra defaults to the measured model, missing here: the bad --inter is what is said."""
    (tmp_path / "one.json").write_text(json.dumps(ONE_DEVICE))
    proc = dlperf_main("project", str(tmp_path / "one.json"), "--nnodes", "2", "--inter",
                       "100gbit@soon", "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "dlperf project: error: --inter: 'soon' is not a latency; write NUMBER followed by ns, "
        "us, ms or s, e.g. 5us"], proc.stderr
    assert not (tmp_path / "r.db").exists()


def test_the_overhead_source_alone_is_refused(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(ONE_DEVICE))
    proc = dlperf_main("project", str(tmp_path / "one.json"), "--devices-per-node", "2",
                       "--intra", "10gbit", "--overhead-from", "3", "--db",
                       str(tmp_path / "r.db"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dlperf project: error: --overhead-from: name the window's result with --overlap-from "
        "too (one whose all-reduce is long enough to be exposed)")
    assert not (tmp_path / "r.db").exists()


def test_a_result_on_two_nodes_is_no_start(tmp_path):
    two = json.loads(json.dumps(ONE_DEVICE))
    two["case"]["nnodes"] = 2
    (tmp_path / "two.json").write_text(json.dumps(two))
    proc = dlperf_main("project", str(tmp_path / "two.json"), "--intra", "10gbit",
                       "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and "a projection starts from a 1-device or 1-node result" \
        in proc.stderr, proc.stderr


def test_a_published_table_projected_from_its_one_gpu_figures(tmp_path):
    out = tmp_path / "p.json"
    proc = dlperf_main("project", "--published", "dlperf-report-v1/resnet50-fp32", "--intra",
                       "400gbit@2us", "--inter", "100gbit@5us", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    oneflow = [r for r in rows if r["framework"] == "OneFlow"]
    assert [(r["nodes"], r["gpus_per_node"]) for r in oneflow] == [(1, 8), (2, 8), (4, 8)]
    at_32 = oneflow[-1]
    assert at_32["published"] == 12411.97
    # never above 32 x the 1-GPU figure (397.64 img/s), whatever the links
    assert at_32["projected"]["high"] <= 32 * 397.64 + 1e-6
    assert at_32["error"] == pytest.approx(at_32["projected"]["value"] / 12411.97 - 1)
    assert "median |error|" in proc.stdout


@pytest.mark.parametrize("table,kind", [("dell-emc-v100/fig2-scaling", "speedup"),
                                        ("horovod-readme-2018/scaling-efficiency",
                                         "scaling-efficiency")])
def test_a_published_table_without_a_throughput_is_refused_saying_so(table, kind):
    proc = dlperf_main("project", "--published", table, "--intra", "100gbit@2us", "--inter",
                       "25gbit@5us", "--no-store")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"dlperf project: error: --published: {table} publishes {kind} only, no throughput on "
        f"one GPU or node to start a projection from (the model needs the step time it adds "
        f"the all-reduce to)")


# a stored 1-device result as `dlperf run --json` writes it, cut to what a projection reads
ONE_DEVICE = {
    "schema": 1, "label": "torch resnet50 train bs8 fp32", "status": "ok", "run_id": 1,
    "case": {"framework": "torch", "model": "resnet50", "task": "train", "precision": "fp32",
             "batch_size": 8, "devices": 1, "nnodes": 1, "device": "cpu"},
    "throughput": {"median": 20.0, "ci95": [19.0, 21.0], "cv": 0.02, "n": 3,
                   "repeats": [19.0, 20.0, 21.0]},
    "model": {"params": 25557032}, "global_batch": 8, "unit": "samples/s",
}


def test_the_overhead_fitted_at_two_batch_sizes_as_a_fixed_time_and_a_share():
    # 0.07 s of overhead where the 1-device step is 0.1 s, 0.10 s where it is 0.25 s: the share
    # (0.10 - 0.07) / (0.25 - 0.1) = 0.2, the fixed part 0.07 - 0.2 x 0.1 = 0.05 s
    fit = overhead_fit([(0.1, 0.07), (0.25, 0.1)])
    assert (fit.fixed_s, fit.share) == (pytest.approx(0.05), pytest.approx(0.2))
    assert fit.at(0.4) == pytest.approx(0.13)
    # a fixed cost alone (JAX's ~1.7 s per 2-process step): no share
    jax = overhead_fit([(0.07, 1.7), (0.14, 1.7)])
    assert (jax.fixed_s, jax.share) == (pytest.approx(1.7), pytest.approx(0.0, abs=1e-12))


def test_a_negative_part_of_the_fit_is_clamped_and_the_other_refitted():
    # less overhead at the larger step: share < 0, so 0, the fixed part the mean
    shrinking = overhead_fit([(0.1, 0.1), (0.25, 0.07)])
    assert (shrinking.fixed_s, shrinking.share) == (pytest.approx(0.085), 0.0)
    # overhead growing faster than the step: fixed < 0, so 0, the share through the origin
    # by least squares: (0.1 x 0.01 + 0.25 x 0.1) / (0.1^2 + 0.25^2) = 0.026 / 0.0725
    growing = overhead_fit([(0.1, 0.01), (0.25, 0.1)])
    assert (growing.fixed_s, growing.share) == (0.0, pytest.approx(0.026 / 0.0725))


def test_the_fitted_overhead_and_its_interval_from_the_two_results_own_intervals():
    # each result: 0.1 s of all-reduce, none hidden (window 0); batch 2's step 0.27 s
    # (0.26-0.29) over its 0.1 s 1-device step: 0.07 s of overhead (0.06-0.09); batch 4's
    # 0.45 s (0.44-0.47) over 0.25 s: 0.10 s (0.09-0.12)
    small = Seen(0.27, 0.1, 0.1, "b2", (0.26, 0.29))
    large = Seen(0.45, 0.25, 0.1, "b4", (0.44, 0.47))
    made = fitted(Overlap(0.0, "b4", 1.0, window_s=0.0), (small, large), 0.4)
    assert (made.overhead_s, made.overhead) == (pytest.approx(0.05), pytest.approx(0.2))
    assert made.overhead_fixed is None and made.window_s == 0.0
    assert "overhead fitted: b2 and b4" in made.source
    # at a 0.4 s step (0.15 s past batch 4, as far as batch 4 from batch 2) a fit gives
    # 2 x o(b4) - o(b2): least 2 x 0.09 - 0.09 (share 0, 0.09 s fixed), most 2 x 0.12 - 0.06
    # (share 0.06 / 0.15 = 0.4, fixed 0.06 - 0.04 = 0.02 s)
    assert made.overhead_fits is not None
    low, high = made.overhead_fits
    assert (low.fixed_s, low.share) == (pytest.approx(0.09), pytest.approx(0.0, abs=1e-12))
    assert (high.fixed_s, high.share) == (pytest.approx(0.02), pytest.approx(0.4))
    # the start's step with the overhead: 0.4 + 0.05 + 0.2 x 0.4; the fast end at 0.38 s with
    # the least fit (+0.09), the slow end at 0.42 s with the most (+0.02 + 0.4 x 0.42)
    with_it = made.with_overhead(Span(0.4, 0.38, 0.42))
    assert (with_it.value, with_it.low, with_it.high) == (
        pytest.approx(0.53), pytest.approx(0.47), pytest.approx(0.608))
    # then the target's 20 ms all-reduce, exposed whole (window 0)
    point = project(inputs(made, Span(0.4, 0.38, 0.42)), Shape(2, 1))
    assert point.step_s.value == pytest.approx(0.55)
    # without the results' intervals the ends are the fit itself
    bare = fitted(Overlap(0.0, "b4", 1.0, window_s=0.0),
                  (Seen(0.27, 0.1, 0.1, "b2"),
                   Seen(0.45, 0.25, 0.1, "b4")), 0.4)
    assert bare.overhead_fits is not None
    assert all(f.at(0.4) == pytest.approx(0.13) for f in bare.overhead_fits)
    # a window leaves only the all-reduce past it exposed: 0.04 s more overhead each
    windowed = fitted(Overlap(0.4, "b4", 1.0, window_s=0.04), (small, large), 0.4)
    assert (windowed.overhead_s, windowed.overhead) == (pytest.approx(0.09),
                                                        pytest.approx(0.2))


def test_a_stored_projection_gains_the_fitted_overhead():
    fits = (Overhead(0.09, 0.0), Overhead(0.02, 0.4))
    made = Projection("x", {}, inputs(Overlap(0.0, "b4", 0.2, window_s=0.0,
                                              overhead_s=0.05,
                                              overhead_fits=fits)), [])
    overlap = made.to_dict()["model"]["overlap"]
    assert overlap["overhead"] == 0.2 and overlap["overhead_s"] == 0.05
    assert overlap["overhead_ends"] == [{"fixed_s": 0.09, "share": 0.0},
                                        {"fixed_s": 0.02, "share": 0.4}]
    assert overlap["overhead_fixed"] is None
    assert "overhead 50 ms per step + 20.0% of the step (fitted at two batch sizes)" in \
        made.model_text()
    # one without a fit stores them empty
    old = Projection("x", {}, inputs(Overlap(0.4, "run 3", 0.1)), []).to_dict()
    assert old["model"]["overlap"]["overhead_s"] is None
    assert old["model"]["overlap"]["overhead_ends"] is None


def constructed_db(path, omit: tuple[int, int] | None = None) -> dict[tuple[int, int], str]:
    """A real SQLite store of constructed torch results, keyed (devices, batch) to run ids:
    1-device steps 0.1 s (batch 2), 0.25 s (4) and 0.4 s (8); 2-process steps 0.27 s (2) and
    0.45 s (4), each with a 0.1 s all-reduce probe and no 95 % interval; ``omit`` left out."""
    from dlperf.store import Store

    steps = {(1, 2): 0.1, (1, 4): 0.25, (1, 8): 0.4, (2, 2): 0.27, (2, 4): 0.45}
    ids = {}
    with Store(path) as store:
        for (devices, batch), step in steps.items():
            if (devices, batch) == omit:
                continue
            result = json.loads(json.dumps(ONE_DEVICE))
            result["case"].update(batch_size=batch, devices=devices)
            result["global_batch"] = batch * devices
            result["label"] = f"torch resnet50 train bs{batch} fp32 {devices}d"
            result["throughput"] = {"median": batch * devices / step, "n": 3}
            if devices > 1:
                result["ranks"] = [{"rank": r, "allreduce_s": [0.1] * 3} for r in (0, 1)]
            run = store.start_run(f"k{devices}-{batch}", result["label"], result["case"], {})
            result["run_id"] = run
            store.finish_run(run, result)
            ids[devices, batch] = str(run)
    return ids


def projections_in(db) -> list[str]:
    """The stored projections' JSON, read with sqlite3 itself."""
    con = sqlite3.connect(db)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'projections'").fetchall():
            return []
        return [row[0] for row in con.execute("SELECT projection_json FROM projections")]
    finally:
        con.close()


def test_dlperf_project_fits_the_overhead_from_two_batch_sizes_and_stores_it(tmp_path):
    db = tmp_path / "r.db"
    ids = constructed_db(db)
    out = tmp_path / "p.json"
    proc = dlperf_main("project", ids[1, 8], "--db", str(db), "--devices-per-node", "2",
                       "--intra", "10gbit", "--overlap-from", ids[2, 4], "--overhead-from",
                       ids[2, 2], "--overhead-from", ids[2, 4], "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    overlap = json.loads(out.read_text())["model"]["overlap"]
    # the window from batch 4 alone: its 0.2 s excess is read as the 0.1 s all-reduce exposed
    # (window 0) and 0.1 s of overhead; batch 2's 0.17 s excess less the 0.1 s exposed: 0.07 s;
    # through (0.1 s, 0.07 s) and (0.25 s, 0.1 s): 0.05 s + 20 % of the step
    assert overlap["window_s"] == pytest.approx(0.0)
    assert overlap["overhead_s"] == pytest.approx(0.05)
    assert overlap["overhead"] == pytest.approx(0.2)
    assert overlap["overhead_fixed"] is None
    point = json.loads(out.read_text())["points"][0]
    # 0.4 s x 1.2 + 0.05 s, then the 2-rank all-reduce at 10 Gbit/s exposed whole
    allreduce = 4 * 25557032 / (10e9 / 8)
    assert point["step_s"]["value"] == pytest.approx(0.53 + allreduce)
    (stored,) = projections_in(db)
    assert json.loads(stored)["model"]["overlap"]["overhead_s"] == pytest.approx(0.05)


@pytest.mark.parametrize("omit, sources, words", [
    (None, [(2, 4), (2, 4)], "--overhead-from: torch resnet50 train bs4 fp32 2d and torch "
                             "resnet50 train bs4 fp32 2d are at one batch size; a fit needs two"),
    (None, [(2, 2), (2, 4), (2, 2)], "--overhead-from: given 3 times; give one (at "
                                     "--overlap-from's batch) or two (at two batch sizes)"),
    ((1, 2), [(2, 2), (2, 4)], "--overhead-from: torch resnet50 train bs2 fp32 2d is at another "
                               "batch size than RESULT and"),
    (None, [(2, 2), (1, 4)], "--overhead-from: torch resnet50 train bs4 fp32 1d is not a result "
                             "of torch resnet50 train bs8 fp32 1d's configuration"),
])
def test_a_fit_from_sources_it_cannot_use_is_refused_in_one_line(tmp_path, omit, sources,
                                                                 words):
    db = tmp_path / "r.db"
    ids = constructed_db(db, omit)
    named = [w for s in sources for w in ("--overhead-from", ids[s])]
    proc = dlperf_main("project", ids[1, 8], "--db", str(db), "--devices-per-node", "2",
                       "--intra", "10gbit", "--overlap-from", ids[2, 4], *named)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"dlperf project: error: {words}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert projections_in(db) == []


@pytest.mark.parametrize("devices", [1, 2])
def test_a_noisy_unsteady_start_is_said_with_its_shape(devices, tmp_path):
    """A start whose repeats spread (CV over 5 %) and whose window was not steady is said so in
    one line each, naming the start as it was measured: one device, or one node of several."""
    from dlperf.store import Store

    result = json.loads(json.dumps(ONE_DEVICE))
    result["case"]["devices"] = devices
    result["global_batch"] = 8 * devices
    result["throughput"] = {"median": 20.0 * devices, "cv": 0.08, "n": 3}
    result["warmup"] = {"steady": False}
    with Store(tmp_path / "r.db") as store:
        run = store.start_run("k", result["label"], result["case"], {})
        store.finish_run(run, result)
    proc = dlperf_main("project", str(run), "--db", str(tmp_path / "r.db"),
                       "--devices-per-node", "4", "--intra", "10gbit", "--no-store")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() + proc.stdout.splitlines()
            if "the start's result" in line]
    assert said == [f"! the start's result (1 x {devices}) is noisy (CV 8.0%): its interval is "
                    f"wide", f"! the start's result (1 x {devices}): its window was not steady"]
    # nothing measured beyond the start: a start of several devices is multi-process itself
    missing = ("no multi-process result" if devices == 1 else
               "no result on more devices than the start's 1 x 2")
    assert f"overlap not measured ({missing} of this configuration in " in proc.stdout


@pytest.mark.parametrize("framework, launcher, count, says", [
    ("torch", "native", 4, "25 MiB buckets (torch.nn.parallel.DistributedDataParallel's"),
    ("torch", "horovod", 2, "64 MiB buckets (Horovod's tensor fusion"),
    ("tensorflow", "native", 1, "one all-reduce of every gradient (tf.distribute's"),
    ("tensorflow1", "native", 6, "one all-reduce per 32 gradient tensors (TF 1.15"),
    ("jax", "native", 161, "one all-reduce per gradient tensor (shard_map"),
    ("mxnet", "native", 161, "one push and pull per gradient tensor (Gluon Trainer"),
    ("mindspore", "native", 4, "25 MiB buckets (mindspore declares none on cpu/compile=off: "
                               "taken as PyTorch DDP's 25 MiB buckets)"),
    # a mode's own declaration: OneFlow's eager DDP buckets 10 parameters (161 -> 17), its
    # nn.Graph declares none
    ("oneflow", "native", 17, "one all-reduce per 10 gradient tensors (flow.nn.parallel."),
    ("oneflow+graph", "native", 4, "25 MiB buckets (oneflow declares none on cpu/compile=on: "
                                   "taken as PyTorch DDP's 25 MiB buckets)"),
])
def test_the_engine_s_declared_packing_counts_the_all_reduces(framework, launcher, count, says,
                                                              tmp_path):
    """A stored ResNet-50 result (102 MB of fp32 gradients, 161 tensors) projected to 4
    processes: the all-reduces a step pays the latency of come from its engine's declaration
    (Horovod's for ``--launcher horovod``), stored and said with the projection; at 0.1 ms a hop each
    costs 6 hops' latency on 4 ranks (MXNet's push and pull two, through its server)."""
    from dlperf.store import Store

    result = json.loads(json.dumps(ONE_DEVICE))
    name, _, graph = framework.partition("+")
    result["case"].update(framework=name, compile=bool(graph))
    with Store(tmp_path / "r.db") as store:
        run = store.start_run("k", result["label"], result["case"], {})
        store.finish_run(run, result)
    out = tmp_path / "p.json"
    proc = dlperf_main("project", str(run), "--db", str(tmp_path / "r.db"),
                       "--devices-per-node", "4", "--intra", "10gbit@100us", "--launcher",
                       launcher, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(out.read_text())
    assert made["model"]["allreduces_per_step"] == count
    assert made["model"]["packing"].startswith(says)
    gradient = 25557032 * 4
    (point,) = made["points"]
    if (framework, launcher) == ("mxnet", "native"):
        # ps-lite's server on the one node: the keys' pushes and pulls pipelined, one round
        # trip (2 latencies) for the step, and the server takes the 4 workers' whole gradients
        # each way (dlperf.projection.links.pushpull_s)
        assert made["model"]["exchange"] == "parameter-server"
        assert (f"in {count} push(es) and pull(s) through a parameter server on each node a "
                f"step: {says}") in made["model"]["text"]
        assert point["allreduce_s"]["value"] == pytest.approx(
            2 * 100e-6 + 4 * gradient / 1.25e9)
        return
    assert made["model"]["exchange"] == "ring"
    assert f"in {count} all-reduce(s) a step: {says}" in made["model"]["text"]
    # the link is given as a rate: it carries the engine's own bytes (MindSpore's MCCL twice
    # a ring's, dlperf.worker.support.Wire; Horovod's a ring's)
    share = 2.0 if (framework, launcher) == ("mindspore", "native") else 1.0
    assert point["allreduce_s"]["value"] == pytest.approx(
        count * 6 * 100e-6 + share * 2 * 3 / 4 * gradient / 1.25e9)


def test_a_per_tensor_engine_on_a_model_that_counts_no_tensors_is_refused(tmp_path):
    from dlperf.store import Store

    result = json.loads(json.dumps(ONE_DEVICE))
    result["case"].update(framework="jax", model="gpt")
    with Store(tmp_path / "r.db") as store:
        run = store.start_run("k", result["label"], result["case"], {})
        store.finish_run(run, result)
    proc = dlperf_main("project", str(run), "--db", str(tmp_path / "r.db"),
                       "--devices-per-node", "4", "--intra", "10gbit@100us")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dlperf project: error: RESULT: one all-reduce per gradient tensor (shard_map's sum of "
        "the gradients: one tuple all-reduce, which XLA's CPU runtime sends a gradient tensor "
        "at a time), and model gpt does not count its gradient tensors; give --bucket-mb")
    assert projections_in(tmp_path / "r.db") == []
    given = dlperf_main("project", str(run), "--db", str(tmp_path / "r.db"),
                        "--devices-per-node", "4", "--intra", "10gbit@100us", "--bucket-mb",
                        "25", "--no-store")
    assert given.returncode == 0, given.stderr


SIZES_1_32_MIB = [MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB]


def allreduce_row(framework: str, path: str, nbytes: int, calls: list[float], **key) -> dict:
    """One stored size of a 2-process all-reduce on one host: its calls and their summary."""
    return {"framework": framework, "path": path, "env": "", "device": "cpu", "nproc": 2,
            "nnodes": 1, "link": None, "emulated": 0, "host": "h", "op": "allreduce",
            "bytes": nbytes, "iters": len(calls), "warmup": 1, "times": calls,
            "detail": {"framework_version": "x"},
            **study.summary(calls, "allreduce", nbytes, 2), **key}


def bent_rows(framework: str = "torch", path: str = "gloo", **key) -> list[dict]:
    """A ring's all-reduce of 1-32 MiB whose bytes cost 8 ns under 8 MiB and 12 ns from there
    (the small sizes ride a shaped link's burst), 1 ms of latency each."""
    return [allreduce_row(framework, path, nbytes,
                          [1e-3 + nbytes * (0.8e-8 if nbytes < 8 * MIB else 1.2e-8)] * 3, **key)
            for nbytes in SIZES_1_32_MIB]


def test_a_message_of_one_size_is_priced_from_the_sizes_near_it(tmp_path):
    from dlperf import collective_model as cm
    from dlperf.store import Store

    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(bent_rows())
    whole = cm.model_for(db, cm.Key("torch", "gloo", "allreduce", 2))
    assert len(whole.sizes) == 6 and whole.fit.beta_s < 1.15e-8  # bent by the cheap small ones
    # TensorFlow's one pack of ResNet-50's 97.5 MiB: no size within 4x but 32 MiB, so the two
    # nearest, 16 and 32 MiB, whose line is exact; past twice the largest measured
    pack = 25557032 * 4
    near = whole.near(pack)
    assert near.sizes == (16 * MIB, 32 * MIB) and near.near_bytes == pack
    assert near.fit.alpha_s == pytest.approx(1e-3) and near.fit.beta_s == pytest.approx(1.2e-8)
    assert near.seconds(pack) == pytest.approx(1e-3 + pack * 1.2e-8)
    assert whole.seconds(pack) < 0.97 * near.seconds(pack)
    assert near.fit.max_error == whole.fit.max_error > 0  # the range's misfit stays its error
    assert near.beyond(pack) and near.sizes_text() == "16-32 MiB"
    # torch DDP's 25 MiB buckets: 8-32 MiB lie within 4x (6.25-100 MiB); not past the range
    bucket = whole.near(25 * MIB)
    assert bucket.sizes == (8 * MIB, 16 * MIB, 32 * MIB) and not bucket.beyond(25 * MIB)
    assert bucket.fit.beta_s == pytest.approx(1.2e-8)
    # 4 MiB: 1-16 MiB, both costs in it, so a fit of its own between them
    assert whole.near(4 * MIB).sizes == (MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB)
    # no times held (a model built by hand): its own fit
    bare = dataclasses.replace(whole, times=())
    assert bare.near(pack) is bare


@pytest.mark.parametrize("framework, message", [
    ("tensorflow", "fitted over 16-32 MiB for its 97.5 MiB messages"),
    ("torch", "fitted over 8-32 MiB for its 25 MiB messages"),
    ("jax", None)])  # one all-reduce per tensor: messages of every size, the whole range's fit
def test_a_projection_prices_its_engines_messages_from_the_sizes_near_them(framework, message,
                                                                          tmp_path):
    from dlperf.store import Store

    db = tmp_path / "r.db"
    result = json.loads(json.dumps(ONE_DEVICE))
    result["case"]["framework"] = framework
    with Store(db) as store:
        run = store.start_run("k", result["label"], result["case"], {})
        store.finish_run(run, result)
        store.add_collectives(bent_rows(framework, study.path_named(framework, None).name))
    out = tmp_path / "p.json"
    proc = dlperf_main("project", str(run), "--db", str(db), "--devices-per-node", "2",
                       "--intra", "measured", "--no-store", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(out.read_text())
    source = made["model"]["intra"]["source"]
    beyond = [line for line in (proc.stdout + proc.stderr).splitlines()
              if "past 2x the largest size measured" in line]
    (point,) = made["points"]
    if message is None:
        assert "fitted over" not in source and not beyond
        return
    assert source.endswith(message)
    # 2 ranks: the ring's time is the fitted line's, alpha + m x beta, for each message
    gradient = 25557032 * 4
    count = made["model"]["allreduces_per_step"]
    assert point["allreduce_s"]["value"] == pytest.approx(count * 1e-3 + gradient * 1.2e-8)
    assert bool(beyond) == (framework == "tensorflow")
    if beyond:
        assert beyond[0].endswith("--intra: its 97.5 MiB messages are past 2x the largest size "
                                  "measured: their price extrapolates the fit; measure up to "
                                  "them with `dlperf collectives --sizes`")


def scattered_rows(framework: str = "torch", path: str = "gloo") -> list[dict]:
    """A ring's all-reduce of 1-32 MiB on one exact line (1 ms + 10 ns a byte), each size's
    five calls at that line but for one call of 16 and 32 MiB that took half as long again (as
    OneFlow's calls over a shaped link scatter, call to call)."""
    rows = []
    for nbytes in SIZES_1_32_MIB:
        t = 1e-3 + nbytes * 1e-8
        rows.append(allreduce_row(framework, path, nbytes,
                                  [t] * 4 + [1.5 * t if nbytes >= 16 * MIB else t]))
    return rows


def test_a_price_is_as_sure_as_its_calls_at_the_sizes_near_the_transfer(tmp_path):
    from dlperf import collective_model as cm
    from dlperf.store import Store

    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(scattered_rows())
    model = cm.model_for(db, cm.Key("torch", "gloo", "allreduce", 2))
    assert model.fit.max_error == pytest.approx(0.0, abs=1e-9)  # the medians lie on the line
    assert model.calls[-1] == (model.times[-1],) * 4 + (1.5 * model.times[-1],)
    # five calls: a resampled median is the slow call's in 5.8 % of draws (three or more of
    # five), more than the 2.5 % tail, so the 95 % interval of the median runs from the four
    # equal calls to the slow one: 0 to +50 %
    spread = model.calls_at(25 * MIB)  # 8-32 MiB lie within 4x; 16 and 32 MiB scatter alike
    assert spread is not None and spread.calls == 5 and spread.nbytes in (16 * MIB, 32 * MIB)
    assert (spread.low, spread.high) == (pytest.approx(0.0), pytest.approx(0.5))
    assert spread.half_width == pytest.approx(0.25)
    assert spread.text().endswith("5 calls at 32 MiB put their median within +0.0%/+50.0% "
                                  "(95 %)") or spread.text().endswith("16 MiB put their median "
                                                                      "within +0.0%/+50.0% (95 %)")
    # the small sizes' calls agree: a price read there is sure (0 either side)
    small = model.calls_at(2 * MIB)
    assert small is not None and (small.low, small.high) == (0.0, 0.0)
    # near() keeps each size's calls beside it
    assert model.near(25 * MIB).calls == model.calls[3:]
    # one call a size, or a model built by hand: nothing to read
    assert dataclasses.replace(model, calls=()).calls_at(25 * MIB) is None
    # the link a projection prices with reaches as far as the calls do, and its fit's misfit
    # where that is wider
    link = link_of_model(model.near(25 * MIB), 25 * MIB)
    assert link.ends == (pytest.approx(1.0), pytest.approx(1.5))
    assert dataclasses.replace(link, error=0.6).ends == (pytest.approx(0.4), pytest.approx(1.6))
    assert link_of_model(model).ends == (pytest.approx(1.0),  # the fit's alone
                                                     pytest.approx(1.0))


def test_a_projection_carries_its_links_uncertain_price_and_says_so(tmp_path):
    from dlperf.store import Store

    db = tmp_path / "r.db"
    with Store(db) as store:
        run = store.start_run("k", ONE_DEVICE["label"], ONE_DEVICE["case"], {})
        store.finish_run(run, json.loads(json.dumps(ONE_DEVICE)))
        store.add_collectives(scattered_rows())
    out = tmp_path / "p.json"
    proc = dlperf_main("project", str(run), "--db", str(db), "--devices-per-node", "2",
                       "--intra", "measured", "--no-store", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(out.read_text())
    (point,) = made["points"]
    # torch DDP's four 25 MiB buckets (the last one smaller) on the line: 4 x 1 ms + 10 ns a
    # byte; its slow end the calls' +50 %, its fast end the line (no call was faster)
    comm = point["allreduce_s"]
    gradient = 25557032 * 4
    assert comm["value"] == pytest.approx(4e-3 + gradient * 1e-8)
    assert (comm["low"], comm["high"]) == (pytest.approx(comm["value"]),
                                           pytest.approx(1.5 * comm["value"]))
    link = made["model"]["intra"]
    assert (link["calls_low"], link["calls_high"]) == (pytest.approx(0.0), pytest.approx(0.5))
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "uncertain" in line]
    assert said == ["! --intra: price uncertain: its 5 calls at 32 MiB put their median within "
                    "+0.0%/+50.0% (95 %), which the interval carries; more calls (`dlperf "
                    "collectives --iters`) narrow it"]


def test_a_noisy_overhead_source_widens_the_interval_and_is_said(tmp_path):
    """A 2-process result whose repeats spread bounds the overhead read from it no better: the
    overhead at its step's 95 % interval ends, in the interval and said in one line."""
    from dlperf.store import Store

    db = tmp_path / "r.db"
    ids = {}
    with Store(db) as store:
        for devices, step, ci in ((1, 0.25, None), (2, 0.45, (0.40, 0.55))):
            result = json.loads(json.dumps(ONE_DEVICE))
            result["case"].update(batch_size=4, devices=devices)
            result["global_batch"] = 4 * devices
            result["label"] = f"torch resnet50 train bs4 fp32 {devices}d"
            samples = 4 * devices
            result["throughput"] = {"median": samples / step, "n": 3, "cv": 0.01}
            if ci:  # a step of 0.40-0.55 s: its throughput's interval, the slow end first
                result["throughput"]["ci95"] = [samples / ci[1], samples / ci[0]]
                result["ranks"] = [{"rank": r, "allreduce_s": [0.1] * 3} for r in (0, 1)]
            run = store.start_run(f"k{devices}", result["label"], result["case"], {})
            store.finish_run(run, result)
            ids[devices] = str(run)
    out = tmp_path / "p.json"
    proc = dlperf_main("project", ids[1], "--db", str(db), "--devices-per-node", "2",
                       "--intra", "10gbit", "--overlap-from", ids[2], "--no-store",
                       "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(out.read_text())
    overlap = made["model"]["overlap"]
    # the excess past its whole all-reduce (its ranks' 0.1 s probe) over the 0.25 s 1-device
    # step: 0.4 at the median step, 0.2 and 0.8 at its interval's ends; the window 0 (the
    # excess is more than the all-reduce), so the target's all-reduce (ResNet-50's 102 MB at
    # 10 Gbit/s, 2 ranks) is exposed whole
    share = [(step - 0.25 - 0.1) / 0.25 for step in (0.40, 0.45, 0.55)]
    comm = 4 * 25557032 / (10e9 / 8)
    assert overlap["overhead"] == pytest.approx(share[1])
    assert overlap["overhead_range"] == pytest.approx([share[0], share[2]])
    (point,) = made["points"]
    assert point["step_s"]["low"] == pytest.approx(0.25 * (1 + share[0]) + comm)
    assert point["step_s"]["high"] == pytest.approx(0.25 * (1 + share[2]) + comm)
    said = " ".join((proc.stdout + proc.stderr).split())  # as one line, however wrapped
    assert said.count("overhead uncertain") == 1
    assert (f"! multi-process overhead uncertain: {share[1]:.1%} of the step, "
            f"{share[0]:.1%}-{share[2]:.1%} at its source's 95 % interval ends (it is that "
            f"step less the compute and the exchange: all of the step's spread lands on it), "
            f"which the interval carries") in said
