"""The first report a newcomer sees answers the question it asked (issue 60): reports of real
tiny databases of each shape, read in headless chromium as a person opens them.

- the quick report (`make run`'s shape): one framework in fp32 and amp-bf16, profiled: the
  ratio amp-bf16 / fp32 with its interval and verdict, why in words, no speedup anywhere;
- a two-framework report (the README's first comparison): torch against tensorflow;
- a version report: one case under two labels, left to the history figure.

The scaling report (1 and 2 processes) is tests/report/test_scaling_report.py's database.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import sqlite3
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from scipy import stats as scipy_stats

from conftest import CUT_RESNET50_FLAGS, dlperf, dlperf_main
from dlperf.report.ratios import decimals_of, ratio_text

# ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is what the
# report says of the stored results, whatever the network's depth
TINY = ["--model", "resnet50", "--image-size", "32", *CUT_RESNET50_FLAGS, "--batch-size", "2",
        "--warmup-steps", "1", "--steps", "2", "--repeats", "2", "--device", "cpu"]
PROFILED = ["--profile", "--profile-steps", "1"]
SECTION = "resnet50 (image_size=32 max_blocks=1)"
# the sentences the report wrote about each figure it did not have (issue 60), and the
# speedup over devices it showed where no device count varied
ABSENT = ("no configuration here", "no result here", "no finished case", "no case here was",
          "no framework and batch size", "side by side")
BLUE = (31, 119, 180)  # torch (and, in a report of one framework, fp32): matplotlib's C0
GREEN = (44, 160, 44)  # amp-bf16 in a report of one framework: C2
OLIVE = (188, 189, 34)  # tensorflow: C8, in the bars and in the roofline alike


class Page(HTMLParser):
    """What a reader sees of a report: its tables (headers, rows; not the environment's), its
    figures (title, PNG), the comparisons under the summary, the muted lines and the other
    list items (findings)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self.figures: dict[str, bytes] = {}
        self.answers: list[str] = []
        self.muted: list[str] = []
        self.items: list[str] = []
        self._table: dict[str, Any] | None = None
        self._row: list[str] | None = None
        self._lists: list[str] = []  # the class of each open <ul>
        self._muted = False
        self._text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "img" and found.get("src", "").startswith("data:image/png;base64,"):
            self.figures[found["alt"]] = base64.b64decode(found["src"].split(",", 1)[1])
        elif tag == "table":
            self._table = None if found.get("class") == "env" else {"headers": [], "rows": []}
            if self._table is not None:
                self.tables.append(self._table)
        elif tag == "tr":
            self._row = None
        elif tag == "ul":
            self._lists.append(found.get("class", ""))
        elif tag == "p":
            self._muted = found.get("class") == "muted"
        if tag in ("th", "td", "li", "p"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        text = " ".join("".join(self._text).split())
        if tag == "table":
            self._table = None
        elif tag == "th" and self._table is not None:
            self._table["headers"].append(text)
        elif tag == "td" and self._table is not None:
            if self._row is None:
                self._row = []
                self._table["rows"].append(self._row)
            self._row.append(text)
        elif tag == "ul" and self._lists:
            self._lists.pop()
        elif tag == "li":
            (self.answers if self._lists and self._lists[-1] == "answers"
             else self.items).append(text)
        elif tag == "p" and self._muted:
            self.muted.append(text)
            self._muted = False

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def summary(self) -> dict[str, Any]:
        return self.tables[0]


def stored(db: Path) -> list[dict[str, Any]]:
    """The results as the database holds them, in run order (read with sqlite3, not dlperf)."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT result_json FROM runs WHERE result_json IS NOT NULL ORDER BY id")
    out = [json.loads(text) for (text,) in rows]
    con.close()
    return out


def report(db: Path, work: Path) -> tuple[Page, str]:
    """The HTML report of ``db`` as chromium renders it (its DOM), and the Markdown one."""
    page = work / "report.html"
    dlperf_main("report", "--db", str(db), "-o", str(page), timeout=600, check=True)
    markdown = dlperf_main("report", "--db", str(db), timeout=600, check=True).stdout
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make browser` installs it (Debian's chromium)"
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-quic", "--no-first-run", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={work / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return Page(dom.stdout), markdown


def measure(db: Path, work: Path, *args: str) -> None:
    # checks the report, not timings: no queue on the host's measurement lock
    dlperf("run", *TINY, *args, "--db", str(db), env={"DLPERF_LOCK_DIR": str(work)},
           check=True)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """`make run`'s shape: torch fp32, then amp-bf16, both profiled after their windows. The
    database as it was after fp32 (``alone``) is where the other shapes start: each adds one run
    to a copy of it."""
    work = tmp_path_factory.mktemp("quick")
    db, alone = work / "quick.db", work / "fp32.db"
    measure(db, work, "--framework", "torch", "--precision", "fp32", *PROFILED)
    shutil.copy(db, alone)
    measure(db, work, "--framework", "torch", "--precision", "amp-bf16", *PROFILED)
    return (*report(db, work), stored(db), alone)


def added_to(quick: tuple[Any, ...], work: Path, *args: str) -> tuple[Any, ...]:
    """The report of the quick fixture's fp32 database with one more run: ``args``."""
    db = work / "dlperf.db"
    shutil.copy(quick[-1], db)
    measure(db, work, *args)
    return (*report(db, work), stored(db))


@pytest.fixture(scope="module")
def two_frameworks(quick, tmp_path_factory):
    """The README's first comparison: torch, then tensorflow, both profiled."""
    return added_to(quick, tmp_path_factory.mktemp("frameworks"), "--framework", "tensorflow",
                    *PROFILED)


@pytest.fixture(scope="module")
def versions(quick, tmp_path_factory):
    """The same case again under a label (another build, another commit), not profiled."""
    return added_to(quick, tmp_path_factory.mktemp("versions"), "--framework", "torch",
                    "--label", "v2")


def welch(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float, str]:
    """The ratio b/a of medians, Welch's p and `dlperf compare`'s verdict, from the stored
    repeats (threshold 5 %, alpha 0.05)."""
    x, y = a["throughput"]["repeats"], b["throughput"]["repeats"]
    ratio = float(np.median(y) / np.median(x))
    p = float(scipy_stats.ttest_ind(x, y, equal_var=False).pvalue)
    verdict = ("same" if abs(ratio - 1) < 0.05 or p >= 0.05 else
               "faster" if ratio > 1 else "slower")
    return ratio, p, verdict


def interval(text: str) -> tuple[float, float]:
    low, high = text.split("(", 1)[1].split(")", 1)[0].replace("95 % CI ", "").split(";")[0] \
        .split("–")
    return float(low), float(high)


def pixels(png: bytes, colour: tuple[int, int, int]) -> int:
    data = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    return int((np.abs(data - np.array(colour)) < 12).all(axis=2).sum())


def no_empty_sentences(page: Page, markdown: str) -> None:
    """Nothing said about what is absent but one line of what was not measured."""
    text = " ".join(page.muted + page.items + page.answers)
    for words in ABSENT:
        assert words not in text and words not in markdown, words
    assert sum(line.startswith("Not measured here:") for line in page.muted) <= 1


def reason_of(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The first clause `dlperf explain` gives for b against a, from the stored profiles: the
    category whose time moved most, in ms/step (or that the profiled steps take the same time)."""
    pa, pb = a["profile"], b["profile"]
    if abs(pa["step_s"] / pb["step_s"] - 1) < 0.02:
        return "the profiled steps take the same time"
    deltas = {name: pb["categories"].get(name, 0.0) - pa["categories"].get(name, 0.0)
              for name in set(pa["categories"]) | set(pb["categories"])}
    name = max(deltas, key=lambda n: abs(deltas[n]))
    return (f"{name} took {abs(deltas[name]) * 1e3:.1f} ms/step "
            f"{'more' if deltas[name] > 0 else 'less'}")


def test_the_quick_report_answers_amp_bf16_against_fp32_with_its_interval_and_why(quick):
    page, markdown, (fp32, bf16), _ = quick
    assert fp32["status"] == bf16["status"] == "ok" and fp32["profile"]["categories"]
    summary = page.summary()
    # what varies is the precision: its ratio, and no speedup over devices that do not vary
    assert summary["headers"] == ["framework", "version", "variant", "device",
                                  "FP32 throughput (samples/s)",
                                  "AMP-BF16 throughput (samples/s)",
                                  "amp-bf16 / fp32 (ratio, 95 % CI, verdict)"]
    (row,) = summary["rows"]
    ratio, p, verdict = welch(fp32, bf16)
    cell = row[-1]
    low, high = interval(cell)
    # shown to the decimals its interval's ends need to differ (at least two; two significant
    # digits below 0.1: amp-bf16 on a CPU without bf16), the ratio rounded as its ends are
    decimals = len(cell.split("(", 1)[1].split("–", 1)[0].split(".", 1)[1])
    assert decimals >= max(2, decimals_of(ratio)) and low < high, cell
    shown = ratio_text(ratio, decimals)
    assert cell.startswith(f"{shown}× (") and cell.endswith(f") {verdict}, Welch's t "
                                                              f"p = {p:.2g}"), cell
    assert low <= float(shown) <= high
    assert not any("speedup" in header for table in page.tables for header in table["headers"])
    assert "speedup" not in " ".join(page.muted).lower()
    # the reason in words, under the summary: the ratio, its interval and test, then what the
    # profiles say, with the CPU's bf16 units from the stored flags
    (answer,) = page.answers
    assert answer.startswith(f"amp-bf16 is {shown}× fp32 (95 % CI {ratio_text(low, decimals)}–"
                             f"{ratio_text(high, decimals)}; "
                             f"Welch's t p = {p:.2g}: {verdict}): "), answer
    assert reason_of(fp32, bf16) in answer, answer
    flags = set(bf16["env"]["cpu"]["flags"])
    if reason_of(fp32, bf16) != "the profiled steps take the same time":
        unit = ("has AMX" if "amx_bf16" in flags else "has AVX-512 BF16 but no AMX"
                if "avx512_bf16" in flags else "has no bf16 instructions")
        assert f"this CPU {unit}" in answer, answer
    assert f"- {answer.split(':')[0]}" in markdown.replace("\\", "")
    # figures: the precisions compared once (no frameworks figure of one framework, no second
    # figure of the same bars), and fp32 and amp-bf16 one colour each in every figure
    titles = [title.split(": ", 1)[1] for title in page.figures]
    assert titles.count("Precisions compared: torch (eager)") == 1
    assert not any(t.startswith(("Frameworks", "Throughput vs", "Speedup")) for t in titles)
    for title in ("Precisions compared: torch (eager)", "Roofline"):
        if f"{SECTION}: {title}" in page.figures:
            png = page.figures[f"{SECTION}: {title}"]
            assert pixels(png, BLUE) > 10 and pixels(png, GREEN) > 10, title
    assert ("Not measured here: more than one device count; more than one batch size"
            in " ".join(page.muted))
    no_empty_sentences(page, markdown)


def test_two_frameworks_carry_their_ratio_interval_and_one_colour_each(two_frameworks):
    page, markdown, (torch, tensorflow) = two_frameworks
    assert torch["status"] == tensorflow["status"] == "ok"
    summary = page.summary()
    assert summary["headers"] == ["framework", "version", "variant", "device",
                                  "FP32 throughput (samples/s)",
                                  "FP32 vs torch (ratio, 95 % CI, verdict)"]
    rows = {row[0].split("[")[0]: row for row in summary["rows"]}  # then its footnote marks
    ratio, p, verdict = welch(torch, tensorflow)
    assert rows["torch"][-1] == "baseline"
    cell = rows["tensorflow"][-1]
    assert cell.startswith(f"{ratio:.2f}× (") and cell.endswith(f") {verdict}, Welch's t "
                                                                  f"p = {p:.2g}"), cell
    low, high = interval(cell)
    (answer,) = page.answers
    assert answer.startswith(f"tensorflow is {ratio:.2f}× torch (95 % CI {low:.2f}–{high:.2f}; "
                             f"Welch's t p = {p:.2g}: {verdict}): "), answer
    assert reason_of(torch, tensorflow) in answer, answer
    assert not any("speedup" in header for table in page.tables for header in table["headers"])
    # the frameworks compared, torch blue and tensorflow olive in the bars and the roofline
    titles = [title.split(": ", 1)[1] for title in page.figures]
    assert titles.count("Frameworks compared") == 1 and "Precisions compared" not in titles
    for title in ("Frameworks compared", "Roofline"):
        if f"{SECTION}: {title}" in page.figures:
            png = page.figures[f"{SECTION}: {title}"]
            assert pixels(png, BLUE) > 10 and pixels(png, OLIVE) > 10, title
    no_empty_sentences(page, markdown)


def test_a_version_report_compares_the_label_and_leaves_the_bars_to_the_history(versions):
    page, markdown, (first, labelled) = versions
    summary = page.summary()
    assert summary["headers"] == ["framework", "version", "variant", "device",
                                  "FP32 throughput (samples/s)",
                                  "FP32 vs torch (ratio, 95 % CI, verdict)"]
    rows = {row[2]: row for row in summary["rows"]}
    ratio, p, verdict = welch(first, labelled)
    assert rows["eager"][-1] == "baseline"
    assert rows["eager · label v2"][-1].startswith(f"{ratio:.2f}× (")
    assert rows["eager · label v2"][-1].endswith(f"{verdict}, Welch's t p = {p:.2g}")
    titles = [title.split(": ", 1)[1] for title in page.figures]
    assert "History and versions" in titles
    assert not any("compared" in t for t in titles), titles  # the same case: the history's
    # one side profiled, the other not: no reason claimed
    assert first["profile"]["categories"] and not labelled.get("profile")
    assert page.answers == []
    no_empty_sentences(page, markdown)
