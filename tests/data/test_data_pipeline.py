"""Real input pipelines (issue 14): `dlperf data make-images`, and `dlperf run --data DIR`,
`--data-only`, `--cold-cache` and `--data both:DIR` with torch. Real Pillow, real torch, real
`dlperf` subprocesses; 64 JPEGs of 64x48 in 4 classes, image size 32, batch 4."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import CUT_RESNET50, CUT_RESNET50_FLAGS, dlperf, dlperf_main, load
from measured import check_measured
from dlperf.spec import Case
from dlperf.worker import pagecache

MANIFEST = "dlperf-dataset.json"
MAKE = ["--count", "64", "--size", "64x48", "--classes", "4"]
TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--num-classes",
        "4", "--batch-size", "4", "--warmup-steps", "2", "--steps", "2", "--repeats", "1"]
BATCHES_PER_EPOCH = 64 // 4
# the training runs' ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what they
# check is the pipeline that feeds the model, whatever its depth
TRAIN = [*TINY, *CUT_RESNET50_FLAGS]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "images"
    dlperf("data", "make-images", str(out), *MAKE, "--jobs", "1", check=True)
    return out


def files_of(root: Path) -> list[Path]:
    return sorted((root / "train").rglob("*.JPEG"))


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_make_images_layout_manifest_and_determinism(dataset, tmp_path):
    manifest = load(dataset / MANIFEST)
    assert (manifest["format"], manifest["layout"], manifest["split"]) == (
        "dlperf-images", "imagenet", "train")
    assert (manifest["count"], manifest["classes"], manifest["width"], manifest["height"],
            manifest["seed"]) == (64, 4, 64, 48, 0)
    classes = sorted(p.name for p in (dataset / "train").iterdir())
    assert len(classes) == 4
    for name in classes:
        members = sorted(p.name for p in (dataset / "train" / name).iterdir())
        assert len(members) == 16 and all(m.startswith(name + "_") and m.endswith(".JPEG")
                                           for m in members)
    files = files_of(dataset)
    assert manifest["total_bytes"] == sum(f.stat().st_size for f in files)
    with Image.open(files[0]) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (64, 48), "RGB")
        spread = float(np.asarray(image.convert("L"), dtype=np.float64).std())
    assert spread > 8, "a flat picture would not decode like a photograph"

    again = tmp_path / "again"  # same seed, more processes: the same bytes
    dlperf("data", "make-images", str(again), *MAKE, "--jobs", "2", check=True)
    assert load(again / MANIFEST)["digest"] == manifest["digest"]
    assert [f.read_bytes() for f in files_of(again)] == [f.read_bytes() for f in files]
    other = tmp_path / "other"
    dlperf("data", "make-images", str(other), *MAKE, "--seed", "1", check=True)
    assert load(other / MANIFEST)["digest"] != manifest["digest"]
    assert files_of(other)[0].read_bytes() != files[0].read_bytes()

    line = one_error_line(dlperf("data", "make-images", str(again), *MAKE))
    assert "not empty" in line and "--force" in line
    dlperf("data", "make-images", str(again), "--count", "8", "--size", "64x48", "--classes",
           "2", "--force", check=True)
    assert len(files_of(again)) == 8 and load(again / MANIFEST)["count"] == 8


def test_training_on_the_folder(dataset, tmp_path):
    db = tmp_path / "r.db"
    dlperf("run", *TRAIN, "--data", str(dataset), "--loader-workers", "2",
           "--db", str(db), "--json", str(tmp_path / "r.json"), check=True)
    result = load(tmp_path / "r.json")
    check_measured(result)
    assert result["case"]["data"] == str(dataset.resolve())
    assert result["case"]["loader_workers"] == 2 and result["case"]["cold_cache"] is False
    assert result["model"]["params"] == result["model"]["catalogue_params"]
    assert all(math.isfinite(v) for v in result["loss"]["first"] + result["loss"]["last"])
    data = result["data"]
    assert data["mode"] == "data+compute" and data["path"] == str(dataset.resolve())
    assert data["dataset"]["count"] == 64 and data["dataset"]["classes"] == 4
    assert data["dataset"]["digest"] == load(dataset / MANIFEST)["digest"]
    loader = data["loader"]
    assert (loader["loader_workers"], loader["persistent_workers"], loader["prefetch_factor"],
            loader["drop_last"], loader["pin_memory"]) == (2, True, 2, True, False)
    assert loader["batches_per_epoch"] == BATCHES_PER_EPOCH and loader["images"] == 64
    assert "RandomResizedCrop(32" in loader["augmentation"] and loader["decoder"].startswith(
        "Pillow")
    assert data["cache"]["requested"] == "warm" and data["cache"]["method"] is None
    # first step + 1 warm-up step, then the 2-step window: batches 2 and 3 of epoch 0
    assert data["passes"]["first_pass_in_window"] == [True]
    assert data["passes"]["repeats"][0]["epochs"] == [0, 0]
    assert data["passes"]["repeats"][0]["later_pass_throughput"] is None
    assert "data 2lw" in result["label"]
    stored = json.loads(sqlite3.connect(db).execute(
        "SELECT result_json FROM runs").fetchone()[0])
    assert stored["data"] == data
    synthetic = Case(framework="torch", model="resnet50", batch_size=4,
                     knobs={"image_size": 32, "num_classes": 4, **CUT_RESNET50}, warmup_steps=2,
                     steps=2)
    assert result["case_key"] != synthetic.key()


def test_data_only_measures_the_pipeline_over_epochs(dataset, tmp_path):
    # 20 window steps after 2 warm-up steps: batches 2..21, across the end of epoch 0 (16)
    dlperf("run", *TINY[:-4], "--steps", "20", "--repeats", "1", "--data", str(dataset), "--loader-workers", "0", "--data-only",
           "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json"), check=True)
    result = load(tmp_path / "r.json")
    assert result["status"] == "ok" and result["case"]["data_only"] is True
    assert len(result["throughput"]["repeats"]) == 1
    check_measured(result)
    assert result["model"]["params"] is None and result["flops"]["achieved_per_s"] is None
    assert result["flops"]["mfu"] is None and not any("parameters" in w
                                                      for w in result["warnings"])
    data = result["data"]
    assert data["mode"] == "data-only"
    assert (data["loader"]["loader_workers"], data["loader"]["persistent_workers"],
            data["loader"]["prefetch_factor"]) == (0, False, None)
    passes = data["passes"]["repeats"][0]
    assert data["passes"]["spans_epochs"] == [True] and passes["epochs"] == [0, 1]
    assert (passes["first_pass_steps"], passes["later_pass_steps"]) == (14, 6)
    assert passes["first_pass_throughput"] > 0 and passes["later_pass_throughput"] > 0
    framework = result["env"]["worker"]["framework"]
    assert framework["data"]["epochs_started"] == 2 and framework["data"]["batches_fetched"] == 22
    # the "loss" of a data-only step is the batch's mean normalised pixel: finite
    assert all(math.isfinite(v) and abs(v) < 3 for v in result["loss"]["last"])


def test_a_broken_image_fails_the_case_naming_the_file(dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    victim = files_of(broken)[5]
    victim.write_bytes(b"not a JPEG")
    # 22 batches of 4 read all 64 files of the first epoch, the broken one included
    proc = dlperf("run", *TINY[:-4], "--steps", "20", "--repeats", "1", "--data", str(broken),
                  "--loader-workers", "2", "--data-only", "--db", str(tmp_path / "r.db"),
                  "--json", str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 1 and result["status"] == "crash"
    assert str(victim.resolve()) in result["error"] and "DataLoader worker" in result["error"]


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (longest mount point that prefixes it)."""
    best, kind = "", "?"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        if str(path).startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def test_cold_cache_records_what_this_machine_did(dataset, tmp_path):
    for f in files_of(dataset):  # warm every file first
        f.read_bytes()
    can_drop = os.access(pagecache.DROP_CACHES, os.W_OK)
    sticky = filesystem(dataset.resolve()) in ("tmpfs", "ramfs")
    proc = dlperf("run", *TINY, "--data", str(dataset), "--loader-workers", "2", "--data-only",
                  "--cold-cache", "--db", str(tmp_path / "r.db"), "--json",
                  str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0 and result["status"] == "ok", proc.stderr
    cache = result["data"]["cache"]
    assert cache["requested"] == "cold" and result["case"]["cold_cache"] is True
    [[node]] = cache["repeats"]  # one repeat, one node
    assert node["resident_before"] >= 0.9
    if can_drop:
        assert node["method"] == "sync; echo 3 > /proc/sys/vm/drop_caches"
        assert node["cached_bytes_after"] < node["cached_bytes_before"]
    else:
        assert node["method"].startswith("posix_fadvise") and node["drop_caches_refused"]
    if sticky:
        assert cache["state"] == "warm" and node["resident_after"] > 0.05
    else:
        assert cache["state"] == "cold" and node["resident_after"] <= 0.05
    assert "cold" in result["label"]


def test_eviction_fallback_when_drop_caches_is_refused(dataset, tmp_path):
    """Where /proc/sys/vm/drop_caches cannot be written, the dataset's own files are evicted
    and the result still checked (a path that cannot be written stands in for /proc)."""
    paths = [str(f) for f in files_of(dataset)]
    for path in paths:
        Path(path).read_bytes()
    record = pagecache.make_cold(paths, drop_path=str(tmp_path / "missing" / "drop_caches"))
    assert "cannot write" in record["drop_caches_refused"]
    assert record["method"].startswith("posix_fadvise") and record["resident_before"] >= 0.9
    if filesystem(dataset.resolve()) in ("tmpfs", "ramfs"):
        assert record["state"] == "warm" and "tmpfs" in record["note"]
    else:
        assert record["state"] == "cold" and record["resident_after"] <= 0.05


def test_data_both_stores_two_results_and_the_verdict(dataset, tmp_path):
    db = tmp_path / "r.db"
    proc = dlperf("run", *TRAIN, "--data", f"both:{dataset}", "--loader-workers", "0",
                  "--db", str(db), "--json", str(tmp_path / "r.json"), check=True)
    compute, fed = load(tmp_path / "r.json")
    assert compute["data"] == {"mode": "synthetic"} and compute["case"]["data"] == "synthetic"
    assert compute["case"]["loader_workers"] is None
    assert fed["data"]["mode"] == "data+compute" and fed["case"]["loader_workers"] == 0
    block = fed["data"]["vs_compute_only"]
    ratio = fed["throughput"]["median"] / compute["throughput"]["median"]
    assert block["ratio"] == pytest.approx(ratio)
    assert block["verdict"] == ("input-bound" if ratio < 0.9 else "not input-bound")
    assert block["compute_only_run_id"] == compute["run_id"]
    assert f"data+compute / compute-only = {ratio:.2f}: {block['verdict']}" in proc.stdout
    rows = sqlite3.connect(db).execute("SELECT id, result_json FROM runs ORDER BY id").fetchall()
    assert [row[0] for row in rows] == [compute["run_id"], fed["run_id"]]
    assert json.loads(rows[1][1])["data"]["vs_compute_only"] == block


@pytest.mark.parallel
def test_synthetic_case_keys_are_unchanged():
    """The new fields at their defaults leave stored cases' identity as it was."""
    assert Case(framework="torch", model="resnet50", batch_size=16).key() == "a3197d8deceeceb0"
    assert Case(framework="torch", model="bert-base", batch_size=8,
                knobs={"seq_len": 16}).key() == "4b6309b237b1c198"


BAD_INPUT = [
    (["data", "make-images", "{tmp}/a", "--size", "64by48"], "--size"),
    (["data", "make-images", "{tmp}/a", "--count", "3", "--classes", "4"], "--classes"),
    (["data", "make-images", "{tmp}/a", "--count", "0"], "--count"),
    (["data", "make-images", "{tmp}/a", "--quality", "100"], "--quality"),
    (["run", *TINY, "--data", "{tmp}/missing"], "data:"),
    (["run", *TINY, "--data", "{tmp}"], "dlperf-dataset.json"),
    (["run", *TINY, "--loader-workers", "2"], "loader_workers:"),
    (["run", *TINY, "--cold-cache"], "cold_cache:"),
    (["run", *TINY, "--data", "{data}", "--loader-workers", "-1"], "loader_workers:"),
    (["run", *TINY, "--num-classes", "3", "--data", "{data}"], "num_classes is 3"),
    (["run", "--framework", "torch", "--model", "bert-base", "--data", "{data}"], "data:"),
    (["run", *TINY, "--task", "infer", "--data", "{data}"], "task train"),
    (["run", "--framework", "mxnet", "--model", "resnet50", "--data", "{data}"],
     "mxnet measures synthetic data only"),
    (["run", *TINY, "--data", "{data}", "--data-only", "--compile"], "compile:"),
    (["run", *TINY, "--data", "both"], "both:DIR"),
    (["run", *TINY, "--data", "{data}", "--batch-size", "65"], "batch_size:"),
]


# the first of each command as a real process, the rest through dlperf's main in this process:
# validation only, refused before any worker starts (test_fuzz_cli checks both answer alike)
@pytest.mark.parallel
@pytest.mark.parametrize("args, expected, run", [
    (*case, dlperf if index in (0, 4) else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line_and_exit_2(dataset, tmp_path, args, expected, run):
    filled = [a.format(tmp=tmp_path, data=dataset) for a in args]
    assert expected in one_error_line(run(*filled, "--db", str(tmp_path / "r.db"))
                                      if filled[0] == "run" else run(*filled))
