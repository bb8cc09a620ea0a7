"""`dlperf sweep` inside a real Slurm allocation (tests/slurm_cluster.py: munged, slurmctld and
two slurmd node names on this host), and multi-node sweeps refused where they cannot start.

Under ``salloc -N 2`` the sweep runs once; each repeat of each case is one srun step (one task
per Slurm node), the framework's launcher runs on every node with that node's rank, and node 0's
gathered rank files travel back through srun's output to the head, which stores the case once.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from conftest import CUT_RESNET50, TAG, assert_nothing_left, dlperf, load
from slurm_cluster import (clean_environ, emulated_slurm_cluster,  # noqa: F401  (fixtures)
                           slurm_cluster)

# Slurm steps on this host's CPUs.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

ROOT = Path(__file__).resolve().parents[2]
DLPERF = [sys.executable, "-m", "dlperf.cli"]

SWEEP = """\
name: slurm-tiny
defaults:
  framework: torch
  model: resnet50
  device: cpu
  image_size: 32
  batch_size: 2
  warmup_steps: 1
  steps: 2
  repeats: 1
include:
  - {nnodes: 1}
  - {nnodes: 2}
  - {nnodes: 2, precision: tf32}
"""
ONE = "torch resnet50 train bs2 fp32"
TWO = "torch resnet50 train bs2 fp32 2n1d"
REFUSED = "torch resnet50 train bs2 tf32 2n1d"
# the sweep that runs under salloc -N 2 with its ResNet-50 cut to a bottleneck a stage: the path
# through Slurm is what is checked, not the network (a torch run of it ~5-6 CPU-s, not ~8); the
# emulated hosts' sweep keeps the whole network, whose gradient bytes it counts on the link
CUT_SWEEP = SWEEP.replace("  repeats: 1\n", "  repeats: 1\n" + "".join(
    f"  {name}: {value}\n" for name, value in CUT_RESNET50.items()))
assert CUT_SWEEP != SWEEP


def job_id(salloc_stderr: str) -> int:
    found = re.search(r"Granted job allocation (\d+)", salloc_stderr)
    assert found, salloc_stderr
    return int(found.group(1))


@pytest.fixture(scope="module")
def swept(slurm_cluster, tmp_path_factory):
    """The tiny sweep, run once under ``salloc -N 2`` on the one-host cluster."""
    work = tmp_path_factory.mktemp("slurm-sweep")
    (work / "s.yaml").write_text(CUT_SWEEP)
    tag = uuid.uuid4().hex
    # a lock of its own: this test checks the path through Slurm, not timings, and need not
    # queue behind other measurements on a shared machine
    proc = slurm_cluster.run(["salloc", "-N", "2", *DLPERF, "sweep", str(work / "s.yaml"),
                              "--db", str(work / "s.db"), "--json", str(work / "out.json")],
                             env={TAG: tag, "DLPERF_LOCK_DIR": str(work)})
    return work, proc, tag


def test_sweep_under_salloc_runs_each_case_as_a_step_and_stores_it_once(slurm_cluster, swept):
    work, proc, tag = swept
    assert_nothing_left(tag, within_s=30)
    # one case failed (tf32 on a CPU): a failure is a result, and the exit code says so
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "each repeat runs as a job step (srun)" in proc.stderr
    job = job_id(proc.stderr)
    results = {r["label"]: r for r in load(work / "out.json")}
    assert set(results) == {ONE, TWO, REFUSED}
    con = sqlite3.connect(work / "s.db")
    rows = con.execute("SELECT label, status FROM runs ORDER BY id").fetchall()
    assert rows == [(ONE, "ok"), (TWO, "ok"), (REFUSED, "unsupported")]  # each stored once
    assert con.execute("SELECT COUNT(*) FROM repeats").fetchone()[0] == 3

    two, one = results[TWO], results[ONE]
    assert two["status"] == "ok" and two["case"]["nnodes"] == 2 and two["case"]["devices"] == 1
    assert [r["rank"] for r in two["ranks"]] == [0, 1]  # node 1's rank gathered at node 0
    assert two["global_batch"] == 4
    # the framework's own launcher on each node, its static rendezvous on the job's port
    assert two["launch"]["launcher"] == "torchrun" and two["launch"]["rendezvous"] == "static"
    assert two["launch"]["slurm"]["step_nodes"] == 2
    assert two["launch"]["slurm"]["job_id"] == str(job)
    assert two["launch"]["slurm"]["master_port"] == 15000 + int(str(job)[-4:])
    assert two["launch"]["slurm"]["srun"][:9] == [
        "srun", "--nodes", "2", "--ntasks", "2", "--ntasks-per-node", "1",
        "--kill-on-bad-exit=1", "--job-name"]
    # the 1-node case ran as a one-node step too, and is the 2-node case's baseline
    assert one["launch"]["slurm"]["step_nodes"] == 1 and one["launch"]["launcher"] == "local"
    speedup = two["throughput"]["median"] / one["throughput"]["median"]
    assert two["speedup"] == pytest.approx(speedup)
    assert two["scaling_efficiency"] == pytest.approx(speedup / 2)

    # Slurm itself started the tasks: each 2-node step on both slurmds, the 1-node one on n1
    n1, n2 = slurm_cluster.log("slurmd-n1.log"), slurm_cluster.log("slurmd-n2.log")
    for step in (1, 2):
        assert f"launch task StepId={job}.{step} " in n1 and f"StepId={job}.{step} " in n2
    assert f"launch task StepId={job}.0 " in n1 + n2


def test_each_node_sends_its_own_failure_back(swept):
    """tf32 is refused on both nodes before any rendezvous of the workers: rank 1's own result
    exists only on node 1 and still reaches the head through srun's output."""
    work, _, _ = swept
    con = sqlite3.connect(work / "s.db")
    detail = con.execute("SELECT r.detail_json FROM repeats r JOIN runs u ON u.id = r.run_id "
                         "WHERE u.label = ?", (REFUSED,)).fetchone()[0]
    ranks = json.loads(detail)["ranks"]
    assert [(r["rank"], r["status"]) for r in ranks] == [(0, "unsupported"),
                                                         (1, "unsupported")]
    result = {r["label"]: r for r in load(work / "out.json")}[REFUSED]
    assert result["error"].startswith("rank 0: UnsupportedError: precision tf32 needs a CUDA")


def test_a_step_slurm_cannot_create_is_a_failed_case_with_sruns_reason(slurm_cluster, tmp_path):
    """DLPERF_SRUN_ARGS reaches every step's srun; a step Slurm refuses is stored once, as a
    crash saying why, and the sweep goes on to its end."""
    (tmp_path / "s.yaml").write_text(SWEEP.replace("repeats: 1", "repeats: 2"))
    proc = slurm_cluster.run(["salloc", "-N", "2", *DLPERF, "sweep", str(tmp_path / "s.yaml"),
                              "--db", str(tmp_path / "s.db"), "--json", str(tmp_path / "o.json")],
                             env={"DLPERF_SRUN_ARGS": "--cpus-per-task=64",
                                  "DLPERF_LOCK_DIR": str(tmp_path)}, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job = job_id(proc.stderr)
    results = load(tmp_path / "o.json")
    assert [r["label"] for r in results] == [ONE, TWO, REFUSED]
    for result in results:
        assert result["status"] == "crash" and result["repeats_done"] == 1
        assert result["error"] == (f"srun: Unable to create step for job {job}: More processors "
                                   f"requested than permitted")
        assert "--cpus-per-task=64" in result["launch"]["slurm"]["srun"]
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3


def test_too_few_nodes_in_the_allocation_refuse_the_sweep(slurm_cluster, tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    proc = slurm_cluster.run(["salloc", "-N", "1", *DLPERF, "sweep", str(tmp_path / "s.yaml"),
                              "--db", str(tmp_path / "s.db")], timeout=120)
    job = job_id(proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("salloc:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert (f"case '{TWO}' and 1 more need 2 nodes (Slurm job {job} has 1 node(s)): run the "
            f"sweep inside a Slurm allocation of >= 2 nodes (salloc -N 2 dlperf sweep "
            f"{tmp_path / 's.yaml'}), across hosts emulated on this machine (--emulate-hosts, "
            f"as root), or pass --skip-multinode") in lines[0]
    assert not (tmp_path / "s.db").exists()
    # with the flag, the plan lists them as skipped and the rest stays measurable
    proc = slurm_cluster.run(["salloc", "-N", "1", *DLPERF, "sweep", str(tmp_path / "s.yaml"),
                              "--db", str(tmp_path / "s.db"), "--dry-run", "--skip-multinode"],
                             timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "1 case(s) (+2 skipped)" in proc.stdout
    assert proc.stdout.count("skipped: needs 2 nodes (--skip-multinode)") == 2
    assert "every case runs as a Slurm job step (srun)" in proc.stdout


def test_a_sweep_started_once_per_node_is_refused(slurm_cluster, tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    proc = slurm_cluster.run(["srun", "-N", "2", *DLPERF, "sweep", str(tmp_path / "s.yaml"),
                              "--db", str(tmp_path / "s.db"), "--dry-run"], timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("dlperf sweep runs once per allocation, not once per task") == 2


@pytest.mark.parallel
def test_multinode_sweep_is_refused_outside_slurm(tmp_path):
    v1 = ROOT / "sweeps" / "dlperf-v1.yaml"
    db = tmp_path / "v1.db"
    for extra in (["--dry-run"], []):
        proc = dlperf("sweep", str(v1), "--db", str(db), *extra, env=clean_environ())
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert lines[0] == (
            f"dlperf sweep: error: sweep dlperf-v1: case 'torch resnet50 train bs128 fp32 2n8d' "
            f"and 5 more need 2 nodes; case 'torch resnet50 train bs128 fp32 4n8d' and 5 more "
            f"need 4 nodes (not inside a Slurm allocation): run the sweep inside a Slurm "
            f"allocation of >= 4 nodes (salloc -N 4 dlperf sweep {v1}), across hosts emulated "
            f"on this machine (--emulate-hosts, as root), or pass --skip-multinode to measure "
            f"the other 12 case(s) without them")
        assert not db.exists()
    proc = dlperf("sweep", str(v1), "--db", str(db), "--dry-run", "--skip-multinode",
                  env=clean_environ())
    assert proc.returncode == 0, proc.stderr
    assert "12 case(s) (+12 skipped)" in proc.stdout
    assert proc.stdout.count("skipped: needs 2 nodes (--skip-multinode)") == 6
    assert proc.stdout.count("skipped: needs 4 nodes (--skip-multinode)") == 6
    assert not db.exists()


@pytest.mark.parallel
def test_every_node_address_reaches_a_step_that_names_its_workers(tmp_path):
    """TF_CONFIG names every worker: the head fills in placeholders that each step task
    replaces with the addresses Slurm gives for the step's nodes."""
    from dlperf.launchers import slurm, slurm_launch, slurm_step
    from dlperf.spec import Case

    case = Case(framework="tensorflow", model="resnet50", batch_size=2, nnodes=2, devices=1,
                device="cpu")
    head = slurm_launch.SlurmLauncher(case, slurm.Allocation("1", 2, 29500))
    addrs = [node.rendezvous.node_addrs for node in head.nodes]
    assert addrs == [(slurm_step.node_placeholder(0), slurm_step.node_placeholder(1))] * 2
    place = slurm_step.step_place({"SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2",
                                   "SLURM_STEP_NODELIST": "127.0.0.1,localhost"})
    assert place[:2] == (1, 2) and len(place[2]) == 2
    replacements = [(slurm_step.node_placeholder(r), a) for r, a in enumerate(place[2])]
    text = ",".join(addrs[0])
    assert slurm_step.substitute(text, replacements) == ",".join(place[2])


def test_a_two_node_sweep_across_emulated_hosts_meets_over_their_network(
        emulated_slurm_cluster, tmp_path):
    """The same sweep on a cluster whose two slurmd run on emulated hosts (each its own network
    namespace, name, address and CPU; NodeAddr its address): `salloc -N 2 dlperf sweep` on the
    first host starts each repeat as an srun step whose tasks run on both hosts, and the ranks
    meet across the hosts' link, as on a cluster."""
    from two_hosts import RESNET50_GRADIENT_BYTES

    cluster = emulated_slurm_cluster
    hosts = cluster.hosts
    (tmp_path / "s.yaml").write_text(SWEEP.replace("  - {nnodes: 1}\n", "").replace(
        "  - {nnodes: 2, precision: tf32}\n", ""))
    tag = uuid.uuid4().hex
    before = hosts.counters()
    proc = cluster.run(["salloc", "-N", "2", *DLPERF, "sweep", str(tmp_path / "s.yaml"),
                        "--db", str(tmp_path / "s.db"), "--json", str(tmp_path / "out.json")],
                       env={TAG: tag, "DLPERF_LOCK_DIR": str(tmp_path)})
    after = hosts.counters()
    assert_nothing_left(tag, within_s=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (two,) = load(tmp_path / "out.json")
    assert two["status"] == "ok" and two["label"] == TWO
    names = [h.hostname for h in hosts.hosts]
    assert [r["host"] for r in two["ranks"]] == names  # a rank on each emulated host
    assert two["launch"]["slurm"]["step_nodes"] == 2
    for start, end in zip(before, after):  # every training step's gradients crossed the link
        sent, loop = end["tx_bytes"] - start["tx_bytes"], end["lo_tx_bytes"] - start["lo_tx_bytes"]
        received = end["rx_bytes"] - start["rx_bytes"]
        assert sent >= 3 * RESNET50_GRADIENT_BYTES and received >= 3 * RESNET50_GRADIENT_BYTES
        assert loop < 0.05 * sent, (sent, loop)
    for name in names:
        assert "launch task StepId=" in cluster.log(f"slurmd-{name}.log")
