"""How the framework phase deals its tests (tests/work_units.py): one framework's tests, from
every file that has some, as one unit; a file's other tests, and files that name no framework,
by file; the session-fixture groups whole. The unit of a test id, and a real inner run on two
pytest-xdist processes (pytester, in a subprocess) that runs each unit in one go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from horovod_phase import BUILDS_DONE
from work_units import DEALT_BY_ENVIRONMENT, HOROVOD_UNIT, SESSION_FIXTURE_FILES, unit_of_test

pytest_plugins = ("pytester",)

# runs pytest on files it writes; nothing measured, no framework
pytestmark = pytest.mark.parallel

TESTS = Path(__file__).resolve().parents[1]  # where the plugin is
COLLECTIVES = "tests/projection/test_collectives.py"


@pytest.mark.parametrize("nodeid, unit", [
    # a test's parameters name its framework
    (f"{COLLECTIVES}::test_each_framework_path_on_two_processes[tensorflow1-ring]",
     "environment tensorflow1"),
    (f"{COLLECTIVES}::test_each_framework_path_on_two_processes[mxnet-kvstore]",
     "environment mxnet"),
    ("tests/envs/test_env_versions.py::test_runs[jax==0.9.2]", "environment jax"),
    # or its name does
    ("tests/backends/test_declared_matrix.py::test_jax_matrix", "environment jax"),
    ("tests/backends/test_distributed_tf_jax.py::"
     "test_a_tensorflow1_first_step_its_peer_never_reaches_times_out", "environment tensorflow1"),
    # its parameters before its name; in those files, a test that names none stays in its file
    ("tests/backends/test_env_tensorflow.py::test_tiny_training_case_runs_ok[tensorflow1]",
     "environment tensorflow1"),
    ("tests/backends/test_env_tensorflow.py::test_envs_list_shows_both",
     "tests/backends/test_env_tensorflow.py"),
    # elsewhere, a file named for one framework goes whole, whatever its tests' parameters say
    ("tests/backends/test_env_mxnet.py::test_adamw[jax]", "environment mxnet"),
    ("tests/backends/test_env_oneflow.py::test_tiny_case_runs_ok[resnet50-no-compile]",
     "environment oneflow"),
    # torch and ONNX Runtime live in dlperf's own environment: their tests stay in their file
    (f"{COLLECTIVES}::test_each_framework_path_on_two_processes[torch-gloo]", COLLECTIVES),
    # a test that uses a Horovod environment (its id names Horovod): a unit apart, dealt last
    (f"{COLLECTIVES}::test_each_framework_path_on_two_processes[tensorflow1-horovod-mpi]",
     HOROVOD_UNIT + "environment tensorflow1"),
    (f"{COLLECTIVES}::test_each_framework_path_on_two_processes[torch-horovod]",
     HOROVOD_UNIT + COLLECTIVES),
    ("tests/backends/test_horovod.py::test_run_stores_horovod_facts[torch]",
     HOROVOD_UNIT + "tests/backends/test_horovod.py"),
    ("tests/backends/test_declared_matrix.py::test_onnxruntime_matrix",
     "tests/backends/test_declared_matrix.py"),
    # none, or two, named: the file
    ("tests/backends/test_distributed_tf_jax.py::test_peers_that_never_come_time_out_cleanly",
     "tests/backends/test_distributed_tf_jax.py"),
    ("tests/backends/test_env_jax_paddle.py::test_jax_and_paddle_agree",
     "tests/backends/test_env_jax_paddle.py"),
    # a file not in DEALT_BY_ENVIRONMENT keeps its tests together, parameters or not
    ("tests/studies/test_reproduce.py::test_every_sweep_file_is_valid[mxnet.yaml]",
     "tests/studies/test_reproduce.py"),
    # words, not parts of words
    (f"{COLLECTIVES}::test_paddles_and_jaxes", COLLECTIVES),
])
def test_the_unit_of_a_test(nodeid, unit):
    assert unit_of_test(nodeid) == unit


def test_the_session_fixture_groups_stay_whole():
    for files in SESSION_FIXTURE_FILES.values():
        for file in files:
            assert unit_of_test(f"{file}::test_x[mxnet]") == "+".join(files)


def test_every_file_dealt_by_environment_exists():
    missing = [f for f in DEALT_BY_ENVIRONMENT if not (TESTS.parent / f).is_file()]
    assert not missing, missing


# an inner suite laid out as the real one: each test writes which xdist process ran it
INNER_TEST = """
import os
import time

def record(name):
    with open(os.environ["ORDER_FILE"], "a") as handle:
        handle.write(os.environ["PYTEST_XDIST_WORKER"] + " " + name + "\\n")
    if os.environ.get("BUILDS_END_AT") == name:  # the builds end as this test runs
        with open(os.environ["BUILDS_FILE"] + ".tmp", "w") as handle:
            handle.write("0\\n")
        os.replace(os.environ["BUILDS_FILE"] + ".tmp", os.environ["BUILDS_FILE"])
    time.sleep(float(os.environ.get("TEST_SECONDS", "0")))
"""
INNER = {
    # six in one unit: the largest, which xdist deals first
    "tests/backends/test_horovod.py": ["torch a", "torch b", "torch c", "torch d", "torch e",
                                       "torch f", "tensorflow1"],
    "tests/backends/test_env_mxnet.py": ["mxnet a", "mxnet b", "mxnet c"],
    "tests/backends/test_env_oneflow.py": ["oneflow a", "oneflow b"],
    COLLECTIVES: ["mxnet-kvstore", "oneflow-cpu", "torch-gloo", "mxnet-horovod", "torch-horovod"],
    "tests/launchers/test_emulated_frameworks.py": ["oneflow", "mxnet", "torch"],
    "tests/report/test_plain.py": ["plain a", "plain b"],
}


@pytest.mark.parametrize("builds", ["under way", "ended", "ending"])
def test_two_processes_run_each_unit_in_one_go(pytester, tmp_path, monkeypatch, builds):
    """Each unit in one go on one process; while `make test`'s Horovod builds are under way
    the Horovod units after every other; once they have ended, next, on one process while the
    other runs the rest (ended from the start: the largest, test_horovod.py, first; ending as
    the first unit runs: a Horovod unit begins before the last of the others)."""
    for path, names in INNER.items():
        (pytester.path / path).parent.mkdir(parents=True, exist_ok=True)
        body = INNER_TEST + "import pytest\n@pytest.mark.parametrize('name', %r)\n" % names
        body += "def test_it(name):\n    record(%r + ' ' + name)\n" % path
        (pytester.path / path).write_text(body)
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    order = tmp_path / "order"
    monkeypatch.setenv("ORDER_FILE", str(order))
    ended = tmp_path / "builds.ended"
    if builds == "ended":
        ended.write_text("0\n")
    monkeypatch.setenv(BUILDS_DONE, str(ended))
    if builds == "ending":  # the largest unit other than Horovod's is mxnet's; 0.2 s a test
        monkeypatch.setenv("BUILDS_END_AT", "tests/backends/test_env_mxnet.py mxnet a")
        monkeypatch.setenv("BUILDS_FILE", str(ended))
        monkeypatch.setenv("TEST_SECONDS", "0.2")
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # not an xdist worker
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    result = pytester.runpytest_subprocess("-p", "work_units", "-p", "no:cacheprovider",
                                           "-n", "2", "--dist", "loadfile", "tests")
    assert result.ret == 0, result.stdout.str()
    runs: dict[str, list[str]] = {}
    in_time: list[str] = []  # every test's unit, in the order they ran
    for line in order.read_text().splitlines():
        worker, path, name = line.split(" ", 2)
        runs.setdefault(worker, []).append(unit_of_test(f"{path}::test_it[{name}]"))
        in_time.append(runs[worker][-1])
    assert sum(map(len, runs.values())) == 22
    for worker, units in runs.items():
        # a unit, once left, never comes back on this process
        starts = [u for i, u in enumerate(units) if i == 0 or units[i - 1] != u]
        assert len(starts) == len(set(starts)), (worker, units)
        if builds == "under way":  # the Horovod units (their tests would wait) after every other
            later = [u.startswith(HOROVOD_UNIT) for u in units]
            assert later == sorted(later), (worker, units)
    horovod = [u.startswith(HOROVOD_UNIT) for u in in_time]
    if builds == "ended":  # next: the largest Horovod unit, test_horovod.py's six, dealt first
        assert HOROVOD_UNIT + "tests/backends/test_horovod.py" in [
            units[0] for units in runs.values()], runs
        # beside it, the other process's first unit is not Horovod's
        assert sorted(units[0].startswith(HOROVOD_UNIT) for units in runs.values()) == [
            False, True], runs
    if builds == "ending":  # not the tail: one began before the other tests' last
        assert horovod.index(True) < len(horovod) - 1 - horovod[::-1].index(False), in_time
    # and runs on one process only
    where = {u: {w for w, units in runs.items() if u in units} for us in runs.values() for u in us}
    assert all(len(w) == 1 for w in where.values()), where
    assert {u for us in runs.values() for u in us} == {
        "environment mxnet", "environment oneflow", COLLECTIVES,
        "tests/launchers/test_emulated_frameworks.py", "tests/report/test_plain.py",
        HOROVOD_UNIT + "tests/backends/test_horovod.py", HOROVOD_UNIT + "environment tensorflow1",
        HOROVOD_UNIT + "environment mxnet", HOROVOD_UNIT + COLLECTIVES}
    mxnet = [u for us in runs.values() for u in us if u == "environment mxnet"]
    assert len(mxnet) == 5  # three from its file, one from each of the two others
