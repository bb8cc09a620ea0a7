"""The tests that wait for `make test`'s Horovod builds (tests/horovod_phase.py): marked by their
id, and a Horovod skip outside them fails while the builds run, on a real inner pytest run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from horovod_phase import PENDING, names_horovod

pytest_plugins = ("pytester",)

# runs pytest on files it writes; nothing measured, no framework
pytestmark = pytest.mark.parallel

TESTS = Path(__file__).resolve().parents[1]  # where the plugin is


@pytest.mark.parametrize("nodeid, named", [
    ("tests/backends/test_horovod.py::test_run_stores_horovod_facts[torch]", True),
    ("tests/backends/test_env_horovod.py::test_a_cache_built_by_another_checkout_reads_this_one",
     True),
    ("tests/launchers/test_emulated_frameworks.py::test_horovod_across_two_emulated_hosts[mxnet]",
     True),
    ("tests/projection/test_collectives.py::test_each_framework_path_on_two_processes"
     "[tensorflow1-horovod-mpi]", True),
    # a word, not part of one
    ("tests/launchers/test_spawn.py::test_horovodrun_is_not_this", False),
    ("tests/projection/test_collectives.py::test_each_framework_path_on_two_processes"
     "[mxnet-kvstore]", False),
])
def test_a_test_waits_for_the_builds_when_its_id_names_horovod(nodeid, named):
    assert names_horovod(nodeid) is named


INNER = '''
import pytest

def test_unnamed_needs_it():
    pytest.skip("torch+horovod is not installed: run `dlperf envs install torch --horovod`")

def test_horovod_named():
    pytest.skip("torch+horovod is not installed: run `dlperf envs install torch --horovod`")

def test_other_skip():
    pytest.skip("Open MPI is not installed")
'''


@pytest.mark.parametrize("pending", [True, False])
def test_a_horovod_skip_outside_the_marked_tests_fails_while_the_builds_run(
        pytester, monkeypatch, pending):
    pytester.makepyfile(test_inner=INNER)
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    if pending:
        monkeypatch.setenv(PENDING, "1")
    else:
        monkeypatch.delenv(PENDING, raising=False)
    result = pytester.runpytest_subprocess("-p", "horovod_phase", "-p", "no:cacheprovider",
                                           "-rA")
    out = result.stdout.str()
    if pending:
        result.assert_outcomes(failed=1, skipped=2)
        assert "test_unnamed_needs_it skipped for want of a Horovod environment" in out
        assert "must name Horovod in its id" in out
    else:
        result.assert_outcomes(skipped=3)
    # the named one is marked: the phase beside the builds leaves it for the one after them
    later = pytester.runpytest_subprocess("-p", "horovod_phase", "-p", "no:cacheprovider",
                                          "-m", "horovod", "--collect-only", "-q")
    assert "test_inner.py::test_horovod_named" in later.stdout.str()
    assert "test_unnamed_needs_it" not in later.stdout.str()
