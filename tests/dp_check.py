"""Two data-parallel ranks step as one process on both batches: the check each engine's
multi-process path passes (Horovod's in tests/backends/test_horovod.py, torch's
DistributedDataParallel in tests/backends/test_distributed.py, Paddle's DataParallel, MXNet's
kvstore, OneFlow's DDP and nn.Graph and MindSpore's DATA_PARALLEL mode in
tests/backends/test_distributed_frameworks.py, TensorFlow 2's MultiWorkerMirroredStrategy,
TensorFlow 1.15's collective all-reduce strategy and JAX's shard_map over jax.distributed in
tests/backends/test_distributed_tf_jax.py, Caffe2's data_parallel_model over Gloo in
tests/backends/test_caffe2_parallel.py).

One step on two ranks fed different batches (seed + rank; JAX's, the rank's own draw) must
leave equal weights on both ranks, equal within fp32 tolerance to the single-process reference:
the single-process step on each rank's batch from the same weights, averaged. ResNet-50's
BatchNorm normalises each rank's batch by its own statistics (no engine here synchronises
them), and SGD's first step (momentum buffer empty) is linear in the gradient, so that average
is the step on the ranks' mean gradient. An engine that summed instead of averaging, skipped
the all-reduce or let a rank keep its own weights fails it. tests/dp_step.py builds the
backend's Workload from a case and dumps the weights around one ``step()``: nothing is added to
the timed loop. The projection (docs/projection.md) prices exactly this step: the 1-device
compute plus the all-reduce.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

from conftest import CUT_RESNET50, SITE
from dlperf import models
from dlperf.spec import Case

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "tests" / "dp_step.py"
TIMEOUT = 300

#: the trainable tensors of the cut ResNet-50 the steps train (conftest's CUT_RESNET50: the
#: averaging is of every gradient alike): a weight per convolution, a scale and a shift per
#: BatchNorm (one after each convolution), the classifier's weight and bias
TRAINABLE = 3 * len(models.resnet_convs(32, 50, CUT_RESNET50["max_blocks"])) + 2


def write_case(path: Path, framework: str, **fields) -> Path:
    case = Case(framework=framework, model="resnet50", batch_size=2, device="cpu",
                knobs={"image_size": 32, **CUT_RESNET50}, **fields)
    path.write_text(json.dumps(case.to_dict()))
    return path


def weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as saved:
        return dict(saved)


def same_weights(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return sorted(a) == sorted(b) and all(np.array_equal(a[name], b[name]) for name in a)


#: engines whose rank's batch is not seed + rank's but its own draw from the rank: JAX folds the
#: rank into the batch's random key (dlperf/backends/jax/backend.py), so its references build
#: with the same seed as ranks 0 and 1 would (tests/dp_step.py --as-ranks)
RANK_KEYED = ("jax",)

#: engines that build one workload a process (MindSpore sets its thread pool once; Caffe2's
#: blobs live in one process-wide workspace)
ONE_BUILD_A_PROCESS = ("mindspore", "caffe2")
assert not set(ONE_BUILD_A_PROCESS) & set(RANK_KEYED)

#: (interpreter, framework, options) -> (the weights its references started from, the
#: references): the single-process step is the same computation whichever engine ran the ranks,
#: so a second run of one framework (torch over Gloo, then over MPI) reuses the first's when its
#: start is the same
REFERENCES: dict[tuple[str, str, str],
                 tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]] = {}


def single_process_steps(python: str, framework: str, start_file: Path, tmp_path: Path,
                         env: dict[str, str], options: str = "") -> list[dict[str, np.ndarray]]:
    """The single-process reference on each rank's batch (seed + rank), from rank 0's weights
    (``start_file``), with the ranks' ``options``: the weights after one step each; made once
    per interpreter, framework, options and start weights."""
    start = weights(start_file)
    known = REFERENCES.get((python, framework, options))
    if known is not None and same_weights(known[0], start):
        return known[1]
    # both in one process, one after the other: one interpreter and framework import (and, for
    # TensorFlow 1.15, one ResNet-50 graph) for the two, where CPU time, not wall time, is short;
    # an engine that builds once a process gets a process each (none of them keys its batches
    # by rank: --as-ranks numbers the pairs of one process)
    by_rank = framework in RANK_KEYED
    pairs = [[str(path) for path in
              (write_case(tmp_path / f"seed{seed}.json", framework, options=options,
                          seed=0 if by_rank else seed),
               tmp_path / f"seed{seed}")] for seed in (0, 1)]
    runs = pairs if framework in ONE_BUILD_A_PROCESS else [pairs[0] + pairs[1]]
    for argv in runs:
        proc = subprocess.run([python, str(STEP), *argv, "--init", str(start_file),
                               *(["--as-ranks"] if by_rank else [])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stdout[-3000:]
    alone = [weights(tmp_path / f"seed{seed}.rank0.after.npz") for seed in (0, 1)]
    REFERENCES[(python, framework, options)] = (start, alone)
    return alone


def run_native_ranks(case_file: Path, prefix: Path, out_dir: Path,
                     env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The case's ranks as `dlperf run --devices 2` starts them (its framework's own launcher,
    from dlperf's registry: MXNet's ps-lite scheduler, servers and workers, say), each running
    tests/dp_step.py in place of the worker."""
    from dlperf.launchers import registry

    case = Case.from_dict(json.loads(case_file.read_text()))
    spec = registry.launcher_for(case)(case, case_file, out_dir)
    at = spec.argv.index("dlperf.worker")  # [..., python, "-m", "dlperf.worker", "--case", ...]
    spec.argv[at - 1:] = [str(STEP), str(case_file), str(prefix)]
    return subprocess.run(spec.argv, env={**env, **spec.env}, capture_output=True, text=True,
                          timeout=TIMEOUT)


def check_native_engine(framework: str, python: str, tmp_path: Path,
                        compile: bool | None = None, options: str = "") -> None:
    """The check for ``framework``'s own engine: a 2-device case's ranks under its own launcher
    (:func:`run_native_ranks`), in its ``compile`` mode (None: the framework's default) with its
    ``options``, against the single-process steps in ``python`` (its environment's interpreter;
    the same options, the default mode: a compiled step computes the same step)."""
    case = write_case(tmp_path / f"{framework}.json", framework, devices=2, compile=compile,
                      options=options)
    # dlperf's sources, and the tests' sitecustomize (tests/conftest.py: XLA's quicker compile)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(ROOT / "src")]),
           "OMP_NUM_THREADS": "1"}
    proc = run_native_ranks(case, tmp_path / framework, tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_ranks_step_as_one(tmp_path / framework, python, framework, tmp_path, env, options)


def check_ranks_step_as_one(prefix: Path, python: str, framework: str, tmp_path: Path,
                            env: dict[str, str], options: str = "") -> None:
    """The two ranks' weights (``prefix``.rank0/1.before/after.npz, written by tests/dp_step.py
    under the engine's launcher) against the averaged single-process steps."""
    start_file = Path(f"{prefix}.rank0.before.npz")
    start = weights(start_file)
    ranks = [weights(Path(f"{prefix}.rank{r}.after.npz")) for r in (0, 1)]
    alone = single_process_steps(python, framework, start_file, tmp_path, env, options)
    assert sorted(ranks[0]) == sorted(start) and len(start) == TRAINABLE  # every one
    moved = 0.0
    for name in start:
        assert np.array_equal(ranks[0][name], ranks[1][name]), f"{name}: ranks differ"
        expected = (alone[0][name] + alone[1][name]) / 2
        np.testing.assert_allclose(ranks[0][name], expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{framework} {name}")
        moved = max(moved, float(np.abs(alone[0][name] - alone[1][name]).max()))
    assert moved > 1e-2  # the two batches' steps really differ: the average is a real check
