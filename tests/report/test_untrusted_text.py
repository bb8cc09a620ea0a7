"""Stored text is data: markup, markdown, HTML, mathtext and formulas in it reach every output
as written, and never crash a command (a real failed and a real measured `dlperf external`).
The text outputs are read through dlperf's main in this process (conftest.dlperf_main, ~1 CPU-s
of a fresh interpreter's imports saved a call; test_fuzz_cli checks that real processes answer
alike); the HTML report is a real process, whose stderr would show matplotlib's complaints."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
ERROR = "see [/opt/data] for details"
NAME = "=HYPERLINK(x) <script>alert(1)</script> [bold]"
LOCK = own_lock("test_untrusted_text")
FAILING = ["--", sys.executable, "-c",
           f"import sys; print({ERROR!r}, file=sys.stderr); sys.exit(3)"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """One failed run whose error holds rich markup, one ok run whose names hold mathtext."""
    db = tmp_path_factory.mktemp("untrusted") / "u.db"
    failed = dlperf("external", "--name", NAME, "--metric", r"r: ([\d.]+)", "--repeats", "1",
                    "--db", str(db), *FAILING, timeout=120, env=LOCK)
    assert failed.returncode == 1, failed.stderr
    assert ERROR in failed.stderr + failed.stdout
    ok = dlperf("external", "--name", "ext $\\frac{1}{$ name", "--framework", "fw$\\x$",
                "--model", "resnet50", "--batch-size", "32", "--metric",
                r"imgs_per_sec : ([\d.]+)", "--repeats", "1", "--db", str(db), "--", sys.executable,
                SCRIPT, timeout=120, env=LOCK)
    assert ok.returncode == 0, ok.stderr
    return db


def test_results_prints_markup_in_an_error_as_text(stored):
    proc = dlperf_main("results", "--db", str(stored))
    assert proc.returncode == 0, proc.stderr
    assert ERROR in proc.stdout and "Traceback" not in proc.stderr


def test_compare_prints_markup_in_an_error_as_text(stored):
    proc = dlperf_main("compare", str(stored), str(stored))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[bold]" in proc.stdout.replace("\n", "")


def test_markdown_escapes_html_and_keeps_the_error(stored):
    proc = dlperf_main("report", "--db", str(stored), "--format", "md", "--title", "<b>t</b>")
    assert proc.returncode == 0, proc.stderr
    assert "<script>" not in proc.stdout and "<b>" not in proc.stdout
    assert "&lt;script&gt;" in proc.stdout and "# &lt;b&gt;t&lt;/b&gt;" in proc.stdout
    # markdown's own syntax is escaped too: no link, footnote reference or GitHub math
    assert "see \\[/opt/data\\] for details" in proc.stdout and ERROR not in proc.stdout
    assert "ext \\$\\\\frac{1}{\\$ name" in proc.stdout and "$\\frac" not in proc.stdout


def test_html_report_with_mathtext_in_labels(stored, tmp_path):
    out = tmp_path / "r.html"
    proc = dlperf("report", "--db", str(stored), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "ParseFatalException" not in proc.stderr
    assert "data:image/png;base64," in out.read_text()


def test_csv_defuses_formulas_and_keeps_numbers(stored):
    proc = dlperf_main("report", "--db", str(stored), "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    labels = {row["status"]: row for row in rows}
    assert labels["crash"]["label"] == "external " + NAME  # not at the start: as it is
    assert labels["crash"]["source"] == "'" + NAME
    assert float(labels["ok"]["throughput_median"]) > 0  # a number, no quote
    assert not labels["ok"]["throughput_median"].startswith("'")


def test_markdown_keeps_a_plain_ampersand_and_defuses_a_character_reference():
    """A study named "Wide & Deep" reads as written in the .md file; only an ampersand that would
    start a character reference (``&lt;``) is written ``&amp;``, so it still renders as text."""
    from dlperf.report.markdown import _escape

    assert _escape("Wide & Deep") == "Wide & Deep"
    assert _escape("&lt;b&gt; & &#60;") == "&amp;lt;b&amp;gt; & &amp;#60;"
    assert _escape("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
