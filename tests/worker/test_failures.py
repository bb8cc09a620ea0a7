"""Failure classes and bad input: real workers that really time out, crash and run out of memory."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from conftest import TINY_RESNET, dlperf, dlperf_main, load
from dlperf.launchers import launch, registry
from dlperf import runner
from dlperf.spec import Case


BAD_INPUT = [
    (["--framework", "caffe", "--model", "resnet50"], "argument --framework: invalid choice"),
    (["--framework", "torch", "--model", "vgg99"], "argument --model: invalid choice"),
    (["--framework", "torch", "--model", "resnet50", "--precision", "fp8"],
     "argument --precision: invalid choice"),
    (["--framework", "torch", "--model", "resnet50", "--batch-size", "0"],
     "batch_size: 0 must be an integer >= 1"),
    (["--framework", "torch", "--model", "resnet50", "--batch-size", "many"],
     "argument --batch-size: invalid integer"),
    (["--framework", "torch", "--model", "resnet50", "--seq-len", "16"],
     "seq_len: not a knob of model resnet50"),
    (["--framework", "torch"], "the following arguments are required: --model"),
]


# the first as a real process, the rest through dlperf's main in this process: validation only,
# refused before any worker starts (test_fuzz_cli checks that both answer alike)
@pytest.mark.parallel
@pytest.mark.parametrize("args, message, run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line_and_exit_2(args, message, run, tmp_path):
    proc = run("run", *args, "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parallel
def test_unusable_database_is_exit_2(tmp_path):
    bad = tmp_path / "not.db"
    bad.write_text("this is not sqlite " * 100)
    proc = dlperf("results", "--db", str(bad))
    assert proc.returncode == 2 and "not a usable dlperf database" in proc.stderr


def test_tf32_on_cpu_is_unsupported(tmp_path):
    out = tmp_path / "u.json"
    proc = dlperf("run", *TINY_RESNET, "--repeats", "3", "--precision", "tf32", "--device",
                  "cpu", "--db", str(tmp_path / "u.db"), "--json", str(out))
    assert proc.returncode == 1
    result = load(out)
    assert result["status"] == "unsupported"
    assert result["error"].endswith(": precision tf32 needs a CUDA device; this run is on cpu"), \
        result["error"]
    assert result["repeats_done"] == 1  # a deterministic failure is not repeated


def test_timeout_stops_the_worker_and_is_recorded_with_where_it_was(tmp_path):
    """A repeat past --timeout (its window asks for 60 s) is stopped, not repeated, and its
    stderr tail ends with the worker's threads' Python stacks at that moment."""
    out = tmp_path / "t.json"
    # 15 s: at 5 s a slow host's worker (both cores busy) was still importing torch, over
    # faulthandler's 100 frames deep, so the frames naming the repeat were cut off by it
    proc = dlperf("run", *TINY_RESNET, "--min-duration", "60", "--repeats", "2", "--timeout",
                  "15", "--db", str(tmp_path / "t.db"), "--json", str(out))
    assert proc.returncode == 1
    result = load(out)
    assert result["status"] == "timeout" and "timeout of 15 s" in result["error"]
    assert result["error"].endswith(runner.STACKS_SAID), result["error"]
    where = result["stderr_tail"].split(runner.STACKS_HEADER + "\n")[1]
    assert where.startswith("worker pid "), where
    # the main thread inside the repeat (building, warming up or timing: wherever 5 s found
    # it), the lifeline's thread watching the harness
    assert re.search(r'File ".*dlperf/worker/__main__\.py", line \d+ in repeat', where), where
    assert re.search(r'File ".*dlperf/worker/lifeline\.py", line \d+ in watch', where), where
    con = sqlite3.connect(tmp_path / "t.db")
    assert con.execute("SELECT status FROM repeats").fetchall() == [("timeout",)]
    # its whole output kept beside the results file, and the repeat's line says where
    kept = tmp_path / "t-logs" / f"run{result['run_id']}-{result['case_key']}-r1"
    assert result["logs"] == str(kept.resolve()) and (kept / "worker.log").is_file()
    assert f"    its logs: {kept.resolve()}\n" in proc.stderr  # one line: the path copies whole


def _wrapped(code: str):
    """A launcher running real Python code in place of (or around) the worker."""
    def launcher(case, case_file, out_dir):
        argv = launch.worker_argv(sys.executable, case_file, out_dir)
        return launch.Launch([sys.executable, "-c", code, *argv[1:]])
    return launcher


def test_worker_dying_from_a_signal_is_a_crash_with_its_output():
    case = Case(framework="torch", model="resnet50", batch_size=2, repeats=2,
                knobs={"image_size": 32}, warmup_steps=1, steps=2)
    result = runner.run_case(case, launcher=_wrapped(
        "import os, sys; print('about to abort', flush=True); os.abort()"))
    assert result["status"] == "crash" and "SIGABRT" in result["error"]
    assert "about to abort" in result["stderr_tail"]


def test_out_of_memory_is_classified(tmp_path):
    # the real worker, under a 3 GiB address-space limit, asked for far more than that
    code = ("import resource, runpy, sys; limit = 3 * 2**30; "
            "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
            "sys.argv = ['dlperf.worker'] + sys.argv[1:]; "
            "runpy.run_module('dlperf.worker', run_name='__main__', alter_sys=True)")
    wrapped = _wrapped(code)

    def launcher(case, case_file, out_dir):
        spec = wrapped(case, case_file, out_dir)
        spec.argv = [spec.argv[0], "-c", code, *spec.argv[5:]]  # drop "-m dlperf.worker"
        return spec

    case = Case(framework="torch", model="resnet50", batch_size=512, repeats=2,
                warmup_steps=1, steps=2, knobs={"image_size": 224}, device="cpu")
    result = runner.run_case(case, launcher=launcher)
    assert result["status"] == "oom", result["error"]
    assert result["repeats_done"] == 1


def _default_sigint() -> None:
    # a suite started in the background has SIGINT ignored, and children inherit that
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                          (signal.SIGHUP, 129)],
                         ids=["ctrl-c", "sigterm", "sighup"])
def test_stop_signal_keeps_finished_repeats_and_leaves_no_worker(tmp_path, signum, code):
    db = tmp_path / "i.db"
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli", "run", *TINY_RESNET,
                             "--repeats", "5", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.2)  # the signal follows the first stored repeat closely
        if db.exists():
            con = sqlite3.connect(db)
            try:
                if con.execute("SELECT COUNT(*) FROM repeats").fetchone()[0] >= 1:
                    break
            except sqlite3.OperationalError:
                pass
            finally:
                con.close()
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive
    con = sqlite3.connect(db)
    repeats = con.execute("SELECT status FROM repeats").fetchall()
    assert len(repeats) >= 1 and all(r == ("ok",) for r in repeats)
    result_json = con.execute("SELECT result_json FROM runs").fetchone()[0]
    assert '"interrupted": true' in result_json
    assert "interrupted" in stdout


@pytest.mark.parallel
def test_interrupted_before_the_first_repeat_ended_says_so(tmp_path):
    """Ctrl-C (or SIGTERM) while the first repeat runs: the stored run says it was interrupted,
    not that the case failed on its own ("no repeat finished" read as a crash in a report)."""
    from dlperf.store import Store

    def stopped(case, case_file, out_dir):
        raise KeyboardInterrupt

    case = Case(framework="torch", model="resnet50", batch_size=2, repeats=3, device="cpu")
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(runner.Interrupted):
            runner.run_case(case, store=store, launcher=stopped)
        (stored,) = store.results()
    assert stored["interrupted"] is True and stored["repeats_done"] == 0
    assert stored["error"] == "interrupted before any repeat finished"
    assert "interrupted: 0 of 3 repeats finished" in stored["warnings"]


def test_a_launcher_error_mid_run_still_finishes_the_stored_run(tmp_path):
    """Not only Ctrl-C: any error between repeats stores what was measured, marked as such."""
    from dlperf.store import Store

    calls = []

    def flaky(case, case_file, out_dir):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the launcher lost its way")
        return launch.local(case, case_file, out_dir)

    case = Case(framework="torch", model="resnet50", batch_size=2, repeats=3, warmup_steps=1,
                steps=2, knobs={"image_size": 32, "num_classes": 10}, device="cpu")
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(RuntimeError, match="lost its way"):
            runner.run_case(case, store=store, launcher=flaky)
        (stored,) = store.results()
    assert stored["interrupted"] is True and stored["repeats_done"] == 1
    assert stored["status"] == "ok" and len(stored["throughput"]["repeats"]) == 1
    assert any(w.startswith("stopped by RuntimeError: the launcher lost its way")
               for w in stored["warnings"])


# MXNet 1.9.1's own message for a bad reshape, as `str(MXNetError)` gives it: its C++ frame first
MXNET_MESSAGE = ('Traceback (most recent call last):\n  File "../src/ndarray/ndarray.cc", line 250\n'
                 'NDArray.Reshape: Check failed: shape_.Size() >= shape.Size() (6 vs. 35) : '
                 'target shape size is larger than the current shape')


@pytest.mark.parallel
def test_a_rank_error_says_what_went_wrong_even_when_its_message_is_a_traceback():
    from dlperf.worker.__main__ import one_line

    MXNetError = type("MXNetError", (Exception,), {})
    assert one_line(MXNetError(MXNET_MESSAGE)) == (
        "MXNetError: NDArray.Reshape: Check failed: shape_.Size() >= shape.Size() (6 vs. 35) : "
        "target shape size is larger than the current shape")
    assert one_line(ValueError("bad batch\nmore detail")) == "ValueError: bad batch"
    assert one_line(RuntimeError("")) == "RuntimeError: "
    assert one_line(RuntimeError(MXNET_MESSAGE.splitlines()[0])) == (
        "RuntimeError: Traceback (most recent call last):")


#: what a rank says when another rank went away under it, in words only its framework uses
#: (torch's is gloo's "Connection closed by peer", which every launch knows: launch.LOST_PEER)
PEER_LOST = {
    # JAX 0.10.2's, from a CI run
    "jax": ("JaxRuntimeError: UNKNOWN: Gloo context initialization failed: DEADLINE_EXCEEDED: "
            "GetKeyValue() timed out with key: cpu:gloo/0,2048/1 and duration: 29.99999987s"),
    "paddle": ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:584] TIMEOUT "
               "self_rank = 0 pair_rank = 1"),
}


@pytest.mark.parallel
@pytest.mark.parametrize("framework", sorted(PEER_LOST))
def test_a_rank_that_lost_its_peer_in_its_frameworks_words_is_not_the_cause(framework, tmp_path):
    """Rank 0 only waited for a peer that went away; rank 1's own error is the cause the result
    shows. Which words mean that is the framework's knowledge: its launcher's launch names them
    (Launch.peer_symptoms), beside the socket's and gloo's that every launch has."""
    ranks = [{"rank": 0, "status": "crash", "error": PEER_LOST[framework]},
             {"rank": 1, "status": "crash", "error": "ValueError: the shard has no images"}]
    for rank in ranks:
        (tmp_path / f"rank{rank['rank']}.json").write_text(json.dumps(rank))
    case = Case(framework, "resnet50", 2, devices=2)
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case.to_dict()))
    spec = registry.launcher_for(case, python=sys.executable)(case, case_file, tmp_path)
    outcome = runner.Outcome(returncode=1, timed_out=False, wall_s=1.0, log_tail="", monitor={})
    record = runner.collect(case, 0, tmp_path, outcome, 2, None, None, spec.peer_symptoms)
    assert record["status"] == "crash"
    assert record["error"] == "rank 1: ValueError: the shard has no images"
    # without the launch's own words, the harness alone would have shown rank 0's wait
    assert not runner.is_peer_symptom(ranks[0])
    assert runner.collect(case, 0, tmp_path, outcome, 2)["error"].startswith("rank 0: ")


@pytest.mark.parallel
def test_a_launcher_that_fails_after_every_rank_wrote_its_result_says_so(tmp_path):
    """MindSpore's msrun has exited 1 at the end of a repeat whose ranks had written their
    results: a crash still (the job failed), and the error says the results were there rather
    than "no result"; without them it says "no result"."""
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "status": "ok"}))
    case = Case("mindspore", "resnet50", 2, devices=2)
    last = "RuntimeError: Distributed job exited with exception. Please check logs in directory"
    outcome = runner.Outcome(returncode=1, timed_out=False, wall_s=1.0, log_tail=f"x\n{last}",
                             monitor={})
    record = runner.collect(case, 0, tmp_path, outcome, 2)
    assert record["status"] == "crash" and record["stderr_tail"] == f"x\n{last}"
    assert record["error"] == f"worker exited with code 1 after 2 of 2 ranks' results: {last}"
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").unlink()
    assert runner.collect(case, 0, tmp_path, outcome, 2)["error"] == (
        f"worker exited with code 1 and no result: {last}")


#: msrun's own lines, as its logger writes them, when a process it started ended badly
MSRUN_SAID = ("[ERROR] ME(900:1,MainProcess):2026-12-05-00:51:27.271.886 "
              "[mindspore/parallel/cluster/process_entity/_api.py:363] ")


@pytest.mark.parallel
@pytest.mark.parametrize("lines, error", [
    (["Worker process 812 exit with exception. Error code: 1."],
     "msrun's worker process 812 exited with code 1"),
    (["Worker process 812 exit with exception. Error code: -11."],
     "msrun's worker process 812 died from SIGSEGV"),
    (["Scheduler process 790 exit with exception."],
     "msrun's scheduler process 790 exited with an error (its errors: msrun-log/scheduler.log)"),
    (["Worker process 812 exit with exception. Error code: -6.",
      "Scheduler process 790 exit with exception."],
     "msrun's worker process 812 died from SIGABRT; msrun's scheduler process 790 exited with "
     "an error (its errors: msrun-log/scheduler.log)"),
])
def test_msrun_names_the_process_that_failed_after_the_ranks_results(tmp_path, lines, error):
    """msrun's "Distributed job exited with exception" says only that something failed; its
    lines before it name the process and its exit code or signal, which the error keeps, with
    the ranks' results written before it (its teardown, not the measurement, failed)."""
    case = Case("mindspore", "resnet50", 2, devices=2)
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case.to_dict()))
    spec = registry.launcher_for(case, python=sys.executable)(case, case_file, tmp_path)
    last = "RuntimeError: Distributed job exited with exception. Please check logs in directory"
    (tmp_path / "worker.log").write_text(
        "".join(MSRUN_SAID + line + "\n" for line in lines) + last + "\n")
    outcome = runner.Outcome(returncode=1, timed_out=False, wall_s=1.0, log_tail=last, monitor={})
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "status": "ok"}))
    record = runner.collect(case, 0, tmp_path, outcome, 2, spec.explain, None, spec.peer_symptoms)
    assert (record["status"], record["error"]) == ("crash", f"{error} after 2 of 2 ranks' results")
    (tmp_path / "rank1.json").unlink()
    record = runner.collect(case, 0, tmp_path, outcome, 2, spec.explain, None, spec.peer_symptoms)
    assert record["error"] == f"{error} after 1 of 2 ranks' results"
    (tmp_path / "rank0.json").unlink()
    record = runner.collect(case, 0, tmp_path, outcome, 2, spec.explain, None, spec.peer_symptoms)
    assert record["error"] == error
    (tmp_path / "worker.log").write_text(last + "\n")  # without msrun's lines: its last line
    assert runner.collect(case, 0, tmp_path, outcome, 2, spec.explain)["error"] == (
        f"worker exited with code 1 and no result: {last}")


@pytest.mark.parallel
def test_a_failed_repeat_keeps_its_logs_beside_the_results_file(tmp_path):
    """The launch's output and the launcher's own log folder outlive the repeat's worker folder,
    each file's last MiB, beside the results file; without a results file nothing is kept."""
    from dlperf.store import Store

    def launcher(case, case_file, out_dir):
        code = (f"import pathlib; logs = pathlib.Path({str(out_dir)!r}) / 'its-logs'; "
                "logs.mkdir(); (logs / 'scheduler.log').write_text('x' * 1500000 + 'why'); "
                "(logs / 'node').mkdir(); (logs / 'node' / 'worker_1.log').write_text('w1'); "
                "print('the launcher said so', flush=True); raise SystemExit(3)")
        return launch.Launch([sys.executable, "-c", code], facts={"log_dir": "its-logs"})

    case = Case(framework="torch", model="resnet50", batch_size=2, repeats=2)
    with Store(tmp_path / "r.db") as store:
        result = runner.run_case(case, store=store, launcher=launcher)
        stored = store.repeats(result["run_id"])
    kept = tmp_path / "r-logs" / f"run{result['run_id']}-{case.key()}-r1"
    assert result["status"] == "crash" and result["repeats_done"] == 1
    assert result["logs"] == stored[0]["logs"] == str(kept.resolve())
    assert "the launcher said so" in (kept / "worker.log").read_text()
    scheduler = (kept / "its-logs" / "scheduler.log").read_text()
    assert len(scheduler) == runner.LOG_KEEP_BYTES and scheduler.endswith("why")
    assert (kept / "its-logs" / "node" / "worker_1.log").read_text() == "w1"
    # without a results file: nothing kept, and the result says none
    assert runner.run_case(case, launcher=launcher)["logs"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-logs", "r.db"]
