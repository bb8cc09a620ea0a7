"""Real input pipelines of TensorFlow 2 (tf.data) and JAX (numpy loader) over a dataset folder
(`dlperf run --data DIR --data-only`): real environments, real `dlperf` subprocesses; 24
JPEGs of 40x30 in 4 classes, image size 32, batch 4 (6 batches per epoch). Training on the
folder (`--data DIR`) is tests/test_data_multiprocess.py's, on 2 processes with a shard each.

A framework whose environment is not installed is skipped, with the `dlperf envs install`
line to run. The JAX loader decodes with Pillow: where the JAX environment cannot import it
(its pinned requirements do not list it yet), the JAX cases are skipped saying so; a PYTHONPATH
that provides Pillow to that interpreter runs them.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from conftest import dlperf, files_of, load, pinned_env, tiny_dataset

MANIFEST = "dlperf-dataset.json"
COUNT, BATCH, WARMUP = 24, 4, 1
BATCHES_PER_EPOCH = COUNT // BATCH
FRAMEWORKS = ("tensorflow", "jax")
TINY = ["--model", "resnet50", "--image-size", "32", "--num-classes", "4", "--batch-size",
        str(BATCH), "--warmup-steps", str(WARMUP), "--repeats", "1", "--device", "cpu"]
PIPELINE = {"tensorflow": "tf.data", "jax": "numpy loader"}


def require(framework: str) -> None:
    pinned_env(framework)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("data"), COUNT)



@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_data_only_runs_into_the_second_epoch(framework, dataset, tmp_path):
    require(framework)
    steps = BATCHES_PER_EPOCH + 2  # with the warm-up step: batches 0..8, epoch 1 from batch 6
    fetched = WARMUP + steps
    proc = dlperf("run", "--framework", framework, *TINY, "--steps", str(steps), "--data",
                  str(dataset), "--data-only", "--loader-workers", "2",
                  "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0 and result["status"] == "ok", (result.get("error"), proc.stderr)
    assert result["case"]["data_only"] is True and result["model"]["params"] is None
    data = result["data"]
    assert data["mode"] == "data-only" and PIPELINE[framework] in data["loader"]["pipeline"]
    assert data["loader"]["layout"] == "NHWC" and data["loader"]["loader_workers"] == 2
    passes = data["passes"]["repeats"][0]
    assert passes["epochs"] == [0, 1] and data["passes"]["spans_epochs"] == [True]
    assert (passes["first_pass_steps"], passes["later_pass_steps"]) == (
        BATCHES_PER_EPOCH - WARMUP, fetched - BATCHES_PER_EPOCH)
    counters = result["env"]["worker"]["framework"]["data"]
    assert counters["batches_fetched"] == fetched
    assert counters["epochs_started"] == (fetched - 1) // BATCHES_PER_EPOCH + 1 == 2
    # the "loss" of a data-only step is the batch's mean normalised pixel
    assert all(math.isfinite(v) and abs(v) < 3 for v in result["loss"]["last"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_truncated_jpeg_fails_the_case_naming_the_file(framework, dataset, tmp_path):
    require(framework)
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    victim = files_of(broken)[5]
    victim.write_bytes(victim.read_bytes()[:400])  # a JPEG cut short: header, no end
    # one epoch and more: every file is read, the broken one included
    proc = dlperf("run", "--framework", framework, *TINY, "--steps", str(BATCHES_PER_EPOCH),
                  "--data", str(broken), "--data-only",
                  "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json"))
    result = load(tmp_path / "r.json")
    assert proc.returncode == 1 and result["status"] == "crash", proc.stderr
    assert str(victim.resolve()) in result["error"] and "DatasetError" in result["error"]
