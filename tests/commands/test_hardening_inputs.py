"""Inputs from outside (result JSON files, results databases, stored tunes) read by compare, gate,
explain, history, report, results, `sweep --dry-run`, `run --config best` and tune: a malformed
one is one line on stderr naming the field, exit 2, no traceback, and every file it reads stays
byte-identical. A database is recognised as dlperf's before anything writes to it, and a command
that writes writes only after its input is validated and the measurement lock is held. And
`gate` exits 1 only for a slowdown it measured: never for a crash.

The results are real (a `dlperf external` run of the fake training script), rewritten as a
`dlperf run` case where gate must print the command that reproduces it; the databases are real
SQLite files written through the Store, damaged with plain SQL.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import dlperf, dlperf_main, own_lock
from dlperf.host import measurelock
from dlperf.spec import Case
from dlperf.store import Store

# measures nothing (the one external run times a script) and asserts nothing about time
pytestmark = pytest.mark.parallel

LOCK = own_lock("test_hardening_inputs")
SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
RATE = ["--metric", r"imgs_per_sec : ([\d.]+)"]
TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
        "--steps", "2"]
CASE = Case(framework="torch", model="resnet50", batch_size=2, knobs={"image_size": 32},
            warmup_steps=1, steps=2)
SWEEP = ("name: s1\ndefaults: {framework: torch, batch_size: 2, image_size: 32, "
         "warmup_steps: 1, steps: 2, repeats: 1}\nmatrix:\n  model: [resnet50]\n")
MISSING = object()
# a profile block in the shape dlperf.worker.profile records
PROFILE = {"tool": {"name": "torch.profiler", "version": "2"}, "steps": 2, "step_s": 0.5,
           "measured_step_s": 0.4, "overhead": 0.25, "coverage": 0.9,
           "categories": {"convolution": 0.3, "matmul": 0.1, "unattributed": 0.1},
           "counts": {"convolution": 10.0, "matmul": 2.0},
           "top_ops": [{"name": "aten::conv2d", "category": "convolution", "s_per_step": 0.3,
                        "calls_per_step": 10.0}], "unmapped": []}


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def edit(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> None:
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement, params if "?" in statement else ())
    db.close()


def one_line(proc, *words: str) -> str:
    """The refusal: exit 2, one line on stderr holding ``words``, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.args, proc.stdout[-2000:], proc.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def setting(result: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``result`` with the dotted field ``path`` set to ``value`` (MISSING: removed)."""
    out = copy.deepcopy(result)
    *parents, name = path.split(".")
    where = out
    for parent in parents:
        where = where[parent]
    if value is MISSING:
        del where[name]
    else:
        where[name] = value
    return out


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, Any]:
    """A real result, its case rewritten as the `dlperf run` case CASE, with a profile."""
    folder = tmp_path_factory.mktemp("measured")
    out = folder / "e.json"
    dlperf("external", "--name", "fake", *RATE, "--repeats", "3", "--db", str(folder / "e.db"),
           "--json", str(out), "--", sys.executable, SCRIPT, timeout=120, check=True, env=LOCK)
    result = json.loads(out.read_text())
    assert result["status"] == "ok"
    result.update(case=CASE.to_dict(), case_key=CASE.key(), label=CASE.label(),
                  environment={"name": "torch", "framework_version": "2.0", "label": "a"},
                  profile=copy.deepcopy(PROFILE))
    return result


def labelled(result: dict[str, Any], label: str, run_id: int) -> dict[str, Any]:
    out = setting(result, "environment.label", label)
    out["run_id"] = run_id
    return out


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def database(path: Path, results: list[dict[str, Any]], sweep: str | None = None) -> Path:
    """A real results file holding ``results``, in rollback-journal mode (as another tool may
    leave it): a writer's switch to WAL would change its bytes."""
    with Store(path) as store:
        for result in results:
            run = store.start_run(result["case_key"], result["label"], result["case"], {},
                                  sweep=sweep)
            store.finish_run(run, {**result, "run_id": run})
    edit(path, "PRAGMA journal_mode=DELETE")
    return path


@pytest.fixture
def stored(measured, tmp_path) -> Path:
    """Four runs of one experiment: labels a, a, b, b."""
    return database(tmp_path / "r.db", [labelled(measured, label, index + 1)
                                        for index, label in enumerate("aabb")])


# -- 1. a database is recognised before it is written, and written only after validation ---


def test_a_foreign_sqlite_file_is_refused_by_every_command_and_left_as_it_was(tmp_path):
    """Another application's file with no table of its own (a view, its user_version): no
    command converts it into a dlperf database."""
    other = tmp_path / "other.db"
    edit(other, "CREATE VIEW answers AS SELECT 42 AS answer", "PRAGMA user_version=7")
    (tmp_path / "s.yaml").write_text(SWEEP)
    before = fingerprint(other)
    commands = [
        ("external", "--name", "x", *RATE, "--repeats", "1", "--db", str(other), "--",
         sys.executable, SCRIPT),
        ("tune", "--framework", "torch", *TINY, "--search", "nope", "--db", str(other)),
        ("sweep", str(tmp_path / "s.yaml"), "--dry-run", "--db", str(other)),
        ("results", "--db", str(other)),
        ("history", "--db", str(other), "--case", "1"),
        ("gate", "--db", str(other), "--baseline", "label=a", "--candidate", "label=b"),
    ]
    for args in commands:
        one_line(dlperf_main(*args, env=LOCK), f"{other} is not a dlperf database")
    assert fingerprint(other) == before


def test_tune_refuses_a_bad_search_before_it_opens_the_database(stored, tmp_path):
    missing = tmp_path / "missing.db"
    before = fingerprint(stored)
    for db in (missing, stored):
        one_line(dlperf_main("tune", "--framework", "torch", *TINY, "--search", "warp_speed",
                             "--db", str(db), env=LOCK), "--search: 'warp_speed'")
    assert not missing.exists()
    assert fingerprint(stored) == before


@pytest.mark.parametrize("argv", [
    ["tune", "--framework", "torch", *TINY, "--budget", "5m"],
    # accuracy checks --db before the wait (a bad one fails at once), read-only
    ["accuracy", "--framework", "torch", "--model", "resnet50"],
], ids=["tune", "accuracy"])
def test_no_wait_writes_nothing_while_another_measurement_holds_the_lock(stored, tmp_path,
                                                                         monkeypatch, argv):
    """session.py's promise: a command that gives up on the lock has touched no database."""
    lock = own_lock("held")
    monkeypatch.setenv("DLPERF_LOCK_DIR", lock["DLPERF_LOCK_DIR"])
    missing = tmp_path / "missing.db"
    before = fingerprint(stored)
    with measurelock.held(wait=False):
        for db in (stored, missing):
            one_line(dlperf_main(*argv, "--no-wait", "--db", str(db), env=lock),
                     "--no-wait: another measurement is running")
    assert fingerprint(stored) == before
    assert not missing.exists()


def test_sweep_dry_run_reads_the_database_and_never_writes_it(stored, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    before = fingerprint(stored)
    done = dlperf_main("sweep", str(sweep), "--dry-run", "--db", str(stored), env=LOCK)
    assert done.returncode == 0, done.stderr
    assert fingerprint(stored) == before
    with sqlite3.connect(stored) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()
    missing = tmp_path / "missing.db"
    assert dlperf_main("sweep", str(sweep), "--dry-run", "--db", str(missing),
                       env=LOCK).returncode == 0
    assert not missing.exists()


# -- 2. a crash is never a verdict --------------------------------------------------------

GATE_FILES = [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    (("throughput.median", "x"), "throughput.median"),
    (("throughput.ci95", 5), "'throughput.ci95' must be [low, high]"),
    (("throughput.repeats", ["x", 1.0]), "throughput.repeats"),
    (("environment", "x"), "'environment' must be an object"),
    (("environment.name", [1]), "'environment.name' must be text"),
    (("case.model", MISSING), "'case.model' is missing"),
    (("case.knobs", [1]), "'case.knobs' must be an object"),
    (("case", "x"), "'case' must be an object"),
    (("run_id", "x"), "'run_id' must be a whole number"),
]


@pytest.mark.parametrize("bad, says", GATE_FILES, ids=[str(i) for i in range(len(GATE_FILES))])
def test_gate_refuses_a_malformed_result_file_with_exit_2_not_1(measured, tmp_path, bad, says):
    good = write(tmp_path / "good.json", labelled(measured, "a", 1))
    path = tmp_path / "bad.json"
    if isinstance(bad, str):
        path.write_text(bad)
    else:
        write(path, setting(labelled(measured, "b", 2), *bad))
    for flags in (("--baseline", str(good), "--candidate", str(path)),
                  ("--baseline", str(path), "--candidate", str(good))):
        one_line(dlperf_main("gate", "--db", str(tmp_path / "none.db"), *flags), says)


def test_gate_and_compare_exit_2_not_1_on_an_unexpected_error(measured, tmp_path, monkeypatch):
    """The last line of defence: whatever escapes validation is "internal error", exit 2, so
    that CI never reads a crash as "slower"."""
    from dlperf.commands import gate
    from dlperf.report import compare

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug of dlperf's own")

    base = write(tmp_path / "a.json", labelled(measured, "a", 1))
    cand = write(tmp_path / "b.json", labelled(measured, "b", 2))
    monkeypatch.setattr(gate, "stored_verdict", broken)
    monkeypatch.setattr(compare, "compare", broken)
    one_line(dlperf_main("gate", "--baseline", str(base), "--candidate", str(cand),
                         "--db", str(tmp_path / "none.db")),
             "dlperf gate: internal error", "ZeroDivisionError: a bug of dlperf's own")
    one_line(dlperf_main("compare", str(base), str(cand), "--fail-on-regression"),
             "dlperf compare: internal error")


PROFILES = [
    (("profile.tool", "x"), "'profile.tool' must be an object"),
    (("profile.measured_step_s", "x"), "'profile.measured_step_s' must be a finite number"),
    (("profile.measured_step_s", MISSING), "'profile.measured_step_s' is missing"),
    (("profile.measured_step_s", -1.0), "'profile.measured_step_s' must be a finite number >= 0"),
    (("profile.top_ops", [1]), "'profile.top_ops[0]' must be an object"),
    (("profile.top_ops", [{"name": "conv", "category": "convolution"}]),
     "'profile.top_ops[0].s_per_step' is missing"),
    (("profile.top_ops", "x"), "'profile.top_ops' must be a list"),
    (("profile.categories", {"convolution": "x"}), "'profile.categories.convolution'"),
    (("profile.counts", {"convolution": [1]}), "'profile.counts.convolution'"),
    (("profile.unmapped", [{"name": 5}]), "'profile.unmapped[0].name' must be text"),
    (("roofline", {"intensity": "x"}), "'roofline.intensity'"),
]


@pytest.mark.parametrize("bad, says", PROFILES, ids=[str(i) for i in range(len(PROFILES))])
def test_explain_checks_the_profile_block_it_reads(measured, tmp_path, bad, says):
    good = write(tmp_path / "good.json", measured)
    assert dlperf_main("explain", str(good)).returncode == 0
    path = write(tmp_path / "bad.json", setting(measured, *bad))
    one_line(dlperf_main("explain", str(path)), "RESULT", says)
    one_line(dlperf_main("explain", str(good), str(path)), "B:", says)


HISTORY_ROWS = [
    (("throughput.ci95", 5), "'throughput.ci95' must be [low, high]"),
    (("throughput.median", "x"), "'throughput.median' must be a finite number"),
    (("environment", "x"), "'environment' must be an object"),
    (("environment.framework_version", 5), "'environment.framework_version' must be text"),
    (("env", [1]), "'env' must be an object"),
    (("case.framework", MISSING), "'case.framework' is missing"),
]


@pytest.mark.parametrize("bad, says", HISTORY_ROWS,
                         ids=[str(i) for i in range(len(HISTORY_ROWS))])
def test_history_checks_every_field_it_reads(measured, tmp_path, bad, says):
    results = [labelled(measured, label, index + 1) for index, label in enumerate("aab")]
    db = database(tmp_path / "h.db", [*results, setting(results[-1], *bad)])
    before = fingerprint(db)
    for args in (("--case", "1"), ("--framework", "torch", "--model", "resnet50")):
        one_line(dlperf_main("history", "--db", str(db), *args), "run 4", says)
    assert fingerprint(db) == before


# -- 3. every reader, every malformed shape -------------------------------------------------

STORED = {
    "not JSON": ("{oops", "unreadable result_json"),
    "a list": ("[1, 2]", "unreadable result_json"),
    "nested": ("[" * 100000 + "]" * 100000, "nested too deeply"),
    "nested 900": ('{"a":' * 900 + "1" + "}" * 900, "nested too deeply"),
    "no case": ({"case": MISSING}, "'case' is missing"),
    "case a number": ({"case": 5}, "'case' must be an object"),
    "NaN median": ({"throughput.median": float("nan")}, "'throughput.median'"),
    "huge median": ({"throughput.median": 10 ** 400}, "a number too large"),
    "throughput a list": ({"throughput": [1]}, "'throughput' must be an object"),
    "flops text": ({"flops": "x"}, "'flops' must be an object"),
    "warnings a number": ({"warnings": 5}, "'warnings' must be a list of text"),
    "label a number": ({"label": 5}, "'label' must be text"),
    "status a list": ({"status": ["ok"]}, "'status' must be text"),
    "line breaks": (json.dumps("x\x0by\u2028z\n"), "unreadable result_json"),
    "timeline text": ({"timeline": {"median": {"columns": {"t": ["x"]}}}},
                      "'timeline.median.columns' column 't' must hold finite numbers"),
}


def damaged_row(measured: dict[str, Any], change: Any) -> str:
    if isinstance(change, str):
        return change
    result = labelled(measured, "b", 5)
    for path, value in change.items():
        result = setting(result, path, value)
    return json.dumps(result)


@pytest.mark.parametrize("name", list(STORED))
def test_a_damaged_stored_result_is_one_line_for_every_reader(measured, tmp_path, name):
    change, says = STORED[name]
    db = database(tmp_path / "d.db", [labelled(measured, label, index + 1)
                                      for index, label in enumerate("aabbb")])
    edit(db, "UPDATE runs SET result_json=? WHERE id=5", params=(damaged_row(measured, change),))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    before = fingerprint(db)
    readers = [("results", "--db", str(db)),
               ("report", "--db", str(db), "--format", "md", "-o", str(tmp_path / "r.md")),
               ("report", "--db", str(db), "--format", "html", "-o", str(tmp_path / "r.html")),
               ("compare", "1", "5", "--db", str(db)), ("compare", str(db), str(db)),
               ("history", "--db", str(db), "--case", "1"),
               ("gate", "--db", str(db), "--baseline", "label=a", "--candidate", "label=b"),
               ("explain", "--db", str(db), "--case", "5"),
               ("sweep", str(sweep), "--dry-run", "--db", str(db))]
    for args in readers:
        one_line(dlperf_main(*args, env=LOCK), "run 5", says)
    assert fingerprint(db) == before


def test_a_table_missing_a_column_is_one_line_for_every_reader(measured, tmp_path):
    db = database(tmp_path / "c.db", [labelled(measured, label, index + 1)
                                      for index, label in enumerate("ab")])
    edit(db, "ALTER TABLE runs DROP COLUMN status")
    before = fingerprint(db)
    for args in (("results",), ("report", "--format", "md", "-o", str(tmp_path / "r.md")),
                 ("history", "--case", "1"), ("compare", "1", "2"),
                 ("gate", "--baseline", "label=a", "--candidate", "label=b")):
        one_line(dlperf_main(*args, "--db", str(db)), "table runs has no column status")
    assert fingerprint(db) == before


RESULT_FILES = {
    "a number": (b"5", "is a number, not a result object"),
    "null": (b"null", "is null, not a result object"),
    "text": (b'"x"', "is text, not a result object"),
    "not UTF-8": (b'{"label": "\xff\xfe"}', "not UTF-8 text"),
    "huge number": (None, "a number too large"),
    "NaN": (None, "throughput.median nan"),
    "nested 900": (b'{"a":' * 900 + b"1" + b"}" * 900, "nested too deeply"),
}


@pytest.mark.parametrize("name", list(RESULT_FILES))
def test_a_malformed_result_file_is_one_line_for_compare_gate_and_explain(measured, tmp_path,
                                                                          name):
    content, says = RESULT_FILES[name]
    text = json.dumps(labelled(measured, "b", 2))
    if name == "huge number":
        content = text.replace('"median": ', '"median": ' + "9" * 400 + ", \"was\": ").encode()
    elif name == "NaN":
        content = text.replace('"median": ', '"median": NaN, "was": ').encode()
    bad, good = tmp_path / "bad.json", write(tmp_path / "good.json", labelled(measured, "a", 1))
    bad.write_bytes(content)
    none = str(tmp_path / "none.db")
    one_line(dlperf_main("compare", str(good), str(bad), "--db", none), "CANDIDATE", says)
    one_line(dlperf_main("gate", "--baseline", str(good), "--candidate", str(bad), "--db", none),
             "--candidate", says)
    one_line(dlperf_main("explain", str(bad), "--db", none), "RESULT", says)
    assert bad.read_bytes() == content


TUNES = {
    "best is text": ('{"best": "x"}', "'best' must be an object"),
    "settings a number": ('{"best": {"settings": 5}}', "'best.settings' must be an object"),
    "changes_math a number": ('{"best": {"settings": {"threads": 1}, "changes_math": 5}}',
                              "'best.changes_math' must be a list of text"),
    "ab a list": ('{"best": {"settings": {"threads": 1}, "ab": [1]}}',
                  "'best.ab' must be an object"),
    "nested": ("[" * 100000 + "]" * 100000, "nested too deeply"),
    "huge": ('{"best": {"settings": {"threads": ' + "9" * 400 + "}}}", "a number too large"),
}


@pytest.mark.parametrize("name", list(TUNES))
def test_run_config_best_and_report_read_a_damaged_tune_as_one_line(tmp_path, name):
    from tune_study import store_study, tiny_case

    outcome, says = TUNES[name]
    db = tmp_path / "tune.db"
    store_study(db, tiny_case())
    edit(db, "UPDATE tune_studies SET outcome_json=?", params=(outcome,))
    before = fingerprint(db)
    one_line(dlperf_main("run", "--framework", "torch", *TINY, "--repeats", "1", "--config",
                         "best", "--db", str(db), "--no-wait", env=LOCK),
             "tune_studies row 1", says)
    one_line(dlperf_main("report", "--db", str(db), "--format", "md", "-o",
                         str(tmp_path / "r.md")), "tune_studies row 1", says)
    assert fingerprint(db) == before


def test_tune_reads_a_damaged_capacity_result_as_one_line(measured, tmp_path):
    """tune bounds its batch sizes by the stored `dlperf capacity` results of the case."""
    db = database(tmp_path / "c.db", [setting(labelled(measured, "a", 1), "case.model", MISSING)],
                  sweep="capacity")
    before = fingerprint(db)
    one_line(dlperf_main("tune", "--framework", "torch", *TINY, "--no-wait", "--db", str(db),
                         env=LOCK), "run 1", "'case.model' is missing")
    assert fingerprint(db) == before
