"""Which launcher starts a case: one local process, or its framework's own multi-process launcher.

:data:`MULTI_PROCESS` names each framework's :class:`~dlperf.launchers.launch.MultiLauncher`; a
framework whose backend declares ``distributed`` devices in its ``SUPPORT`` must have one here.
This is the only place a launcher is picked by framework.
"""

from __future__ import annotations

import os

from dlperf.errors import UsageError
from dlperf.host import allocators, emulated
from dlperf.launchers import (caffe2, horovod, jax, mindspore, mxnet, oneflow, paddle,
                              tensorflow, tensorflow1, torch)
from dlperf.launchers.launch import Launcher, MultiLauncher, Rendezvous, local
from dlperf.spec import Case

MULTI_PROCESS: dict[str, type[MultiLauncher]] = {
    "torch": torch.Torchrun,
    "tensorflow": tensorflow.TFConfigLauncher,
    "tensorflow1": tensorflow1.TF1ConfigLauncher,
    "jax": jax.JaxDistributed,
    "paddle": paddle.PaddleLaunch,
    "mxnet": mxnet.KVStoreLaunch,
    "mindspore": mindspore.Msrun,
    "oneflow": oneflow.OneFlowLaunch,
    "caffe2": caffe2.Caffe2Gloo,
}


def launcher_for(case: Case, rendezvous: Rendezvous | None = None,
                 python: str | None = None) -> Launcher:
    """:func:`~dlperf.launchers.launch.local` for one process; else the framework's own
    :class:`~dlperf.launchers.launch.MultiLauncher`. A ``--launcher horovod`` case gets
    :class:`~dlperf.launchers.horovod.HorovodLaunch` for any process count (one process under
    horovodrun is a case of its own); it raises UsageError (one line) where Horovod cannot
    start: its environment missing, ``--controller mpi`` without Open MPI, several nodes.

    A framework without one (its backend declares no ``distributed`` devices) gets ``local``:
    its worker refuses the case from ``SUPPORT`` before building anything, so the result is
    ``unsupported`` with the backend's own reason, as for any other undeclared combination.

    A case whose allocator is not installed here is refused (UsageError) before anything runs:
    every launcher preloads it; so is a case with a link rate outside a node of emulated hosts
    (:mod:`dlperf.launchers.emulated`), where nothing would shape it."""
    if case.allocator:
        allocators.library(case.allocator)
    if case.link and not os.environ.get(emulated.NODE_VARIABLE):
        raise UsageError(f"link: {case.link} is shaped between emulated hosts only; measure it "
                         f"with `dlperf run --emulate-hosts N --link {case.link}`, or `dlperf sweep "
                         f"FILE --emulate-hosts`")
    if case.launcher == "horovod":
        return horovod.HorovodLaunch(case, rendezvous, python)
    multi = MULTI_PROCESS.get(case.framework)
    if case.devices * case.nnodes == 1 or multi is None:
        return local
    launcher = multi(rendezvous, python)
    launcher.check(case)
    return launcher
