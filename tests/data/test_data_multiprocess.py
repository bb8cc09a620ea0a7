"""Data-parallel training fed from a dataset folder (issue 14): `dlperf run --data DIR --devices 2
--threads-per-process 1` in torch, tensorflow, jax and paddle, through each framework's own
launcher, and the input pipeline alone (`--data-only`) on 2 processes. Real environments, real
launchers, real subprocesses; 24 (or, for a split that does not divide evenly, 23) JPEGs of 40x30
in 4 classes, image size 32, batch 4 per process.

Every rank's own record is in the repeats stored in the database. Within an epoch the ranks must
read disjoint shards of the folder: each rank's shard holds files // ranks images (the same
number of batches per epoch on every rank, so the ranks' epochs stay in step), no rank reads the
whole folder, and the shards' sizes add up to the folder less the remainder the epoch rule drops.
Every pipeline also records each rank's epoch-0 shard as a count and an additive fingerprint of
its files' names (dlperf.data.imagefolder.shard_info), which this file recomputes from the
folder: the ranks' fingerprints add up to the folder's own (less the one file dropped from an
uneven split) only if no file is in two shards.

`--data-only --devices 2` runs the input pipeline alone on 2 processes through the same command
line: a barrier and a warm-up vote through the framework's collectives (torch.distributed's gloo
group in torch), a shard per rank.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from conftest import (CUT_RESNET50_FLAGS, VOTE_MAX_STEPS, check_voted_warmup, dlperf_main,
                      files_of, load, pinned_env, tiny_dataset)
from dlperf.store import Store

# two ranks, a core each, reading disjoint shards.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

EVEN, ODD, BATCH, WARMUP, STEPS, RANKS = 24, 23, 4, 2, 2, 2
TINY = ["--model", "resnet50", "--image-size", "32", "--num-classes", "4", "--batch-size",
        str(BATCH), "--device", "cpu", "--repeats", "1", "--loader-workers", "1"]
FRAMEWORKS = ("torch", "tensorflow", "jax", "paddle")
# each framework's own input pipeline, as the result names it, and the layout it says it feeds
# (torch's DataLoader gives NCHW tensors and does not say so)
PIPELINE = {"torch": ("torch.utils.data.DataLoader", None), "tensorflow": ("tf.data", "NHWC"),
            "jax": ("numpy loader", "NHWC"), "paddle": ("paddle.io.DataLoader", "NCHW")}
MANIFEST = "dlperf-dataset.json"
# each test's `dlperf run` goes through dlperf_main in this process: the harness itself is not
# what is checked (its ranks and launchers are still fresh processes), and a fresh harness
# interpreter cost ~0.5 CPU-s a test (of 8) on a 2-core EPYC


@pytest.fixture(scope="module")
def even(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("even"), EVEN)


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("odd"), ODD)


def prepare(framework: str) -> None:
    """The framework's pinned environment (JAX compiles quickly: tests/conftest.py)."""
    if framework != "torch":  # torch runs in the project's own environment
        pinned_env(framework)


def name_hash(name: str) -> int:
    """A file's term of a shard fingerprint: the first 8 bytes of the SHA-1 of its path under
    ROOT/train, big-endian."""
    return int(hashlib.sha1(name.encode("utf-8")).hexdigest()[:16], 16)


def folder_hashes(root: Path) -> list[int]:
    return [name_hash(f.relative_to(root / "train").as_posix()) for f in files_of(root)]


def rank_records(db: Path, run_id: int) -> list[dict]:
    """Every rank's own result of the run's only repeat, in rank order."""
    with Store(db, readonly=True) as store:
        [record] = store.repeats(run_id)
    return sorted(record["ranks"], key=lambda r: r["rank"])


def check_ranks(result: dict, steps: int) -> None:
    """Both ranks' figures; the job's throughput is the global samples over the slowest window;
    the global batch is the batch per process times the processes."""
    assert result["status"] == "ok", result.get("error")
    assert result["global_batch"] == BATCH * RANKS and result["case"]["devices"] == RANKS
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == list(range(RANKS))
    assert all(r["throughput"][0] > 0 and r["threads"] == 1 for r in ranks), ranks
    samples = sum(r["throughput"][0] * r["window_s"][0] for r in ranks)
    assert samples == pytest.approx(RANKS * BATCH * steps)
    assert result["throughput"]["repeats"][0] == pytest.approx(
        samples / max(r["window_s"][0] for r in ranks))


def check_shards(framework: str, records: list[dict], root: Path, count: int) -> list[dict]:
    """Each rank read its own shard of ``count`` files in an epoch (see the module's doc); the
    ranks' data blocks, in rank order."""
    data = [r["info"]["data"] for r in records]
    per_rank = count // RANKS
    assert [d["images"] for d in data] == [count] * RANKS
    assert [d["images_per_process"] for d in data] == [per_rank] * RANKS
    assert [d["batches_per_epoch"] for d in data] == [per_rank // BATCH] * RANKS
    fetched = [d["batches_fetched"] for d in data]
    assert fetched[0] == fetched[1] > per_rank // BATCH  # every rank into its second epoch
    assert [d["epochs_started"] for d in data] == [
        (f - 1) // (per_rank // BATCH) + 1 for f in fetched]
    if framework == "torch":
        assert [d["sampler"] for d in data] == ["DistributedSampler"] * RANKS
    shards = [d["shard"] for d in data]
    assert all(s["epoch"] == 0 and per_rank <= s["files"] < count for s in shards), shards
    hashes = folder_hashes(root)
    assert len(hashes) == count
    dropped = count - sum(s["files"] for s in shards)
    # tensorflow shards the file list by stride (Dataset.shard), every file in one shard; torch
    # (DistributedSampler), jax and paddle deal a permutation cut to a multiple of the ranks,
    # which leaves count % ranks out
    assert dropped == (0 if framework == "tensorflow" else count % RANKS)
    missing = (sum(hashes) - sum(int(s["fingerprint"], 16) for s in shards)) % 2 ** 64
    assert missing == 0 if dropped == 0 else missing in hashes, (shards, dropped)
    return data


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_processes_train_on_disjoint_shards(framework, even, tmp_path, tagged):
    prepare(framework)
    db = tmp_path / "r.db"
    # ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is the
    # shards the ranks read and the pipeline that fed the model, whatever its depth
    proc = dlperf_main("run", "--framework", framework, *TINY, *CUT_RESNET50_FLAGS,
                       "--warmup-steps", str(WARMUP), "--steps", str(STEPS), "--devices", str(RANKS),
                       "--threads-per-process", "1", "--data", str(even), "--db", str(db),
                       "--json", str(tmp_path / "r.json"), timeout=600)
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0, (result.get("error"), proc.stderr[-3000:])
    check_ranks(result, steps=STEPS)
    assert result["data"]["mode"] == "data+compute"
    # the cut network, built as the catalogue counts it
    assert result["model"]["params"] == result["model"]["catalogue_params"] > 0
    # the pipeline that fed the model (this is TF's and JAX's only training-on-a-folder test: the
    # one-process path differs only in the shard, which tests/fixtures/test_data_pipeline_tf_jax.py's
    # data-only runs cover)
    assert all(math.isfinite(v) for v in result["loss"]["first"] + result["loss"]["last"])
    assert result["data"]["path"] == str(even.resolve())
    assert result["data"]["dataset"]["digest"] == load(even / MANIFEST)["digest"]
    loader = result["data"]["loader"]
    pipeline, layout = PIPELINE[framework]
    assert pipeline in loader["pipeline"] and loader.get("layout") == layout, loader
    assert loader["drop_last"] is True and "RandomResizedCrop(32" in loader["augmentation"]
    data = check_shards(framework, rank_records(db, result["run_id"]), even, EVEN)
    # the first step (warm-up step 1 of 2), one more warm-up step and the 2-step window: batches
    # 0..3, of which batch 3 opens the second epoch
    assert [d["batches_fetched"] for d in data] == [WARMUP + STEPS] * RANKS
    assert result["data"]["passes"]["repeats"][0]["epochs"] == [0, 1]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_data_only_on_two_processes_uneven_split(framework, odd, tmp_path, tagged):
    """`dlperf run --data-only --devices 2`: 23 files over 2 ranks, 11 each per epoch on every
    framework (tensorflow's strided shards hold 12 and 11), 2 batches, the ranks' warm-up decided
    by a vote through the framework's collectives."""
    prepare(framework)
    db = tmp_path / "r.db"
    proc = dlperf_main("run", "--framework", framework, *TINY, "--warmup-steps", "auto",
                       "--warmup-max-steps", str(VOTE_MAX_STEPS), "--steps", str(STEPS),
                       "--devices", str(RANKS), "--threads-per-process", "1", "--data", str(odd),
                       "--data-only", "--timeout", "300", "--db", str(db),
                       "--json", str(tmp_path / "r.json"), timeout=600)
    result = load(tmp_path / "r.json")
    assert proc.returncode == 0, (result.get("error"), proc.stderr[-3000:])
    check_ranks(result, steps=STEPS)
    assert result["data"]["mode"] == "data-only" and result["model"]["params"] is None
    assert result["case"]["data_only"] is True
    check_voted_warmup(result, db, max_steps=VOTE_MAX_STEPS)
    check_shards(framework, rank_records(db, result["run_id"]), odd, ODD)
