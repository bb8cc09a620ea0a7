"""One reading of Slurm's node list (:func:`dlperf.launchers.slurm.node_hosts`): the step's
list before the job's, expanded in node-rank order, and what every reader of a job's place
(the run's position, the flags' node addresses) takes from it."""

from __future__ import annotations

import argparse

import pytest

from dlperf.commands import _flags
from dlperf.launchers import slurm

pytestmark = pytest.mark.parallel

JOB = {"SLURM_JOB_NODELIST": "node[01-04]", "SLURM_NNODES": "4", "SLURM_NODEID": "1",
       "SLURM_JOB_ID": "7312"}
STEP = dict(JOB, SLURM_STEP_NODELIST="node[02-03]", SLURM_STEP_NUM_NODES="2")


def test_the_step_list_comes_before_the_job_list():
    assert slurm.node_hosts(STEP) == ["node02", "node03"]
    assert slurm.node_hosts(JOB) == ["node01", "node02", "node03", "node04"]
    assert slurm.node_hosts({"SLURM_NODELIST": "gpu[1-2],cpu5"}) == ["gpu1", "gpu2", "cpu5"]
    assert slurm.node_hosts({}) == []


def test_the_position_and_the_node_addresses_read_the_same_list(monkeypatch):
    position = slurm.position(STEP)
    assert position is not None
    assert (position.nnodes, position.node_rank, position.master_addr) == (2, 1, "node02")
    for name in slurm.NODELIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in STEP.items():
        monkeypatch.setenv(name, value)
    args = argparse.Namespace(node_addrs=None)
    assert _flags.node_addrs_from_args(args, position, 2) == ("node02", "node03")
    assert _flags.node_addrs_from_args(args, position, 3) == ()  # not the case's nodes
