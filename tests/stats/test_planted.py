"""The calibration's planted slowdown (`dlperf run --plant-slowdown`): a fixed sleep inside every
timed step, sized from a reference step to take the asked share of throughput away; marked in
the label and every table, never a gate's baseline, never in a sweep."""

from __future__ import annotations

import json

import pytest

from conftest import CUT_RESNET50_FLAGS, TINY_RESNET, dlperf, dlperf_main
from dlperf.spec import Case


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted")
    out = folder / "r.json"
    # ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): the sleep is sized from
    # the case's own reference step, whatever the network's depth
    proc = dlperf("run", *TINY_RESNET, *CUT_RESNET50_FLAGS, "--repeats", "1",
                  "--threads-per-process", "1", "--plant-slowdown", "30%",
                  "--db", str(folder / "r.db"), "--json", str(out), check=True)
    return proc, json.loads(out.read_text()), folder


def test_the_sleep_is_inside_every_timed_step_and_recorded(planted):
    proc, result, _ = planted
    assert result["case"]["plant_slowdown"] == 0.3
    assert "PLANTED-30%-slower" in result["label"]
    assert "PLANTED -30%" in proc.stdout  # the terminal's table marks it
    assert result["status"] == "ok"
    (sleep_s,) = result["planted"]["sleep_s"]
    assert result["planted"]["share"] == 0.3 and sleep_s > 0
    # the window holds every step's sleep (at least 3 steps of it), so the sleep is a share of
    # it: the reference step x 0.3 / 0.7 each
    (window_s,) = result["timings"]["window_s"]
    assert window_s >= 3 * sleep_s


def test_a_planted_result_is_never_a_baseline(planted, tmp_path):
    _, result, folder = planted
    base = tmp_path / "base.json"
    base.write_text(json.dumps(result))
    proc = dlperf_main("gate", "--baseline", str(base), "--candidate", str(base), "--db",
                       str(folder / "r.db"))
    assert proc.returncode == 2 and "carries a planted slowdown" in proc.stderr, proc.stderr


@pytest.mark.parallel
def test_the_knob_is_its_own_case_and_checked():
    plain, planted = Case("torch", "resnet50", 2), Case("torch", "resnet50", 2,
                                                        plant_slowdown=0.05)
    assert plain.key() != planted.key() and plain.key() == Case("torch", "resnet50", 2).key()
    for bad, words in ((0.6, "plant_slowdown"), (-0.1, "plant_slowdown")):
        with pytest.raises(ValueError, match=words):
            Case("torch", "resnet50", 2, plant_slowdown=bad)


@pytest.mark.parallel
def test_a_sweep_may_not_plant(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndefaults: {framework: torch, model: resnet50, batch_size: 2}\n"
                    "include:\n  - {plant_slowdown: 0.05}\n")
    proc = dlperf_main("sweep", str(path), "--dry-run", "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2 and "a calibration knob" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
