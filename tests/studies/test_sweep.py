"""`dlperf sweep`: validation with file:line, the matrix, real runs, SIGKILL and --resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import dlperf, dlperf_main
from dlperf.studies import sweep as sweep_mod
from dlperf.spec import SpecError
from sweep_session import TINY_BERT_KNOBS

ISSUE_EXAMPLE = """\
name: quick-cpu
defaults:            # any case field; flags of `dlperf run` are the field names
  framework: torch
  warmup_steps: 3
  steps: 10
  repeats: 3
matrix:              # the cartesian product of these lists
  model: [resnet50, bert-base]
  precision: [fp32, amp-bf16]
  batch_size: [8, 16]
exclude:             # drop combinations that match all given fields
  - {model: bert-base, batch_size: 16}
include:             # extra single cases
  - {model: resnet50, precision: amp-bf16, batch_size: 32, compile: true}
on_oom: halve        # optional: retry an OOM case at half the batch size, recording both
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parallel
def test_the_issue_example_expands_to_its_cases(tmp_path):
    sweep = sweep_mod.load(write(tmp_path, ISSUE_EXAMPLE))
    assert sweep.name == "quick-cpu" and sweep.on_oom == "halve"
    labels = [c.label() for c in sweep.cases]
    # 2 models x 2 precisions x 2 batch sizes = 8, minus bert-base bs16 (2), plus 1 include
    assert len(labels) == 7
    assert "torch bert-base train bs16 fp32" not in labels
    assert labels[-1] == "torch resnet50 train bs32 amp-bf16 compile"
    assert all(c.repeats == 3 and c.steps == 10 and c.warmup_steps == 3 for c in sweep.cases)
    assert len({c.key() for c in sweep.cases}) == 7


@pytest.mark.parallel
def test_knobs_apply_to_the_models_that_have_them_and_exclude_takes_lists(tmp_path):
    sweep = sweep_mod.load(write(tmp_path, """\
defaults: {framework: torch, batch_size: 2, image_size: 32, seq_len: 16}
matrix:
  model: [resnet50, bert-base]
  seq_len: [16, 32]
  precision: [fp32, amp-bf16, bf16]
exclude:
  - {precision: [amp-bf16, bf16], model: bert-base}
  - {task: infer}
"""))
    resnet = [c for c in sweep.cases if c.model == "resnet50"]
    bert = [c for c in sweep.cases if c.model == "bert-base"]
    # seq_len is not a ResNet knob: its two values give the same ResNet case, merged once
    assert len(resnet) == 3 and all(c.knobs["image_size"] == 32 for c in resnet)
    assert all("seq_len" not in c.knobs for c in resnet)
    assert sorted(c.knobs["seq_len"] for c in bert) == [16, 32]
    assert {c.precision for c in bert} == {"fp32"}
    assert sweep.name == "s"  # the file's stem when the file names none
    assert any("matches no combination" in note for note in sweep.notes)
    assert any("duplicate" in note for note in sweep.notes)


BAD_FILES = [
    ("unknown field", "defaults:\n  framework: torch\n  batchsize: 8\nmatrix:\n  model: [resnet50]\n",
     3, "unknown field 'batchsize' (did you mean 'batch_size'?)"),
    ("value not allowed", "defaults: {framework: torch, batch_size: 2}\nmatrix:\n  model: [resnet50]\n"
     "  precision:\n    - fp32\n    - fp8\n", 6, "precision: 'fp8' is not one of fp32"),
    ("list for a scalar", "defaults:\n  framework: torch\n  steps: [10, 20]\nmatrix:\n"
     "  model: [resnet50]\n  batch_size: [2]\n", 3, "defaults.steps: a list is not allowed here"),
    ("scalar in matrix", "defaults: {framework: torch}\nmatrix:\n  model: [resnet50]\n"
     "  batch_size: 8\n", 4, "matrix.batch_size: expected a list of values"),
    ("bad batch", "defaults: {framework: torch}\ninclude:\n  - model: resnet50\n"
     "    batch_size: 0\n", 4, "batch_size: 0 must be an integer >= 1"),
    ("knob of another model", "defaults: {framework: torch, batch_size: 2}\ninclude:\n"
     "  - {model: resnet50, seq_len: 16}\n", 3, "seq_len: not a knob of model resnet50"),
    ("missing field", "defaults: {framework: torch}\nmatrix:\n  model: [resnet50]\n", 3,
     "batch_size: no value"),
    ("bad on_oom", "on_oom: double\ninclude:\n  - {framework: torch, model: resnet50, "
     "batch_size: 2}\n", 1, "on_oom: 'double' is not one of halve, search, record"),
    ("bad order", "order: shuffled\ninclude:\n  - {framework: torch, model: resnet50, "
     "batch_size: 2}\n", 1, "order: 'shuffled' is not one of cases, interleaved"),
    ("interleaved with a retry", "on_oom: halve\norder: interleaved\ninclude:\n  - {framework: "
     "torch, model: resnet50, batch_size: 2}\n", 2,
     "order: interleaved needs on_oom: record (a retry at another batch size, on_oom: halve"),
    ("unknown section", "defaults: {framework: torch}\nmatirx:\n  model: [resnet50]\n", 2,
     "unknown section 'matirx' (did you mean 'matrix'?)"),
    ("yaml syntax", "defaults: {framework: torch\nmatrix:\n  model: [resnet50]\n", 2,
     "not valid YAML"),
    ("duplicate key", "defaults:\n  framework: torch\n  framework: tensorflow\n", 3,
     "'framework' given twice (first on line 2)"),
    ("not a boolean", "defaults: {framework: torch, batch_size: 2, model: resnet50}\ninclude:\n"
     "  - {compile: maybe}\n", 3, "compile: 'maybe' must be true or false"),
]


@pytest.mark.parallel
@pytest.mark.parametrize("what, text, line, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_sweep_file_is_one_line_with_file_and_line(what, text, line, message, tmp_path):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(SpecError) as error:
        sweep_mod.load(path)
    assert str(error.value).startswith(f"{path}:{line}: "), str(error.value)
    assert message in str(error.value)


@pytest.mark.parallel
def test_bad_sweep_file_exits_2_before_anything_runs(tmp_path):
    path = write(tmp_path, BAD_FILES[1][1], "bad.yaml")
    db = tmp_path / "never.db"
    proc = dlperf("sweep", str(path), "--db", str(db))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:6: precision: 'fp8'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not db.exists()


@pytest.mark.parallel
def test_dry_run_lists_cases_and_an_estimate_and_measures_nothing(tmp_path):
    path = write(tmp_path, ISSUE_EXAMPLE)
    db = tmp_path / "dry.db"
    # measures nothing: through dlperf's main in this process
    proc = dlperf_main("sweep", str(path), "--db", str(db), "--dry-run", check=True)
    assert "7 case(s)" in proc.stdout and "estimated time:" in proc.stdout
    assert "torch resnet50 train bs32 amp-bf16 compile" in proc.stdout
    assert not db.exists()


@pytest.mark.parallel
def test_shipped_sweep_files_are_valid():
    root = Path(__file__).resolve().parents[2] / "sweeps"
    quick = sweep_mod.load(root / "quick-cpu.yaml")
    assert quick.name == "quick-cpu" and len(quick.cases) >= 4
    v1 = sweep_mod.load(root / "dlperf-v1.yaml")
    topologies = {(c.nnodes, c.devices) for c in v1.cases}
    assert topologies == {(1, 1), (1, 8), (2, 8), (4, 8)}
    batches = {(c.model, c.precision): set() for c in v1.cases}
    for case in v1.cases:
        batches[(case.model, case.precision)].add(case.batch_size)
    assert batches == {("resnet50", "fp32"): {128}, ("resnet50", "amp-fp16"): {256},
                       ("bert-base", "fp32"): {32, 96}, ("bert-base", "amp-fp16"): {64, 160}}
    assert all(c.repeats == 7 and c.warmup_steps == 20 and c.steps == 100 for c in v1.cases)
    assert len(v1.cases) == 24 and v1.on_oom == "halve"
    # the cross-framework table: every framework x model x precision x mode, once each
    table = sweep_mod.load(root / "frameworks-cpu.yaml")
    cells = {(c.framework, c.model, c.precision, c.compile) for c in table.cases}
    assert len(table.cases) == len(cells) == 9 * 2 * 2 * 2  # nine training frameworks
    assert {c.batch_size for c in table.cases} == {2} and all(c.repeats == 3 for c in table.cases)
    slow_xla = {c.model: c.timeout_s for c in table.cases
                if c.framework == "tensorflow1" and c.compile and c.precision == "fp32"}
    assert slow_xla == {"resnet50": 120, "bert-base": 120}
    slow_steps = {(c.precision, c.compile): (c.steps, c.warmup_max_steps) for c in table.cases
                  if c.framework == "mindspore" and c.model == "bert-base"}
    assert slow_steps == {(p, m): (4, 10) for p in ("fp32", "amp-bf16") for m in (False, True)}
    assert {(c.steps, c.warmup_max_steps) for c in table.cases
            if (c.framework, c.model) != ("mindspore", "bert-base")} == {(8, 20)}


# -- real runs ---------------------------------------------------------------------------------


def test_a_failed_case_does_not_stop_the_sweep(fixture_db):
    by_label = {r["label"]: r for r in fixture_db.sweep_json}
    assert by_label["torch bert-base train bs2 tf32"]["status"] == "unsupported"
    ok = [r for r in fixture_db.sweep_json if r["status"] == "ok"]
    assert {r["label"] for r in ok} >= {
        "torch bert-base train bs2 fp32", "torch bert-base train bs4 fp32",
        "torch bert-base train bs2 amp-bf16", "torch bert-base train bs4 amp-bf16",
        "torch resnet50 train bs2 fp32"}
    assert fixture_db.sweep_returncode == 1  # some case failed: a script can tell
    assert "tf32" in fixture_db.sweep_stdout and "overhead x" in fixture_db.sweep_stdout
    for result in ok:
        assert len(result["throughput"]["repeats"]) == result["case"]["repeats"]
    assert {r["case"]["repeats"] for r in ok} == {1, 2}  # an include entry overrides defaults
    # the ResNet case kept only its own knobs from the defaults
    resnet = by_label["torch resnet50 train bs2 fp32"]
    assert resnet["case"]["knobs"] == {"image_size": 32, "num_classes": 1000, "max_blocks": 6}


def test_out_of_memory_is_retried_at_half_the_batch(fixture_db):
    # batch 32 does not fit in 3 GiB; 16 did when this was written (8 would do as well)
    *failed, last = fixture_db.oom_results
    assert failed and all(r["status"] == "oom" for r in failed), failed[0]["error"]
    assert [r["case"]["batch_size"] for r in fixture_db.oom_results] == [
        32 // 2**i for i in range(len(fixture_db.oom_results))]
    assert last["status"] == "ok", last["error"]
    assert last["fallback"]["from_batch_size"] == 2 * last["case"]["batch_size"]
    assert "ran out of memory" in last["fallback"]["reason"]
    con = sqlite3.connect(fixture_db.path)
    stored = con.execute("SELECT json_extract(case_json, '$.batch_size'), status FROM runs "
                         "WHERE sweep='oom-halve' ORDER BY id").fetchall()
    assert stored == [(r["case"]["batch_size"], r["status"])  # every attempt recorded
                      for r in fixture_db.oom_results]
    result = json.loads(con.execute("SELECT result_json FROM runs WHERE sweep='oom-halve' AND "
                                    "status='ok'").fetchone()[0])
    assert result["fallback"] == last["fallback"]


KILL_SWEEP = f"""\
name: killme
defaults:
  framework: torch
  model: bert-base
  device: cpu
  warmup_steps: 2
  steps: 3
  repeats: 2
{TINY_BERT_KNOBS}matrix:
  batch_size: [2, 4]
"""


def _db_state(db: Path) -> tuple[list[tuple[int, str]], list[tuple[int, int, float]]]:
    """(runs as (id, case_key), repeats as (run_id, index, throughput)) as stored now."""
    if not db.exists():
        return [], []
    con = sqlite3.connect(db, timeout=30)
    try:
        runs = con.execute("SELECT id, case_key FROM runs ORDER BY id").fetchall()
        repeats = con.execute("SELECT run_id, repeat_index, throughput FROM repeats "
                              "ORDER BY run_id, repeat_index").fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return [], []
    finally:
        con.close()
    return runs, repeats


def _workers(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            if "dlperf.worker" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            pass
    return out


def _start(path: Path, db: Path, *flags: str) -> subprocess.Popen:
    """The sweep, its temporary files beside the database: a SIGKILLed harness cannot remove
    its repeat's directory, and pytest removes this one."""
    return subprocess.Popen([sys.executable, "-m", "dlperf.cli", "sweep", str(path),
                             "--db", str(db), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(db.parent)})


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"sweep ended before the kill: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting to kill the sweep")


def test_sigkill_at_any_moment_then_resume_stores_every_repeat_exactly_once(tmp_path):
    path = write(tmp_path, KILL_SWEEP, "killme.yaml")
    db = tmp_path / "kill.db"
    history = []

    def kill(proc: subprocess.Popen, moment: str) -> None:
        workers = _workers(proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        # the worker in flight dies with the harness (no orphan competing for the CPU)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"orphaned workers after the kill {moment}: {alive}"
        runs, repeats = _db_state(db)
        keys = [(run_id, index) for run_id, index, _ in repeats]
        assert len(keys) == len(set(keys))
        history.append((moment, len(runs), len(repeats), len(workers), repeats))

    # 1: in the first worker, before anything is stored
    proc = _start(path, db)
    _wait_for(lambda: bool(_workers(proc)), proc)
    time.sleep(1.0)
    kill(proc, "during the first repeat")
    assert history[-1][2] == 0
    # 2: the moment a repeat has been committed
    proc = _start(path, db, "--resume")
    _wait_for(lambda: len(_db_state(db)[1]) >= 1, proc)
    kill(proc, "right after a repeat was stored")
    # 3: inside a worker, after a few repeats (the first case done, the second under way: its
    # run already holds a repeat, so --resume must continue that run, not start it again)
    proc = _start(path, db, "--resume")
    _wait_for(lambda: len(_db_state(db)[1]) >= 3 and bool(_workers(proc)), proc)
    time.sleep(0.5)
    kill(proc, "mid-repeat in the second case")
    before = history[-1][4]
    assert len(before) >= 3

    proc = _start(path, db, "--resume")
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    runs, repeats = _db_state(db)
    print("kill-and-resume record:")
    for moment, n_runs, n_repeats, n_workers, _ in history:
        print(f"  killed {moment}: database held {n_runs} run(s), {n_repeats} repeat(s); "
              f"{n_workers} worker(s) in flight died with it")
    print(f"  after --resume: {len(runs)} run(s), {len(repeats)} repeat(s)")
    # one run per case (killed runs were continued, not restarted) ...
    assert sorted(key for _, key in runs) == sorted(
        c.key() for c in sweep_mod.load(path).cases)
    # ... and every (case, repeat) exactly once
    assert [(r, i) for r, i, _ in repeats] == [(run_id, i) for run_id, _ in runs
                                               for i in range(2)]
    # nothing stored before the last kill was redone
    assert set(before) <= set(repeats)
    con = sqlite3.connect(db)
    for (result_json,) in con.execute("SELECT result_json FROM runs"):
        result = json.loads(result_json)
        assert result["status"] == "ok" and result["repeats_done"] == 2
        assert len(result["throughput"]["repeats"]) == 2 and not result["interrupted"]

    # a second plain run refuses to mix sessions; --resume has nothing left to do (neither
    # starts a worker: through dlperf's main in this process; test_fuzz_cli checks both alike)
    again = dlperf_main("sweep", str(path), "--db", str(db))
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = dlperf_main("sweep", str(path), "--db", str(db), "--resume", check=True)
    assert "0 case(s) measured now" in resumed.stdout
    assert "2 taken from the database" in resumed.stdout


def test_force_measures_again_and_keeps_the_old_run(tmp_path):
    path = write(tmp_path, KILL_SWEEP.replace("batch_size: [2, 4]", "batch_size: [2]")
                 .replace("repeats: 2", "repeats: 1"), "force.yaml")
    db = tmp_path / "force.db"
    dlperf("sweep", str(path), "--db", str(db), check=True)
    dlperf("sweep", str(path), "--db", str(db), "--force", check=True)
    runs, repeats = _db_state(db)
    assert len(runs) == 2 and runs[0][1] == runs[1][1] and len(repeats) == 2
    # a resume after --force continues the new session: nothing to do (it and the report start
    # no worker: through dlperf's main in this process)
    proc = dlperf_main("sweep", str(path), "--db", str(db), "--resume", check=True)
    assert "1 taken from the database" in proc.stdout
    report = json.loads(dlperf_main("report", "--db", str(db), "--format", "json",
                                    check=True).stdout)
    assert [r["run_id"] for r in report] == [runs[1][0]]  # the newest measurement is reported


INTERLEAVED_SWEEP = KILL_SWEEP.replace("name: killme", "name: rounds\norder: interleaved") + """\
include:
  - {batch_size: 2, precision: tf32}
"""


def test_interleaved_sweep_measures_in_rounds_and_resumes_between_them(tmp_path):
    """``order: interleaved``: one repeat of each case per round, in the sweep's order; a case
    whose repeat fails (tf32 on CPUs) leaves the rounds while the others go on; a stop after the
    first round (SIGTERM, which dlperf takes as Ctrl-C: a process started in the background, as
    `make test` may be, ignores SIGINT) keeps its repeats and --resume measures only the second
    round."""
    path = write(tmp_path, INTERLEAVED_SWEEP, "rounds.yaml")
    cases = sweep_mod.load(path).cases
    assert sweep_mod.load(path).order == "interleaved" and len(cases) == 3
    db = tmp_path / "rounds.db"
    proc = _start(path, db)
    _wait_for(lambda: len(_db_state(db)[1]) >= 3, proc)  # the first round is stored
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    first = _db_state(db)[1]
    proc = _start(path, db, "--resume", "--json", str(tmp_path / "rounds.json"))
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr  # the tf32 case failed, the sweep went on
    con = sqlite3.connect(db)
    runs = dict(con.execute("SELECT id, case_key FROM runs").fetchall())
    order = [(runs[run_id], index, status) for run_id, index, status in con.execute(
        "SELECT run_id, repeat_index, status FROM repeats ORDER BY rowid")]
    a, b, refused = (case.key() for case in cases)
    # stored as measured: round 1 of every case, then round 2 of those still going
    assert [(key, index) for key, index, _ in order] == [
        (a, 0), (b, 0), (refused, 0), (a, 1), (b, 1)], order
    assert order[2][2] == "unsupported" and {s for _, _, s in order[:2] + order[3:]} == {"ok"}
    assert len(first) >= 3 and set(first) <= set(_db_state(db)[1])  # kept, not redone
    assert "repeat 2/2" in stderr and cases[0].label() in stderr
    results = json.loads((tmp_path / "rounds.json").read_text())
    assert [r["label"] for r in results] == [case.label() for case in cases]  # the sweep's order
    assert [r["status"] for r in results] == ["ok", "ok", "unsupported"]
    assert all(len(r["throughput"]["repeats"]) == 2 and not r["interrupted"]
               for r in results[:2])
    assert len(runs) == 3  # the runs the first invocation began were continued
