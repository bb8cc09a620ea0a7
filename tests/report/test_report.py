"""`dlperf report` from a real sweep: Markdown, HTML (rendered by a real headless chromium), CSV, JSON."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import dlperf, dlperf_main
from dlperf.report.ratios import ratio_text

CONTRACT = {"schema", "case", "model", "status", "error", "unit", "throughput", "latency_ms",
            "timings", "memory", "flops", "monitor", "env"}
TINY = "bert-base (heads=2 hidden=64 intermediate=128 layers=1 seq_len=8 vocab_size=1000)"
BIG_VOCAB = "bert-base (heads=2 hidden=32 intermediate=64 layers=1 seq_len=64 vocab_size=100000)"


def stored(db: Path, sweep: str | None = None) -> dict[str, dict]:
    """The results as the database holds them, by label (read with sqlite3, not dlperf)."""
    con = sqlite3.connect(db)
    query = "SELECT label, result_json FROM runs WHERE result_json IS NOT NULL"
    rows = con.execute(query + (" AND sweep=?" if sweep else "") + " ORDER BY id",
                       (sweep,) if sweep else ()).fetchall()
    return {label: json.loads(text) for label, text in rows}


@pytest.fixture(scope="module")
def reports(fixture_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    # the four renderings of the stored database through dlperf's main in this process, one
    # after another (what they write is checked, not a fresh interpreter; test_fuzz_cli checks
    # that the two answer alike): dlperf, matplotlib and SciPy are imported once, not per format
    for fmt in ("md", "html", "csv", "json"):
        dlperf_main("report", "--db", str(fixture_db.path), "--format", fmt,
                    "-o", str(out / f"report.{fmt}"), timeout=600, check=True)
    return out


def test_markdown_has_dlperf_summary_and_detail_tables(fixture_db, reports):
    text = (reports / "report.md").read_text()
    results = stored(fixture_db.path)
    assert f"## {TINY}" in text and "## resnet50 (image_size=32)" in text
    section = text.split(f"## {TINY}")[1].split("\n## ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| framework"))
    # device counts vary (a 2-device case): a speedup column per precision; precisions vary:
    # amp-bf16 against fp32 (tf32 failed: no ratio of it)
    assert header == ("| framework | version | variant | device | FP32 throughput (samples/s) | FP32 speedup | "
                      "TF32 throughput (samples/s) | TF32 speedup | AMP-BF16 throughput "
                      "(samples/s) | AMP-BF16 speedup | amp-bf16 / fp32 (ratio, 95 % CI, "
                      "verdict) |")
    # AMP cell: the best 1-device amp-bf16 result, at its batch size
    amp = [r for label, r in results.items() if "amp-bf16" in label and "bert-base" in label]
    best = max(amp, key=lambda r: r["throughput"]["median"])
    assert f"{best['throughput']['median']:,.1f} (bsz {best['case']['batch_size']})" in section
    # every stored case is a detail row with its median
    for label, result in results.items():
        if result["status"] == "ok":
            assert f"| {result['throughput']['median']:,.1f} |" in text, label
    # the failure is footnoted with its reason, in the cell and in the notes
    assert re.search(r"\| unsupported \[(\d+)\] \|", section)
    note = re.search(r"\| unsupported \[(\d+)\] \|", section).group(1)
    assert re.search(rf"\[{note}\]: torch tf32 bsz 2: unsupported — .*tf32 needs a CUDA device",
                     text)


def test_speedup_is_measured_or_says_there_is_no_baseline(fixture_db, reports):
    text = (reports / "report.md").read_text()
    results = stored(fixture_db.path)
    two = results["torch bert-base train bs2 fp32 1n2d"]
    one = results["torch bert-base train bs2 fp32"]
    row = next(line for line in text.splitlines() if line.startswith("| 1 | 2 | 2 | 4 |"))
    assert two["status"] == "ok"  # the fixture requires it
    speedup = two["throughput"]["median"] / one["throughput"]["median"]
    assert f"| {ratio_text(speedup)} | {speedup / 2:.1%} |" in row
    # the summary's FP32 cell shows the result on the most devices measured, with its speedup
    section = text.split(f"## {TINY}")[1].split("\n## ")[0]
    torch_row = next(line for line in section.splitlines()
                     if line.startswith("| torch |") and "| eager |" in line)
    assert f"| {two['throughput']['median']:,.1f} (bsz 2, 2 devices) | {ratio_text(speedup)}" \
        in torch_row, torch_row
    # the big-vocabulary BERT: measured at a halved batch after running out of memory
    fitted = fixture_db.oom_results[-1]["case"]["batch_size"]
    section = text.split(f"## {BIG_VOCAB}")[1].split("\n## ")[0]
    cell = re.search(rf"\| ([\d.,]+) \(bsz {fitted}\) ((?:\[\d+\])+) \|", section)
    assert cell, section
    notes = re.findall(r"\[(\d+)\]", cell.group(2))
    texts = {n: re.search(rf"\[{n}\]: (.*)", text).group(1) for n in notes}
    assert any(f"bsz {fitted}: {2 * fitted} ran out of memory" in t
               for t in texts.values()), texts
    assert any(": oom — " in t and "allocate" in t for t in texts.values()), texts


def test_no_made_up_speedup_without_a_baseline(fixture_db, tmp_path):
    # the 2-device case alone, without its 1-device baseline in the database
    db = tmp_path / "alone.db"
    shutil.copy(fixture_db.path, db)
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM repeats WHERE run_id IN (SELECT id FROM runs WHERE label != "
                    "'torch bert-base train bs2 fp32 1n2d')")
        con.execute("DELETE FROM runs WHERE label != 'torch bert-base train bs2 fp32 1n2d'")
        # a speedup stored by the run itself would be kept; this checks the report's own rule
        row = con.execute("SELECT id, result_json FROM runs").fetchone()
        result = json.loads(row[1])
        for key in ("speedup", "scaling_efficiency", "speedup_note", "speedup_baseline"):
            result.pop(key, None)
        con.execute("UPDATE runs SET result_json=? WHERE id=?", (json.dumps(result), row[0]))
    con.close()
    text = dlperf_main("report", "--db", str(db), timeout=600, check=True).stdout
    if result["status"] == "ok":
        assert "no 1-device baseline" in text
        exported = json.loads(dlperf_main("report", "--db", str(db), "--format", "json",
                                          timeout=600, check=True).stdout)
        assert exported[0]["speedup"] is None and exported[0]["scaling_efficiency"] is None
        assert exported[0]["speedup_note"] == "no 1-device baseline"


def _pngs(html: str) -> list[bytes]:
    return [base64.b64decode(data) for data in
            re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_html_is_one_self_contained_file_with_plots(fixture_db, reports):
    html = (reports / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html)  # nothing fetched
    assert "<script" not in html and "<link" not in html
    images = _pngs(html)
    assert len(images) == html.count("<img")
    # tiny BERT: its precisions compared (bars at batch 2 and 4), devices, speedup, batch size,
    # spread; ResNet-50 and the big-vocabulary BERT (one result each): spread only; each section
    # its roofline (measuring probed the machine's peaks)
    assert len(images) == 5 + 1 + 1 + 3
    assert html.count("Roofline</figcaption>") == 3
    for data in images:
        picture = Image.open(io.BytesIO(data))
        picture.verify()
        assert picture.size[0] > 300 and picture.size[1] > 100
    for title in ("Precisions compared: torch (eager)", "Throughput vs batch size",
                  "Per-repeat spread", "Speedup vs devices", "Throughput vs devices"):
        assert f"{TINY}: {title}</figcaption>" in html
    # one framework: no figure of frameworks; what a section lacks is one line, not a sentence
    # per figure
    assert "Frameworks" not in html and "no configuration here" not in html
    resnet = html.split('<h2 id="resnet50-image-size-32">')[1].split("<h2")[0]
    assert resnet.count("Not measured here: more than one device count; more than one batch "
                        "size") == 1
    assert "AMD" in html or "Intel" in html or "CPU" in html
    assert "Raw per-repeat throughput" in html


def test_html_renders_in_headless_chromium(reports, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make browser` installs it (Debian's chromium)"
    shot = tmp_path / "report.png"
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars"]
    url = (reports / "report.html").resolve().as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<table>" in dom.stdout and "FP32 throughput" in dom.stdout
    assert dom.stdout.count("data:image/png;base64,") >= 5
    proc = subprocess.run([*flags, "--window-size=1100,3000", f"--screenshot={shot}", url],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    picture = Image.open(shot).convert("RGB")
    assert picture.size == (1100, 3000)
    pixels = np.asarray(picture, dtype=int)
    ink = float((pixels.sum(axis=2) < 600).mean())
    assert ink > 0.02, "the page rendered (almost) blank"
    # matplotlib's first colour (the plotted lines and dots) is on the page: the plots drew
    blue = int((np.abs(pixels - np.array([31, 119, 180])) < 40).all(axis=2).sum())
    assert blue > 200
    print(f"screenshot for a person to look at: {shot}")  # pytest keeps its temp directories


def test_csv_has_one_row_per_case_with_every_field_and_statistic(fixture_db, reports):
    rows = list(csv.DictReader((reports / "report.csv").open()))
    exported = json.loads((reports / "report.json").read_text())
    assert len(rows) == len(exported) == len(stored(fixture_db.path))
    columns = set(rows[0])
    assert {"framework", "model", "task", "batch_size", "precision", "compile", "device",
            "devices", "nnodes", "data", "warmup_steps", "warmup_max_steps", "steps",
            "repeats", "seed", "timeout_s"} <= columns
    assert {"knob_seq_len", "knob_image_size", "knob_vocab_size"} <= columns
    assert {"throughput_median", "throughput_min", "throughput_max", "throughput_iqr",
            "throughput_cv", "throughput_ci95_low", "throughput_ci95_high",
            "throughput_repeats", "speedup", "scaling_efficiency", "status", "error"} <= columns
    for row, result in zip(rows, exported):
        assert row["label"] == result["label"] and row["status"] == result["status"]
        assert row["warmup_max_steps"] == str(result["case"]["warmup_max_steps"])
        if result["status"] == "ok":
            assert float(row["throughput_median"]) == pytest.approx(
                result["throughput"]["median"])
            assert [float(v) for v in row["throughput_repeats"].split(";")] == pytest.approx(
                result["throughput"]["repeats"])
        else:
            assert row["throughput_median"] == "" and row["error"]


@pytest.mark.parallel
def test_csv_case_columns_include_the_warm_up_bound():
    """warmup_max_steps beside warmup_steps, as the case holds it (empty for a result stored
    before the field existed)."""
    from dlperf.report import export
    from dlperf.spec import Case

    capped = Case(framework="torch", model="resnet50", batch_size=2, warmup_max_steps=12)
    old = capped.to_dict()
    del old["warmup_max_steps"]
    rows = list(csv.DictReader(io.StringIO(export.to_csv([{"case": capped.to_dict()},
                                                          {"case": old}]))))
    header = list(rows[0])
    assert header.index("warmup_max_steps") == header.index("warmup_steps") + 1
    assert [(r["warmup_steps"], r["warmup_max_steps"]) for r in rows] == [("auto", "12"),
                                                                          ("auto", "")]


def test_json_is_a_list_of_contract_objects_with_every_repeat(fixture_db, reports):
    exported = json.loads((reports / "report.json").read_text())
    db = stored(fixture_db.path)
    for result in exported:
        assert CONTRACT <= set(result)
        original = db[result["label"]]
        assert result["throughput"]["repeats"] == original["throughput"]["repeats"]
        if result["status"] == "ok":
            assert len(result["throughput"]["repeats"]) == result["repeats_done"]
        assert "speedup" in result and "scaling_efficiency" in result


def test_sweep_filter_and_bad_input(fixture_db, tmp_path):
    only = json.loads(dlperf_main("report", "--db", str(fixture_db.path), "--sweep", "oom-halve",
                                  "--format", "json", timeout=600, check=True).stdout)
    assert sorted(r["case"]["batch_size"] for r in only) == sorted(
        r["case"]["batch_size"] for r in fixture_db.oom_results)
    # the missing file as a real process, the rest through dlperf's main in this process
    proc = dlperf_main("report", "--db", str(fixture_db.path), "--sweep", "nope")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no sweep named 'nope'" in proc.stderr and "fixture" in proc.stderr
    proc = dlperf("report", "--db", str(tmp_path / "missing.db"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "missing.db").exists()
    proc = dlperf_main("report", "--db", str(fixture_db.path), "--format", "pdf")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.parallel
def test_one_colour_per_framework_in_every_report_and_per_precision_in_one_framework_s():
    """The palette is fixed: torch is matplotlib's first colour whatever else the report holds,
    tensorflow the same colour beside torch as beside jax; a report of one framework colours
    its precisions instead, and series of one colour are numbered (hatch, marker)."""
    from dlperf.report import palette

    def result(framework, precision="fp32"):
        return {"case": {"framework": framework, "precision": precision}}

    two = palette.of([result("tensorflow"), result("torch")])
    other = palette.of([result("jax"), result("tensorflow"), result("torch", "amp-bf16")])
    assert two.by == other.by == "framework"
    assert two.colour(result("torch")) == "C0" == other.colour(result("torch", "amp-bf16"))
    assert two.colour(result("tensorflow")) == other.colour(result("tensorflow")) != "C0"
    assert len({other.colour(result(fw)) for fw in ("jax", "tensorflow", "torch")}) == 3
    one = palette.of([result("torch"), result("torch", "amp-bf16")])
    assert one.by == "precision"
    assert one.colour(result("torch")) != one.colour(result("torch", "amp-bf16"))
    styles = two.styles({"torch (eager)": result("torch"), "torch (compiled)": result("torch"),
                         "tensorflow (graph)": result("tensorflow")})
    assert styles["torch (compiled)"] == ("C0", 0) and styles["torch (eager)"] == ("C0", 1)
    assert styles["tensorflow (graph)"][1] == 0


@pytest.mark.parallel
def test_a_refused_mode_row_says_which_mode_it_was():
    """JAX has no eager mode: the summary row of its refused compile=false cells names that,
    rather than calling the variant "unsupported"."""
    from dlperf.report import tables
    assert tables.variant({"framework": "jax", "compile": False}) == "no eager mode"
    assert tables.variant({"framework": "jax", "compile": True}).startswith("jax.jit (XLA)")
    assert tables.variant({"framework": "tensorflow", "compile": False}) == "tf.function graph"


@pytest.mark.parallel
def test_the_comparison_figure_draws_each_result_once_titled_by_what_varies():
    """Eight frameworks in two precisions and two modes: bars per precision, one per framework
    and mode, and the title names frameworks, compile settings and precisions; one framework's
    two precisions are titled by the precisions and the framework; a case in two labels alone
    is left to the history figure."""
    from dlperf.report.plots import bar_groups, compared, compared_title
    from dlperf.report.palette import of

    def ok(framework, precision, compiled, median, batch=2, label=""):
        return {"status": "ok", "throughput": {"median": median, "repeats": [median]},
                "case": {"framework": framework, "model": "resnet50", "precision": precision,
                         "compile": compiled, "batch_size": batch, "run_label": label}}

    results = []
    for i, fw in enumerate(("torch", "tensorflow", "tensorflow1", "jax", "paddle", "mxnet",
                            "mindspore", "oneflow")):
        for precision in ("fp32", "amp-bf16"):
            for compiled in (False, True) if fw != "jax" else (True,):  # jax: jit only
                results.append(ok(fw, precision, compiled, 10.0 + i + compiled))
    results.append(ok("torch", "fp32", False, 5.0, batch=4))  # alone at its batch: no group
    groups = bar_groups(results)
    assert [key[1] for key in sorted(groups)] == ["fp32", "amp-bf16"]
    assert all(len(bars) == 15 for bars in groups.values())
    assert sum(len(bars) for bars in groups.values()) == 30  # every result once, no bar twice
    assert compared_title(results) == "Frameworks, compile settings and precisions compared"
    png = compared(results, of(results))
    assert png is not None and png.startswith(b"\x89PNG")
    one = [ok("torch", "fp32", False, 5.0), ok("torch", "amp-bf16", False, 4.0)]
    assert compared_title(one) == "Precisions compared: torch (eager)"
    assert list(bar_groups(one).values())[0].keys() == {"fp32", "amp-bf16"}
    labels = [ok("torch", "fp32", False, 5.0, label="v1"), ok("torch", "fp32", False, 5.2,
                                                               label="v2")]
    assert bar_groups(labels) == {} and compared(labels, of(labels)) is None
