"""The report's scaling table and speedup plot, from a real database: the same tiny ResNet-50
measured by 1 and by 2 torch processes, rendered as Markdown and as HTML in headless chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from conftest import CUT_RESNET50_FLAGS, dlperf, dlperf_main, load

# a two-process job against its one-process twin.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

# ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is the
# scaling the report derives from the stored results, whatever the network's depth
TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", *CUT_RESNET50_FLAGS,
        "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
        "--device", "cpu"]
SECTION = "resnet50 (image_size=32 max_blocks=1)"
HEADER = ("| precision | batch/device | nodes | devices/node | devices | "
          "throughput (samples/s, median) | speedup | scaling efficiency |")
BLUE = np.array([31, 119, 180])  # matplotlib's first colour: the framework's line
IDEAL = np.array([51, 51, 51])  # the ideal line's dark grey


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """results.db with the 1-process case, then the 2-process one; a report of the first alone."""
    work = tmp_path_factory.mktemp("scaling")
    db = str(work / "results.db")
    env = {"DLPERF_LOCK_DIR": str(work)}  # checks the report, not timings: no queue on the lock
    dlperf("run", *TINY, "--db", db, "--json", str(work / "one.json"), env=env, check=True)
    # the renderings of the stored database through dlperf's main in this process (what they
    # print and write is checked, not a fresh interpreter; test_fuzz_cli checks the two alike)
    alone = dlperf_main("report", "--db", db, timeout=600, check=True).stdout
    dlperf("run", *TINY, "--devices", "2", "--db", db, "--json", str(work / "two.json"),
           env=env, check=True)
    for fmt in ("md", "html"):
        dlperf_main("report", "--db", db, "-o", str(work / f"report.{fmt}"), timeout=600,
                    check=True)
    return work, load(work / "one.json"), load(work / "two.json"), alone


def pngs(html: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(data) for alt, data in re.findall(
        r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)}


def count(pixels: np.ndarray, colour: np.ndarray, tolerance: int = 30) -> int:
    return int((np.abs(pixels - colour) < tolerance).all(axis=2).sum())


def test_markdown_scaling_table_per_framework(measured):
    work, one, two, alone = measured
    assert one["status"] == "ok" and two["status"] == "ok" and len(two["ranks"]) == 2
    text = (work / "report.md").read_text()
    title = f"### {SECTION}: scaling of torch · eager · cpu"
    assert text.count(title) == 1
    lines = text.split(title)[1].strip().splitlines()
    assert lines[0] == HEADER
    speedup = two["throughput"]["median"] / one["throughput"]["median"]
    assert two["speedup"] == pytest.approx(speedup)  # stored by the run, shown by the report
    assert lines[2] == f"| fp32 | 2 | 1 | 1 | 1 | {one['throughput']['median']:,.1f} | 1.00 | 100.0% |"
    assert lines[3] == (f"| fp32 | 2 | 1 | 2 | 2 | {two['throughput']['median']:,.1f} | "
                        f"{speedup:.2f} | {speedup / 2:.1%} |")
    assert lines[4] == ""  # the table has exactly these two rows
    # one device measured only: nothing scales, so no scaling table
    assert "scaling of" not in alone and f"## {SECTION}" in alone


def test_scaling_table_without_a_baseline_says_so(measured, tmp_path):
    work, _, two, _ = measured
    db = tmp_path / "alone.db"
    shutil.copy(work / "results.db", db)
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM repeats WHERE run_id != ?", (two["run_id"],))
        con.execute("DELETE FROM runs WHERE id != ?", (two["run_id"],))
        result = json.loads(con.execute("SELECT result_json FROM runs").fetchone()[0])
        for key in ("speedup", "scaling_efficiency", "speedup_baseline", "speedup_note"):
            result.pop(key, None)
        con.execute("UPDATE runs SET result_json=?", (json.dumps(result),))
    con.close()
    text, html = (dlperf_main("report", "--db", str(db), *extra, timeout=600, check=True).stdout
                  for extra in ((), ("--format", "html")))
    row = next(line for line in text.splitlines() if line.startswith("| fp32 | 2 | 1 | 2 | 2 |"))
    assert row.endswith("| no 1-device baseline | — |"), row
    assert f"{SECTION}: Speedup vs devices" not in pngs(html)
    # one device count left: no speedup column or figure, and one line, not a sentence a figure
    assert "FP32 speedup" not in html and "no result here" not in html
    assert "Not measured here: more than one device count;" in html


def test_html_has_the_table_and_the_speedup_plot_with_the_ideal_line(measured):
    work, _, _, _ = measured
    html = (work / "report.html").read_text()
    assert '<h3>scaling of torch · eager · cpu</h3><div class="wide"><table>' in html
    images = pngs(html)
    plot = images[f"{SECTION}: Speedup vs devices"]
    picture = Image.open(io.BytesIO(plot))
    picture.verify()
    pixels = np.asarray(Image.open(io.BytesIO(plot)).convert("RGB"), dtype=int)
    assert pixels.shape[1] > 500 and pixels.shape[0] > 300
    assert count(pixels, BLUE) > 100  # torch's line and its points
    # the ideal line: its grey, nearly exact (the same plot without it has ~60 such pixels, from
    # antialiased text, and ~280 with it)
    assert count(pixels, IDEAL, tolerance=3) > 180


def test_html_renders_in_headless_chromium(measured, tmp_path):
    work, _, _, _ = measured
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make browser` installs it (Debian's chromium)"
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars"]
    url = (work / "report.html").resolve().as_uri()
    shot = tmp_path / "report.png"
    # the DOM dump and the screenshot are independent: two browsers at once, a profile each
    runs = {"dom": ["--dump-dom", url],
            "shot": ["--window-size=1100,2600", f"--screenshot={shot}", url]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(runs, pool.map(
            lambda name: subprocess.run([*flags, f"--user-data-dir={tmp_path / name}",
                                         *runs[name]], capture_output=True, text=True,
                                        timeout=180), runs)))
    dom, proc = done["dom"], done["shot"]
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<h3>scaling of torch · eager · cpu</h3>" in dom.stdout
    assert f'alt="{SECTION}: Speedup vs devices"' in dom.stdout
    # what varies is the device count: the summary's speedup, no ratio, no comparison bars (one
    # framework, one precision), and the line of what was not measured does not name it
    summary = dom.stdout.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert "<th>FP32 speedup</th>" in summary and "ratio" not in summary
    assert " compared" not in dom.stdout
    assert "Not measured here: more than one batch size" in dom.stdout
    assert "more than one device count" not in dom.stdout
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert float((pixels.sum(axis=2) < 600).mean()) > 0.02, "the page rendered (almost) blank"
    assert count(pixels, BLUE, tolerance=40) > 200  # the plots drew
    print(f"screenshot for a person to look at: {shot}")
