"""Real input pipeline of PaddlePaddle (paddle.io.DataLoader) over a dataset folder
(`dlperf run --data DIR`, `--data-only`): the real environment, real `dlperf` subprocesses; 24
JPEGs of 40x30 in 4 classes, image size 32, batch 4 (6 batches per epoch). The pattern of
tests/fixtures/test_data_pipeline_tf_jax.py, with the Paddle loader's NCHW layout and worker processes.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf, files_of, load, pinned_env, tiny_dataset
from measured import check_measured

MANIFEST = "dlperf-dataset.json"
COUNT, BATCH, WARMUP = 24, 4, 1
BATCHES_PER_EPOCH = COUNT // BATCH
TINY = ["--framework", "paddle", "--model", "resnet50", "--image-size", "32", "--num-classes",
        "4", "--batch-size", str(BATCH), "--warmup-steps", str(WARMUP), "--repeats", "1",
        "--device", "cpu"]


@pytest.fixture(scope="module", autouse=True)
def paddle_env() -> None:
    """The paddle environment from its pinned set."""
    pinned_env("paddle")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("data"), COUNT)



def test_training_on_the_folder(dataset, tmp_path):
    # ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is the
    # pipeline that feeds the model, whatever its depth
    proc = dlperf("run", *TINY, *CUT_RESNET50_FLAGS, "--steps", "2", "--data", str(dataset),
                  "--loader-workers", "1", "--db", str(tmp_path / "r.db"),
                  "--json", str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0 and result["status"] == "ok", (result.get("error"), proc.stderr)
    assert result["model"]["params"] == result["model"]["catalogue_params"] > 0  # the cut one
    check_measured(result)
    assert all(math.isfinite(v) for v in result["loss"]["first"] + result["loss"]["last"])
    data = result["data"]
    assert data["mode"] == "data+compute" and data["path"] == str(dataset.resolve())
    assert data["dataset"]["digest"] == load(dataset / MANIFEST)["digest"]
    loader = data["loader"]
    assert "paddle.io.DataLoader" in loader["pipeline"] and loader["layout"] == "NCHW"
    assert (loader["images"], loader["batches_per_epoch"], loader["drop_last"]) == (
        COUNT, BATCHES_PER_EPOCH, True)
    assert (loader["loader_workers"], loader["loader_workers_default"]) == (1, False)
    assert loader["use_shared_memory"] is True and loader["prefetch_factor"] == 2
    assert "RandomResizedCrop(32" in loader["augmentation"]
    assert loader["decoder"].startswith("Pillow ")
    # the first step and 1 warm-up step, then the 2-step window: batches 1 and 2 of epoch 0
    assert data["passes"]["repeats"][0]["epochs"] == [0, 0]
    counters = result["env"]["worker"]["framework"]["data"]
    assert (counters["batches_fetched"], counters["epochs_started"]) == (WARMUP + 2, 1)


def test_data_only_runs_into_the_second_epoch(dataset, tmp_path):
    steps = BATCHES_PER_EPOCH + 2  # with the warm-up step: batches 0..8, epoch 1 from batch 6
    fetched = WARMUP + steps
    proc = dlperf("run", *TINY, "--steps", str(steps), "--data", str(dataset), "--data-only",
                  "--loader-workers", "2",
                  "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0 and result["status"] == "ok", (result.get("error"), proc.stderr)
    assert result["case"]["data_only"] is True and result["model"]["params"] is None
    data = result["data"]
    assert data["mode"] == "data-only"
    assert data["loader"]["loader_workers"] == 2 and data["loader"]["layout"] == "NCHW"
    passes = data["passes"]["repeats"][0]
    assert passes["epochs"] == [0, 1] and data["passes"]["spans_epochs"] == [True]
    assert (passes["first_pass_steps"], passes["later_pass_steps"]) == (
        BATCHES_PER_EPOCH - WARMUP, fetched - BATCHES_PER_EPOCH)
    counters = result["env"]["worker"]["framework"]["data"]
    assert counters["batches_fetched"] == fetched
    assert counters["epochs_started"] == (fetched - 1) // BATCHES_PER_EPOCH + 1 == 2
    # the "loss" of a data-only step is the batch's mean normalised pixel
    assert all(math.isfinite(v) and abs(v) < 3 for v in result["loss"]["last"])


@pytest.mark.parametrize("workers", [1, 0])
def test_a_truncated_jpeg_fails_the_case_naming_the_file(workers, dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    victim = files_of(broken)[5]
    victim.write_bytes(victim.read_bytes()[:400])  # a JPEG cut short: header, no end
    # one epoch and more: every file is read, the broken one included, in a worker process or
    # (0 workers) in the loader's thread, which paddle 3.3.1 lets die without waking the step
    proc = dlperf("run", *TINY, "--steps", str(BATCHES_PER_EPOCH), "--data", str(broken),
                  "--data-only", "--loader-workers", str(workers),
                  "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json"),
                  timeout=180)
    result = load(tmp_path / "r.json")
    assert proc.returncode == 1 and result["status"] == "crash", proc.stderr
    assert str(victim.resolve()) in result["error"] and "DatasetError" in result["error"]
