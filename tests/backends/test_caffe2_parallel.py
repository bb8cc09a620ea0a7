"""Caffe2 over several processes: data_parallel_model with Gloo, meeting through the file store.

Real ranks started by dlperf.launchers.spawn in the caffe2 environment (Python 3.7); nothing is
mocked. A step on two ranks must average their gradients (tests/dp_check.py, the check every
engine passes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import CUT_RESNET50_ENTRIES, dlperf_main, pinned_env
from dp_check import check_native_engine
from measured import check_measured
from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

# multi-process jobs, a rank per core.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

HERE = Path(__file__).resolve().parents[1]
TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--option",
        "engine=cpu"]
SHORT = ["--warmup-steps", "1", "--steps", "2", "--repeats", "1"]
CASE = {"framework": "caffe2", "model": "resnet50", "task": "train", "batch_size": 2,
        "precision": "fp32", "device": "cpu", "seed": 3, "knobs": {"image_size": 32}}


@pytest.fixture(scope="module")
def caffe2_env() -> str:
    return pinned_env("caffe2")


def test_two_ranks_average_their_gradients(caffe2_env, tmp_path):
    """Caffe2's data_parallel_model over Gloo, both ranks as `dlperf run --devices 2` starts
    them (dlperf.launchers.caffe2: spawn and the file store): one step of two ranks fed seed +
    rank's batch averages their gradients (tests/dp_check.py, the check every engine passes),
    on Caffe2's own CPU operators (engine=cpu)."""
    check_native_engine("caffe2", caffe2_env, tmp_path, options="engine=cpu")


# the scaling sweep (devices 1 and 2 on engine cpu, ideep on 1), once for the module: its
# 2-process case is the one whose launcher facts are checked, its report the scaling table. What
# they check is the launch, the stored facts and the table, not ResNet-50's depth: the network cut
# to a bottleneck a stage (conftest's CUT_RESNET50; the averaging test keeps the whole network)
SWEEP = """
name: caffe2-scaling
defaults: {{framework: caffe2, model: resnet50, device: cpu, image_size: 32, batch_size: 2,
           {cut}, warmup_steps: 1, steps: 2, repeats: 1}}
matrix:
  devices: [1, 2]
  options: [engine=cpu]
include:
  - {{devices: 1, options: engine=ideep}}
""".format(cut=CUT_RESNET50_ENTRIES)


@pytest.fixture(scope="module")
def scaling_sweep(caffe2_env, tmp_path_factory) -> tuple[str, list[dict]]:
    """(the sweep's database, its results): the sweep run once, its harness through dlperf_main
    in this process (the ranks are still fresh processes)."""
    folder = tmp_path_factory.mktemp("caffe2-scaling")
    sweep = folder / "caffe2.yaml"
    sweep.write_text(SWEEP)
    db = str(folder / "r.db")
    proc = dlperf_main("sweep", str(sweep), "--db", db, "--json", str(folder / "out.json"),
                       timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return db, json.loads((folder / "out.json").read_text())


def test_two_processes_store_one_case_with_the_launcher_facts(scaling_sweep):
    (result,) = [r for r in scaling_sweep[1] if r["case"]["devices"] == 2]
    assert result["status"] == "ok", result.get("error")
    launch = result["launch"]
    assert launch["processes"] == 2 and "Gloo" in launch["launcher"]
    assert launch["rendezvous"].startswith("Caffe2 FileStoreHandler")
    assert not Path(launch["store_dir"]).exists()  # rank 0 removed the store after the gather
    info = result["env"]["worker"]["framework"]
    assert info["world_size"] == 2 and info["data_parallel"].startswith("data_parallel_model")
    assert result["global_batch"] == 4
    check_measured(result)


def test_ideep_with_several_processes_is_refused_with_the_reason(caffe2_env, tmp_path):
    out = tmp_path / "r.json"
    proc = dlperf_main("run", "--framework", "caffe2", *TINY[:-2], *SHORT, "--devices", "2",
                       "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "unsupported"
    assert "engine ideep with several processes" in result["error"]
    assert "--option engine=cpu" in result["error"]


def test_across_nodes_without_a_shared_directory_is_refused(caffe2_env, tmp_path):
    proc = dlperf_main("run", "--framework", "caffe2", *TINY, *SHORT, "--nnodes", "2",
                       "--node-rank", "1", "--master-addr", "127.0.0.1",
                       "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.strip().splitlines() if x]
    assert len(lines) == 1 and "--rdzv-dir" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.db").exists() or b"caffe2" not in (tmp_path / "r.db").read_bytes()


def test_sweep_report_scales_caffe2_over_its_own_engine(scaling_sweep, tmp_path):
    db = scaling_sweep[0]
    report = tmp_path / "report.md"
    # read back through dlperf's main in this process (test_fuzz_cli: a real process alike)
    dlperf_main("report", "--db", db, "-o", str(report), check=True)
    text = report.read_text()
    title = "scaling of caffe2 · net as built (RunNet) · engine=cpu · cpu"  # the device last
    assert text.count(title) == 1, text
    rows = [line for line in text.split(title)[1].strip().splitlines()[2:4]]
    assert rows[0].startswith("| fp32 | 2 | 1 | 1 | 1 |") and "| 1.00 | 100.0% |" in rows[0]
    assert rows[1].startswith("| fp32 | 2 | 1 | 2 | 2 |") and "%" in rows[1]
    assert "scaling of caffe2 · net as built (RunNet) · engine=ideep" not in text  # 1 device only


# the cut ResNet-50 too: what is checked is the Slurm step and its launch
SLURM_SWEEP = """
name: caffe2-slurm
defaults: {{framework: caffe2, model: resnet50, device: cpu, image_size: 32, batch_size: 2,
           {cut}, warmup_steps: 1, steps: 2, repeats: 1, options: engine=cpu}}
include:
  - {{devices: 2}}
""".format(cut=CUT_RESNET50_ENTRIES)


def test_two_processes_run_as_a_slurm_step(caffe2_env, slurm_cluster, tmp_path):
    (tmp_path / "s.yaml").write_text(SLURM_SWEEP)
    proc = slurm_cluster.run(["salloc", "-N", "1", sys.executable, "-m", "dlperf.cli", "sweep",
                              str(tmp_path / "s.yaml"), "--db", str(tmp_path / "s.db"),
                              "--json", str(tmp_path / "out.json")],
                             env={"DLPERF_LOCK_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads((tmp_path / "out.json").read_text())
    assert result["status"] == "ok" and len(result["ranks"]) == 2
    assert result["launch"]["slurm"]["step_nodes"] == 1
    assert result["launch"]["rendezvous"].startswith("Caffe2 FileStoreHandler")


def test_two_node_sweep_without_a_shared_directory_is_refused(caffe2_env, slurm_cluster,
                                                              tmp_path):
    (tmp_path / "s.yaml").write_text(SLURM_SWEEP.replace("{devices: 2}", "{nnodes: 2}"))
    proc = slurm_cluster.run(["salloc", "-N", "2", sys.executable, "-m", "dlperf.cli", "sweep",
                              str(tmp_path / "s.yaml"), "--db", str(tmp_path / "s.db")],
                             env={"DLPERF_LOCK_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--rdzv-dir" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s.db").exists()
