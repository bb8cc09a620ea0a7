"""dlperf capacity: grow x2 to the first out-of-memory probe, bisect, under a real memory limit."""

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from conftest import dlperf, dlperf_main
from dlperf.studies import capacity
from dlperf.errors import UsageError

TINY_RESNET = ["--framework", "torch", "--model", "resnet50", "--image-size", "32"]
TINY_BERT = ["--framework", "torch", "--model", "bert-base", "--batch-size", "1",
             "--knob", "layers=1", "--knob", "hidden=32", "--knob", "heads=2",
             "--knob", "intermediate=64", "--knob", "vocab_size=500"]
# a narrow Wide & Deep: its memory is the two embedding tables (and their Adam moments), so the
# vocabulary bounds it and each probe's step stays a few milliseconds, whatever its size. One
# thread a worker: each thread's stack and arena count in the data segment (~17 MB; 32 threads
# against 1: +536 MB), so with a thread a core the boundary moved with the machine's cores
TINY_WIDE_DEEP = ["--framework", "torch", "--model", "wide-deep", "--batch-size", "64",
                  "--knob", "hidden_units=1", "--knob", "hidden_size=16",
                  "--threads-per-process", "1"]
# A row costs ~205 bytes of the data segment (its 17 floats and their two Adam moments) over a
# one-thread torch worker's own ~0.3 GB: under 700 MiB the boundary is between 2.25M rows (ok)
# and 2.5M (oom) in a worker alone (in this test 2.25M ran and 2.625M did not). Each probe is
# a fresh torch worker whose import is most of its ~2.5 CPU-s; the table's rows add the rest:
# under 1200 MiB (boundary ~4.8M rows) a probe took ~0.5 CPU-s more, ~3 CPU-s over the test's
# six (measured on a loaded 2-core AMD EPYC, 2026-12-07).
LIMIT = "700MiB"
# growth 1.5M (ok), 3M (oom) reaches the boundary in two probes; a resolution of 0.5M bisects
# 1.5M..3M in two (2.25M, then 2.625M or 1.875M), and the direct check one resolution either
# side of the answer, ~100 MB of the limit, is two probes (series: below, then above, < 2x)
START = 1_500_000
RESOLUTION = 500_000
SEARCH_LIMIT = int(1.15 * 2**30)  # the on_oom: search sweep's address-space limit


def run_capacity(tmp_path, *args,
                 run: Callable[..., subprocess.CompletedProcess[str]] = dlperf):
    """`dlperf capacity ARGS` into its own database; the process and the JSON result (or None).
    ``run``: a fresh process, or dlperf_main (this process: its probes are still fresh workers,
    under the limit; the harness's own interpreter saves ~1 s of CPU and checks nothing that
    test_fuzz_cli does not)."""
    out = tmp_path / "capacity.json"
    proc = run("capacity", *args, "--db", str(tmp_path / "c.db"), "--json", str(out),
               timeout=1200)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.parallel
def test_sizes_parse_with_their_units():
    assert capacity.parse_count("3.2M", "--from") == 3_200_000
    assert capacity.parse_count("819M", "--to") == 819_000_000
    assert capacity.parse_count("48", "--from") == 48
    assert capacity.parse_bytes("8GiB") == 8 * 2**30 == capacity.parse_bytes("8G")
    assert capacity.parse_bytes("512MiB") == 512 * 2**20
    for bad in ("nan", "-3", "1.5", "3.2MiB", ""):
        with pytest.raises(UsageError, match="--from"):
            capacity.parse_count(bad, "--from")
    with pytest.raises(UsageError, match="--memory-limit"):
        capacity.parse_bytes("1MiB")
    assert capacity.series(3, 20) == [3, 6, 12, 20]


def test_search_finds_the_boundary_a_direct_check_confirms(tmp_path):
    proc, answer = run_capacity(tmp_path, *TINY_WIDE_DEEP, "--param", "vocab_size", "--from",
                                str(START), "--resolution", str(RESOLUTION), "--memory-limit",
                                LIMIT, run=dlperf_main)
    assert proc.returncode == 0, proc.stderr[-2000:]
    low, high = answer["largest"], answer["smallest_failing"]
    assert low is not None and high is not None and 0 < high - low <= RESOLUTION
    probes = [(p["value"], p["status"]) for p in answer["probes"]]
    # growth: 3M, 6M, ... each ok, up to the first out-of-memory probe
    first_oom = next(i for i, (_, status) in enumerate(probes) if status == "oom")
    assert [v for v, _ in probes[:first_oom + 1]] == [START * 2**i for i in range(first_oom + 1)]
    assert all(status == "ok" for _, status in probes[:first_oom])
    # bisection: every later probe is the midpoint of the bounds known before it
    lo, hi = probes[first_oom - 1][0], probes[first_oom][0]
    for value, status in probes[first_oom + 1:]:
        assert value == (lo + hi) // 2 and status in ("ok", "oom")
        lo, hi = (value, hi) if status == "ok" else (lo, value)
    assert (lo, hi) == (low, high)
    assert "largest vocab_size that fits: %d" % low in proc.stdout
    # the real bisection rendered: the Markdown and HTML reports state the boundary it found
    # and list every probe it ran
    answer_line = "largest vocab_size that fits: %d (%d runs out of memory; resolution" % (
        low, high)
    for fmt, marker in (("md", "**Answer:** "), ("html", "<strong>Answer:</strong> ")):
        # through dlperf's main in this process: the rendering is what is checked, not a fresh
        # interpreter (test_fuzz_cli checks that the two answer the same)
        rendered = dlperf_main("report", "--db", str(tmp_path / "c.db"), "--format", fmt,
                               timeout=300)
        assert rendered.returncode == 0, rendered.stderr[-2000:]
        assert marker + answer_line in rendered.stdout, rendered.stdout[-3000:]
        for value, status in probes:
            assert (f"| {value} | {status}" if fmt == "md" else
                    f'<tr><td class="r">{value}</td><td class="l">{status}') in rendered.stdout
    # sizes one resolution either side, probed again directly in fresh workers, agree (the
    # boundary itself moves a little from process to process: allocators differ)
    below, above = low - RESOLUTION, high + RESOLUTION
    proc, table = run_capacity(tmp_path, *TINY_WIDE_DEEP, "--param", "vocab_size", "--from",
                               str(below), "--to", str(above), "--table", "--memory-limit",
                               LIMIT, run=dlperf_main)
    direct = [(p["value"], p["status"]) for p in table["probes"]]
    assert (direct[0], direct[-1]) == ((below, "ok"), (above, "oom")), direct


def test_a_failure_other_than_memory_stops_the_search_instead_of_bounding_it(tmp_path):
    # each size doubles the step time; a short --timeout ends the growth with `timeout` (the
    # sizes before it, if any on this machine, ran ok). From batch 256 (~1 s a step on a 2-core
    # CPU, 6 steps, after ~2.5 CPU-s of import and build) the first probe is the one that times
    # out: one probe of 2 s, not an ok probe at 32 before it (growth through ok probes: the
    # boundary search above). The worker computes until it is stopped: under `make test` (a
    # core of its own) each second of --timeout is a CPU-second. Through dlperf's main in this
    # process, as the search above: the probe is still a fresh worker
    proc, answer = run_capacity(tmp_path, *TINY_RESNET, "--param", "batch_size", "--from", "256",
                                "--timeout", "2", run=dlperf_main)
    assert proc.returncode == 1, proc.stderr[-2000:]
    statuses = [p["status"] for p in answer["probes"]]
    assert statuses[-1] == "timeout" and set(statuses[:-1]) <= {"ok"}
    assert answer["stopped"].startswith("probe %d: timeout" % answer["probes"][-1]["value"])
    assert "largest" not in answer and "search stopped" in proc.stdout


def test_the_models_own_range_ends_the_search_with_its_reason(tmp_path):
    # BERT's position table has 512 rows: seq_len 1024 is refused by the model, not a memory
    # bound (one probe that runs, at the table's own size, then the refusal); through dlperf's
    # main in this process, as the search above: the probe is still a fresh worker
    proc, answer = run_capacity(tmp_path, *TINY_BERT, "--param", "seq_len", "--from", "512",
                                run=dlperf_main)
    assert proc.returncode == 1
    assert [(p["value"], p["status"]) for p in answer["probes"]] == [(512, "ok")]
    assert answer["stopped"] == ("probe 1024: refused: knobs: seq_len (1024) exceeds "
                                 "max_positions (512)")
    assert "Traceback" not in proc.stderr


@pytest.mark.parallel
@pytest.mark.parametrize("args, message", [
    (["--param", "depth"], "--param: 'depth' is not an integer parameter of resnet50"),
    (["--param", "batch_size", "--from", "0"], "--from: '0' must be a positive integer"),
    (["--param", "batch_size", "--from", "8", "--to", "4"], "--to: 4 must be at least --from"),
    (["--param", "batch_size", "--table"], "--to: needed with --table"),
    (["--param", "batch_size", "--memory-limit", "lots"], "--memory-limit: 'lots' must be"),
])
def test_bad_questions_are_one_line_and_exit_2(tmp_path, args, message):
    # refused at validation: the first as a real process, the rest through dlperf's main in
    # this process (test_fuzz_cli checks both answer alike)
    run = dlperf if args[1] == "depth" else dlperf_main
    proc = run("capacity", *TINY_RESNET, *args, "--db", str(tmp_path / "c.db"), "--json",
               str(tmp_path / "capacity.json"), timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "c.db").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_a_sweep_with_on_oom_search_measures_the_largest_batch_that_fits(tmp_path,
                                                                        monkeypatch):
    """The sweep library under a 1.15 GiB address-space launcher (the session's oom-halve
    launcher, its limit lowered): a 25k-vocabulary BERT runs out of memory at batch 8 of 256
    tokens; `on_oom: search` halves to a size that fits, bisects between it and 8 with short
    probes, and measures the case at the largest.

    The session's oom-halve sweep (100k vocabulary, 32 x 64 tokens, 3 GiB) in 8 x 256 tokens:
    the bisection from 4 to 8 takes two probes where 16 to 32 took four. The [tokens, vocabulary]
    logits are nearly all of a step's bytes and time, ~80 MiB of address space a sample at 25k.
    One thread a worker (`threads: 1`): each thread of a torch worker adds ~49 MB of address
    space (its stack and malloc arena; VmSize with 32 threads against 1), so without it the
    boundary moved with the machine's cores (50k under 1.8 GiB: batch 4, 1.45 GB with two
    threads, stops fitting from ~12) and by ~120 MB between a `make test` worker pinned to a
    core and an unpinned one on two cores. With it, a worker as the harness starts it (with its
    lifeline thread) peaks at 1063, 1139, 1218, 1294 and 1369 MiB at batch 4 to 8 (VmPeak, two
    runs each within 4 MiB), so 1.15 GiB (1178 MiB) keeps 5 and 6 ~40 MiB either side of it, 4
    115 MiB inside and 8 190 MiB outside. 50k under 1.8 GiB took ~1.5 CPU-s more a run (of
    ~3.5 at 25k; five runs: 8, 4, 6, 5 and the measurement at 5).
    The probes' window is the measurement's, one warmup step and two timed (the product's is
    two and three): the second step is the first whose forward and backward run beside Adam's
    moments, and no later one needs more; the softmax's seconds are most of a probe's."""
    from sweep_session import OOM_SWEEP, limited_launcher_for

    from dlperf.store import Store
    from dlperf.studies.sweep import load as load_sweep
    from dlperf.studies.sweep_runner import SweepRun

    limited_launcher = limited_launcher_for(SEARCH_LIMIT)
    monkeypatch.setattr(capacity, "PROBE_WARMUP", 1)
    monkeypatch.setattr(capacity, "PROBE_STEPS", 2)

    sweep_file = tmp_path / "search.yaml"
    text = (OOM_SWEEP.replace("on_oom: halve", "on_oom: search")
            .replace("name: oom-halve", "name: oom-search"))
    for old, new in (("seq_len: 64", "seq_len: 256"), ("batch_size: [32]", "batch_size: [8]"),
                     ("vocab_size: 100000", "vocab_size: 25000"),
                     ("  repeats: 1\n", "  repeats: 1\n  threads: 1\n")):
        assert old in text
        text = text.replace(old, new)
    sweep_file.write_text(text)
    with Store(tmp_path / "s.db") as store:
        outcome = SweepRun(load_sweep(sweep_file), store, launcher=limited_launcher).run()
    first, *stepped, final = outcome.results
    assert first["status"] == "oom" and first["case"]["batch_size"] == 8
    assert first["case"]["knobs"]["seq_len"] == 256
    search = final["fallback"]["search"]
    probes = search["probes"]
    assert probes[0] == [4, "ok"]  # halved first, as `halve` would, but it does not stop there
    low, high = 4, 8
    for value, status in probes[1:]:  # then bisection between what fits and what does not
        assert value == (low + high) // 2
        low, high = (value, high) if status == "ok" else (low, value)
    assert (search["largest"], search["smallest_failing"]) == (low, high) and high - low <= 1
    # the full measurement at the size found can still run out at the boundary (allocator
    # noise under RLIMIT_AS): then each step down is to the next size whose probe ran
    expected = low
    for result in stepped:
        assert result["status"] == "oom" and result["case"]["batch_size"] == expected
        expected = max(v for v, status in probes if status == "ok" and v < expected)
    assert final["status"] == "ok" and final["case"]["batch_size"] == expected >= 4


@pytest.mark.parallel
def test_after_a_search_an_out_of_memory_measurement_steps_down_to_the_next_size_that_ran():
    from dlperf.spec import Case
    from dlperf.studies.sweep_runner import next_fitting

    case = Case(framework="torch", model="bert-base", batch_size=27)
    search = {"probes": [[16, "ok"], [24, "ok"], [28, "oom"], [26, "ok"], [27, "ok"]]}
    assert next_fitting(case, search).batch_size == 26
    assert next_fitting(Case(framework="torch", model="bert-base", batch_size=16), search) is None


@pytest.mark.parametrize("limit, status", [(2**30, "oom"), (None, "crash")])
def test_a_worker_that_segfaults_is_out_of_memory_only_under_a_memory_limit(tmp_path, limit,
                                                                              status):
    """Native code that does not check a refused allocation segfaults: under a memory limit
    that dlperf set, that is what a SIGSEGV means (XLA's CPU runtime does it); without one it
    is a crash."""
    from dlperf.launchers import launch
    from dlperf import runner
    from dlperf.spec import Case

    def segfaulting(case, case_file, out_dir):
        spec = launch.Launch([sys.executable, "-c",
                              "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
        return capacity.limited(lambda *_: spec, limit)(case, case_file, out_dir)

    case = Case(framework="torch", model="bert-base", batch_size=1, repeats=1, timeout_s=60)
    record = runner.run_repeat(case, 0, segfaulting)
    assert record["status"] == status, record["error"]
    assert record["error"].startswith("worker died from SIGSEGV")
    assert ("1.00 GiB memory limit" in record["error"]) == (limit is not None)
