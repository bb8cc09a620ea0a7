"""One reading of where a rank sits (:mod:`dlperf.worker.placement`): the worker's place (rank,
world size, local rank) and the local rank the CPU pinning uses come from the same launcher
variables, so the two never disagree about which slice of the CPUs a rank takes."""

from __future__ import annotations

import pytest

from dlperf.worker import placement

pytestmark = pytest.mark.parallel


@pytest.fixture
def no_launcher(monkeypatch):
    for name in {*placement.LOCAL_RANK_VARIABLES,
                 *(n for triple in placement.PLACE_VARIABLES for n in triple)}:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("names", placement.PLACE_VARIABLES, ids=lambda names: names[0])
def test_place_and_local_rank_read_each_launcher_alike(no_launcher, names):
    rank, size, local = names
    for name, value in zip(names, ("5", "8", "1")):
        no_launcher.setenv(name, value)
    assert placement.place() == (5, 8, 1)
    assert placement.local_rank() == 1


def test_one_process_outside_a_launcher(no_launcher):
    assert placement.place() == (0, 1, 0)
    assert placement.local_rank() is None
    assert placement.place(lambda: (3, 4, 1)) == (3, 4, 1)  # a backend's own reading


def test_a_launcher_naming_only_the_local_rank(no_launcher):
    no_launcher.setenv("PADDLE_LOCAL_RANK", "2")
    assert placement.local_rank() == 2
