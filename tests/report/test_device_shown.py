"""The device everywhere: every result, terminal table, report row and comparison names the device
a case ran on (resolved: ``cpu``, ``cuda:0 NVIDIA ...``), CPU and GPU results of one case are
never one row or one speedup, `compare` across devices needs ``--across-devices``, and ``--device
auto`` landing on the CPU of a GPU host says so and why.

One real tiny torch case (two repeats; the session's, tests/tiny_runs.py, shared with
test_run.py) serves every check of the commands (`dlperf ab`'s device: test_ab.py); a GPU twin
of it is a copy of that real result with another device, as a GPU host would have stored it
(this host has none).
"""

from __future__ import annotations

import copy
import importlib
import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import dlperf_main, load
from dlperf.result import auto_cpu_note, device_kind_name, device_of
from dlperf.store import Store
from dlperf.worker.support import device_label, resolved_device

H100 = "NVIDIA H100 80GB HBM3"
GPU = f"cuda:0 {H100}"
# what host/sysinfo.gpus() records for one GPU (NVML: name, memory, driver)
GPU_ENV = {"gpus": [{"name": H100, "memory_bytes": 85520809984, "driver": "565.57.01"}]}
WIDE = {"COLUMNS": "250"}  # the terminal table whole, not folded into ellipses


@pytest.fixture(scope="module")
def measured(tiny_resnet_run) -> dict:
    """One real tiny torch result (TINY_RESNET, two repeats), stored and written as JSON, with
    its terminal output (COLUMNS=250): the session's one run (tests/tiny_runs.py)."""
    return tiny_resnet_run


def on_gpu(result: dict, devices: int = 1) -> dict:
    """``result`` as a GPU host stores it: resolved to GPU 0 (an H100), with the host's GPUs."""
    twin = copy.deepcopy(result)
    twin["device"] = GPU
    twin["env"]["gpus"] = GPU_ENV["gpus"]
    twin["env"]["worker"]["device"] = resolved_device("cuda", 0, H100)
    twin["case"]["devices"] = devices
    return twin


def faster(result: dict, factor: float) -> dict:
    """``result`` with every throughput figure ``factor`` times its own (a GPU's speed)."""
    tp = result["throughput"]
    result["throughput"] = {**tp, **{k: tp[k] * factor for k in ("median", "mean", "min", "max")
                                     if tp.get(k) is not None},
                            "repeats": [v * factor for v in tp.get("repeats") or []]}
    return result


def store_results(path: Path, results: list[dict]) -> None:
    with Store(path) as store:
        for result in results:
            key = f"{result['case_key']} {result['case']['devices']} {result.get('device')}"
            run_id = store.start_run(key, result["label"], result["case"], result["env"])
            store.finish_run(run_id, result)


# --------------------------------------------------------------------------------------------
# the contract's pieces, with real inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parallel
def test_the_backend_resolves_its_device_with_a_reason():
    """torch's own resolve_device here (no GPU): the CPU, and why in words a user can act on."""
    device = importlib.import_module("dlperf.backends.torch").BACKEND.resolve_device("auto")
    assert device["kind"] == "cpu" and device["index"] is None
    assert "torch" in device["reason"]
    assert device_label(device) == "cpu"


@pytest.mark.parallel
def test_labels_name_kind_index_and_gpu():
    assert device_label(resolved_device("cuda", 1, " NVIDIA  A100 ")) == "cuda:1 NVIDIA A100"
    # a framework that names no GPU (MXNet, ONNX Runtime): the host's GPU at that index
    assert device_label(resolved_device("cuda", 0), [H100]) == GPU
    assert device_label(resolved_device("cuda", 3), [H100]) == "cuda:3"
    assert device_label(resolved_device("cpu", reason="why")) == "cpu"
    assert device_kind_name(GPU) == f"cuda {H100}" and device_kind_name("cpu") == "cpu"
    with pytest.raises(ValueError, match="allowed: cpu, cuda"):
        resolved_device("gpu")


def test_auto_on_the_cpu_of_a_gpu_host_says_so_and_why(measured):
    """The pure rule the result applies: a real worker record (this run's) on a host whose
    sysinfo lists a GPU."""
    worker = measured["result"]["env"]["worker"]["device"]
    env = {**measured["result"]["env"], **GPU_ENV}
    note = auto_cpu_note("torch", "auto", env, worker)
    assert note is not None and "\n" not in note
    assert note.startswith(f"--device auto ran torch on the cpu although this host has 1 GPU "
                           f"({H100}): ")
    assert note.endswith(worker["reason"])
    # no note: the CPU was asked for, the host has no GPU, or the run is on the GPU
    assert auto_cpu_note("torch", "cpu", env, worker) is None
    assert auto_cpu_note("torch", "auto", measured["result"]["env"], worker) is None
    assert auto_cpu_note("torch", "auto", env, resolved_device("cuda", 0, H100)) is None
    # this host: no note in the stored result
    assert not [w for w in measured["result"]["warnings"] if w.startswith("--device auto")]


def test_results_stored_before_the_device_was_recorded(measured, tmp_path):
    """Old results: from the backend's info and the host's GPUs, never a crash on an old row."""
    old = copy.deepcopy(measured["result"])
    del old["device"]
    del old["env"]["worker"]["device"]
    assert device_of(old) == "cpu"
    gpu = copy.deepcopy(old)
    gpu["env"]["gpus"] = GPU_ENV["gpus"]
    gpu["env"]["worker"]["framework"].update(device="cuda:0", device_name=H100)
    assert device_of(gpu) == GPU
    gpu["env"]["worker"]["framework"].update(device="gpu(0)", device_name="gpu:0")  # MXNet's
    assert device_of(gpu) == GPU
    bare = {"case": {"device": "auto"}, "env": GPU_ENV}  # nothing but the host's GPUs
    assert device_of(bare) == "cuda" and device_of({"case": {}}) == "cpu"
    # an existing database with such a row: the report reads it with its device
    db = tmp_path / "old.db"
    store_results(db, [old])
    with sqlite3.connect(db) as raw:
        (text,) = raw.execute("SELECT result_json FROM runs").fetchone()
    assert "device" not in json.loads(text)
    # the commands that read stored results run through dlperf's main in this process here:
    # what they print is checked, not a fresh interpreter (test_fuzz_cli checks both alike)
    proc = dlperf_main("report", "--db", str(db), "--format", "csv", check=True)
    (row,) = csv.DictReader(io.StringIO(proc.stdout))
    assert row["device"] == "cpu" and row["device_requested"] == "auto"


# --------------------------------------------------------------------------------------------
# the commands, on the real result
# --------------------------------------------------------------------------------------------


def test_the_result_and_the_terminal_table_name_the_device(measured):
    result = measured["result"]
    assert result["device"] == "cpu" and result["case"]["device"] == "auto"
    assert result["env"]["worker"]["device"]["kind"] == "cpu"
    header = next(line for line in measured["stdout"].splitlines() if "framework" in line)
    cells = [cell.strip() for cell in header.split("┃") if cell.strip()]
    assert cells[cells.index("compile") + 1] == "device"
    row = next(line for line in measured["stdout"].splitlines() if "resnet50" in line)
    assert [cell.strip() for cell in row.split("│") if cell.strip()][cells.index("device")] == "cpu"


def test_reports_keep_cpu_and_gpu_apart(measured, tmp_path):
    """A CPU result, its GPU twin and a 2-GPU run: two summary rows, each named; the 2-GPU
    speedup is over the GPU's 1-device result, never the CPU's."""
    cpu = measured["result"]
    gpu = faster(on_gpu(cpu), 10)
    two = faster(on_gpu(cpu, devices=2), 15)
    for result in (gpu, two):
        for key in ("speedup", "scaling_efficiency", "speedup_baseline", "speedup_note"):
            result.pop(key, None)
    db = tmp_path / "mixed.db"
    store_results(db, [cpu, gpu, two])
    markdown = dlperf_main("report", "--db", str(db), "--format", "md", check=True).stdout
    header = next(line for line in markdown.splitlines() if line.startswith("| framework"))
    assert header.startswith("| framework | version | variant | device | FP32 throughput")
    rows = [line for line in markdown.splitlines() if line.startswith("| torch |")]
    assert [row.split(" | ")[3] for row in rows] == ["cpu", GPU]
    assert f"torch · eager · {GPU} · fp32" in markdown and "torch · eager · cpu · fp32" in markdown
    assert f"scaling of torch · eager · {GPU}" in markdown
    data = json.loads(dlperf_main("report", "--db", str(db), "--format", "json", check=True).stdout)
    scaled = next(r for r in data if r["case"]["devices"] == 2)
    assert scaled["speedup"] == pytest.approx(1.5)  # over the GPU's 1 device, not 15x the CPU
    html = dlperf_main("report", "--db", str(db), "--format", "html", check=True).stdout
    assert f'<td class="l">{GPU}</td>' in html and '<td class="l">cpu</td>' in html
    table = list(csv.DictReader(io.StringIO(
        dlperf_main("report", "--db", str(db), "--format", "csv", check=True).stdout)))
    assert sorted(r["device"] for r in table) == ["cpu", GPU, GPU]


def test_compare_names_devices_and_refuses_across_them(measured, tmp_path):
    same = dlperf_main("compare", str(measured["json"]), str(measured["json"]), check=True, env=WIDE)
    row = next(line for line in same.stdout.splitlines() if "resnet50" in line)
    assert "│ cpu " in row
    gpu_json = tmp_path / "gpu.json"
    gpu_json.write_text(json.dumps(on_gpu(measured["result"])))
    refused = dlperf_main("compare", str(measured["json"]), str(gpu_json), env=WIDE)
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "ran on cpu in the baseline and on " + GPU in refused.stderr
    assert "--across-devices" in refused.stderr and "Traceback" not in refused.stderr
    asked = dlperf_main("compare", str(measured["json"]), str(gpu_json), "--across-devices",
                   "--json", str(tmp_path / "c.json"), check=True, env=WIDE)
    assert (f"different devices, compared as asked (--across-devices): "
            f"{measured['result']['label']}: baseline on cpu, candidate on {GPU}") in asked.stdout
    assert f"cpu → {GPU}" in asked.stdout
    (case,) = load(tmp_path / "c.json")["cases"]
    assert (case["baseline_device"], case["candidate_device"]) == ("cpu", GPU)



@pytest.mark.parallel
def test_the_scaling_line_names_the_device():
    from dlperf import scaling

    result = {"case": {"devices": 2, "nnodes": 1}, "speedup": 1.8, "scaling_efficiency": 0.9,
              "speedup_baseline": {"throughput": 10.0, "run_id": 3},
              "device": "cuda:0 NVIDIA H100 80GB HBM3"}
    line = scaling.describe(result)
    assert line.startswith("speedup 1.80x on 2 devices (cuda NVIDIA H100 80GB HBM3) over 1 device")
    assert scaling.describe(dict(result, device="cpu")).startswith(
        "speedup 1.80x on 2 devices (cpu) over 1 device")
