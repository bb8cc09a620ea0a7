"""Threads and CPU affinity: one case field sizes every pool; ranks get disjoint CPUs."""

import json
import os
import subprocess
import sys

import pytest

from dlperf.worker import placement

# the worker's pinning, checked against every CPU the test process has.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--batch-size", "2",
        "--warmup-steps", "1", "--steps", "2", "--repeats", "1"]


@pytest.mark.parallel
def test_cpus_are_split_into_disjoint_contiguous_slices():
    cpus = [0, 1, 2, 3, 4, 5, 6, 7]
    assert placement.share(cpus, 1, 0) == cpus
    assert [placement.share(cpus, 2, r) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [placement.share(cpus, 3, r) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert [placement.share([0, 1], 3, r) for r in range(3)] == [[0], [1], [0]]


def run(tmp_path, *extra):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *TINY, *extra,
                           "--db", str(tmp_path / "r.db"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_one_process_gets_every_cpu_and_as_many_threads(tmp_path):
    result = run(tmp_path)
    given = sorted(os.sched_getaffinity(0))
    place = result["env"]["worker"]["placement"]
    assert place == {"cpus_given": len(given), "pinned": True, "cpus": given,
                     "threads_set_by": "dlperf (all available CPUs of this process)",
                     "threads": len(given)}
    assert result["env"]["worker"]["framework"]["num_threads"] == len(given)  # torch's own count
    assert result["env"]["worker"]["thread_variables"]["OMP_NUM_THREADS"] == str(len(given))


def test_the_threads_field_sizes_the_framework_pool(tmp_path):
    result = run(tmp_path, "--threads-per-process", "1")
    assert result["env"]["worker"]["placement"]["threads"] == 1
    # and its CPUs: one process of one thread is the device each of two such processes is
    given = sorted(os.sched_getaffinity(0))
    assert result["env"]["worker"]["placement"]["cpus"] == given[:1]
    assert result["ranks"][0]["cpus"] == given[:1]
    assert result["env"]["worker"]["framework"]["num_threads"] == 1
    variables = result["env"]["worker"]["thread_variables"]
    assert variables["TF_NUM_INTRAOP_THREADS"] == variables["MKL_NUM_THREADS"] == "1"


def test_two_ranks_on_one_node_never_share_a_cpu(tmp_path):
    result = run(tmp_path, "--devices", "2")
    cpus = [rank["cpus"] for rank in result["ranks"]]
    given = sorted(os.sched_getaffinity(0))
    assert len(cpus) == 2 and all(cpus)
    if len(given) >= 2:
        assert not set(cpus[0]) & set(cpus[1])
        assert sorted(cpus[0] + cpus[1]) == given[:len(cpus[0]) * 2]
