"""`dlperf external`: a real command run repeatedly, its log parsed by both rules, stored."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, load, own_lock
from dlperf.studies.external import parse_time

SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
RATE = ["--metric", r"imgs_per_sec : ([\d.]+)"]
STEPS = ["--step-regex", r"step (\d+)", "--samples-per-step", "32"]
# the host's measurement lock in a directory of this module's own: the fake script measures
# nothing, so its runs neither wait for nor hold up a measuring test beside them (the tests
# marked parallel run under pytest-xdist, beside others)
LOCK = own_lock("test_external")


def external(tmp_path: Path, *flags: str, env: dict[str, str] | None = None,
             name: str = "fake", out: str = "e.json"):
    proc = dlperf("external", "--name", name, "--db", str(tmp_path / "e.db"),
                  "--json", str(tmp_path / out), *flags, "--", sys.executable, SCRIPT,
                  env={**LOCK, **(env or {})}, timeout=300)
    result = load(tmp_path / out) if (tmp_path / out).exists() else None
    return proc, result


@pytest.mark.parallel
def test_rate_lines_give_the_harmonic_mean_after_the_warmup(tmp_path):
    proc, result = external(tmp_path, *RATE, "--repeats", "3")
    assert proc.returncode == 0, proc.stderr
    # 200, 400, 400, 200 after skipping the first line: 4 / (2/200 + 2/400) = 266.67
    expected = 4 / (2 / 200 + 2 / 400)
    assert result["status"] == "ok"
    assert result["throughput"]["repeats"] == pytest.approx([expected] * 3)
    assert result["throughput"]["median"] == pytest.approx(expected)
    # the arithmetic mean of the rates (300) would overstate
    assert result["throughput"]["median"] < 300
    proc, result = external(tmp_path, *RATE, "--repeats", "1", "--warmup", "0")
    assert result["throughput"]["median"] == pytest.approx(5 / (1 / 100 + 2 / 200 + 2 / 400))


@pytest.mark.parallel
def test_step_counter_with_timestamps_in_the_log(tmp_path):
    proc, result = external(tmp_path, *STEPS, "--time-regex", r"^\[([\d.]+)\]",
                            "--warmup", "1", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr
    # steps 1..4: 3 steps x 32 samples over 3 x 0.25 s of printed time = 128 samples/s
    assert result["throughput"]["repeats"] == pytest.approx([128.0, 128.0])
    assert result["timings"]["window_s"] == pytest.approx([0.75, 0.75])


# serial: its figure is the real time between the fake script's lines
def test_step_counter_timed_by_arrival(tmp_path):
    proc, result = external(tmp_path, *STEPS, "--warmup", "1", "--repeats", "1",
                            env={"FAKE_STEP_S": "0.5"})
    assert proc.returncode == 0, proc.stderr
    # 3 steps x 32 samples every 0.5 s of real time: 64/s, less when the machine is busy, more
    # when dlperf read step 1's line late (a stalled scheduler: up to 0.5 s keeps it below 1.6x);
    # the printed timestamps would give 128/s
    (value,) = result["throughput"]["repeats"]
    assert 64 * 0.4 < value < 64 * 1.6
    assert value == pytest.approx(3 * 32 / result["timings"]["window_s"][0])


@pytest.mark.parallel
def test_result_is_stored_like_any_case_and_reported(tmp_path):
    proc, result = external(tmp_path, *RATE, "--repeats", "2", "--framework", "ngc-pytorch",
                            "--model", "resnet50", "--batch-size", "32", name="ngc-rn50")
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(tmp_path / "e.db")
    runs = con.execute("SELECT id, label, case_key, status, result_json FROM runs").fetchall()
    assert len(runs) == 1 and runs[0][1] == "external ngc-rn50 resnet50 bs32"
    assert runs[0][3] == "ok" and runs[0][2] == result["case_key"]
    assert con.execute("SELECT COUNT(*) FROM repeats WHERE run_id=?", (runs[0][0],)
                       ).fetchone()[0] == 2
    case = json.loads(runs[0][4])["case"]
    assert case["external"]["command"] == [sys.executable, SCRIPT]
    assert case["framework"] == "ngc-pytorch" and case["batch_size"] == 32
    assert result["flops"]["per_sample"] > 0  # a catalogue model: FLOPs are known
    assert {"schema", "case", "status", "throughput", "timings", "env"} <= set(result)
    # the stored result read back through dlperf's main in this process (test_fuzz_cli checks
    # that a real process answers alike)
    report = dlperf_main("report", "--db", str(tmp_path / "e.db"), check=True).stdout
    assert "| ngc-pytorch | — | external: ngc-rn50 |" in report  # no framework version: not ours


@pytest.mark.parallel
@pytest.mark.parametrize("fail, status, message", [
    ("crash", "crash", "exited with 3"),
    ("oom", "oom", "out of memory"),
])
def test_a_failing_command_is_a_failed_case(fail, status, message, tmp_path):
    proc, result = external(tmp_path, *RATE, "--repeats", "3", env={"FAKE_FAIL": fail})
    assert proc.returncode == 1
    assert result["status"] == status and message in result["error"]
    assert result["repeats_done"] == 1
    assert "step 1" in result["stderr_tail"]


@pytest.mark.parallel
def test_timeout_and_unreadable_output(tmp_path):
    proc, result = external(tmp_path, *RATE, "--repeats", "2", "--timeout", "2",
                            env={"FAKE_FAIL": "hang"})
    assert proc.returncode == 1 and result["status"] == "timeout"
    proc, result = external(tmp_path, "--metric", r"tokens/s: ([\d.]+)", "--repeats", "2",
                            out="n.json")
    assert proc.returncode == 1 and result["status"] == "crash"
    assert "no line matched --metric" in result["error"]


@pytest.mark.parallel
@pytest.mark.parametrize("flags, message", [
    (["--metric", "imgs_per_sec"], "--metric: the expression needs a group"),
    (["--metric", "([", ], "--metric: not a valid regular expression"),
    ([], "give exactly one way to read the speed"),
    (RATE + STEPS, "give exactly one way to read the speed"),
    (["--step-regex", r"step (\d+)"], "--samples-per-step: required"),
    (RATE + ["--repeats", "0"], "--repeats: 0 must be >= 1"),
])
def test_bad_input_is_one_line_and_exit_2(flags, message, tmp_path):
    # refused at validation: through dlperf's main in this process (test_fuzz_cli checks that a
    # real process answers alike; test_missing_command_is_exit_2 is one)
    proc = dlperf_main("external", "--name", "x", "--db", str(tmp_path / "x.db"), *flags, "--",
                  sys.executable, SCRIPT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parallel
def test_missing_command_is_exit_2(tmp_path):
    proc = dlperf("external", "--name", "x", *RATE, "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2 and "give the command after `--`" in proc.stderr


@pytest.mark.parallel
def test_timestamp_formats():
    assert parse_time("12.5") == 12.5
    assert parse_time("01:02:03.5") == 3723.5
    iso = dt.datetime(2021, 3, 4, 5, 6, 7, 250000).timestamp()
    assert parse_time("2021-03-04 05:06:07.250") == pytest.approx(iso)
    assert parse_time("2021-03-04T05:06:07,250") == pytest.approx(iso)
    with pytest.raises(ValueError):
        parse_time("yesterday")
