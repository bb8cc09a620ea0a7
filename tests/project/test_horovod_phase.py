"""The tests that wait for `make test`'s Horovod builds (tests/horovod_phase.py): marked by their
id, waiting for the builds' end, and a Horovod skip outside them failing, on a real inner pytest
run."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from horovod_phase import BUILDS_DONE, names_horovod, wait_for_the_builds

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
import os
import pytest

def test_unnamed_needs_it():
    pytest.skip("torch+horovod is not installed: run `dlperf envs install torch --horovod`")

def test_horovod_named():
    # it ran once make test's builds had ended, however long that took
    assert os.path.exists(os.environ["ENDED_FILE"])
    pytest.skip("torch+horovod is not installed: run `dlperf envs install torch --horovod`")

def test_other_skip():
    pytest.skip("Open MPI is not installed")
'''


@pytest.mark.parametrize("under_make_test", [True, False])
def test_horovod_tests_wait_for_the_builds_and_a_horovod_skip_elsewhere_fails(
        pytester, monkeypatch, tmp_path, under_make_test):
    """Under `make test` (DLPERF_TEST_BUILDS_DONE), a marked test starts once the builds'
    file is there (written here a second after the run starts), and an unmarked test that skips
    for want of Horovod fails; elsewhere both skip."""
    pytester.makepyfile(test_inner=INNER)
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    ended = tmp_path / "builds.ended"
    monkeypatch.setenv("ENDED_FILE", str(ended))
    if under_make_test:
        monkeypatch.setenv(BUILDS_DONE, str(ended))
    else:
        monkeypatch.delenv(BUILDS_DONE, raising=False)
        ended.write_text("0\n")
    writer = threading.Timer(1.0, lambda: ended.write_text("0\n"))
    writer.start()
    try:
        result = pytester.runpytest_subprocess("-p", "horovod_phase", "-p", "no:cacheprovider",
                                               "-rA")
    finally:
        writer.cancel()
    out = result.stdout.str()
    if under_make_test:
        result.assert_outcomes(failed=1, skipped=2)
        assert "test_unnamed_needs_it skipped for want of a Horovod environment" in out
        assert "must name Horovod in its id" in out
    else:
        result.assert_outcomes(skipped=3)
    # the named one is marked `horovod`
    marked = pytester.runpytest_subprocess("-p", "horovod_phase", "-p", "no:cacheprovider",
                                           "-m", "horovod", "--collect-only", "-q")
    assert "test_inner.py::test_horovod_named" in marked.stdout.str()
    assert "test_unnamed_needs_it" not in marked.stdout.str()


def test_the_wait_ends_when_the_file_appears_or_at_its_longest(tmp_path):
    ended = tmp_path / "builds.ended"
    threading.Timer(0.5, lambda: ended.write_text("0\n")).start()
    waited = wait_for_the_builds(ended, poll_s=0.05)
    assert 0.4 < waited < 5 and ended.exists()
    never = tmp_path / "never"
    assert 0.3 <= wait_for_the_builds(never, poll_s=0.05, longest_s=0.3) < 5
