"""NVIDIA DALI as torch's input pipeline (`dlperf run --data DIR --loader dali`), on this
GPU-less machine: DALI's CPU-only mode (device_id None, CPU operators), installed by the real
`dlperf envs install dali` (the hashed overlay beside dlperf's environment; a no-op once it is
current), real torch, real `dlperf` subprocesses. 24 JPEGs of 40x30 in 4 classes, image size 32,
batch 4: 6 batches per epoch. And the refusals: another framework's `--loader dali` is an
`unsupported` result with its reason, a missing DALI too, bad choices are one line and exit 2."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from conftest import (CUT_RESNET50, CUT_RESNET50_FLAGS, dlperf, dlperf_main, files_of, load,
                      own_lock, pinned_env, tiny_dataset)
from measured import check_measured
from package_index import PYPI, reachable_or_skip
from dlperf.spec import Case

COUNT, BATCH = 24, 4
BATCHES_PER_EPOCH = COUNT // BATCH
LOCK = own_lock("test_data_dali")
TINY = ["--model", "resnet50", "--image-size", "32", "--num-classes", "4", "--batch-size",
        str(BATCH), "--warmup-steps", "1", "--repeats", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("data"), COUNT)


@pytest.fixture(scope="module")
def dali() -> str:
    """DALI's overlay, installed (or found current) the way a user does it; installing reads
    the package index, so without one (and no current overlay) the tests that need it skip."""
    from dlperf.envs import dali as overlay

    if overlay.current_stamp() is None:
        reachable_or_skip(PYPI)
    proc = dlperf("envs", "install", "dali", timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("dali: "), proc.stdout
    return proc.stdout


def run(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[int, dict]:
    proc = dlperf("run", *args, "--db", str(tmp_path / "r.db"), "--json",
                  str(tmp_path / "r.json"), env={**LOCK, **(env or {})})
    return proc.returncode, load(tmp_path / "r.json")


def test_training_through_dali_on_the_cpu(dali, dataset, tmp_path):
    # ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is the
    # pipeline that feeds the model, whatever its depth
    code, result = run(tmp_path, "--framework", "torch", *TINY, *CUT_RESNET50_FLAGS, "--steps",
                       "2", "--data", str(dataset), "--loader", "dali", "--loader-workers", "2")
    assert code == 0 and result["status"] == "ok", result.get("error")
    check_measured(result)
    assert all(math.isfinite(v) for v in result["loss"]["first"] + result["loss"]["last"])
    assert result["case"]["loader"] == "dali" and "data dali 2lw" in result["label"]
    loader = result["data"]["loader"]
    assert loader["loader"] == "dali" and loader["pipeline"].startswith("NVIDIA DALI 2.")
    assert loader["dali_mode"] == "CPU-only (device_id None)"
    assert loader["decoder"] == "fn.decoders.image, device cpu"
    assert (loader["num_threads"], loader["loader_workers"], loader["images"],
            loader["batches_per_epoch"], loader["last_batch_policy"]) == (
        2, 2, COUNT, BATCHES_PER_EPOCH, "DROP")
    assert "RandomResizedCrop(32" in loader["augmentation"]
    native = Case(framework="torch", model="resnet50", batch_size=BATCH, data=str(dataset),
                  loader_workers=2, knobs={"image_size": 32, "num_classes": 4, **CUT_RESNET50},
                  warmup_steps=1, steps=2, device="cpu")
    assert result["case_key"] != native.key()  # the loader is part of the case's identity


def test_data_only_through_dali_spans_epochs(dali, dataset, tmp_path):
    # the first step (the one warm-up step), then 10 window steps: batches 1..10 of 6 a pass
    code, result = run(tmp_path, "--framework", "torch", *TINY, "--steps", "10", "--data",
                       str(dataset), "--loader", "dali", "--data-only")
    assert code == 0 and result["status"] == "ok", result.get("error")
    assert result["model"]["params"] is None
    check_measured(result)
    data = result["data"]
    assert data["mode"] == "data-only" and data["loader"]["loader"] == "dali"
    assert data["loader"]["loader_workers_default"] is True
    passes = data["passes"]["repeats"][0]
    assert passes["epochs"] == [0, 1] and (passes["first_pass_steps"],
                                           passes["later_pass_steps"]) == (5, 5)
    framework = result["env"]["worker"]["framework"]
    assert framework["data"]["epochs_started"] == 2
    assert framework["data"]["batches_fetched"] == 11
    assert all(math.isfinite(v) and abs(v) < 3 for v in result["loss"]["last"])


def test_a_broken_image_fails_the_case_in_one_line(dali, dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    files_of(broken)[2].write_bytes(b"not a JPEG")  # in DALI's first batch, whatever the order
    code, result = run(tmp_path, "--framework", "torch", *TINY, "--steps", "10", "--data",
                       str(broken), "--loader", "dali", "--data-only")
    assert code == 1 and result["status"] == "crash"
    assert "DALI: Error in CPU operator `nvidia.dali.fn.decoders.image`" in result["error"]
    assert str(broken.resolve()) in result["error"] and "\n" not in result["error"]


def test_missing_dali_is_unsupported_with_the_way_to_install_it(dataset, tmp_path):
    # an empty environments root: no overlay there, and dlperf's own environment has no DALI
    # (the worker builds the model before its feed: ResNet-50 cut, conftest's CUT_RESNET50)
    code, result = run(tmp_path, "--framework", "torch", *TINY, *CUT_RESNET50_FLAGS, "--steps",
                       "2", "--data", str(dataset), "--loader", "dali",
                       env={"DLPERF_ENVS": str(tmp_path / "no-envs")})
    assert code == 1 and result["status"] == "unsupported"
    assert "NVIDIA DALI is not installed" in result["error"]
    assert "dlperf envs install dali" in result["error"]


def test_another_frameworks_dali_is_unsupported(dataset, tmp_path):
    pinned_env("paddle")
    code, result = run(tmp_path, "--framework", "paddle", *TINY, "--steps", "2", "--data",
                       str(dataset), "--loader", "dali")
    assert code == 1 and result["status"] == "unsupported"
    assert ("UnsupportedError: the paddle backend reads a dataset folder with its own pipeline "
            "(paddle.io.DataLoader") in result["error"]
    assert result["error"].endswith("it has no --loader dali")


@pytest.mark.parallel
@pytest.mark.parametrize("args, expected", [
    (["--data", "{data}", "--loader", "nope"], "--loader: invalid choice"),
    (["--loader", "dali"], "loader: --loader needs data to be a dataset directory"),
    (["--data", "{data}", "--loader", "dali", "--loader-workers", "0"], "loader_workers:"),
])
def test_bad_loader_choices_are_one_line(dataset, tmp_path, args, expected):
    filled = [a.format(data=dataset) for a in args]
    proc = dlperf_main("run", "--framework", "torch", *TINY, *filled, "--db",
                       str(tmp_path / "r.db"), env=LOCK)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert expected in lines[0], lines[0]
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parallel
def test_the_default_loader_leaves_case_keys_alone(dataset):
    case = Case(framework="torch", model="resnet50", batch_size=4, data=str(dataset))
    assert "loader" not in case.identity() and case.label().endswith(" data")
    dali_case = Case(framework="torch", model="resnet50", batch_size=4, data=str(dataset),
                     loader="dali")
    assert dali_case.identity()["loader"] == "dali" and dali_case.key() != case.key()
    assert dali_case.label().endswith(" data dali")
