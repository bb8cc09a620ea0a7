"""benchmarks/history_corpus.py: the corpus plants its changes where it says, the scorer counts
as a hand count does, and a tiny corpus runs end to end through every method (and from a real
calibration pool)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import history_corpus  # noqa: E402

from dlperf.spec import Case  # noqa: E402
from dlperf.store import Store  # noqa: E402

SCRIPT = str(ROOT / "benchmarks" / "history_corpus.py")


@pytest.mark.parallel
def test_the_corpus_plants_steps_where_it_says():
    rng = np.random.default_rng(3)
    quiet = history_corpus.normal_noise(0.0)
    for steps in (0, 1, 2):
        for _ in range(20):
            s = history_corpus.make_series(rng, 30, 3, 0.05, steps, quiet)
            assert len(s.changes) == steps and len(s.medians) == 30
            assert all(len(r) == 3 for r in s.repeats)
            # without noise the level moves by exactly 5 % at each planted index and nowhere else
            ratios = np.asarray(s.medians[1:]) / np.asarray(s.medians[:-1])
            moved = [i + 1 for i, r in enumerate(ratios) if abs(r - 1) > 1e-12]
            assert moved == s.changes
            for i in s.changes:
                assert abs(abs(ratios[i - 1] - 1) - 0.05) < 1e-12
                assert i >= history_corpus.GAP and i <= 30 - history_corpus.GAP
            assert all(b - a >= history_corpus.GAP for a, b in zip(s.changes, s.changes[1:]))
    # the corpus: per repeat count, one "none" cell and a 1-step and 2-step cell per size
    series = history_corpus.corpus(0, 30, [3, 5], [0.02, 0.1], 2, quiet)
    assert len(series) == 2 * (2 + 2 * 2 * 2)
    assert sorted({(s.k, s.size, len(s.changes)) for s in series}) == [
        (k, size, steps) for k in (3, 5) for size, steps in
        ((0.0, 0), (0.02, 1), (0.02, 2), (0.1, 1), (0.1, 2))]


@pytest.mark.parallel
def test_the_scorer_counts_as_by_hand():
    # 10 is found one late, 25 one early (27 is a second, unmatched detection), 20 is a false
    # alarm: 2 hits, 2 false alarms, nothing missed
    assert history_corpus.match([10, 25], [11, 20, 24, 27], 1) == (2, 2, 0)
    # two away is outside a tolerance of 1 and inside one of 2
    assert history_corpus.match([10], [12], 1) == (0, 1, 1)
    assert history_corpus.match([10], [12], 2) == (1, 0, 0)
    # one detection between two planted changes counts once
    assert history_corpus.match([10, 12], [11], 1) == (1, 0, 1)
    quiet = history_corpus.normal_noise(0.0)
    rng = np.random.default_rng(0)
    a = history_corpus.make_series(rng, 40, 3, 0.05, 2, quiet)
    b = history_corpus.make_series(rng, 20, 3, 0.0, 0, quiet)
    c = history_corpus.make_series(rng, 40, 5, 0.05, 1, quiet)
    found = {"m": [[a.changes[0] + 1, a.changes[1] + 3], [4], [c.changes[0]]]}
    scored = history_corpus.score([a, b, c], found, 1)["m"]
    # a: 1 hit, 1 false alarm, 1 missed in 40 results
    assert scored["3"]["5%"] == {"tp": 1, "fp": 1, "fn": 1, "points": 40, "precision": 0.5,
                                 "recall": 0.5, "false_alarms_per_100": 2.5}
    # b: a false alarm in 20 results with nothing planted
    assert scored["3"]["none"] == {"tp": 0, "fp": 1, "fn": 0, "points": 20, "precision": 0.0,
                                   "recall": None, "false_alarms_per_100": 5.0}
    # all of 3 repeats: 1 hit, 2 false alarms, 1 missed in 60 results
    assert scored["3"]["all"]["false_alarms_per_100"] == pytest.approx(100 * 2 / 60)
    assert scored["3"]["all"]["precision"] == pytest.approx(1 / 3)
    assert scored["5"]["5%"]["precision"] == 1.0 and scored["5"]["5%"]["recall"] == 1.0


@pytest.mark.parallel
def test_e_divisive_finds_a_clear_step_and_not_a_flat_line():
    detect = history_corpus.e_divisive(99)
    rng = np.random.default_rng(5)
    flat = list(100 * rng.normal(1, 0.01, 30))
    step = flat[:15] + [v * 1.3 for v in flat[15:]]
    assert detect(step, []) == [15]
    assert detect([100.0] * 30, []) == []


@pytest.mark.parallel
def test_a_tiny_corpus_runs_and_reports_every_method(tmp_path):
    out, md = tmp_path / "h.json", tmp_path / "h.md"
    proc = subprocess.run([sys.executable, SCRIPT, "--points", "20", "--series", "1",
                           "--repeats", "3", "--sizes", "0.1", "--permutations", "19",
                           "--json", str(out), "--markdown", str(md)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(out.read_text())
    assert set(found["methods"]) == set(history_corpus.methods(19))
    for by_k in found["methods"].values():
        assert set(by_k["3"]) == {"none", "10%", "all"}
        assert by_k["3"]["all"]["points"] == 3 * 20  # no step, one step, two steps
        assert by_k["3"]["10%"]["tp"] + by_k["3"]["10%"]["fn"] == 3  # 1 + 2 planted
    for name in found["methods"]:
        assert name in md.read_text() and name in proc.stdout


@pytest.mark.parallel
def test_noise_from_a_calibration_pool(tmp_path):
    db = tmp_path / "cal.db"
    with Store(db) as store:
        for share, values in ((0.0, [90.0, 100.0, 110.0] * 4), (0.1, [50.0] * 3)):
            case = Case(framework="torch", model="resnet50", batch_size=2,
                        plant_slowdown=share).to_dict()
            run = store.start_run(f"k{share}", "x", case, {})
            store.finish_run(run, {"status": "ok", "case": case, "label": "x",
                                   "throughput": {"median": float(np.median(values)),
                                                  "repeats": values}})
    out = tmp_path / "h.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--pool", str(db), "--points", "15",
                           "--series", "1", "--repeats", "3", "--sizes", "0.05",
                           "--permutations", "9", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["config"]["noise"] == f"12 repeats from {db}"
    # the resampled factors are the pool's over its median: 0.9, 1 and 1.1 only
    draw = history_corpus.pool_noise([90.0, 100.0, 110.0])
    assert set(np.round(draw(np.random.default_rng(0), 50), 9)) <= {0.9, 1.0, 1.1}


@pytest.mark.parallel
@pytest.mark.parametrize("args, line", [
    (["--cv", "0"], "--cv: a fraction between 0 and 0.5"),
    (["--points", "10"], "--points: at least 15"),
    (["--sizes", "5"], "--sizes: fractions between 0 and 1"),
    (["--pool", "/nonexistent.db"], "--pool: no such file"),
    (["--pool", "TEXT"], "--pool: "),
    (["--pool", "TEXT", "--cv", "0.02"], "--cv: not with --pool"),  # a text file, not a database
])
def test_bad_input_is_one_line_and_exit_2(args, line, tmp_path, capsys):
    """Through the script's main in this process: a fresh interpreter's imports (~2 CPU-s) saved
    per case; the tests above run it as a process."""
    text = tmp_path / "text.db"
    text.write_text("not a database\n")
    args = [str(text) if a == "TEXT" else a for a in args]
    assert history_corpus.main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith(line) and err.count("\n") == 1
    assert out == ""
