"""The model's own error (dlperf.projection.error): each validation's declared errors traced to
where they were published (the docs' tables) or recomputed (the published checks), the check a
start and target take, and the interval it widens, against hand calculations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import dlperf_main
from dlperf.projection.error import (CHECKS, EMULATED_HOSTS, EMULATED_HOSTS_FROM_NODE, ONE_HOST,
                                     PUBLISHED, PUBLISHED_FROM_NODE, Check, ModelError,
                                     engine_named, for_target, median_abs)
from dlperf.projection.links import Link
from dlperf.projection.model import Inputs, Projection, Shape, project
from dlperf.projection.overlap import Overlap
from dlperf.projection.span import Span

pytestmark = pytest.mark.parallel

DOCS = Path(__file__).resolve().parents[2] / "docs" / "projection.md"
SIGNED = r"([+−-]\d+\.\d) %"


def percent(text: str) -> float:
    return round(float(text.replace("−", "-")) / 100, 4)


def section(title: str, until: str) -> str:
    text = DOCS.read_text()
    return text[text.index(title):text.index(until, text.index(title))]


#: the rows of the docs' table "A parameter server overlaps the whole step": MXNet's link-rate
#: cases made again by the model since (each cell the error now, then in brackets the whole step
#: alone and the model before), which replace the errors of each run's own table above (those
#: are the model's of the day they were measured); each row's run, and its three links
THREE = ("10 Gbit/s", "1 Gbit/s", "100 Mbit/s")
WHOLE_STEP_RUNS = {"Zen 4, 2026-12-02": ("12-02 frameworks", THREE),
                   "Zen 5, 2026-12-03": ("12-03 servers", THREE),
                   "Zen 5, 2026-12-04": ("12-04 more rates",
                                         ("2.5 Gbit/s", "1 Gbit/s", "300 Mbit/s")),
                   "Zen 4, 2026-12-04": ("12-04 Zen 4", THREE),
                   "Xeon, 2026-12-04": ("12-04 Xeon", THREE),
                   "from a node of 2, Xeon, 2026-12-04": ("from a node", THREE)}


def whole_step_errors() -> dict[str, float]:
    """MXNet's errors in that table, by the declared cases' names ("MXNet 1 Gbit/s 12-03
    servers"; from a node, without the run)."""
    out = {}
    text = section("**A parameter server overlaps the whole step", "These 15 emulated-hosts")
    for label, (run, links) in WHOLE_STEP_RUNS.items():
        found = re.search(r"^\| " + re.escape(label) + r"[^|]*\| " + r" \| ".join(
            [SIGNED + r" \([+−-]\d+\.\d; [+−-]\d+\.\d\)"] * 3) + r" \|", text, re.M)
        assert found, label
        for link, e in zip(links, found.groups()):
            out[f"MXNet {link}" + ("" if run == "from a node" else f" {run}")] = percent(e)
    return out


def test_the_one_host_check_is_the_docs_table():
    """Each framework's row of the one-host tables, one per machine (its error column), is the
    declared error of that framework on that machine."""
    declared = {}
    # the pinned run has no torch row: its 2-process case hung in one repeat
    for machine, title, frameworks in (
            ("Zen 3", "On one host, `benchmarks/projection_validation.py", 8),
            ("Zen 4", "The same sweep on a 2-core AMD EPYC Zen 4", 8),
            ("Zen 4 pinned", "The same sweep after that fix", 7),
            ("Zen 4 interleaved", "The same sweep with its repeats interleaved", 8),
            ("Zen 4 fixed", "The one-host sweep for JAX alone, with the fixed step", 1),
            ("Zen 5", "The same sweep on a 2-core AMD EPYC Zen 5", 8),
            ("Zen 5 fixed", "The one-host sweep for TF 1.15 and MXNet alone, after that fix",
             2),
            ("Zen 4 again", "The same sweep on the Zen 4 again", 7),
            ("Xeon", "The same sweep on a 2-core Intel Xeon", 8),
            ("AVX2", "The same sweep on the AVX2-only EPYC", 8),
            ("AVX2", "Caffe2's part of the same sweep on the AVX2-only EPYC", 1),
            ("Zen 4 12-07", "The same sweep, Caffe2's cases with it, on another Zen 4", 9)):
        text = section(title, "Median |error|")
        rows = re.findall(r"^\| (\w+) \| [\d.]+ \| [\d.]+ \([\d.]+-[\d.]+\) \| " + SIGNED,
                          text, re.M)
        assert len(rows) == frameworks, (machine, rows)
        declared.update((f"{name} {machine}", percent(e)) for name, e in rows)
    assert declared == dict(ONE_HOST.errors)


def test_the_emulated_hosts_check_is_the_docs_table():
    """The link-rate tables' error columns, per engine, link and run (the first run's "now"
    column, the later runs' "error"), are the declared errors."""
    docs = {}
    first = section("| engine | link | before | now |", "Median |error|")
    for engine, link, e in re.findall(r"^\| ([\w ]+?) \| ([\w/ ]+?) \| [+−-]\d+\.\d % \| \**"
                                      + SIGNED, first, re.M):
        docs[f"{engine} {link} 11-29"] = percent(e)
    for run, title in (("12-01", "The same sweep again on 2026-12-01"),
                       ("12-01 pinned", "The same sweep after the pinning fix"),
                       ("12-02 interleaved", "The link-rate sweep with its repeats interleaved"),
                       ("12-02 frameworks", "The six other engines over the same links"),
                       ("12-02 fixed", "for JAX alone with the fixed step"),
                       ("12-02 measured", "MindSpore's and OneFlow's, measured over each link"),
                       ("12-02 remeasured", "OneFlow's link-rate sweep again"),
                       ("12-03 servers", "MXNet's parameter servers, priced as such"),
                       ("12-04 more rates", "MXNet's parameter servers at two more rates"),
                       ("12-04 Zen 5", "OneFlow's link-rate sweep on a Zen 5"),
                       ("12-04 Zen 5", "MindSpore's link-rate sweep on a Zen 5"),
                       ("12-04 Zen 4", "MindSpore's and MXNet's link-rate sweeps on a Zen 4"),
                       ("12-04 Xeon", "MXNet's link-rate sweep on a Xeon"),
                       ("12-04 Xeon", "OneFlow's link-rate sweep on a Xeon"),
                       ("12-04 Xeon new rates", "MXNet's out-of-sample check on a Xeon"),
                       ("12-04 Xeon near rates", "**The window read from a rate near the"),
                       ("12-04 Xeon sizes", "**TensorFlow past its pack's size**"),
                       ("12-06 unseen", "**Out of sample: six engines at rates no sweep"),
                       ("12-06 calls", "**Out of sample: the interval that carries its calls"),
                       ("12-06 AVX2", "**Out of sample on another CPU kind"),
                       ("12-06 AVX2 more", "**Three more engines on the AVX2 EPYC"),
                       ("12-07 AVX2 last", "**The last three engines on the AVX2 EPYC"),
                       ("12-07 AVX2 Caffe2", "**Caffe2 across hosts**"),
                       ("12-08 Zen 5", "**Out of sample on a Zen 5**")):
        rows = re.findall(r"^\| ([\w. ]+?) \| ([\w/. ]+?) \| [\d.]+ \| [\d.]+ "
                          r"\([\d.]+-[\d.]+\) \| \**" + SIGNED,
                          section(title, "Median |error|"), re.M)
        # the frameworks run less the rows the check took again: JAX's from before its step's
        # fix, MindSpore's and OneFlow's on the wire and path before their measured links, and
        # OneFlow's measured again
        assert len(rows) == {"12-02 frameworks": 9, "12-02 fixed": 3, "12-02 measured": 3,
                             "12-02 remeasured": 3, "12-03 servers": 3,
                             "12-04 more rates": 3, "12-04 Zen 5": 3,
                             "12-04 Zen 4": 6, "12-04 Xeon": 3,
                             "12-04 Xeon new rates": 4,
                             "12-04 Xeon near rates": 16,
                             "12-04 Xeon sizes": 3,
                             "12-06 unseen": 18, "12-06 calls": 4,
                             "12-06 AVX2": 4, "12-06 AVX2 more": 6,
                             "12-07 AVX2 last": 6, "12-07 AVX2 Caffe2": 2,
                             "12-08 Zen 5": 8}.get(run, 9), (run, rows)
        docs.update((f"{engine} {link} {run}", percent(e)) for engine, link, e in rows)
    made_again = {case: e for case, e in whole_step_errors().items() if case in docs}
    assert len(made_again) == 15
    changed = {case: e for case, e in window_rule_changed().items() if case in docs}
    assert len(changed) == 4
    sized = {case: e for case, e in message_sizes_changed().items() if case in docs}
    assert len(sized) == 13
    assert docs | made_again | changed | sized == dict(EMULATED_HOSTS.errors)


def window_rule_changed() -> dict[str, float]:
    """The table "The declared cases the rule changed": each case's error now (its window from
    the fastest other rate whose step shows its all-reduce), which replaces its run's own table
    above; from a node, by the check's case names (without "(from a node)")."""
    text = section("**The declared cases the rule changed**", "The emulated-hosts check is now")
    rows = re.findall(r"^\| ([\w. /-]+?)(?: \(from a node\))? \| " + SIGNED + r" \([\w/. ]+\) \| "
                      + SIGNED + r" \([\w/. ]+\) \|$", text, re.M)
    assert len(rows) == 8, rows
    return {case: percent(now) for case, now, _ in rows}


def message_sizes_changed() -> dict[str, float]:
    """The table "The declared cases the message sizes changed": each case's error since a
    measured all-reduce of one-size messages is priced from the sizes near them, which replaces
    the rule's table and its run's own; from a node, by the check's case names."""
    text = section("**The declared cases the message sizes changed**",
                   "The emulated-hosts check is now")
    rows = re.findall(r"^\| ([\w. /-]+?)(?: \(from a node\))? \| " + SIGNED + r" \| " + SIGNED
                      + r" \|$", text, re.M)
    assert len(rows) == 20, rows
    return {case: percent(now) for case, now, _ in rows}


def found_rows(title: str, count: int) -> list[tuple[str, str, str]]:
    """(engine, link, error) of the table in the docs' section ``title``: ``count`` of them."""
    rows = re.findall(r"^\| ([\w ]+?) \| ([\w/ ]+?) \| [\d.]+ \| [\d.]+ \([\d.]+-[\d.]+\) \| \**"
                      + SIGNED, section(title, "Median |error|"), re.M)
    assert len(rows) == count, (title, rows)
    return rows


def test_the_emulated_hosts_from_node_check_is_the_docs_table():
    """The table of 2 emulated hosts of 2 projected from a node of 2: its error column, engine by
    engine and link by link, is the declared check (its data folder's validation.md is made again
    from git in tests/projection/test_projection_validation.py)."""
    rows = [row for title, count in (("**From a node of 2 processes", 9),
                                     ("**From a node, Paddle and JAX", 6))
            for row in found_rows(title, count)]
    check = EMULATED_HOSTS_FROM_NODE
    made_again = {case: e for case, e in whole_step_errors().items() if case.count(" ") == 2}
    assert len(made_again) == 3  # MXNet's, by the whole-step model since
    docs = {f"{engine} {link}": percent(e) for engine, link, e in rows}
    changed = {case: e for case, e in window_rule_changed().items() if case in docs}
    assert len(changed) == 4  # the window from the fastest rate that shows its all-reduce, since
    sized = {case: e for case, e in message_sizes_changed().items() if case in docs}
    assert len(sized) == 7  # torch's, TensorFlow's and Paddle's one-size messages, since
    assert docs | made_again | changed | sized == dict(check.errors)
    assert check.start_devices == 2 and (check.nodes, check.devices) == (2, 4)


def computed_errors(check: Check, tmp_path: Path) -> dict[str, float]:
    """The errors the check's own command computes today, keyed as the check declares them."""
    out = tmp_path / f"{check.name}.json"
    command = check.command.split()
    assert command[:2] == ["dlperf", "project"]
    proc = dlperf_main(*command[1:], "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    return {f"{r['framework']} {r['nodes']}x{r['gpus_per_node']}": r["error"]
            for r in json.loads(out.read_text())}


PUBLISHED_CHECKS = [PUBLISHED, PUBLISHED_FROM_NODE]


@pytest.mark.parametrize("check", PUBLISHED_CHECKS, ids=lambda c: c.name)
def test_a_published_check_is_what_the_command_computes(check, tmp_path):
    """A published check's errors are its `dlperf project --published` command's own, today (the
    from-node check's with `--from-node`: each case from its framework's 1-node figure, its
    declared start), and so are its least, most and median: a change to the model that moves
    them fails here until the declaration (and the docs) follow."""
    assert ("--from-node" in check.command.split()) == (check.start_devices > 1)
    computed = computed_errors(check, tmp_path)
    declared = dict(check.errors)
    assert computed.keys() == declared.keys()
    for case, error in computed.items():
        assert error == pytest.approx(declared[case], abs=0.0005), case
    assert min(computed.values()) == pytest.approx(check.under, abs=0.0005)
    assert max(computed.values()) == pytest.approx(check.over, abs=0.0005)
    assert median_abs(list(computed.values())) == pytest.approx(
        check.median_abs, abs=0.0005)


@pytest.mark.parametrize("check", PUBLISHED_CHECKS, ids=lambda c: c.name)
def test_a_published_check_reaches_and_starts_where_its_cases_say(check):
    """Its reach is its largest case; a check from a node has only cases that add nodes of its
    start's devices; one from 1 device has a case within one node."""
    shapes = [(int(n), int(per)) for n, per in (case.rsplit(" ", 1)[1].split("x")
                                                 for case, _ in check.errors)]
    assert (check.nodes, check.devices) == max((n, n * per) for n, per in shapes)
    if check.start_devices > 1:
        assert all(n > 1 and per == check.start_devices for n, per in shapes)
    else:
        assert check.start_devices == 1 and any(n == 1 for n, _ in shapes)


def test_the_docs_table_is_the_declared_checks():
    """Each row of the docs' table of checks: its cases, reach, errors and median, as declared."""
    text = section("**The model's error.**", "and its throughput gets")
    rows = re.findall(r"^\| ([\w-]+): .*? \| (\d+) \| (\d+) nodes?, (\d+) devices \| "
                      + SIGNED + " to " + SIGNED + r" \| ([\d.]+) % \|$", text, re.M)
    docs = {name: (int(cases), int(nodes), int(devices), percent(under), percent(over),
                   percent(median)) for name, cases, nodes, devices, under, over, median in rows}
    assert docs == {c.name: (len(c.errors), c.nodes, c.devices, round(c.under, 4),
                             round(c.over, 4), percent(f"{c.median_abs:.1%}".rstrip("%")))
                    for c in CHECKS}


def test_a_target_takes_the_nearest_check_that_reaches_it():
    def check(nodes: int, devices: int) -> tuple[str, bool]:
        found = for_target(nodes, devices, start_nodes=1, start_devices=1)
        return found.check.name, found.beyond

    assert check(1, 2) == ("one-host", False)
    assert check(2, 2) == ("emulated-hosts", False)
    assert check(1, 8) == ("published", False)
    assert check(4, 32) == ("published", False)
    assert check(8, 64) == ("published", True)
    assert check(2, 64) == ("published", True)


def test_a_start_of_a_whole_node_takes_the_checks_from_a_node_where_they_reach():
    def check(start: Shape, target: Shape) -> tuple[str, bool]:
        found = for_target(target.nodes, target.devices,
                           start_nodes=start.nodes, start_devices=start.devices)
        return found.check.name, found.beyond

    node_of_8, node_of_2 = Shape(8, 1), Shape(2, 1)
    assert check(node_of_8, Shape(8, 2)) == ("published-from-node", False)
    assert check(node_of_8, Shape(8, 4)) == ("published-from-node", False)
    # a CPU node of 2 processes, to 2 nodes of 2: the check made that way; to 4 nodes of 2 the
    # published one from a node, the only check from a node that reaches it
    assert check(node_of_2, Shape(2, 2)) == ("emulated-hosts-from-node", False)
    assert check(node_of_2, Shape(2, 4)) == ("published-from-node", False)
    # devices added within each node, which no check from a node did: as from 1 device
    assert check(node_of_2, Shape(8, 1)) == ("published", False)
    assert check(Shape(4, 1), Shape(8, 4)) == ("published", False)
    # past every check's shapes: the furthest-reaching, on a tie the one from 1 device
    assert check(node_of_8, Shape(8, 8)) == ("published", True)
    assert check(node_of_2, Shape(32, 2)) == ("published", True)
    # a start of one device per node is a start from 1 device, as before
    assert check(Shape(1, 1), Shape(2, 1)) == ("one-host", False)


def test_the_interval_widens_by_the_largest_errors_either_way():
    """Measured = projected / (1 + error): errors from -10 % to +25 % put a projection of
    100-120 samples/s at 100 / 1.25 = 80 to 120 / 0.9 = 133.3."""
    made = Check("x", "", 1, 2, "", "", (("a", -0.10), ("b", 0.25), ("c", 0.05)),
                 start_devices=1, device="cpu")
    assert (made.under, made.over) == (-0.10, 0.25)
    assert made.median_abs == 0.10
    low, high = ModelError(made, False).widen(100.0, 120.0)
    assert low == pytest.approx(80.0) and high == pytest.approx(133.333, abs=1e-3)
    # a check that was never below (or above) leaves that end as it was
    above = Check("y", "", 1, 2, "", "", (("a", 0.02), ("b", 0.04)), start_devices=1,
                  device="cpu")
    assert ModelError(above, False).widen(100.0, 120.0) == (100.0 / 1.04, 120.0)
    # of an even count, the median is the mean of the middle two
    assert median_abs([0.01, -0.02, 0.04, -0.08]) == pytest.approx(0.03)


def test_every_projected_point_carries_its_check_and_stores_both_intervals():
    link = Link(10 * 1e9 / 8, 0.0, "given")
    made = Inputs(Span(0.1, 0.095, 0.105), 8, 100 * 10**6, 4, "25 MiB buckets", link, link,
                  Overlap(0.5, "run 2", window_s=0.01))
    near, far = (project(made, Shape(2, 1)), project(made, Shape(8, 16)))
    assert near.model_error.check is ONE_HOST and not near.model_error.beyond
    assert far.model_error.check is PUBLISHED and far.model_error.beyond
    wide = near.throughput_with_model_error
    assert wide.value == near.throughput.value
    assert wide.low == pytest.approx(near.throughput.low / (1 + ONE_HOST.over))
    assert wide.high == pytest.approx(near.throughput.high / (1 + ONE_HOST.under))
    (point,) = Projection("x", {}, made, [near]).to_dict()["points"]
    assert point["throughput"]["low"] == near.throughput.low  # the inputs' spread, as before
    assert point["throughput_with_model_error"] == {"value": wide.value, "low": wide.low,
                                                    "high": wide.high}
    assert point["model_error"]["check"] == "one-host"
    assert point["model_error"]["cases"] == len(ONE_HOST.errors) == 75
    assert point["model_error"]["beyond_validated"] is False


def test_a_target_past_every_check_on_its_kind_of_device_keeps_their_errors():
    """A CPU start of OneFlow projected to 4 nodes: only the GPU study's figures reach 4 nodes,
    and OneFlow's 3 cases there miss by -0.8 % to +1.0 %, where its CPU cases at 2 emulated hosts
    miss by -7.0 % to +41.6 %. The interval at 4 nodes takes the CPU checks' errors with the
    published one's (-14.0 % to +41.6 %: its one-host cases too), never narrower than at 2
    nodes, and says so; a GPU start keeps the published check alone, and a target a CPU check
    reaches keeps that check alone."""
    def found(nodes, devices, device, engine="oneflow", start=(1, 1)):
        return for_target(nodes, devices, start_nodes=start[0], start_devices=start[1],
                          engine=engine, device=device)

    two, four = found(2, 2, "cpu"), found(4, 4, "cpu")
    assert two.check.name == "emulated-hosts (oneflow)" and two.short_of is None
    assert (two.check.under, two.check.over) == (-0.070, 0.416)
    assert four.check.name == ("one-host (oneflow), emulated-hosts (oneflow) and published "
                               "(oneflow)") and not four.beyond
    published = PUBLISHED.of_engine("oneflow")
    assert published is not None and (published.under, published.over) == (-0.008, 0.010)
    assert (four.check.under, four.check.over) == (-0.140, 0.416)
    assert len(four.check.errors) == 9 + 20 + 3
    assert four.short_of is not None and four.short_of.device == "cpu"
    assert (four.short_of.nodes, four.short_of.devices) == (2, 2)
    assert four.to_dict()["past_its_device"] == {"device": "cpu", "nodes": 2, "devices": 2}
    assert four.check.text().startswith("-14.0% to +41.6% (the one-host (oneflow), "
                                        "emulated-hosts (oneflow) and published (oneflow) checks: "
                                        "32 cases")
    low, high = four.widen(100.0, 120.0)
    assert low == pytest.approx(100.0 / 1.416) and high == pytest.approx(120.0 / 0.86)
    # a GPU start: the published check is its own kind's
    gpu = found(4, 4, "cuda")
    assert gpu.check == published and gpu.short_of is None
    assert gpu.to_dict()["past_its_device"] is None
    # past every check: the furthest one and its own kind's, said beyond
    far = found(8, 8, "cpu")
    assert far.beyond and [part.name for part in far.check.parts] == [
        "one-host (oneflow)", "emulated-hosts (oneflow)", "published (oneflow)"]
    # a CPU node of 2 processes to 4 nodes of 2: the from-node checks of both kinds
    node = found(4, 8, "cpu", "torch", start=(1, 2))
    assert [part.name for part in node.check.parts] == ["emulated-hosts-from-node (torch)",
                                                        "published-from-node (torch)"]
    # no device given (a caller that does not know it): the nearest check, as before
    assert found(4, 4, None).check == published


def test_a_point_projected_from_a_whole_node_carries_the_check_from_a_node():
    """A start of 1 node x 8 devices: 2 x 8 takes the from-node check's errors (-1.8 % to
    +12.4 %), stored with its name; 8 x 8 is past it and takes the published check's."""
    link = Link(100 * 1e9 / 8, 5e-6, "given")
    made = Inputs(Span(0.4, 0.39, 0.41), 32, 100 * 10**6, 4, "25 MiB buckets", link, link,
                  Overlap(None, "not stated"), Shape(8, 1))
    near, far = (project(made, Shape(8, 2)), project(made, Shape(8, 8)))
    check = PUBLISHED_FROM_NODE
    assert near.model_error.check is check and not near.model_error.beyond
    assert far.model_error.check is PUBLISHED and far.model_error.beyond
    wide = near.throughput_with_model_error
    assert wide.low == pytest.approx(near.throughput.low / 1.124)
    assert wide.high == pytest.approx(near.throughput.high / 0.982)
    (point,) = Projection("x", {}, made, [near]).to_dict()["points"]
    assert point["model_error"]["check"] == "published-from-node"
    assert point["model_error"]["cases"] == 16
    assert point["model_error"]["beyond_validated"] is False


def test_the_published_table_in_the_docs_is_the_declared_checks():
    """The docs' per-framework table of the published comparison: its three columns from 1 GPU
    are the published check's errors, its two from 1 node the from-node check's."""
    text = section("| framework | 1x8 from 1 GPU |", "From 1 GPU the projection")
    rows = re.findall(r"^\| ([\w. ]+?) \| " + r" \| ".join([SIGNED] * 5) + r" \|$", text, re.M)
    assert len(rows) == 8
    from_gpu = {f"{fw} {shape}": percent(e) for fw, *errors in rows
                for shape, e in zip(("1x8", "2x8", "4x8"), errors[:3])}
    from_node = {f"{fw} {shape}": percent(e) for fw, *errors in rows
                 for shape, e in zip(("2x8", "4x8"), errors[3:])}
    assert from_gpu == dict(PUBLISHED.errors)
    assert from_node == dict(PUBLISHED_FROM_NODE.errors)


def test_every_case_of_every_check_names_its_engine():
    """The engine dimension reads each case's name: every case names a framework of dlperf's
    (or Horovod), the published studies' columns too."""
    from dlperf import spec

    engines = set(spec.frameworks()) | {"horovod"}
    for check in CHECKS:
        for case, _ in check.errors:
            assert engine_named(case) in engines, (check.name, case)
    named = engine_named
    assert [named(n) for n in ("torch DDP 1 Gbit/s 11-29", "TensorFlow 1.15 10 Gbit/s 12-02",
                               "TensorFlow 10 Gbit/s 12-01", "NGC TensorFlow 1.x 2x8",
                               "TensorFlow 2.x 4x8", "NGC PyTorch 1x8", "PaddlePaddle 2x8",
                               "tensorflow1 Zen 3", "Horovod 1 Gbit/s 12-01")] == [
        "torch", "tensorflow1", "tensorflow", "tensorflow1", "tensorflow", "torch", "paddle",
        "tensorflow1", "horovod"]
    assert named("Inception V3") is None


def test_an_engine_with_cases_of_its_own_takes_their_errors():
    """2 emulated hosts: torch DDP's interval from its own 25 cases of the emulated-hosts check
    (-17.6 % to +14.9 %), not from the whole check's (MXNet's +20.8 % was +29.7 % and -34.7 %
    before its whole-step overlap); OneFlow's from its
    20; an engine with fewer than 3 cases in the check (Caffe2: none) from the whole check, as
    before."""
    check = EMULATED_HOSTS

    def found(engine):
        return for_target(2, 2, start_nodes=1, start_devices=1, engine=engine)

    torch = found("torch").check
    assert torch.name == "emulated-hosts (torch)" and len(torch.errors) == 25
    assert all(case.startswith("torch DDP") for case, _ in torch.errors)
    assert (torch.under, torch.over) == (-0.176, 0.149)
    oneflow = found("oneflow").check
    assert len(oneflow.errors) == 20 and (oneflow.under, oneflow.over) == (-0.070, 0.416)
    assert found("caffe2").check is check and found(None).check is check
    assert (check.under, check.over) == (-0.195, 0.416)  # Caffe2's own since 2026-12-07
    # past every check's shapes: the widest check, its engine's own cases where it has them
    far = for_target(8, 64, start_nodes=1, start_devices=1, engine="torch")
    assert far.beyond and far.check.name == "published (torch)"
    assert [case for case, _ in far.check.errors] == [
        "NGC PyTorch 1x8", "NGC PyTorch 2x8", "NGC PyTorch 4x8", "PyTorch 1x8", "PyTorch 2x8",
        "PyTorch 4x8"]
