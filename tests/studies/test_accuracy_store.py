"""Accuracy rows in the results database, in reports (beside stored inference) and in compare.

One real database, made once: a file from before the accuracy table existed, then a real
``dlperf accuracy`` (GoogLeNet, random weights given with --weights on a tiny image folder, so
nothing trains: seconds) and a real ``dlperf infer`` of the same model and engine in fp32 and
int8 at two batch sizes. Every test reads that file (or a copy). No mocks.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from conftest import dlperf, dlperf_main, load
from image_folders import coloured_image_folder
from dlperf.report.ratios import ratio_text

MODEL = "googlenet"
INFER = ["--framework", "torch", "--model", MODEL, "--image-size", "32", "--repeats", "1",
         "--warmup-steps", "2", "--steps", "3"]
# fp32 at two batch sizes, int8 at one (a worker fewer): int8 finds its twin in the database
SWEEPS = (("fp32", "1,2"), ("int8", "1"))


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def rows(db: Path, sql: str = "SELECT * FROM accuracy ORDER BY id") -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    import torch

    from dlperf.backends.torch import vision
    from dlperf.store import Store

    root = tmp_path_factory.mktemp("accuracy-store")
    db = root / "results.db"
    Store(db).close()
    with sqlite3.connect(db) as con:  # as an older dlperf left it: no accuracy table
        con.execute("DROP TABLE accuracy")
    con.close()
    coloured_image_folder(root / "val")
    torch.manual_seed(0)
    torch.save(vision.network(MODEL, 3).state_dict(), root / "weights.pt")
    dlperf("accuracy", "--model", MODEL, "--data", str(root / "val"), "--weights",
           str(root / "weights.pt"), "--calibration-samples", "4", "--db", str(db),
           "--json", str(root / "accuracy.json"), env={"DLPERF_CACHE": str(root / "cache")},
           timeout=600, check=True)
    for precision, batches in SWEEPS:
        dlperf("infer", *INFER, "--precision", precision, "--batch-sizes", batches,
               "--db", str(db), "--json", str(root / f"infer-{precision}.json"), timeout=600,
               check=True)
    return db


def infer_results(db: Path) -> list[dict]:
    return [r for precision, _ in SWEEPS for r in load(db.parent / f"infer-{precision}.json")]


def test_rows_are_stored_with_data_identity_and_env(stored):
    found = rows(stored)
    assert [(r["model"], r["framework"], r["precision"]) for r in found] == [
        (MODEL, "torch", "int8")]
    row = found[0]
    printed = load(stored.parent / "accuracy.json")["rows"][0]
    assert row["status"] == "ok" and row["samples"] == 15 == printed["samples"]
    for name in ("fp32_top1", "fp32_top5", "top1", "top5", "diff_top1", "diff_top5",
                 "changed_top1"):
        assert row[name] == pytest.approx(printed[name]), name
    assert row["diff_top1"] == pytest.approx(row["top1"] - row["fp32_top1"])
    dataset = json.loads(row["dataset_json"])
    assert dataset["name"] == "folder" and dataset["path"] == str(stored.parent / "val")
    assert len(dataset["fingerprint"]) == 16 and dataset["test_samples"] == 15
    assert json.loads(row["env_json"])["hostname"]
    detail = json.loads(row["detail_json"])
    assert {c["precision"] for c in detail["cells"]} == {"fp32", "int8"}
    # the older file gained the table and kept its version
    assert rows(stored, "SELECT value FROM meta WHERE key='schema_version'")[0][0] == "1"


# `dlperf report` and `dlperf compare` of the stored database run through dlperf's main in this
# process: what is checked is what they print and write, not a fresh interpreter (each would pay
# its imports again, SciPy's ~1.5 s for compare); the measurements above are real processes


def test_report_shows_accuracy_beside_the_inference_speedup(stored):
    before = fingerprint(stored)
    text = dlperf_main("report", "--db", str(stored), check=True).stdout
    assert fingerprint(stored) == before  # read-only
    # the device the engine evaluated on, then the precision
    line = next(l for l in text.splitlines() if l.startswith(f"| {MODEL} | torch | cpu | int8 |"))
    row = rows(stored)[0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4:7] == [f"{row['fp32_top1']:.2f}%", f"{row['top1']:.2f}%",
                          f"{row['diff_top1']:+.2f}"]
    assert cells[10] == str(row["changed_top1"])
    results = {(r["case"]["precision"], r["case"]["batch_size"]): r
               for r in infer_results(stored)}
    expected = (results[("int8", 1)]["throughput"]["median"]
                / results[("fp32", 1)]["throughput"]["median"])
    # each speedup names the device its timings ran on
    assert cells[13] == f"bsz 1: {ratio_text(expected)}× (image 32, cpu)"
    # the inference table: p90 and a latency speedup per percentile, against the fp32 twin
    header = next(l for l in text.splitlines() if "p90 speedup vs fp32" in l)
    names = [c.strip() for c in header.strip("|").split("|")]
    section = text[text.index("torch · eager · cpu · int8"):]
    first = next(l for l in section.splitlines() if l.startswith("| 1 | 1 | 1 |"))
    values = dict(zip(names, (c.strip() for c in first.strip("|").split("|"))))
    for p in ("p50", "p90", "p99"):
        expected = (results[("fp32", 1)]["latency_ms"][p] / results[("int8", 1)]["latency_ms"][p])
        assert values[f"{p} speedup vs fp32"] == f"{ratio_text(expected)}×"
        assert values[f"{p} ms"] == f"{results[('int8', 1)]['latency_ms'][p]:,.2f}"


def test_html_report_has_the_accuracy_table_and_inference_plots(stored, tmp_path):
    out = tmp_path / "report.html"
    dlperf_main("report", "--db", str(stored), "-o", str(out), check=True)
    html = out.read_text()
    assert '<h2 id="accuracy">' in html and 'href="#accuracy"' in html
    assert (f"<td class=\"l\">{MODEL}</td><td class=\"l\">torch</td><td class=\"l\">cpu</td>"
            f"<td class=\"l\">int8</td>") \
        in html
    images = dict(re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"', html))
    for title in ("Latency percentiles vs batch size", "Throughput vs latency per precision"):
        found = [data for alt, data in images.items() if alt.endswith(title)]
        assert len(found) == 1, (title, list(images))
        picture = Image.open(io.BytesIO(base64.b64decode(found[0])))
        picture.verify()
        assert picture.size[0] > 300


def test_an_older_file_without_the_table_reports_unchanged(stored, tmp_path):
    old = tmp_path / "old.db"
    shutil.copy(stored, old)
    with sqlite3.connect(old) as con:
        con.execute("DROP TABLE accuracy")
        con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    before = fingerprint(old)
    text = dlperf_main("report", "--db", str(old), check=True).stdout
    assert "Accuracy: fp32" not in text and "p99 speedup vs fp32" in text
    assert fingerprint(old) == before
    proc = dlperf_main("compare", str(old), str(stored))
    assert proc.returncode == 0 and "only in candidate" in proc.stdout, proc.stderr


def test_compare_matches_rows_and_fails_on_a_top1_drop(stored, tmp_path):
    same = dlperf_main("compare", str(stored), str(stored), "--fail-on-regression",
                  "--json", str(tmp_path / "same.json"))
    assert same.returncode == 0, same.stdout + same.stderr
    matched = load(tmp_path / "same.json")["accuracy"]["rows"]
    assert [(r["label"], r["verdict"], r["top1_change_points"]) for r in matched] == [
        (f"{MODEL} torch int8", "same", 0.0)]

    worse = tmp_path / "worse.db"
    shutil.copy(stored, worse)
    with sqlite3.connect(worse) as con:
        con.execute("UPDATE accuracy SET top1 = top1 - 5, diff_top1 = diff_top1 - 5")
    con.close()
    proc = dlperf_main("compare", str(stored), str(worse), "--fail-on-regression",
                  "--json", str(tmp_path / "worse.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "worse" in proc.stdout and "1 accuracy regression(s)" in proc.stdout
    item = load(tmp_path / "worse.json")["accuracy"]["rows"][0]
    assert item["verdict"] == "worse" and item["top1_change_points"] == pytest.approx(-5)
    lenient = dlperf_main("compare", str(stored), str(worse), "--fail-on-regression",
                     "--accuracy-threshold", "6")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr


BAD_INPUT = [
    (["compare", "{db}", "{db}", "--accuracy-threshold", "-1"],
     "expected percentage points between 0 and 100"),
    (["accuracy", "--model", MODEL, "--db", "{other}"], "is not a dlperf database"),
    (["accuracy", "--model", MODEL, "--db", ":memory:"], "--db: ':memory:' is not allowed"),
]


# the first as a real process, the rest through dlperf's main in this process
@pytest.mark.parametrize("args, message, run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line_and_exit_2(args, message, run, stored, tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE photos (id INTEGER)")
    con.close()
    proc = run(*(a.format(db=stored, other=other) for a in args), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
