"""What uses a finished tune: `dlperf run --config best|best-fixed`, a sweep's `config: best`,
and the report's "Default vs best" section with a chart of each search.

The studies are written through the Store's own methods (start_tune_study, add_tune_trial,
finish_tune_study) in the shape `dlperf tune` stores: that is the storage contract between the
search and everything here, so no search has to run for these tests.
"""

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

import pytest

from conftest import dlperf, dlperf_main, load
from tune_study import BEST, BEST_FIXED, store_study, tiny_case
from dlperf import result as result_mod
from dlperf.spec import Case
from dlperf.store import Store
from dlperf.studies import sweep as sweeps
from dlperf.studies import tuned
from dlperf.tune import settings, stored

TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
        "--steps", "2", "--repeats", "1"]
HOSTILE = "<b>fast</b> $x$ [link](http://x)"


def one_line_usage(done) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parallel
def test_config_best_and_best_fixed_read_the_newest_tune(tmp_path):
    db = tmp_path / "tune.db"
    key = store_study(db, tiny_case())
    found = tuned.from_db(db, tiny_case(), "best")
    assert settings.of_case(found.case, list(BEST)) == BEST
    assert found.case.options == "memory_format=channels_last"
    assert found.marker["from"] == "tune" and found.marker["study"] == key
    assert found.marker["which"] == "best" and found.marker["settings"] == BEST
    assert found.marker["changes_math"] == ["batch_size"] and found.marker["speedup"] == 1.28
    assert key in found.line and "batch_size=4" in found.line and "\n" not in found.line

    fixed = tuned.from_db(db, tiny_case(), "best-fixed")
    assert settings.of_case(fixed.case, list(BEST_FIXED)) == BEST_FIXED
    assert fixed.marker["which"] == "best-fixed" and fixed.marker["speedup"] == 1.12

    # a case at another batch size: only `best` says what to run; best-fixed knows batch 2 only
    other = tiny_case(batch_size=8)
    assert tuned.from_db(db, other, "best").case.batch_size == 4
    with pytest.raises(Exception, match="best-fixed: the tune's default ran at batch_size=2, "
                                        "this case at batch_size=8"):
        tuned.from_db(db, other, "best-fixed")
    # a different case (another image size) has no tune here; the study's case is named
    with pytest.raises(Exception, match="has no finished tune of torch resnet50 train") as error:
        tuned.from_db(db, Case(framework="torch", model="resnet50", batch_size=2,
                               knobs={"image_size": 64}), "best")
    assert "torch resnet50 train" in str(error.value).split("holds tuned results of:")[1]
    with pytest.raises(Exception, match="does not exist; run `dlperf tune"):
        tuned.from_db(tmp_path / "none.db", tiny_case(), "best")
    # a tune whose default failed found nothing to reuse: said, not a traceback
    failed = tiny_case("jax")
    with Store(db) as store:
        store.start_tune_study("failed", stored.base_key(failed), failed.to_dict(),
                               {"knobs": {}, "batch_limit": None}, 60.0)
        store.finish_tune_study("failed", {"default": {"settings": {}, "throughput": None,
                                                       "trial": 0}, "best": None,
                                           "best_fixed": None})
    with pytest.raises(Exception, match="found no configuration that ran, not even the default"):
        tuned.from_db(db, failed, "best")


@pytest.mark.parallel
def test_run_config_refusals_are_one_line(tmp_path):
    db = tmp_path / "tune.db"
    missing = dlperf_main("run", "--framework", "torch", *TINY, "--config", "best",
                          "--db", str(db))
    one_line_usage(missing)
    assert "does not exist" in missing.stderr and not db.exists()
    with Store(db):
        pass
    untuned = dlperf_main("run", "--framework", "torch", *TINY, "--config", "best",
                          "--db", str(db))
    one_line_usage(untuned)
    assert "has no finished tune of torch resnet50 train" in untuned.stderr
    store_study(db, tiny_case())
    fixed = dlperf_main("run", "--framework", "torch", *TINY[:4], "--batch-size", "8",
                        *TINY[6:], "--config", "best-fixed", "--db", str(db))
    one_line_usage(fixed)
    assert "--config best-fixed: the tune's default ran at batch_size=2" in fixed.stderr
    wrong = dlperf_main("run", "--framework", "torch", *TINY, "--config", "fastest",
                        "--db", str(db))
    one_line_usage(wrong)
    assert "--config" in wrong.stderr
    with sqlite3.connect(db) as con:  # nothing was measured
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_run_config_best_measures_and_marks_the_tuned_case(tmp_path):
    db, out = tmp_path / "tune.db", tmp_path / "best.json"
    key = store_study(db, tiny_case())
    done = dlperf("run", "--framework", "torch", *TINY, "--config", "best", "--db", str(db),
                  "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("--config best:")]
    assert len(said) == 1 and key in said[0], done.stdout
    result = load(out)
    case = Case.from_dict(result["case"])
    assert settings.of_case(case, list(BEST)) == BEST  # batch 4, one thread, channels-last
    assert result["config"]["study"] == key and result["config"]["which"] == "best"
    with Store(db, readonly=True) as store:
        kept = store.results()
    assert len(kept) == 1 and kept[0]["case"] == result["case"]
    assert kept[0]["config"] == result["config"]  # the stored result says where it came from


SWEEP = """\
name: tuned-tiny
tune_db: tunes/tune.db
defaults:
  model: resnet50
  image_size: 32
  batch_size: 2
  warmup_steps: 1
  steps: 2
  repeats: 1
  config: best
include:
  - {framework: torch}
  - {framework: jax}
"""


@pytest.mark.parallel
def test_sweep_files_take_config_and_tune_db(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndefaults: {model: resnet50, batch_size: 2, image_size: 32}\n"
                    "matrix:\n  framework: [torch, jax]\n  config: [default, best]\n"
                    "exclude:\n  - {framework: jax, config: best}\n")
    loaded = sweeps.load(path)
    assert [c.framework for c in loaded.cases] == ["torch", "torch", "jax"]
    assert loaded.wants == {1: "best"} and loaded.tune_db is None
    assert loaded.cases[0].key() == loaded.cases[1].key()  # the same case, two configurations
    tunes = tmp_path / "tunes"
    tunes.mkdir()
    store_study(tunes / "t.db", tiny_case())
    done = sweeps.with_configs(loaded, tunes / "t.db")
    assert done.wants == {} and not done.refused and len(done.cases) == 3
    assert done.cases[1].batch_size == 4 and done.cases[1].threads == 1
    assert done.configs[done.cases[1].key()]["which"] == "best"
    assert sweeps.with_configs(done, tmp_path / "other.db") is done  # nothing left to resolve
    # untuned: a refused cell with the reason; the default case is kept
    refused = sweeps.with_configs(loaded, tmp_path / "none.db")
    assert len(refused.cases) == 2 and len(refused.refused) == 1
    assert "does not exist" in refused.refused[0].reason
    assert refused.refused[0].key != loaded.cases[0].key()

    body = "defaults: {model: resnet50, batch_size: 2}\ninclude:\n"
    for text, message in [
            ("name: b\n" + body + "  - {framework: torch, config: fastest}\n",
             ":4: config: 'fastest' is not one of default, best, best-fixed"),
            ("name: b\ntune_db: ''\n" + body + "  - {framework: torch}\n",
             ":2: tune_db: must be the path of a results file")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(Exception) as error:
            sweeps.load(bad)
        assert message in str(error.value), str(error.value)


def test_sweep_config_best_stores_the_tuned_case_and_refuses_an_untuned_one(tmp_path):
    """One tiny torch case in its tuned configuration (from `tune_db:`, relative to the file),
    one jax case without a tune: kept as an unsupported cell with the reason, no worker run."""
    (tmp_path / "tunes").mkdir()
    key = store_study(tmp_path / "tunes" / "tune.db", tiny_case())
    path = tmp_path / "tuned.yaml"
    path.write_text(SWEEP)
    db = tmp_path / "sweep.db"
    plan = dlperf_main("sweep", str(path), "--db", str(db), "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "batch_size=4" in plan.stdout + plan.stderr and key in plan.stdout + plan.stderr
    done = dlperf("sweep", str(path), "--db", str(db), timeout=600)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # the refused cell
    with Store(db, readonly=True) as store:
        kept = {r["case"]["framework"]: r for r in store.results()}
    torch = kept["torch"]
    assert torch["status"] == "ok", torch.get("error")
    assert settings.of_case(Case.from_dict(torch["case"]), list(BEST)) == BEST
    assert torch["config"]["study"] == key and torch["config"]["which"] == "best"
    jax = kept["jax"]
    assert jax["status"] == "unsupported" and "has no finished tune of jax" in jax["error"]
    assert jax["label"].endswith("· config best") and jax["timings"]["wall_s"] == []
    # a rerun with --resume measures nothing again
    again = dlperf_main("sweep", str(path), "--db", str(db), "--resume", timeout=120)
    assert again.returncode == 1 and "0 case(s) measured now" in again.stdout, again.stdout
    report = dlperf_main("report", "--db", str(db), "--format", "md")
    assert report.returncode == 0, report.stderr
    assert "eager · memory_format=channels_last · config best |" in report.stdout  # its own row
    table = dlperf_main("report", "--db", str(db), "--format", "csv")
    assert {(row["framework"], row["config"], row["config_study"])
            for row in csv.DictReader(io.StringIO(table.stdout))} == {
        ("torch", "best", key), ("jax", "best", "")}


def failed_tensorflow_result(db: Path) -> None:
    """A stored tensorflow training result (refused: no worker is needed to list it)."""
    case = tiny_case("tensorflow")
    record = {"repeat": 0, "status": "unsupported", "error": "not here", "wall_s": 0.0,
              "ranks": [], "monitor": {}}
    with Store(db) as store:
        run_id = store.start_run(case.key(), case.label(), case.to_dict(), {}, None)
        store.add_repeat(run_id, 0, record)
        store.finish_run(run_id, result_mod.aggregate(case, [record], {}, run_id=run_id))


@pytest.mark.parallel
def test_report_shows_default_vs_best_and_each_search(tmp_path):
    db = tmp_path / "tune.db"
    store_study(db, tiny_case())
    # a second framework whose best keeps the batch and precision, with markup in its settings
    hostile = {"threads": 2, "option.memory_format": HOSTILE, "batch_size": 2}
    store_study(db, tiny_case("tensorflow"), best=hostile, fixed=hostile)
    failed_tensorflow_result(db)
    html_out, md_out = tmp_path / "r.html", tmp_path / "r.md"
    for out, fmt in ((html_out, "html"), (md_out, "md")):
        done = dlperf_main("report", "--db", str(db), "--format", fmt, "-o", str(out),
                           timeout=120)
        assert done.returncode == 0, done.stderr
    page = html_out.read_text()
    assert '<h2 id="default-vs-best">Default vs best (dlperf tune)</h2>' in page
    assert '<a href="#default-vs-best">' in page
    assert "<h3>torch: default vs best</h3>" in page and "<h3>tensorflow: default vs best</h3>" in page
    torch_table = page.split("<h3>torch: default vs best</h3>")[1].split("</table>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", torch_table)
    assert cells[2] == "10.0" and cells[4] == "13.0"
    assert "batch_size=4 option.memory_format=channels_last threads=1" in cells[5]
    assert cells[6] == "1.280× (95 % CI 1.210–1.350, 4 pairs, faster)"
    assert cells[7].startswith("yes: batch_size<sup>")  # marked, footnoted
    assert "11.5" in cells[8] and "1.120×" in cells[8]  # the best at batch 2 beside it
    assert "8m32s of 10m00s (confirming 1m36s)" == cells[9]
    assert "3 complete, 1 pruned, 1 failed" == cells[10]
    tensorflow_table = page.split("<h3>tensorflow: default vs best</h3>")[1].split("</table>")[0]
    assert "the best (it keeps them)" in tensorflow_table
    # data, never markup
    assert HOSTILE not in page and "&lt;b&gt;fast&lt;/b&gt;" in page
    # a chart per search: PNG images that decode
    charts = re.findall(r'<img alt="Search: ([^"]*)" src="data:image/png;base64,([^"]+)"', page)
    assert sorted(title.split()[0] for title, _ in charts) == ["tensorflow", "torch"]
    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for _, data in charts)
    # the tensorflow footnote, under the results table and the tune table
    notes = re.findall(r'<li id="note-(\d+)">(.*?)</li>', page)
    weight_decay = [n for n, text in notes if "tf.nn.l2_loss over all variables" in text]
    assert len(weight_decay) == 1
    assert page.count(f'href="#note-{weight_decay[0]}"') >= 2
    assert not any("l2_loss" in text for n, text in notes if n != weight_decay[0])
    markdown = md_out.read_text()
    assert "## Default vs best (dlperf tune)" in markdown and "### torch: default vs best" in markdown
    assert "1.280×" in markdown and HOSTILE not in markdown
    assert "tf.nn.l2\\_loss" in markdown or "tf.nn.l2_loss" in markdown


@pytest.mark.parallel
def test_the_tune_trials_stay_out_of_the_results_tables(tmp_path):
    """A tune's own runs (sweep `tune`) are shown by the tune section, not as results; `--sweep
    tune` lists them."""
    db = tmp_path / "tune.db"
    store_study(db, tiny_case())
    case = tiny_case(threads=1)
    record = {"repeat": 0, "status": "crash", "error": "x", "wall_s": 0.0, "ranks": [],
              "monitor": {}}
    with Store(db) as store:
        run_id = store.start_run(case.key(), case.label(), case.to_dict(), {}, "tune")
        store.add_repeat(run_id, 0, record)
        store.finish_run(run_id, result_mod.aggregate(case, [record], {}, run_id=run_id))
    everything = dlperf_main("report", "--db", str(db), "--format", "json")
    assert everything.returncode == 2 and "holds no finished result" in everything.stderr
    trials = dlperf_main("report", "--db", str(db), "--sweep", "tune", "--format", "json")
    assert trials.returncode == 0 and len(json.loads(trials.stdout)) == 1
    page = dlperf_main("report", "--db", str(db), "--format", "md")
    assert page.returncode == 0, page.stderr
    assert "0 result(s) and 1 tune(s), whose trials are shown in their own section" in page.stdout
    assert "### torch: default vs best" in page.stdout


def test_the_tune_section_parses_in_headless_chromium(tmp_path):
    """The browser reads the section as written: its heading, one table per framework with
    every column, the charts as images, and markup in the settings as text."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make browser` installs it (Debian's chromium)"
    db, page = tmp_path / "tune.db", tmp_path / "r.html"
    store_study(db, tiny_case())
    hostile = {"threads": 2, "option.memory_format": HOSTILE, "batch_size": 2}
    store_study(db, tiny_case("tensorflow"), best=hostile, fixed=hostile)
    assert dlperf_main("report", "--db", str(db), "--format", "html", "-o", str(page),
                       timeout=120).returncode == 0
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    section = dom.stdout.split('<h2 id="default-vs-best">')[1].split("</section>")[0]
    tables = re.findall(r"<table>.*?</table>", section, re.S)
    assert len(tables) == 2
    assert all(len(re.findall(r"<td", t)) == len(re.findall(r"<th>", t)) for t in tables)
    assert section.count("data:image/png;base64,") == 2
    assert "<b>" not in section and "&lt;b&gt;fast&lt;/b&gt; $x$" in section
    # in a 1200 px window the page keeps its width: a wide table scrolls in its own box
    frame = tmp_path / "frame.html"
    frame.write_text(f'<iframe id="f" src="{page.name}" width="1200" height="900"></iframe>'
                     "<script>f.onload = () => { const d = f.contentDocument.documentElement;"
                     " const w = [...f.contentDocument.querySelectorAll('table')];"
                     " document.body.dataset.widths = [d.scrollWidth, d.clientWidth,"
                     " Math.max(...w.map(x => x.offsetWidth))].join(' '); };</script>")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync",
                          "--allow-file-access-from-files",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          frame.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    page_width, view_width, widest = map(int, re.search(r'data-widths="(\d+) (\d+) (\d+)"',
                                                         dom.stdout).groups())
    assert page_width <= view_width < widest  # the widest table is wider than the page
