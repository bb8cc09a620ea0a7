"""Real input pipelines of TensorFlow 2 (tf.data) and JAX (numpy loader) over a dataset folder
(`dlperf run --data DIR --data-only`): real environments, real `dlperf` subprocesses; 24
JPEGs of 40x30 in 4 classes, image size 32, batch 4 (6 batches per epoch). Training on the
folder (`--data DIR`) is tests/fixtures/test_data_multiprocess.py's, on 2 processes with a shard each.

A framework whose environment is not installed is skipped, with the `dlperf envs install`
line to run. The JAX loader decodes with Pillow: where the JAX environment cannot import it
(its pinned requirements do not list it yet), the JAX cases are skipped saying so; a PYTHONPATH
that provides Pillow to that interpreter runs them.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import dlperf, files_of, load, pinned_env, tiny_dataset
from dlperf import envs

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


# a strategy's feed over two logical CPUs (a MultiDeviceIterator, as a multi-worker job's) and a
# plain one; each gives a batch, then both are dropped and collected
KEEPS_DISTRIBUTED = """
import gc, sys, weakref
import tensorflow as tf
from dlperf.backends.tensorflow import input_pipeline
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
case = {"data": sys.argv[1], "loader_workers": 1}
distributed = input_pipeline.Feed(case, 32, 4, 0, strategy=strategy, local=2)
plain = input_pipeline.Feed(case, 32, 4, 0)
distributed.next(), plain.next()
kept, freed = weakref.ref(distributed._iterator), weakref.ref(plain._iterator)
del distributed, plain
gc.collect()
print("distributed kept:", kept() is not None, "plain freed:", freed() is None)
"""


def test_a_distributed_iterator_is_never_freed_and_a_plain_one_is(dataset):
    """A rank's exit used to wait 0-60 s in the distributed iterator's destructor (the
    backend's input_pipeline doc): that iterator is kept to the process's end, while a one-process
    feed's is freed as usual."""
    python = pinned_env("tensorflow")
    proc = subprocess.run([python, "-c", KEEPS_DISTRIBUTED, str(dataset)], capture_output=True,
                          text=True, timeout=300, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "distributed kept: True plain freed: True"
