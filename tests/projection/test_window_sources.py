"""Which stored results `dlperf project` reads its overlap window and overhead from when none is
named (the rule the validation's error is published for: dlperf.scaling), and what it says of a
source that cannot show the window. On real results: the AVX2 EPYC's torch DDP runs of
2026-12-06 (1 process; 2 emulated hosts unshaped, at 1.2 Gbit/s and at 600 Mbit/s) and the
gloo models measured over those links, as committed in benchmarks/data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import dlperf_main
from dlperf import scaling

# measures nothing and starts no framework
pytestmark = pytest.mark.parallel

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "data" / "link-rates-avx2-epyc-2026-12-06"
RESULTS = json.loads((FOLDER / "results.json").read_text())
# the folder's torch results (runs 1, 2, 3 and 7 once loaded, in its order)
UNSHAPED, AT_1200, AT_600, START = "1", "2", "3", "7"
TARGET = ["--devices-per-node", "1", "--nnodes", "2", "--intra", "1000gbit"]


def loaded(db: Path, drop: tuple[int, ...] = (), more: tuple[dict, ...] = ()) -> Path:
    """The folder's results and collective models in a new database ``db`` (runs numbered
    from 1 in the file's order, less those at the positions ``drop``), then ``more``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import projection_validation as pv

    kept = [r for i, r in enumerate(RESULTS) if i not in drop] + list(more)
    stored = db.parent / "results.json"
    stored.write_text(json.dumps(kept))
    (db.parent / pv.COLLECTIVES).write_text((FOLDER / pv.COLLECTIVES).read_text())
    pv.load(stored, db, "avx2")
    return db


def projected(db: Path, *flags: str, link: str = "1200mbit") -> tuple[dict, str]:
    """`dlperf project` of the 1-process torch result to 2 hosts over ``link``: what it stored
    as JSON, and what it said (as one line, however the console wrapped it)."""
    out = db.parent / "p.json"
    proc = dlperf_main("project", START, "--db", str(db), *TARGET, "--inter",
                       f"measured:{link}", "--no-store", "--json", str(out), *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), " ".join((proc.stdout + proc.stderr).split())


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return loaded(tmp_path_factory.mktemp("avx2") / "x.db")


def test_the_rule_tries_shaped_links_fastest_first_with_an_unshaped_partner():
    torch = [dict(r, run_id=i + 1) for i, r in enumerate(RESULTS)
             if r["case"]["framework"] == "torch" and scaling.total_devices(r["case"]) > 1]
    again = dict(torch[2], run_id=99)  # a newer run at 600 Mbit/s: tried before the older one
    tried = scaling.shaped_fastest_first([*torch, again])
    assert [(r["case"]["link"], r["run_id"]) for r in tried] == [
        ("1200mbit", 2), ("600mbit", 99), ("600mbit", 3)]
    assert [scaling.link_bits(r) for r in tried] == [1_200_000_000, 600_000_000, 600_000_000]
    assert scaling.link_bits(torch[0]) is None
    # the overhead's partner: the unshaped result of the window's shape and batch
    assert scaling.overhead_partner(torch, tried[0])["run_id"] == 1
    other_batch = dict(torch[0], case=dict(torch[0]["case"], batch_size=4))
    assert scaling.overhead_partner([other_batch], tried[0]) is None


def test_with_no_source_named_the_window_is_read_where_the_rule_reads_it(db):
    made, said = projected(db)
    # the rule by hand, through the command: the shaped results fastest first, each with the
    # unshaped result's overhead; the first whose step shows part of its all-reduce is read
    by_hand = None
    for window in (AT_1200, AT_600):
        named, _ = projected(db, "--overlap-from", window, "--overhead-from", UNSHAPED)
        if scaling.shows_exposed(named["model"]["overlap"]):
            by_hand = named
            break
    assert by_hand is not None
    assert made["points"] == by_hand["points"]
    assert made["model"]["overlap"]["window_s"] == by_hand["model"]["overlap"]["window_s"]
    assert made["model"]["overlap"]["source"].startswith(
        by_hand["model"]["overlap"]["source"] + "; chosen as the fastest link whose step shows "
        "part of its all-reduce past the window")
    assert "chosen as the fastest link whose step shows part of its all-reduce" in said
    # at 1.2 Gbit/s the rule reads the result over that link: the measured 11.12 samples/s
    assert made["points"][0]["throughput"]["value"] == pytest.approx(11.12, abs=0.01)
    assert not any("overlap window" in w for w in made["warnings"])


def test_a_window_read_alone_from_a_short_all_reduce_names_the_results_that_show_it(db):
    made, said = projected(db, "--overlap-from", UNSHAPED)
    # its all-reduce (the ranks' 95 ms probe) is shorter than the target's (713 ms over the
    # 1.2 Gbit/s model): the window read from it is the least that explains its step
    assert made["model"]["overlap"]["window_s"] == 0
    assert "! overlap window read from one result, run 1, whose all-reduce (95.1 ms) is " \
           "shorter than the targets' (up to 712.6 ms)" in said
    assert "--overlap-from 2 --overhead-from 1 reads it where it shows" in said
    # the projection it gives is the slow end: 8.2 samples/s where 11.1 were measured
    assert made["points"][0]["throughput"]["value"] < 9
    # read from a result whose all-reduce is the longer one, nothing is said of it
    made, said = projected(db, "--overlap-from", AT_600)
    assert made["warnings"] == ["the start's result (1 x 1) is noisy (CV 10.5%): its interval "
                                "is wide"]


def test_a_window_source_that_hid_its_whole_all_reduce_is_said(db):
    made, said = projected(db, "--overlap-from", UNSHAPED, "--overhead-from", UNSHAPED)
    assert not scaling.shows_exposed(made["model"]["overlap"])
    assert "! the overlap window's result, run 1, hid its whole all-reduce (95.1 ms) within " \
           "its step's noise: the window (95.1 ms) is the least it allows, the interval's " \
           "fast end a window as long as the backward pass; --overlap-from 2 " \
           "--overhead-from 1 reads it where it shows" in said
    # a lower bound only: the window's most is the backward pass (2/3 of the 1-process step,
    # stretched by the overhead as the step is), past its all-reduce
    ends = made["model"]["overlap"]["window_ends"]
    assert ends[1] > 0.0951 and ends[1] == pytest.approx(
        2 / 3 * made["model"]["compute_s"]["value"] * (1 + made["model"]["overlap"]["overhead"]),
        rel=0.05)


def test_with_no_shaped_result_shown_the_slowest_is_read_and_a_slower_link_asked_for(tmp_path):
    # the unshaped result again, as if over 10 Gbit/s (no model over that link: priced by its
    # own 95 ms probe, all of it hidden): the only shaped result, and it shows nothing
    fast = json.loads(json.dumps(RESULTS[0]))
    fast["case"]["link"] = "10gbit"
    fast["label"] += " 10gbit-link"
    db = loaded(tmp_path / "x.db", drop=(1, 2), more=(fast,))
    start = "5"  # the torch 1-process result, with two runs fewer before it
    out = tmp_path / "p.json"
    proc = dlperf_main("project", start, "--db", str(db), *TARGET, "--inter",
                       "measured:1200mbit", "--no-store", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "chosen as the slowest link: none showed its all-reduce past the window" in said
    assert "hid its whole all-reduce" in said
    assert "a result of this configuration over a slower link shows it (`dlperf run ... " \
           "--emulate-hosts 2 --link RATE`)" in said
    # and with no shaped result at all, the newest alone, with the same request
    db = loaded(tmp_path / "y.db", drop=(1, 2))
    proc = dlperf_main("project", start, "--db", str(db), *TARGET, "--inter",
                       "measured:1200mbit", "--no-store")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, proc.stderr
    assert "chosen as the newest: none was run over a shaped link" in said
    assert "overlap window read from one result, run 1" in said and \
           "over a slower link shows it" in said
