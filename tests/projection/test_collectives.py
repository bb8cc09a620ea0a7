"""`dlperf collectives`: nccl-tests' bus bandwidth factors and the latency-bandwidth fit checked
against hand calculations; the size parser and the refusals through the command line (one line,
exit 2, nothing stored); the store's rows and the model read back; then real jobs on 2 processes
at tiny sizes through every framework's own collective path into a real SQLite file, torch's
across two emulated hosts over a shaped link, and TF 1.15's across two emulated hosts of two
processes. The jobs' checks are of behaviour (what was
stored, what crossed the hosts), never of speed.
"""

from __future__ import annotations

import json
import socket
import statistics
import uuid
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import TAG, assert_nothing_left, dlperf_main, load
from dlperf import collective_model, spec
from dlperf.commands.collectives import fit_line
from dlperf.collective_model import Key, NoModel
from dlperf.errors import UsageError
from dlperf.projection.links import RING, link_bytes
from dlperf.spec import frameworks
from dlperf.store import Store
from dlperf.studies import collectives as study
from dlperf.worker.collectives import bus_factor, elements

ROOT = Path(__file__).resolve().parents[2]

KIB = 1024
MIB = 1024 * KIB
TINY = ["--sizes", "4K:64K", "--iters", "3", "--warmup", "1"]
TINY_SIZES = [4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB]


# ------------------------------------------------------------------------------------------------
# arithmetic, by hand
# ------------------------------------------------------------------------------------------------

@pytest.mark.parallel
@pytest.mark.parametrize("op, ranks, factor", [
    ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
    ("allgather", 2, 0.5), ("allgather", 4, 0.75), ("reducescatter", 8, 0.875),
    ("broadcast", 2, 1.0), ("broadcast", 16, 1.0), ("pushpull", 4, 1.0)])
def test_bus_bandwidth_factors_are_nccl_tests(op, ranks, factor):
    # allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast 1 (PERFORMANCE.md)
    assert bus_factor(op, ranks) == factor


@pytest.mark.parallel
def test_an_unknown_operation_has_no_factor():
    with pytest.raises(ValueError, match="alltoall"):
        bus_factor("alltoall", 2)


@pytest.mark.parallel
def test_message_elements_are_whole_and_shard_evenly():
    assert elements("allreduce", 4096, 3) == 1024
    assert elements("allgather", 4096, 3) == 1023  # 341 per rank
    assert elements("reducescatter", 16, 8) == 0  # 4 elements cannot give 8 ranks one each


@pytest.mark.parallel
def test_the_fit_recovers_an_exact_alpha_beta_line():
    alpha, beta = 20e-6, 1 / 2e9  # 20 us, 2 GB/s
    sizes = [2 ** k for k in range(12, 27)]
    fit = collective_model.fit(sizes, [alpha + m * beta for m in sizes])
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_s == pytest.approx(beta, rel=1e-9)
    assert fit.max_error == pytest.approx(0, abs=1e-9)


@pytest.mark.parallel
def test_the_fit_weights_each_size_by_its_own_time():
    """Three points off any line: the weighted normal equations solved by Cramer's rule, in
    exact fractions, with rows (1/t, m/t) and right-hand side 1."""
    sizes, times = [1000, 2000, 4000], [3e-6, 4e-6, 7e-6]
    rows = [(1 / Fraction(t).limit_denominator(10 ** 9), Fraction(m) / Fraction(t)
             .limit_denominator(10 ** 9)) for m, t in zip(sizes, times)]
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sa, sb = sum(a for a, _ in rows), sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    alpha, beta = (sbb * sa - sab * sb) / det, (saa * sb - sab * sa) / det
    assert alpha > 0 and beta > 0  # the unconstrained solution stands
    fit = collective_model.fit(sizes, times)
    assert fit.alpha_s == pytest.approx(float(alpha), rel=1e-9)
    assert fit.beta_s == pytest.approx(float(beta), rel=1e-9)
    errors = sorted(abs((float(alpha) + float(beta) * m) / t - 1) for m, t in zip(sizes, times))
    assert fit.median_error == pytest.approx(errors[1]) and fit.max_error == pytest.approx(
        errors[2])


@pytest.mark.parallel
def test_a_shrinking_time_fits_latency_alone():
    """t = 2, 1 at m = 1, 2: the exact line has beta = -1; alpha alone, sum(1/t) / sum(1/t^2) =
    1.5 / 1.25 = 1.2 (squared relative residuals 0.16 + 0.04), beats beta alone (2.5 / 4.25,
    residuals 0.53): relative errors 0.4 and 0.2."""
    fit = collective_model.fit([1, 2], [2.0, 1.0])
    assert (fit.alpha_s, fit.beta_s) == (pytest.approx(1.2), 0.0)
    assert fit.median_error == pytest.approx(0.3) and fit.max_error == pytest.approx(0.4)


@pytest.mark.parallel
def test_one_size_cannot_fit_two_parameters():
    with pytest.raises(ValueError, match="two or more"):
        collective_model.fit([4096, 4096], [1e-5, 2e-5])


@pytest.mark.parallel
def test_a_size_summary_is_nccl_tests_algbw_and_busbw():
    """Times 1..5 us for 4096 bytes on 4 ranks: median 3 us, numpy's linear 10th and 90th
    percentiles 1.4 and 4.6 us; algbw 4096 / 3e-6 B/s, busbw x 1.5 for an all-reduce."""
    out = study.summary([1e-6, 2e-6, 3e-6, 4e-6, 5e-6], "allreduce", 4096, 4)
    assert out["time_us"] == pytest.approx(3.0)
    assert (out["time_p10_us"], out["time_p90_us"]) == (pytest.approx(1.4), pytest.approx(4.6))
    assert out["algbw_gbs"] == pytest.approx(4096 / 3e-6 / 1e9)
    assert out["busbw_gbs"] == pytest.approx(1.5 * 4096 / 3e-6 / 1e9)


# ------------------------------------------------------------------------------------------------
# what the flags may say
# ------------------------------------------------------------------------------------------------

@pytest.mark.parallel
@pytest.mark.parametrize("text, sizes", [
    ("4K:64K", tuple(TINY_SIZES)), ("4K,1M,4K", (4096, 2 ** 20)), ("12,4", (4, 12)),
    ("1K:3K", (1024, 2048)), ("64KiB,1MB", (65536, 2 ** 20))])
def test_sizes_parse(text, sizes):
    assert study.parse_sizes(text) == sizes


@pytest.mark.parallel
@pytest.mark.parametrize("text, why", [
    ("abc", "not a size"), ("1023", "multiple of 4"), ("8G", "4G"), ("4K:2K", "downwards"),
    ("4K", "one size"), ("4K,4K", "one size"), ("4K,", "not a size")])
def test_bad_sizes_are_refused(text, why):
    with pytest.raises(UsageError, match=why):
        study.parse_sizes(text)


@pytest.mark.parallel
@pytest.mark.parametrize("flags, words", [
    (["--sizes", "4X"], "--sizes: '4X' is not a size"),
    (["--nproc", "1"], "--nproc: 1 process(es) on 1 node(s) exchange nothing"),
    (["--ops", "pushpull"], "--ops: torch gloo has no 'pushpull'; it has allreduce"),
    (["--ops", "alltoall"], "(dlperf knows allreduce"),
    (["--framework", "tensorflow1", "--ops", "allgather"], "tensorflow1 ring has no 'allgather'"),
    (["--framework", "onnxruntime"], "the onnxruntime backend has no collective path"),
    (["--path", "mpi"], "--path: torch has no collective path 'mpi'; it has gloo, nccl"),
    (["--nproc", "2", "--sizes", "4,8", "--ops", "allgather", "--nnodes", "2",
      "--master-addr", "127.0.0.1"], "less than one float32 element per rank on 4 ranks"),
    (["--iters", "0"], "--iters: 0 must be 1 or more"),
    (["--link", "1gbit"], "--link: 1gbit shapes the links between emulated hosts"),
])
def test_bad_input_is_one_line_exit_2_and_stores_nothing(tmp_path, flags, words):
    db = tmp_path / "c.db"
    proc = dlperf_main("collectives", *flags, "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlperf collectives: error: "), proc.stderr
    assert words in lines[0]
    assert not db.exists()


# ------------------------------------------------------------------------------------------------
# the store and the model, on constructed rows
# ------------------------------------------------------------------------------------------------

def constructed_rows(op: str, alpha: float, beta: float, **key) -> list[dict]:
    rows = []
    for nbytes in TINY_SIZES:
        t = alpha + nbytes * beta
        row = {"framework": "torch", "path": "gloo", "env": "", "device": "cpu", "nproc": 2,
               "nnodes": 1, "link": None, "emulated": 0, "host": "h", "op": op,
               "bytes": nbytes, "iters": 3, "warmup": 1, "times": [t] * 3,
               "detail": {"framework_version": "x"}, **study.summary([t] * 3, op, nbytes, 2)}
        rows.append({**row, **key})
    return rows


@pytest.mark.parallel
def test_the_newest_run_of_a_key_is_its_model(tmp_path):
    db = tmp_path / "c.db"
    with Store(db) as store:
        first = store.add_collectives(constructed_rows("allreduce", 50e-6, 1e-9))
        second = store.add_collectives(constructed_rows("allreduce", 30e-6, 2e-9)
                                       + constructed_rows("broadcast", 10e-6, 1e-9))
        store.add_collectives(constructed_rows("allreduce", 5e-6, 1e-10, link="1gbit",
                                               nnodes=2, nproc=1, emulated=1))
    assert (first, second) == (1, 2)
    model = collective_model.model_for(db, Key("torch", "gloo", "allreduce", 2))
    assert model.run == 2 and model.alpha_us == pytest.approx(30.0)
    assert model.busbw_gbs == pytest.approx(1.0 / 2e-9 / 1e9)  # factor 1 on 2 ranks
    assert model.seconds(2 ** 20) == pytest.approx(30e-6 + 2 ** 20 * 2e-9)
    emulated = collective_model.model_for(db, Key("torch", "gloo", "allreduce", 1, 2, "1gbit"))
    assert emulated.run == 3 and emulated.emulated
    with Store(db, readonly=True) as store:
        assert len(collective_model.models(store)) == 3
        stored = store.collectives("run=2 AND op='broadcast'")
    assert [row["bytes"] for row in stored] == TINY_SIZES
    assert stored[0]["times"] == [10e-6 + 4096e-9] * 3


@pytest.mark.parallel
def test_a_parameter_servers_model_is_fitted_over_the_keys_its_servers_split(tmp_path):
    # MXNet's push and pull of 1-32 MiB keys: the keys under its declared split size (4 MB,
    # ps-lite's big-array bound) go to one server whole and take twice as long a byte (one
    # direction of the link at a time); the model is the line through the split ones alone
    split = spec.wire_of("mxnet", None, "cpu").split_bytes
    assert split == 4 * 10**6
    rows = []
    for nbytes in [MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB]:
        t = 0.01 + nbytes * (2e-8 if nbytes < split else 1e-8)
        rows.append({**constructed_rows("pushpull", 1e-3, 1e-9)[0], "framework": "mxnet",
                     "path": "kvstore", "nproc": 1, "nnodes": 2, "link": "1gbit",
                     "emulated": 1, "bytes": nbytes, "times": [t] * 3,
                     **study.summary([t] * 3, "pushpull", nbytes, 2)})
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(rows)
        # the same times as a ring's all-reduce: every size is fitted
        store.add_collectives([{**row, "op": "allreduce", "framework": "torch", "path": "gloo"}
                               for row in rows])
    key = Key("mxnet", "kvstore", "pushpull", 1, 2, "1gbit")
    model = collective_model.model_for(db, key)
    assert model.split and model.sizes == (4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB)
    assert model.fit.alpha_s == pytest.approx(0.01) and model.fit.beta_s == pytest.approx(1e-8)
    assert "over 4 sizes (4.0 MiB and up: the keys its servers split)" in fit_line(model)
    ring = collective_model.model_for(db, Key("torch", "gloo", "allreduce", 1, 2, "1gbit"))
    assert not ring.split and len(ring.sizes) == 6
    assert ring.fit.beta_s != pytest.approx(1e-8, rel=0.05)  # bent by the small keys
    # fewer than two split sizes measured: every size, as before
    assert collective_model.fitted_rows(key, rows[:3]) == rows[:3]


@pytest.mark.parallel
def test_a_missing_model_names_the_command_that_measures_it(tmp_path):
    key = Key("jax", "gloo", "allgather", 2, 2, "100mbit")
    with pytest.raises(NoModel) as missing:
        collective_model.model_for(tmp_path / "none.db", key)
    assert str(missing.value).endswith(
        "measure it with `dlperf collectives --framework jax --path gloo --ops allgather "
        f"--nproc 2 --emulate-hosts 2 --link 100mbit --db {tmp_path / 'none.db'}`")
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(constructed_rows("allreduce", 50e-6, 1e-9))
    with pytest.raises(NoModel, match="no collective model of jax gloo allgather"):
        collective_model.model_for(db, key)


@pytest.mark.parallel
def test_calls_that_scatter_at_the_largest_sizes_are_shown_and_said(tmp_path):
    """The calls' spread beside each model: at 32 and 64 KiB (within 4x of the largest) one
    call of three took twice the others, so a resampled median is the slow one's in 7.4 % of
    draws (two or three of three) and its 95 % interval runs 0 to +100 %; the line a
    measurement prints says so. Calls that agree say nothing."""
    from dlperf.commands.collectives import calls_warning

    rows = constructed_rows("allreduce", 50e-6, 1e-9)
    for row in rows:
        if row["bytes"] >= 32 * KIB:
            t = row["times"][0]
            row.update(times=[t, t, 2 * t], **study.summary([t, t, 2 * t], "allreduce",
                                                            row["bytes"], 2))
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(rows)
        store.add_collectives(constructed_rows("allreduce", 50e-6, 1e-9, link="1gbit",
                                               nnodes=2, nproc=1, emulated=1))
    scattered, steady = (collective_model.model_for(db, Key("torch", "gloo", "allreduce", 2)),
                         collective_model.model_for(db, Key("torch", "gloo", "allreduce", 1, 2,
                                                            "1gbit")))
    assert calls_warning(scattered) == ("allreduce: calls spread: its 3 calls at 32 KiB put "
                                        "their median within +0.0%/+100.0% (95 %); a projection "
                                        "priced here carries it, and more calls (--iters) "
                                        "narrow it") or "at 64 KiB" in calls_warning(scattered)
    assert calls_warning(steady) is None
    shown = dlperf_main("collectives", "--show", "--db", str(db), check=True).stdout
    assert "+0.0%/+100.0%" in shown and "+0.0%/+0.0%" in shown


@pytest.mark.parallel
def test_a_damaged_row_is_one_line(tmp_path):
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_collectives(constructed_rows("allreduce", 50e-6, 1e-9))
        store.db.execute("UPDATE collectives SET time_us='fast' WHERE id=2")
        store.db.commit()
    proc = dlperf_main("collectives", "--show", "--db", str(db))
    assert proc.returncode == 2
    assert "collectives row 2 has a malformed time_us" in proc.stderr


# ------------------------------------------------------------------------------------------------
# real jobs
# ------------------------------------------------------------------------------------------------

def measure(tmp_path: Path, *flags: str) -> tuple[dict, Path]:
    """One `dlperf collectives` job into a fresh database (TINY's sizes and iterations unless
    ``flags`` name others): its JSON, checked to have run, and the database; nothing it started
    is left running."""
    db, out, tag = tmp_path / "c.db", tmp_path / "c.json", uuid.uuid4().hex
    # the harness through dlperf_main in this process (its launcher and ranks are still fresh
    # processes, marked by ``tag`` through this process's environment): the harness process is
    # not what is checked, and a fresh one costs about 0.5 CPU-s of imports a job
    proc = dlperf_main("collectives", *TINY, *flags, "--db", str(db), "--json", str(out),
                       env={TAG: tag}, timeout=600)
    assert_nothing_left(tag)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return load(out), db


def check_stored(measured: dict, db: Path, key: Key, ops: tuple[str, ...]) -> None:
    """Every operation at every size stored once under the job's run, with its iterations'
    times (each the slowest rank's), nccl-tests' bandwidths, and a model that reads back."""
    assert measured["status"] == "ok" and measured["run"] == 1
    with Store(db, readonly=True) as store:
        rows = store.collectives()
    assert [(row["op"], row["bytes"]) for row in rows] == [
        (op, size) for op in ops for size in TINY_SIZES]
    for row in rows:
        assert (row["framework"], row["path"], row["nproc"], row["nnodes"], row["link"]) == (
            key.framework, key.path, key.nproc, key.nnodes, key.link)
        assert len(row["times"]) == 3 and all(t > 0 for t in row["times"])
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * bus_factor(
            row["op"], key.ranks))
        assert row["algbw_gbs"] == pytest.approx(row["bytes"] / row["time_us"] / 1e3)
        assert row["detail"]["framework_version"]
        # the busiest rank's process CPU per iteration, and its median in us
        cpu = row["detail"]["cpu_s"]
        assert len(cpu) == 3 and all(c >= 0 for c in cpu)
        assert row["detail"]["cpu_us"] == pytest.approx(statistics.median(cpu) * 1e6)
        assert study.cpu_us(row) == row["detail"]["cpu_us"]
    largest = [row for row in rows if row["bytes"] == max(TINY_SIZES)]
    assert all(sum(row["detail"]["cpu_s"]) > 0 for row in largest)  # moving it costs CPU
    for op in ops:
        model = collective_model.model_for(db, Key(**{**vars(key), "op": op}))
        assert model.run == 1 and model.sizes == tuple(TINY_SIZES)
        assert model.fit.alpha_s >= 0 and model.fit.beta_s >= 0
    assert [m["key"]["op"] for m in measured["models"]] == list(ops)
    for made in measured["models"]:  # how surely the largest sizes' calls pin their median
        spread = made["calls_at_largest"]
        assert spread["calls"] == 3 and spread["nbytes"] in TINY_SIZES
        assert spread["low"] <= 0 <= spread["high"]
    # --json: the rows as the table shows them, their CPU per iteration with them
    assert [(r["op"], r["bytes"], r["time_us"], r["cpu_us"]) for r in measured["rows"]] == [
        (row["op"], row["bytes"], row["time_us"], row["detail"]["cpu_us"]) for row in rows]


@pytest.mark.spans_cores
def test_torch_gloo_on_two_processes_is_stored_and_fitted(tmp_path):
    measured, db = measure(tmp_path)
    key = Key("torch", "gloo", "allreduce", 2)
    check_stored(measured, db, key, ("allreduce", "allgather", "broadcast"))
    assert measured["launch"]["launcher"] == "torchrun"
    assert measured["facts"]["backend"] == "gloo"
    with Store(db, readonly=True) as store:
        rows = store.collectives()
    assert {(row["emulated"], row["host"]) for row in rows} == {(0, socket.gethostname())}
    shown = dlperf_main("collectives", "--show", "--db", str(db), check=True).stdout
    assert "allgather" in shown and "broadcast" in shown


#: (framework, path, its operations measured) of every other path a backend declares on a CPU
OTHER_PATHS = [
    ("torch", "horovod", ("allreduce", "allgather", "reducescatter", "broadcast")),
    ("torch", "horovod-mpi", ("allreduce",)),
    ("jax", "gloo", ("allreduce", "allgather", "reducescatter")),
    ("paddle", "gloo", ("allreduce", "allgather", "broadcast")),
    ("caffe2", "gloo", ("allreduce", "allgather", "broadcast")),
    ("tensorflow", "ring", ("allreduce", "allgather")),
    ("tensorflow1", "ring", ("allreduce",)),
    ("tensorflow1", "horovod", ("allreduce", "allgather", "broadcast")),
    ("tensorflow1", "horovod-mpi", ("allreduce",)),
    ("oneflow", "cpu", ("allreduce", "allgather", "broadcast")),
    ("mindspore", "mccl", ("allreduce", "allgather", "broadcast")),
    ("mxnet", "kvstore", ("pushpull",)),
    ("mxnet", "horovod", ("allreduce", "allgather", "broadcast")),
    ("mxnet", "horovod-mpi", ("allreduce",)),
]


@pytest.mark.spans_cores
@pytest.mark.parametrize("framework, path, ops", OTHER_PATHS,
                         ids=[f"{fw}-{path}" for fw, path, _ in OTHER_PATHS])
def test_each_framework_path_on_two_processes(tmp_path, framework, path, ops):
    measured, db = measure(tmp_path, "--framework", framework, "--path", path, "--ops",
                           ",".join(ops))
    check_stored(measured, db, Key(framework, path, ops[0], 2), ops)


@pytest.mark.parallel
def test_every_declared_path_is_run_by_a_test():
    """A path a backend declares is measured above (on a CPU) or in tests/gpu (CUDA)."""
    declared = {(fw, p.name, p.device) for fw in frameworks() if fw in study.with_paths()
                for p in study.paths_of(fw)}
    assert declared == {("torch", "gloo", "cpu"), ("torch", "nccl", "cuda")} | {
        (fw, path, "cpu") for fw, path, _ in OTHER_PATHS}
    gpu_tests = (Path(__file__).parents[1] / "gpu" / "test_gpu.py").read_text()
    assert '"collectives", "--path", "nccl"' in gpu_tests


@pytest.mark.spans_cores
def test_torch_across_two_emulated_hosts_over_a_shaped_link(tmp_path):
    from two_hosts import skip_without_emulation

    skip_without_emulation()
    measured, db = measure(tmp_path, "--nproc", "1", "--emulate-hosts", "2", "--link",
                           "100mbit", "--ops", "allreduce")
    key = Key("torch", "gloo", "allreduce", 1, 2, "100mbit")
    check_stored(measured, db, key, ("allreduce",))
    with Store(db, readonly=True) as store:
        rows = store.collectives()
    assert {(row["emulated"], row["host"]) for row in rows} == {(1, "dlperf-h0")}
    # every timed and untimed all-reduce crossed the hosts: each sent at least its share
    hosts = measured["emulated_hosts"]["hosts"]
    assert measured["emulated_hosts"]["link"] == "100mbit"
    least = sum(TINY_SIZES) * 4 // 2  # (3 timed + 1 warm-up) x half of each message
    assert all(host["tx_bytes"] >= least for host in hosts), json.dumps(hosts)


@pytest.mark.spans_cores
def test_tf1_ring_across_two_emulated_hosts_of_two_processes_is_one_ring_through_all(tmp_path):
    """Ranks 2 and 3 of TF 1.15's RING all-reduce once read past their replica list (fixed
    2026-12-04). Each host's link carries a ring through all 4 processes' 2(P-1)/P = 1.5 times
    each message (what dlperf project prices), not a hierarchical all-reduce's 1.0."""
    from two_hosts import skip_without_emulation

    skip_without_emulation()
    sizes = [256 * KIB, 512 * KIB]
    measured, _ = measure(tmp_path, "--framework", "tensorflow1", "--path", "ring", "--ops",
                          "allreduce", "--emulate-hosts", "2", "--nproc", "2",
                          "--threads-per-process", "1", "--sizes",
                          ",".join(str(size) for size in sizes))
    assert measured["status"] == "ok" and measured["nproc"] == 2 and measured["nnodes"] == 2
    messages = sum(sizes) * (3 + 1)  # TINY's 3 timed iterations and 1 warm-up of each
    shares = [host["tx_bytes"] / messages for host in measured["emulated_hosts"]["hosts"]]
    assert len(shares) == 2 and all(1.35 < share < 1.75 for share in shares), shares
    assert link_bytes(RING, 2, 2) == pytest.approx(1.5)


def cpu_table_script():
    """benchmarks/collectives_cpu_table.py as a module, imported when a test asks for it."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import collectives_cpu_table

    return collectives_cpu_table


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["xeon", "zen4"])
def test_the_cpu_table_of_every_path_is_made_again_from_its_stored_rows(kind):
    """docs/collectives.md's tables of every CPU path's bandwidth and CPU a byte (a Xeon's, a
    Zen 4's) are what benchmarks/collectives_cpu_table.py makes from their data folders' stored
    rows; each row's CPU per byte is its median CPU over its bytes, its share that CPU over its
    median time."""
    cpu_table = cpu_table_script()

    folder = ROOT / "benchmarks" / "data" / f"collectives-cpu-every-path-{kind}-2026-12-05"
    made = cpu_table.table(folder)
    assert made in (ROOT / "docs" / "collectives.md").read_text()
    runs = json.loads((folder / "collectives.json").read_text())
    assert len(made.splitlines()) == 2 + len(runs) == 16  # the fourteen paths
    for rows in runs:
        for row in rows:
            assert row["detail"]["cpu_us"] == pytest.approx(
                statistics.median(row["detail"]["cpu_s"]) * 1e6)
    tf_ring = next(rows for rows in runs if rows[0]["framework"] == "tensorflow")
    biggest = max(tf_ring, key=lambda r: r["bytes"])
    assert cpu_table.row(tf_ring).split(" | ")[3] == (
        f"{biggest['time_us'] / 1e3:.1f}, {biggest['detail']['cpu_us'] / 1e3:.1f}")
    with pytest.raises(SystemExit, match="no CPU taken"):
        cpu_table.row([{**r, "detail": {}} for r in tf_ring])


@pytest.mark.parallel
@pytest.mark.parametrize("folder_name", ["collectives-two-processes-zen4-2026-12-07",
                                         "collectives-two-processes-zen5-2026-12-08"])
def test_a_run_of_several_operations_is_tabulated_by_its_all_reduce(folder_name):
    """benchmarks/collectives_cpu_table.py over runs that measured all-reduce, all-gather and
    broadcast (`dlperf collectives`' default) reads each run's all-reduce alone (MXNet's
    kvstore: its push-pull), as its data folder's README holds it, never their mixture."""
    cpu_table = cpu_table_script()

    folder = ROOT / "benchmarks" / "data" / folder_name
    runs = json.loads((folder / "collectives.json").read_text())
    made = cpu_table.table(folder)
    assert made in (folder / "README.md").read_text()
    assert len(made.splitlines()) == 2 + len(runs) == 17  # the fifteen CPU paths
    torch_gloo = next(rows for rows in runs if rows[0]["path"] == "gloo"
                      and rows[0]["framework"] == "torch")
    assert {r["op"] for r in torch_gloo} == {"allreduce", "allgather", "broadcast"}
    reduced = [r for r in torch_gloo if r["op"] == "allreduce"]
    assert cpu_table.row(torch_gloo) == cpu_table.row(reduced)
    biggest = max(reduced, key=lambda r: r["bytes"])
    assert cpu_table.row(torch_gloo).split(" | ")[3].startswith(f"{biggest['time_us'] / 1e3:.1f},")
    kvstore = next(rows for rows in runs if rows[0]["path"] == "kvstore")
    assert cpu_table.gradient_rows(kvstore) == kvstore  # push-pull only
    with pytest.raises(SystemExit, match="no all-reduce or push-pull among allgather"):
        cpu_table.row([r for r in torch_gloo if r["op"] == "allgather"])


@pytest.mark.parallel
def test_how_the_cpu_of_an_all_reduce_grew_with_the_ring_is_its_stored_rows():
    """The growth docs/projection.md states ("What TensorFlow's overhead is"): from 2 emulated
    hosts of 1 process to 2 of 2, the busiest process's CPU a call grew 1.09-1.33 times in
    torch's gloo and 2.6-6.6 times in TensorFlow's ring, where a ring's bytes a process grow
    1.5 times (2(P-1)/P)."""
    folder = ROOT / "benchmarks" / "data" / "collectives-cpu-ranks-xeon-2026-12-05"
    runs = json.loads((folder / "collectives.json").read_text())
    cpu = {(rows[0]["framework"], rows[0]["nproc"]): {r["bytes"]: study.cpu_us(r) for r in rows}
           for rows in runs}
    assert sorted(cpu) == [("tensorflow", 1), ("tensorflow", 2), ("torch", 1), ("torch", 2)]
    growth = {fw: sorted(cpu[fw, 2][size] / cpu[fw, 1][size] for size in cpu[fw, 1])
              for fw in ("torch", "tensorflow")}
    assert [round(g, 2) for g in growth["torch"]] == [1.09, 1.13, 1.33]
    assert [round(g, 2) for g in growth["tensorflow"]] == [2.64, 3.62, 6.62]
    assert bus_factor("allreduce", 4) / bus_factor("allreduce", 2) == 1.5
    text = " ".join((ROOT / "docs" / "projection.md").read_text().split())
    assert "grew 1.09-1.33 times in torch's gloo and 2.6-6.6 times in TensorFlow's ring" in text
