"""Where this process sits in a Slurm job: node count, node rank and the master node.

``srun -N 4 --ntasks-per-node 1 dlperf run ... --devices 8`` starts one ``dlperf run`` per node;
each reads its place from the variables Slurm sets (the step's, else the job's), and the first
host of the node list is node 0, the rendezvous master.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

# torchrun's port is fixed; jobs sharing a node need different ones, so derive it from the job id
# (the convention PyTorch Lightning uses).
PORT_BASE = 15000


@dataclass(frozen=True)
class JobPosition:
    """Where this process sits in a Slurm job: the job's nodes, this node's rank, node 0."""

    nnodes: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    job_id: str | None


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = environ.get(name)
        if value:
            return value
    return None


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets: ``a[1,3],b`` -> ``a[1,3]``, ``b``."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return parts


def _expand_brackets(ranges: str) -> list[str]:
    """``01-03,07`` -> 01 02 03 07 (zero padding kept)."""
    out = []
    for item in ranges.split(","):
        low, _, high = item.partition("-")
        if not high:
            out.append(low)
            continue
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return out


def expand_nodelist(nodelist: str) -> list[str]:
    """Host names of a Slurm node list: ``node[01-02,05],gpu7`` -> node01 node02 node05 gpu7.

    Handles the compact forms Slurm prints (several bracket groups per name included);
    ``scontrol show hostnames`` is preferred where it exists (see :func:`hostnames`).
    """
    hosts: list[str] = []
    for item in _split_top_level(nodelist.strip()):
        names = [""]
        for text, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            choices = _expand_brackets(ranges) if ranges else [""]
            names = [name + text + choice for name in names for choice in choices]
        hosts.extend(names)
    return [host for host in hosts if host]


def hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames`` when Slurm's tools are installed, else our own expansion."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=30, check=True).stdout.split()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_nodelist(nodelist)


#: Where Slurm names the nodes: the step's, else the job's (and its older name).
NODELIST_VARIABLES = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


def node_hosts(environ: Mapping[str, str]) -> list[str]:
    """The host names of the step's nodes (else the job's) in node-rank order, from the first
    of :data:`NODELIST_VARIABLES` that is set; empty outside Slurm. The one reading of a node
    list: the harness, the sweep's tasks and the flags all take it from here."""
    nodelist = _first(environ, *NODELIST_VARIABLES)
    return hostnames(nodelist) if nodelist else []


def position(environ: Mapping[str, str]) -> JobPosition | None:
    """This process's place in a Slurm job, or None outside Slurm."""
    nnodes = _first(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    if nnodes is None:
        return None
    hosts = node_hosts(environ)
    job_id = _first(environ, "SLURM_JOB_ID", "SLURM_JOBID")
    return JobPosition(nnodes=int(nnodes), node_rank=int(environ.get("SLURM_NODEID", "0")),
                     master_addr=hosts[0] if hosts else None, master_port=job_port(job_id),
                     job_id=job_id)


def job_port(job_id: str | None) -> int | None:
    """The rendezvous port of a job: PORT_BASE + the job id's last 4 digits (None without)."""
    return PORT_BASE + int(job_id[-4:]) if job_id and job_id[-4:].isdigit() else None


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this process runs in (salloc, sbatch), seen from its head."""

    job_id: str
    nnodes: int
    port: int | None


def allocation(environ: Mapping[str, str]) -> Allocation | None:
    """The job's id and node count (the job's, not a step's), or None outside a Slurm job."""
    job_id = _first(environ, "SLURM_JOB_ID", "SLURM_JOBID")
    nnodes = _first(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    if job_id is None or nnodes is None or not nnodes.isdigit():
        return None
    return Allocation(job_id=job_id, nnodes=int(nnodes), port=job_port(job_id))


def node_address(name: str) -> str:
    """The address Slurm reaches node ``name`` at (its NodeAddr), else the name itself.

    Node names are usually host names, but slurm.conf may give a node another address
    (``NodeName=n1 NodeAddr=10.0.0.5``); a rendezvous needs the address."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "node", "-o", name], capture_output=True,
                                 text=True, timeout=30, check=True).stdout
            found = re.search(r"\bNodeAddr=(\S+)", out)
            if found and found.group(1) not in ("(null)", ""):
                return found.group(1)
        except (OSError, subprocess.SubprocessError):
            pass
    return name
