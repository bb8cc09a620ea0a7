"""`dlperf report` shows capacity searches: a real tiny `dlperf capacity --table` over Wide &
Deep's vocab_size, and a bisecting search that ran out of memory and crashed, stored through the
store's own API from copies of the real probes (a real one would take minutes)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock
from dlperf.report import capacity
from dlperf.store import Store

LOCK = own_lock("test_report_capacity")
TINY_WIDE_DEEP = ["--framework", "torch", "--model", "wide-deep", "--batch-size", "8",
                  "--knob", "hidden_units=1", "--knob", "hidden_size=16",
                  "--knob", "deep_embedding_size=4"]
LABEL = "fw$x$ <script>alert(1)</script> [bold]"
# the stored search in the order a bisection probes: x2 to the first oom, then midpoints; a crash
# stops it (values, statuses)
BISECTION = [(1000, "ok"), (2000, "ok"), (4000, "ok"), (8000, "ok"), (16000, "ok"),
             (32000, "oom"), (24000, "ok"), (28000, "oom"), (26000, "crash")]
LIMIT = 3 * 2**29  # 1.5 GiB


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("capacity-report")
    db, answer = out / "c.db", out / "answer.json"
    proc = dlperf("capacity", *TINY_WIDE_DEEP, "--param", "vocab_size", "--from", "1K",
                  "--to", "2K", "--table", "--db", str(db), "--json", str(answer),
                  timeout=300, env=LOCK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Store(db) as store:
        real = store.results()
        assert [r["status"] for r in real] == ["ok", "ok"]
        for value, status in BISECTION:
            result = copy.deepcopy(real[0])
            case = result["case"]
            case["framework"] = LABEL
            case["knobs"]["vocab_size"] = value
            result.update(status=status, label=f"{LABEL} {value}", case_key=f"k{value}")
            result["launch"] = {**(result.get("launch") or {}), "memory_limit_bytes": LIMIT,
                                "capacity": {"search": "bisection", "param": "vocab_size"}}
            if status != "ok":
                result.update(error=f"{status} at {value} <b>$y$</b>", throughput=None,
                              iteration_ms=None)
                result["memory"]["peak_device_bytes"] = None
            run = store.start_run(f"k{value}", result["label"], case, {}, sweep="capacity")
            result["run_id"] = run
            store.finish_run(run, result)
        other = copy.deepcopy(real[1])  # one run of another sweep
        run = store.start_run("nightly", other["label"], other["case"], {}, sweep="nightly")
        other["run_id"] = run
        store.finish_run(run, other)
    return db, json.loads(answer.read_text())


def report(db: Path, fmt: str, *args: str) -> str:
    """`dlperf report` through dlperf's main in this process: what is checked is the rendering,
    not a fresh interpreter (each would pay its imports again; test_capacity.py renders a real
    bisection the same way)."""
    proc = dlperf_main("report", "--db", str(db), "--format", fmt, *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def md_rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")]
            for line in section.splitlines() if re.match(r"\| \d", line)]


def test_markdown_lists_every_probe_ascending_with_the_answer(stored):
    db, answer = stored
    text = report(db, "md")
    section = text.split("## Capacity\n")[1].split("\n## ")[0]
    real, bisect = section.split("\n### ")[1:]
    assert real.startswith("torch wide-deep: vocab_size\n")
    assert "batch size 8" in real and "hidden_size=16" in real and "memory limit none" in real
    assert ", on cpu," in real  # the device the probes ran on
    rows = md_rows(real)
    assert [r[:2] for r in rows] == [["1000", "ok"], ["2000", "ok"]]
    for row, probe in zip(rows, answer["probes"]):  # the numbers `dlperf capacity` printed
        assert row[2] == f"{probe['throughput']:,.1f}"
        assert row[3] == f"{probe['latency_s'] * 1000:,.2f}"
    assert "**Answer:** largest vocab_size: at least 2000 (no probe ran out of memory)" in real
    # the bisection, ascending, its failures footnoted with their (escaped) reasons
    title = ("fw\\$x\\$ &lt;script&gt;alert(1)&lt;/script&gt; \\[bold\\] wide-deep: vocab_size "
             "under 1.5 GiB")  # HTML and markdown's own syntax escaped: the label as written
    assert bisect.startswith(title + "\n")
    rows = md_rows(bisect)
    assert [int(r[0]) for r in rows] == sorted(v for v, _ in BISECTION)
    assert [r[1].split(" [")[0] for r in rows] == [s for _, s in sorted(BISECTION)]
    assert all(r[2] == "—" and r[3] == "—" for r in rows if not r[1].startswith("ok"))
    crash = re.search(r"crash \[(\d+)\]", bisect).group(1)
    assert f"[{crash}]: capacity {title.split(' wide-deep')[0]} wide-deep vocab_size=26000: " \
           f"crash — crash at 26000 &lt;b&gt;\\$y\\$&lt;/b&gt;" in text
    assert ("**Answer:** largest vocab_size that fits: 24000 (28000 runs out of memory; "
            "resolution 4000); stopped by probe 26000: crash") in bisect
    assert "<script>" not in text and "<b>" not in text


def test_html_has_the_tables_and_one_plot_per_search(stored):
    db, _ = stored
    text = report(db, "html")
    assert '<li><a href="#capacity">Capacity</a></li>' in text
    section = text.split('<h2 id="capacity">')[1].split("</section>")[0]
    blocks = section.split("<h3>")[1:]
    assert len(blocks) == 2 and section.count("<svg") == 2 and section.count("</svg>") == 2
    real, bisect = blocks
    values = [int(v) for v in re.findall(r'<tr><td class="r">(\d+)</td>', bisect)]
    assert values == sorted(v for v, _ in BISECTION)
    assert "<strong>Answer:</strong> largest vocab_size that fits: 24000" in bisect
    assert re.findall(r'<tr><td class="r">(\d+)</td><td class="l">(\w+)', real) == [
        ("1000", "ok"), ("2000", "ok")]
    # the figures: text is SVG text; the bisection spans 32x, so its x axis is logarithmic
    # (decades labelled 1K, 10K) and its failed probes are marked with their status
    words = re.findall(r"<text[^>]*>([^<]*)</text>", bisect.split("<svg")[1])
    assert {"1K", "10K", "oom", "crash", "vocab_size", "latency / iteration (ms)"} <= set(words)
    assert words.count("oom") == 4 and words.count("crash") == 2  # each mark on both panels
    real_words = re.findall(r"<text[^>]*>([^<]*)</text>", real.split("<svg")[1])
    assert "10K" not in real_words and "1.2K" in real_words  # 2x: a linear axis
    # a label holding mathtext, HTML and rich markup stays text everywhere
    assert "<script" not in text
    escaped = "fw$x$ &lt;script&gt;alert(1)&lt;/script&gt; [bold] wide-deep: vocab_size"
    assert f"<h3>{escaped} under 1.5 GiB</h3>" in text
    assert any(w.startswith(escaped) for w in words)
    assert len(section) < 80_000  # two small inline figures, not megabytes


def test_a_report_of_another_sweep_leaves_the_searches_out(stored):
    db, _ = stored
    assert "## Capacity" in report(db, "md", "--sweep", "capacity")
    nightly = report(db, "md", "--sweep", "nightly")
    assert "## wide-deep" in nightly and "Capacity" not in nightly
    assert 'id="capacity"' not in report(db, "html", "--sweep", "nightly")


def _probe(vocab: int, batch: int = 8, limit: int | None = None, status: str = "ok") -> dict:
    return {"status": status, "case": {"framework": "torch", "model": "wide-deep",
                                       "batch_size": batch, "precision": "fp32",
                                       "knobs": {"vocab_size": vocab, "hidden_size": 16}},
            "launch": {"memory_limit_bytes": limit} if limit else None}


def test_stored_probes_name_their_search_and_parameter(stored):
    db, answer = stored
    with Store(db) as store:
        tags = [r["launch"]["capacity"] for r in store.results() if r["status"] == "ok"
                and r["case"]["framework"] == "torch" and r.get("launch", {}).get("capacity")]
    # the two real probes (and the fixture's copy of one under another sweep) share one tag
    assert len(tags) == 3 and tags[0] == tags[1] == tags[2] and tags[0]["param"] == "vocab_size"


@pytest.mark.parallel
def test_tagged_probes_group_by_their_search_even_interleaved():
    def tagged(vocab: int, search: str, param: str = "vocab_size") -> dict:
        probe = _probe(vocab)
        probe["launch"] = {"capacity": {"search": search, "param": param}}
        return probe
    searches = capacity.group([tagged(1000, "a"), tagged(1000, "b"), tagged(2000, "a"),
                               tagged(8, "c", "batch_size"), _probe(500)])
    assert [(s.param, [p.value for p in s.probes]) for s in searches] == [
        ("vocab_size", [1000, 2000]), ("vocab_size", [1000]), ("batch_size", [8]),
        (None, [None])]
    assert searches[1].answer() == "largest vocab_size: at least 1000 (no probe ran out of memory)"


@pytest.mark.parallel
def test_probes_group_into_the_searches_that_stored_them():
    searches = capacity.group([
        _probe(1000), _probe(2000), _probe(4000),  # one search over vocab_size
        _probe(1000), _probe(3000),  # a value seen again: a new search
        _probe(3000, limit=2**30), _probe(6000, limit=2**30),  # another memory limit
        _probe(6000, batch=16, limit=2**30),  # batch size: a different parameter
        _probe(6000, batch=32, limit=2**30), _probe(6000, batch=24, limit=2**30, status="oom"),
        _probe(500)])  # alone: its parameter is unknown
    assert [(s.param, [p.value for p in s.probes]) for s in searches] == [
        ("vocab_size", [1000, 2000, 4000]), ("vocab_size", [1000, 3000]),
        ("vocab_size", [3000, 6000]), ("batch_size", [16, 24, 32]), (None, [None])]
    assert searches[3].answer() == ("largest batch_size that fits: 16 (24 runs out of memory; "
                                    "resolution 8)")
    assert searches[4].answer() == "a single probe: ok (the parameter searched is not stored)"
    assert capacity.figure(searches[4]) is None
