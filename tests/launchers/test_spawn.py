"""dlperf.launchers.spawn: the process starter for frameworks configured by per-process variables."""

import json
import os
import subprocess
import sys
import time

import pytest

from dlperf import envs
from dlperf.launchers import launch, spawn
from dlperf.spec import Case

# multi-process jobs, a rank per core.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores


def run_spawn(tmp_path, body, nproc=2, extra=()):
    script = tmp_path / "rank.py"
    script.write_text("import json, os, sys, time\n" + body)
    return subprocess.run([sys.executable, "-m", "dlperf.launchers.spawn", "--nproc", str(nproc),
                           "--master-port", "4321", *extra, "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=60,
                          env=envs.worker_env())


def test_every_rank_gets_its_place_in_the_job(tmp_path):
    body = ("v = {k: os.environ[k] for k in os.environ if k.startswith('DLPERF_') and k not in "
            "('DLPERF_HARNESS_PID',) or k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE')}\n"
            f"open(os.path.join({str(tmp_path)!r}, 'r' + v['DLPERF_RANK']), 'w').write(json.dumps(v))\n")
    proc = run_spawn(tmp_path, body, nproc=2, extra=("--nnodes", "2", "--node-rank", "1",
                                                     "--master-addr", "10.1.2.3"))
    assert proc.returncode == 0, proc.stderr
    seen = {int(p.name[1:]): json.loads(p.read_text()) for p in tmp_path.glob("r[0-9]*")}
    assert sorted(seen) == [2, 3]
    # what spawn set (the test's own DLPERF_* variables, e.g. DLPERF_ENVS, pass through as given)
    placed = {k: v for k, v in seen[3].items()
              if k.startswith("DLPERF_") and os.environ.get(k) != v}
    assert placed == {"DLPERF_RANK": "3", "DLPERF_LOCAL_RANK": "1", "DLPERF_WORLD_SIZE": "4",
                       "DLPERF_LOCAL_WORLD_SIZE": "2", "DLPERF_NODE_RANK": "1",
                       "DLPERF_NNODES": "2", "DLPERF_MASTER_ADDR": "10.1.2.3",
                       "DLPERF_MASTER_PORT": "4321"}
    assert (seen[3]["RANK"], seen[3]["LOCAL_RANK"], seen[3]["WORLD_SIZE"]) == ("3", "1", "4")
    assert proc.stdout.count("exited with code 0") == 2


def test_a_failed_rank_stops_the_others_and_its_status_is_the_jobs(tmp_path):
    # rank 0 would wait for a peer forever (as in a collective); rank 1 fails with code 3
    body = "time.sleep(120) if os.environ['DLPERF_RANK'] == '0' else sys.exit(3)\n"
    start = time.monotonic()
    proc = run_spawn(tmp_path, body)
    assert proc.returncode == 3
    assert time.monotonic() - start < spawn.GRACE_S + spawn.KILL_AFTER_S + 20
    assert "dlperf.launchers.spawn: rank 1 exited with code 3" in proc.stdout
    assert "dlperf.launchers.spawn: rank 0 died from SIGTERM (exitcode -15)" in proc.stdout
    assert spawn.explain(proc.stdout) is None  # rank 1 exited by itself: its result file says why


def test_a_rank_killed_by_the_kernel_is_explained_as_oom(tmp_path):
    body = "os.kill(os.getpid(), 9) if os.environ['DLPERF_RANK'] == '1' else time.sleep(120)\n"
    proc = run_spawn(tmp_path, body)
    assert proc.returncode == 128 + 9
    status, message = spawn.explain(proc.stdout)
    assert status == "oom" and message.startswith("rank 1: killed by SIGKILL")


@pytest.mark.parallel
def test_the_spawn_launcher_builds_one_command_for_this_nodes_ranks(tmp_path):
    case = Case(framework="torch", model="resnet50", batch_size=2, devices=2, nnodes=2)
    launcher = launch.SpawnLauncher(launch.Rendezvous(node_rank=1, master_addr="10.0.0.5",
                                                      master_port=29511, timeout_s=40),
                                    python=sys.executable)
    spec = launcher(case, tmp_path / "case.json", tmp_path)
    at = spec.argv.index("--")
    assert spec.argv[:at] == [sys.executable, "-m", "dlperf.launchers.spawn", "--nproc", "2", "--nnodes",
                              "2", "--node-rank", "1", "--master-addr", "10.0.0.5",
                              "--master-port", "29511"]
    assert spec.argv[at + 1:at + 4] == [sys.executable, "-m", "dlperf.worker"]
    assert spec.ranks == 2 and not launcher.is_master(case)  # node 1 keeps its own two ranks
    assert spec.env["DLPERF_RDZV_TIMEOUT_S"] == "40" and spec.facts["master"] == "10.0.0.5:29511"
    one_node = Case(framework="torch", model="resnet50", batch_size=2, devices=2)
    spec = launch.SpawnLauncher(python=sys.executable)(one_node, tmp_path / "c.json", tmp_path)
    assert spec.ranks == 2 and spec.facts["master"].startswith("127.0.0.1:")
