"""Several processes and several "nodes" through torchrun: real gloo jobs on this CPU, and
DistributedDataParallel's step on two ranks against one process on both batches.

Each test leaves a marker variable in the environment of everything it starts, and checks at the
end that no process carrying it is still alive (workers, torchrun agents, harnesses).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (CUT_RESNET50_FLAGS, TINY_BERT, TINY_RESNET, VOTE_MAX_STEPS,
                      check_voted_warmup, dlperf_main, load)
from dp_check import check_native_engine
from dlperf.launchers import launch, slurm
from dlperf import runner
from dlperf.launchers import torch as torchrun
from dlperf.spec import Case

# multi-process jobs, a rank per core, and their speedup over one (as computed, never
# its size).
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

# TINY_RESNET with 1 warm-up and 2 measured steps (its last four words are its 2 and 3) on
# ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): each repeat is a fresh
# torchrun, and amp-bf16 on a CPU without bf16 instructions is emulated, slowly; what is checked
# (ranks, the aggregation, stored rows, the speedup as computed) counts the steps as run on
# whatever network, and torch's plain training run keeps the whole one (tests/worker/test_run.py)
assert TINY_RESNET[-4:] == ["--warmup-steps", "2", "--steps", "3"], TINY_RESNET
FEW_STEPS = [*TINY_RESNET[:-4], *CUT_RESNET50_FLAGS, "--warmup-steps", "1", "--steps", "2"]
SMALL_BERT = [*TINY_BERT, "--knob", "layers=2", "--knob", "hidden=128", "--knob", "heads=2",
              "--knob", "intermediate=256"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_aggregation(result: dict) -> None:
    """Job throughput per repeat = global samples / the slowest rank's window; every rank kept."""
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    n = len(result["throughput"]["repeats"])
    per_repeat = []
    for i in range(n):
        windows = [r["window_s"][i] for r in ranks]
        steps = [r["throughput"][i] * r["window_s"][i] / result["case"]["batch_size"]
                 for r in ranks]
        # every rank ran the same steps: the asked ones, or more to fill a minimum duration
        # (the ranks vote on each run; one a step ahead would hang in its all-reduce)
        assert steps[1] == pytest.approx(steps[0]) and steps[0] == pytest.approx(round(steps[0]))
        if result["case"].get("min_duration_s"):
            assert round(steps[0]) >= result["case"]["steps"]
            assert min(windows) >= result["case"]["min_duration_s"]
        else:
            assert round(steps[0]) == result["case"]["steps"]
        samples = sum(steps) * result["case"]["batch_size"]
        per_repeat.append(samples / max(windows))
    assert sorted(result["throughput"]["repeats"]) == pytest.approx(sorted(per_repeat))
    assert result["timings"]["window_s"] == pytest.approx(
        [max(r["window_s"][i] for r in ranks) for i in range(n)])
    assert sum(r["slowest_in"] for r in ranks) == n


def test_resnet50_two_processes_amp_bf16_and_speedup_over_one(tmp_path, tagged):
    db = str(tmp_path / "r.db")
    # one repeat each: the aggregation over several repeats is checked by the two-node test
    # below (2 repeats of fp32), without the emulated bf16 steps
    common = [*FEW_STEPS, "--device", "cpu", "--precision", "amp-bf16", "--repeats", "1",
              "--db", db]
    # the harness through dlperf_main in this process (its worker and ranks are still fresh
    # processes): the harness process itself is not what is checked
    dlperf_main("run", *common, "--json", str(tmp_path / "one.json"), check=True, timeout=600)
    elastic = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    proc = dlperf_main("run", *common, "--devices", "2", "--json", str(tmp_path / "two.json"),
                       check=True, timeout=600)
    # torchrun's logs went to the repeat's own folder, deleted with it: none left behind
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= elastic
    one, two = load(tmp_path / "one.json"), load(tmp_path / "two.json")
    assert two["status"] == "ok" and two["case"]["devices"] == 2
    assert two["global_batch"] == 4
    check_aggregation(two)
    threads = max(1, launch.usable_cores() // 2)  # the node's cores divided between 2 processes
    assert two["launch"]["launcher"] == "torchrun"
    assert two["launch"]["log_dir"] == torchrun.LOG_DIR
    assert two["launch"]["threads_per_process"] == threads
    assert [r["threads"] for r in two["ranks"]] == [threads, threads]
    assert two["env"]["worker"]["framework"]["ddp"] is True
    assert two["env"]["worker"]["framework"]["autocast_dtype"] == "bfloat16"
    # speedup over the 1-device result of the same configuration in the same database
    assert one["speedup"] == 1.0 and len(one["ranks"]) == 1
    speedup = two["throughput"]["median"] / one["throughput"]["median"]
    assert two["speedup"] == pytest.approx(speedup)
    assert two["scaling_efficiency"] == pytest.approx(speedup / 2)
    assert two["speedup_baseline"]["run_id"] == one["run_id"]
    assert "speedup" in proc.stdout and "scaling efficiency" in proc.stdout
    con = sqlite3.connect(db)
    stored = con.execute("SELECT result_json FROM runs WHERE id=?", (two["run_id"],)).fetchone()
    assert '"scaling_efficiency"' in stored[0]


def test_two_ddp_ranks_step_as_one_process_on_both_batches(tmp_path, tagged):
    """torch's native engine, DistributedDataParallel over gloo under the real torchrun (as
    `dlperf run --devices 2` starts it): one step of two ranks fed seed + rank's batch averages
    their gradients (tests/dp_check.py, the check Horovod's paths pass too)."""
    check_native_engine("torch", sys.executable, tmp_path)


def test_bert_two_processes_explicit_threads_and_no_baseline(tmp_path, tagged):
    out = tmp_path / "b.json"
    proc = dlperf_main("run", *SMALL_BERT, "--device", "cpu", "--devices", "2", "--repeats",
                       "1", "--threads-per-process", "1", "--warmup-steps", "auto",
                       "--warmup-max-steps", str(VOTE_MAX_STEPS), "--min-duration", "1.5",
                       "--db", str(tmp_path / "b.db"),
                       "--json", str(out), check=True, timeout=600)
    result = load(out)
    assert result["status"] == "ok"
    check_aggregation(result)
    # auto warm-up and a window of a minimum duration with several ranks: the ranks vote, so
    # both stop at the same step, why (check_aggregation: the window's steps)
    check_voted_warmup(result, tmp_path / "b.db", max_steps=VOTE_MAX_STEPS)
    assert result["case"]["threads"] == 1 and result["launch"]["threads_per_process"] == 1
    assert result["env"]["worker"]["thread_variables"]["OMP_NUM_THREADS"] == "1"
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    # no 1-device BERT in this database: said so, never a made-up 1.0 or 0
    assert result["speedup"] is None and result["scaling_efficiency"] is None
    assert result["speedup_note"] == "no 1-device baseline"
    assert "no 1-device baseline" in proc.stdout


def test_two_nodes_on_this_machine_store_one_case(tmp_path, tagged):
    db, port = str(tmp_path / "shared.db"), free_port()
    base = [sys.executable, "-m", "dlperf.cli", "run", *FEW_STEPS, "--device", "cpu",
            "--nnodes", "2", "--threads-per-process", "1", "--repeats", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-timeout", "120",
            "--db", db]
    nodes = [subprocess.Popen([*base, "--node-rank", str(rank), "--json",
                               str(tmp_path / f"node{rank}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (1, 0)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    master, peer = load(tmp_path / "node0.json"), load(tmp_path / "node1.json")
    assert master["status"] == "ok" and master["case"]["nnodes"] == 2
    check_aggregation(master)
    assert master["launch"]["rendezvous"] == "static"
    assert peer["status"] == "ok" and peer["node_rank"] == 1 and "throughput" not in peer
    assert peer["stored_by"].startswith("node 0")
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*), MAX(status) FROM runs").fetchone() == (1, "ok")
    assert con.execute("SELECT COUNT(*) FROM repeats").fetchone()[0] == 2


def test_a_rank_out_of_memory_fails_the_case_and_stops_the_others(tmp_path, tagged):
    # the real worker; rank 1 alone runs under an address-space limit 1.5 GiB above what torch
    # itself takes, and a 224x224 batch of 16 needs more than that
    script = tmp_path / "limited_worker.py"
    script.write_text(
        "import os, resource, runpy, sys\n"
        "if os.environ['RANK'] == '1':\n"
        "    import torch\n"
        "    with open('/proc/self/status') as status:\n"
        "        vm = [int(l.split()[1]) * 1024 for l in status if l.startswith('VmSize')][0]\n"
        "    limit = vm + 1536 * 2**20\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "sys.argv = ['dlperf.worker'] + sys.argv[1:]\n"
        "runpy.run_module('dlperf.worker', run_name='__main__', alter_sys=True)\n")
    inner = torchrun.Torchrun()

    def launcher(case, case_file, out_dir):
        spec = inner(case, case_file, out_dir)
        at = spec.argv.index("dlperf.worker")
        spec.argv[at - 1:at + 1] = [str(script)]  # torchrun runs the script instead of -m
        return spec

    case = Case(framework="torch", model="resnet50", batch_size=16, repeats=2, warmup_steps=1,
                steps=2, knobs={"image_size": 224}, device="cpu", devices=2, timeout_s=600)
    start = time.monotonic()
    result = runner.run_case(case, launcher=launcher)
    assert result["status"] == "oom", result["error"]
    assert result["error"].startswith("rank 1: ") and "allocate" in result["error"]
    assert result["repeats_done"] == 1 and time.monotonic() - start < 300
    assert result["speedup"] is None and "did not succeed" in result["speedup_note"]


def test_peers_that_never_come_time_out_cleanly(tmp_path, tagged):
    # node 0 waits for a node 1 that never starts; a node 1 (placed by Slurm's variables) waits
    # for a node 0 that never starts. Both: status timeout soon after --rdzv-timeout.
    port0, port1 = free_port(), free_port()
    common = [sys.executable, "-m", "dlperf.cli", "run", *TINY_RESNET, "--device", "cpu",
              "--repeats", "3", "--rdzv-timeout", "2", "--db", str(tmp_path / "t.db")]
    slurm_env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
                 "SLURM_JOB_NODELIST": "127.0.0.[1]"}
    start = time.monotonic()
    lonely_master = subprocess.Popen(
        [*common, "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
         "--master-port", str(port0), "--json", str(tmp_path / "m.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lonely_peer = subprocess.Popen([*common, "--master-port", str(port1), "--json",
                                    str(tmp_path / "p.json")], env=slurm_env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [proc.communicate(timeout=300) for proc in (lonely_master, lonely_peer)]
    assert time.monotonic() - start < 150, outputs
    assert [p.returncode for p in (lonely_master, lonely_peer)] == [1, 1], outputs
    master, peer = load(tmp_path / "m.json"), load(tmp_path / "p.json")
    assert master["status"] == "timeout" and master["repeats_done"] == 1
    assert "rendezvous timed out after 2 s" in master["error"]
    assert "1 of 2 nodes joined" in master["error"]
    assert peer["status"] == "timeout" and peer["node_rank"] == 1
    assert "node 0 never answered at 127.0.0.1:" in peer["error"]
    assert peer["case"]["nnodes"] == 2  # from SLURM_NNODES


@pytest.mark.parallel
@pytest.mark.parametrize("nodelist, hosts", [
    ("node07", ["node07"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu[1-2],cpu5", ["gpu1", "gpu2", "cpu5"]),
    ("rack[1-2]-n[08-09]", ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]),
])
def test_slurm_nodelists(nodelist, hosts):
    assert slurm.expand_nodelist(nodelist) == hosts


@pytest.mark.parallel
def test_slurm_placement():
    place = slurm.position({"SLURM_NNODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_ID": "123456",
                             "SLURM_JOB_NODELIST": "node[10-13]"})
    assert place == slurm.JobPosition(nnodes=4, node_rank=2, master_addr="node10",
                                    master_port=18456, job_id="123456")  # 15000 + 3456
    assert slurm.position({}) is None


@pytest.mark.parallel
@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"],
     "--node-rank: 2 must be between 0 and 1"),
    (["--nnodes", "2"], "--master-addr: needed with --nnodes > 1"),
    (["--threads-per-process", "0"], "threads: 0 must be an integer >= 1"),
    (["--nnodes", "2", "--master-addr", "h", "--rdzv-timeout", "0"],
     "--rdzv-timeout: 0.0 must be seconds in (0, 86400]"),
])
def test_bad_distributed_flags_are_one_line_and_exit_2(args, message, tmp_path):
    proc = dlperf_main("run", *TINY_RESNET, *args, "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


@pytest.mark.parallel
def test_explain_reads_torchrun_failures():
    rdzv = launch.Rendezvous(master_addr="10.0.0.1", master_port=29500, timeout_s=30)
    log = ("Root Cause (first observed failure):\n[0]:\n  time : x\n  host : h\n"
           "  rank      : 3 (local_rank: 1)\n  exitcode  : -9 (pid: 12)  (SIGKILL)\n")
    status, message = torchrun.explain(log, rdzv)
    assert status == "oom" and message.startswith("rank 3: killed by SIGKILL")
    assert torchrun.explain(log.replace("-9 (pid", "1 (pid"), rdzv) is None
