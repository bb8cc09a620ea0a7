"""Multi-process and multi-node MXNet cases: the parameter-server kvstore ``dist_sync`` (harness
side).

MXNet ships no launcher in its wheel (``tools/launch.py`` and the dmlc tracker live in its source
tree), so dlperf starts what ``tools/launch.py --launcher local`` would, on every node and once
per repeat: :mod:`dlperf.backends.mxnet.dmlc` runs ps-lite's scheduler (node 0) and one server
per node (``python -c "import mxnet"`` with ``DMLC_ROLE=scheduler`` / ``server``), and
:mod:`dlperf.launchers.spawn` this node's workers (``DMLC_ROLE=worker``, RANK / LOCAL_RANK / WORLD_SIZE),
all with ``DMLC_PS_ROOT_URI`` / ``DMLC_PS_ROOT_PORT`` (one node: 127.0.0.1 on a free port, and
``DMLC_NODE_HOST=127.0.0.1`` so nothing listens beyond loopback; several: --master-addr/port),
``DMLC_NUM_SERVER`` (the nodes) and ``DMLC_NUM_WORKER``. Each worker joins with
``mx.kv.create("dist_sync")``, whose creation is the rendezvous; ``DLPERF_RDZV_TIMEOUT_S`` bounds
it (the backend's alarm: a worker still waiting dies from SIGALRM, read here as ``timeout``).

Horovod, MXNet's other documented data-parallel path, is the case's other engine
(``--launcher horovod``): :mod:`dlperf.launchers.horovod` runs horovodrun from the
``mxnet+horovod`` environment (Horovod built from its source archive, ``dlperf envs install mxnet
--horovod``) and the backend trains with ``hvd.DistributedTrainer``
(``dlperf.backends.mxnet.horovod``); this launcher is the native one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dlperf.envs import selection
from dlperf.launchers import spawn
from dlperf.launchers.launch import Launch, Rendezvous, SpawnLauncher, rendezvous_timeout
from dlperf.spec import Case

_ALARM = re.compile(re.escape(spawn.PREFIX) + r" first failure: rank (\d+) died from SIGALRM")


class KVStoreLaunch(SpawnLauncher):
    """The launcher for mxnet cases with devices x nnodes > 1."""

    name = "dlperf.launchers.spawn + ps-lite (MXNet kvstore dist_sync)"

    def __call__(self, case: Case, case_file: Path, out_dir: Path) -> Launch:
        spec = super().__call__(case, case_file, out_dir)  # the workers, through dlperf.launchers.spawn
        rdzv = self.rendezvous
        addr, port = spec.facts["master"].rsplit(":", 1)
        python = self.python or selection.case_python(case.framework, case.env)
        spec.env.update(DMLC_PS_ROOT_URI=addr, DMLC_PS_ROOT_PORT=port,
                        DMLC_NUM_SERVER=str(case.nnodes),
                        DMLC_NUM_WORKER=str(case.devices * case.nnodes))
        if case.nnodes == 1:
            spec.env["DMLC_NODE_HOST"] = "127.0.0.1"
        if rdzv.socket_ifname:
            spec.env["DMLC_INTERFACE"] = rdzv.socket_ifname
        scheduler = self.is_master(case)
        spec.argv = [sys.executable, "-m", "dlperf.backends.mxnet.dmlc", "--python", python,
                     "--servers", "1", *(["--scheduler"] if scheduler else []), "--", *spec.argv]
        spec.facts.update(rendezvous="ps-lite scheduler (node 0)", kvstore="dist_sync",
                          servers=case.nnodes, scheduler_here=scheduler)
        spec.explain = lambda log: explain(log, case, rdzv, f"{addr}:{port}")
        return spec


def explain(log: str, case: Case, rdzv: Rendezvous, master: str) -> tuple[str, str] | None:
    """(status, message): a worker that died from the backend's SIGALRM waited longer than
    --rdzv-timeout for the kvstore to form; anything else as dlperf.launchers.spawn reads it."""
    if _ALARM.search(log):
        return rendezvous_timeout(rdzv, f"the {case.nnodes} nodes' kvstore (scheduler at "
                                        f"{master}) never formed; start the same `dlperf run` "
                                        f"on every node with its --node-rank")
    return spawn.explain(log)
