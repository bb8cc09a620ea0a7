"""A sweep inside a Slurm allocation: every case runs as a Slurm job step, one repeat per step.

``salloc -N 4 dlperf sweep FILE`` (or the same line in an sbatch script) runs the sweep ONCE, on
the head (the host where salloc or the batch script runs). For each repeat of a case of
``nnodes`` nodes :class:`SlurmLauncher` starts one step::

    python -m dlperf.launchers.slurm_step relay --out-dir OUT -- \\
        srun --nodes N --ntasks N --ntasks-per-node 1 --kill-on-bad-exit=1 ... \\
        python -m dlperf.launchers.slurm_step task PAYLOAD

It wraps whatever :func:`dlperf.launchers.registry.launcher_for` returns for the case and never
looks at the framework: on the head it asks the framework's launcher for the command of every node rank (the
rendezvous's master address is a placeholder, since only the step knows its first node), and
the payload carries those commands, the case and the head's paths to every node, where
:mod:`dlperf.launchers.slurm_step` fills them in (node rank from ``SLURM_NODEID``, master = NodeAddr of the
step's first host, port from the job id as :mod:`dlperf.launchers.slurm` derives it) and runs its node's
command in a private directory. Node 0's gathered rank files come back through srun's output
(see :mod:`dlperf.launchers.slurm_step`), so the head's runner reads ``OUT/rank<N>.json`` and stores the
case once, whether or not the head is one of the nodes or shares /tmp with them.

Single-node cases run as one-node steps too: inside an allocation the head may be a login node,
and a measurement belongs on the allocated nodes. Outside Slurm, or with fewer nodes than a case
needs, a multi-node case cannot start: :func:`fit` finds them and the sweep is refused (:func:`refusal`) before anything runs
unless ``--skip-multinode`` was given, which leaves those cases out of the plan.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf.errors import UsageError
from dlperf.launchers import launch, registry, slurm
from dlperf.launchers.slurm_step import MASTER_PLACEHOLDER, PREFIX, encode, node_placeholder
from dlperf.spec import Case

# extra srun options for every step, e.g. "--gpus-per-node=8 --cpu-bind=none" (shlex-split)
SRUN_ARGS_VARIABLE = "DLPERF_SRUN_ARGS"
_SRUN_ERROR = re.compile(r"^srun: error: (.*)$", re.M)
_STEP_ERROR = re.compile(r"^" + re.escape(PREFIX) + r" error: (.*)$", re.M)
_TASK_EXIT = re.compile(r"task \d+: (Exited with exit code|Killed|Terminated)")


def srun_argv(nnodes: int, job_name: str = "dlperf") -> list[str]:
    """srun for one task per node on ``nnodes`` nodes of the allocation; a failed task ends
    the step everywhere, so no node waits for a dead peer until the case's timeout. The tasks
    need our environment (PYTHONPATH, the lifeline, the framework's variables) whatever the
    site's default (SLURM_EXPORT_ENV=NONE), hence ``--export=ALL``."""
    extra = shlex.split(os.environ.get(SRUN_ARGS_VARIABLE, ""))
    return ["srun", "--nodes", str(nnodes), "--ntasks", str(nnodes), "--ntasks-per-node", "1",
            "--kill-on-bad-exit=1", "--job-name", job_name, "--export=ALL", *extra]


def _fill(value: Any, text: str, nnodes: int = 0) -> Any:
    """``value`` with the master placeholder replaced by ``text`` (and each node's address
    placeholder by "node N of the Slurm step") in every string inside."""
    if isinstance(value, str):
        for rank in range(nnodes):
            value = value.replace(node_placeholder(rank), f"node {rank} of the Slurm step")
        return value.replace(MASTER_PLACEHOLDER, text)
    if isinstance(value, dict):
        return {k: _fill(v, text, nnodes) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, text, nnodes) for v in value]
    return value


class SlurmLauncher(launch.MultiLauncher):
    """Runs each repeat of ``case`` as one Slurm step over ``case.nnodes`` nodes, every node
    running the command its framework's launcher gives for that node rank."""

    name = "slurm"

    def __init__(self, case: Case, allocation: slurm.Allocation,
                 timeout_s: float = launch.DEFAULT_RDZV_TIMEOUT_S,
                 python: str | None = None) -> None:
        super().__init__(launch.Rendezvous(), python)  # the head: it holds the whole job
        self.allocation = allocation
        self.port = allocation.port or launch.DEFAULT_PORT
        if case.nnodes == 1:
            self.nodes = [registry.launcher_for(case, launch.Rendezvous(), python)]
        else:
            self.nodes = [registry.launcher_for(case, launch.Rendezvous(
                node_rank=rank, master_addr=MASTER_PLACEHOLDER, master_port=self.port,
                timeout_s=timeout_s,
                node_addrs=tuple(node_placeholder(n) for n in range(case.nnodes))), python)
                for rank in range(case.nnodes)]

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> launch.Launch:
        # a node's launcher may pause before a later repeat (NEXT_REPEAT_GRACE_S): in parallel
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            launches = list(pool.map(lambda node: node(case, case_file, out_dir), self.nodes))
        payload = {"case": case_file.read_text(), "case_file": str(case_file),
                   "out_dir": str(out_dir),
                   "nodes": [{"argv": item.argv, "env": item.env} for item in launches]}
        srun = srun_argv(case.nnodes)
        argv = [sys.executable, "-m", "dlperf.launchers.slurm_step", "relay", "--out-dir", str(out_dir),
                "--", *srun, sys.executable, "-m", "dlperf.launchers.slurm_step", "task", encode(payload)]
        head = launches[0]
        facts = _fill(dict(head.facts), "first node of the Slurm step", case.nnodes)
        facts["slurm"] = {"job_id": self.allocation.job_id,
                          "allocation_nodes": self.allocation.nnodes, "step_nodes": case.nnodes,
                          "srun": srun, "master_port": self.port if case.nnodes > 1 else None}
        return launch.Launch(argv, env={}, ranks=case.devices * case.nnodes,
                             explain=lambda log: explain(log, head.explain), facts=facts,
                             peer_symptoms=head.peer_symptoms)


def explain(log: str, inner: Any) -> tuple[str, str] | None:
    """The framework launcher's reading of the log first, then what the step or srun said."""
    found = inner(log) if inner is not None else None
    if found is not None:  # its messages may name the rendezvous: the step's first node
        return found[0], _fill(found[1], "the Slurm step's first node")
    step = _STEP_ERROR.search(log)
    if step:
        return "crash", f"Slurm step: {step.group(1)}"
    for message in _SRUN_ERROR.findall(log):
        if not _TASK_EXIT.search(message):  # a task's exit is a consequence, not the cause
            return "crash", f"srun: {message.strip()}"
    return None


def launcher(case: Case, allocation: slurm.Allocation) -> launch.MultiLauncher | Any:
    """The launcher of ``case`` inside ``allocation``: a Slurm step, except for a multi-node
    case whose framework has no multi-process launcher (its worker refuses the case from its
    SUPPORT declaration in a second: that runs where it is)."""
    inner = registry.launcher_for(case)
    if case.nnodes > 1 and not isinstance(inner, launch.MultiLauncher):
        return inner
    return SlurmLauncher(case, allocation)


# ------------------------------------------------------------------------------------------------
# before the sweep: where its cases can run
# ------------------------------------------------------------------------------------------------

@dataclass
class SweepFit:
    """How a sweep's cases fit where it runs: the Slurm allocation (None outside Slurm) and the
    cases it cannot hold, with the node count each needs."""

    allocation: slurm.Allocation | None
    why_not: str = ""  # why there is no usable allocation (no job, no srun)
    refused: list[Case] = field(default_factory=list)

    def skipped_reason(self, case: Case) -> str:
        return f"skipped: needs {case.nnodes} nodes"


def fit(cases: list[Case], environ: Mapping[str, str]) -> SweepFit:
    """The allocation this sweep runs in and the multi-node cases it cannot run."""
    if (environ.get("SLURM_STEP_NUM_TASKS") or "1").isdigit() and \
            int(environ.get("SLURM_STEP_NUM_TASKS") or "1") > 1:
        raise UsageError("dlperf sweep runs once per allocation, not once per task: start it "
                         "without srun, inside salloc or an sbatch script (it starts a Slurm "
                         "step per case itself)")
    found = slurm.allocation(environ)
    why_not = ""
    if found is not None and shutil.which("srun") is None:
        found, why_not = None, "srun is not on PATH"
    elif found is None:
        why_not = "not inside a Slurm allocation"
    available = found.nnodes if found is not None else 1
    return SweepFit(found, why_not, [case for case in cases if case.nnodes > available])


def refusal(fitted: SweepFit, sweep_name: str, path: Path, total: int) -> str:
    """One line: which cases need how many nodes, and how to give them those nodes."""
    by_nodes: dict[int, list[Case]] = {}
    for case in fitted.refused:
        by_nodes.setdefault(case.nnodes, []).append(case)
    parts = []
    for nodes, cases in sorted(by_nodes.items()):
        more = f" and {len(cases) - 1} more" if len(cases) > 1 else ""
        parts.append(f"case {cases[0].label()!r}{more} need{'s' if not more else ''} "
                     f"{nodes} nodes")
    most = max(by_nodes)
    if fitted.allocation is None:
        where = fitted.why_not
    else:
        where = (f"Slurm job {fitted.allocation.job_id} has "
                 f"{fitted.allocation.nnodes} node(s)")
    others = total - len(fitted.refused)
    return (f"sweep {sweep_name}: {'; '.join(parts)} ({where}): run the sweep inside a Slurm "
            f"allocation of >= {most} nodes (salloc -N {most} dlperf sweep {path}), across "
            f"hosts emulated on this machine (--emulate-hosts, as root), or pass "
            f"--skip-multinode to measure the other {others} case(s) without them")
