"""Caffe2 data parallelism across processes: ``data_parallel_model.Parallelize`` with Gloo, as
Caffe2's ``examples/imagenet_trainer.py`` runs it with ``--num_shards``.

Each process is one shard with one device (``devices=[0]``: its CPU, or its GPU); the shards meet
through Caffe2's file store handler (``FileStoreHandlerCreate``) in the directory
``DLPERF_CAFFE2_STORE`` that :mod:`dlperf.launchers.caffe2` gives every rank: a directory of the
repeat's own on one node, a shared one (``--rdzv-dir``) across nodes (this wheel has no Redis
store handler, and Gloo needs a store every shard can reach). ``Parallelize`` adds Gloo's
``Allreduce`` of every gradient after the backward pass and broadcasts the initial parameters
from shard 0; Parallelize scales each shard's loss by 1 / shards, so the summed gradients are
their mean (a step on two shards equals one on the concatenated batch). The ranks come from
:mod:`dlperf.launchers.spawn`'s variables.

The worker's collectives (barrier, the warm-up vote, the results' gather, the all-reduce probe)
are Gloo operators too, on a clone of the common world ``Parallelize`` created, in a net of
their own. Valid Python 3.7; imports numpy and caffe2.
"""

import os
import shutil
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from dlperf.backends.caffe2 import STORE_VARIABLE
from dlperf.backends.common import gather_json
from dlperf.worker.workload import UnsupportedError

STORE_BLOB = "dlperf_store_handler"
WORLD_BLOB = "dlperf_common_world"
TIMEOUT_VARIABLE = "DLPERF_RDZV_TIMEOUT_S"

_job = []  # type: List[Collectives]


def rank():
    # type: () -> int
    return int(os.environ.get("DLPERF_RANK", os.environ.get("RANK", "0")))


def world_size():
    # type: () -> int
    return int(os.environ.get("DLPERF_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def rendezvous():
    # type: () -> Optional[Dict[str, Any]]
    """Parallelize's ``rendezvous`` for this process's shard (None for one process): the file
    store handler created in the workspace, Gloo over TCP, the rank's shard id."""
    world = world_size()
    if world <= 1:
        return None
    from caffe2.python import core, workspace

    path = os.environ.get(STORE_VARIABLE, "").strip()
    if not path:
        raise UnsupportedError("%d caffe2 processes but no %s: start several processes with "
                               "`dlperf run --framework caffe2 --devices N`, whose launcher "
                               "gives each the store directory" % (world, STORE_VARIABLE))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise UnsupportedError("the Caffe2 rendezvous directory %s cannot be made (%s); across "
                               "hosts it must be a directory every node shares" % (path, error))
    workspace.RunOperatorOnce(core.CreateOperator(
        "FileStoreHandlerCreate", [], [STORE_BLOB], path=path, prefix="dlperf"))
    settings = {"kv_handler": STORE_BLOB, "shard_id": rank(), "num_shards": world,
                "engine": "GLOO", "transport": "tcp", "exit_nets": None}
    interface = os.environ.get("GLOO_SOCKET_IFNAME", "").strip()
    if interface:
        settings["interface"] = interface
    return settings


def timeout_s():
    # type: () -> int
    """How long a shard waits for the others (Parallelize's barrier and the common world)."""
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    try:
        return max(1, int(float(value)))
    except ValueError:
        return 300


def parallelize(model, forward, update, device, ideep, net_type, workers):
    # type: (Any, Callable[[Any, float], List[Any]], Callable[[Any], Any], Any, bool, str, int) -> str
    """``Parallelize`` ``model`` over this job's shards, one device each: ``forward(model,
    loss_scale)`` builds the network and returns ``[loss]``, ``update(model)`` the optimizer
    (once, in the device's scope: Caffe2's ``optimizer_builder_fun``, which sees every
    parameter with its scoped name, as imagenet_trainer.py builds its SGD);
    the net runs on ``net_type``'s executor with ``workers`` threads per device, as one process's.
    Returns the name scope of this process's device (``cpu_0/``, ``ideep_0/``, ``gpu_N/``),
    which every blob of the model carries."""
    from caffe2.proto import caffe2_pb2
    from caffe2.python import data_parallel_model as dpm

    cuda = device.device_type != caffe2_pb2.CPU and device.device_type != caffe2_pb2.IDEEP
    gpu = int(device.device_id) if cuda else 0
    cpu = not cuda and not ideep
    dpm.Parallelize(
        model,
        input_builder_fun=lambda m: None,  # the synthetic batch is fed once, before the first step
        # loss_scale is Parallelize's 1 / (devices x shards): the summed gradients are the mean
        forward_pass_builder_fun=forward,
        optimizer_builder_fun=lambda m: _in_scope(device, update, m),
        devices=[gpu],
        rendezvous=rendezvous(),
        cpu_device=cpu,
        ideep=ideep,
        net_type=net_type,
        num_threads_per_device=workers,
        barrier_net_timeout_sec=timeout_s(),
        # as imagenet_trainer.py --use_cpu: one set of parameters, BatchNorm over the device
        shared_model=cpu, combine_spatial_bn=cpu,
    )
    # the trainer's next call: gradients share buffers where their lifetimes allow (memonger)
    dpm.OptimizeGradientMemory(model, {}, set(), False)
    return "%s_%d/" % (model._device_prefix, gpu)


def _in_scope(device, build, model):
    # type: (Any, Callable[[Any], Any], Any) -> Any
    from caffe2.python import core

    with core.DeviceScope(device):
        return build(model)


class Collectives(object):
    """Gloo operators across the shards on a clone of ``Parallelize``'s common world."""

    def __init__(self, world_blob, params):
        # type: (str, int) -> None
        from caffe2.python import core, workspace

        self.world = world_size()
        self.rank = rank()
        self.params = params
        net = core.Net("dlperf_clone_common_world")
        net.CloneCommonWorld([world_blob], WORLD_BLOB, engine="GLOO")
        workspace.RunNetOnce(net)
        self._nets = {}  # type: Dict[str, str]

    def run(self, name, build):
        # type: (str, Callable[[Any], None]) -> None
        """Create net ``name`` once (``build(net)`` adds its operators), then run it."""
        from caffe2.python import core, workspace

        if name not in self._nets:
            net = core.Net("dlperf_" + name)
            build(net)
            workspace.CreateNet(net)
            self._nets[name] = net.Proto().name
        workspace.RunNet(self._nets[name])

    def barrier(self):
        # type: () -> None
        self.run("barrier", lambda net: net.Barrier([WORLD_BLOB], [], engine="GLOO"))

    def allreduce(self, blob):
        # type: (str) -> None
        """Sum ``blob`` over the shards, in place (a float32 or float16 blob: Caffe2's Gloo
        Allreduce sums those only), with a net of its own created on the first call."""
        self.run("allreduce_" + blob, lambda net: net.Allreduce([WORLD_BLOB, blob], blob,
                                                                engine="GLOO"))

    def all_gather(self, vector):
        # type: (Any) -> Any
        """Every shard's float32 ``vector`` (one length for all), one row each in rank order."""
        from caffe2.python import workspace

        values = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        name = "gather_%d" % values.size  # one net per length: Allgather keeps its output size
        workspace.FeedBlob(name + "_in", values)
        self.run(name, lambda net: net.Allgather([WORLD_BLOB, name + "_in"], name + "_out",
                                                  engine="GLOO"))
        return workspace.FetchBlob(name + "_out").reshape(self.world, -1)

    def gather_ints(self, value):
        # type: (int) -> List[int]
        return [int(v) for v in self.all_gather(np.array([value], dtype=np.float32))[:, 0]]

    def allreduce_seconds(self, median_seconds):
        # type: (Callable[..., float]) -> float
        from caffe2.python import workspace

        workspace.FeedBlob("dlperf_probe", np.zeros(self.params, dtype=np.float32))
        return median_seconds(lambda: self.allreduce("dlperf_probe"), lambda: None)


def info():
    # type: () -> Dict[str, Any]
    """What a data-parallel result records about the job."""
    return {"world_size": world_size(), "rank": rank(),
            "data_parallel": "data_parallel_model.Parallelize (one device per process, Gloo "
                             "Allreduce of the gradients, each loss scaled by 1/%d)" % world_size(),
            "rendezvous": "FileStoreHandler in %s" % os.environ.get(STORE_VARIABLE, "")}


def activate(collectives):
    # type: (Collectives) -> None
    """Make ``collectives`` the job's, for :func:`gather_results`."""
    _job[:] = [collectives]


def any_world_blob():
    # type: () -> str
    """A common world ``Parallelize``'s init net made (the first, in name order)."""
    from caffe2.python import workspace

    worlds = sorted(b for b in workspace.Blobs() if b.endswith("_cw"))
    if not worlds:
        raise RuntimeError("data_parallel_model created no Gloo common world")
    return worlds[0]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every shard's result at rank 0 (None elsewhere); one process gets its own back. Rank 0
    then removes the store directory: every shard has passed the gather, so none reads it.

    The gather ends with Caffe2's Gloo barrier, which is rooted at rank 0 (every shard sends to
    it, then it releases them): a shard leaves only once rank 0 has finished its gather. A
    shard that exited straight after the gather's last all-gather closed its connections while
    rank 0 was still inside it, and rank 0 failed with "Connection closed by peer" (once, in
    `make test`'s framework phase on a busy 2-core host, 2026-12-07)."""
    if not _job:
        return [payload]
    collectives = _job[0]
    everyone = gather_json(payload, collectives.all_gather, collectives.rank == 0,
                           "float32", "float32")
    collectives.barrier()
    if collectives.rank == 0:
        shutil.rmtree(os.environ.get(STORE_VARIABLE, ""), ignore_errors=True)
    return everyone
