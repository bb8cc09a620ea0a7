"""Caffe2 backend (the ``caffe2`` package of PyTorch 1.8.1's cp37 wheel): ``build(case)`` turns a
case into a ready Workload. Valid Python 3.7; imports numpy, caffe2 and stdlib-only dlperf parts.

Everything one-off happens here, outside the timed window: the engine and the threads, the
network on a ``model_helper.ModelHelper`` (:mod:`.resnet`: ``create_resnext`` as Caffe2's
ImageNet trainer calls it), gradients (``AddGradientOperators``), the optimizer, the synthetic
batch fed once into the workspace (NCHW, seeded, on the net's device), the init net, the
``--compile`` transform and ``workspace.CreateNet``. A step is one ``workspace.RunNet``, which
returns when every operator has run: it is its own synchronisation.

- engine (the case's option ``engine``, ``--option engine=...``): ``ideep`` (the default where the wheel has it,
  ``workspace.C.use_mkldnn``): every operator on the IDEEP device, Caffe2's MKL-DNN operators,
  as ``imagenet_trainer.py --use_ideep`` runs them; ``cpu``: Caffe2's own CPU operators
  (im2col + MKL GEMM). Recorded as ``engine`` in the result.
- ``--compile`` (inference, ideep engine): ``caffe2.python.transformations.optimizeForMKLDNN``,
  Caffe2's MKL-DNN graph optimisation (Conv+BN folded, Conv+ReLU and Conv+Sum fused). Training on
  ideep always gets its training form (the filters pre-converted), without which the IDEEP update
  of conv1 is wrong (see TRAIN_TRANSFORM_ALWAYS), so training has no compiled mode.
- ``--device cuda``: the CUDA 10.2 build (``caffe2_pybind11_state_gpu``), GPUs up to compute
  capability 7.5; a newer GPU is refused before any work (:func:`check_gpu`).
"""

import os
from typing import Any, Dict, List, Optional

import numpy as np

from dlperf.backends.common import (CaseView, CollectiveRanks, check_built, check_device_name,
                                    check_resnet_batch)
from dlperf.data import synthetic
from dlperf.worker import fpenv, placement
from dlperf.worker.support import parse_options, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

# Caffe2's CPU operators (im2col + GEMM, Eigen) compute subnormals at full cost, and this build
# has no flag of its own for it (torch 1.8.1's at::set_flush_denormal is not reached from caffe2):
# set FTZ/DAZ before Caffe2 starts a thread (see dlperf.worker.fpenv), every engine alike
DENORMALS = fpenv.flush_denormals()

# MKL_NUM_THREADS stays as the worker set it: Caffe2's GlobalInit (caffe2/core/init_omp.cc,
# Caffe2SetMKLThreads) puts MKL on one thread when it is unset (docs/fidelity.md, caffe2 under
# "Measured after the fixes").

ENGINES = ("ideep", "cpu")
#: The newest GPU architecture the wheel's CUDA 10.2 kernels are built for (Turing, sm_75).
MAX_CAPABILITY = (7, 5)
NET_TYPE, NET_WORKERS = "dag", 4  # data_parallel_model.Parallelize's net_type, num_threads_per_device
COMPILE_MODE = "optimizeForMKLDNN (caffe2.python.transformations)"
# Measured with torch 1.8.1's wheel: on the IDEEP device the net as built updates conv1 (3 input
# channels, whose weight gradient MKL-DNN returns in the blocked Ohwi16o layout) with that
# gradient's buffer read as OIHW: after one step conv1's weights differed from the CPU engine's
# by 0.51 (their scale 0.35; every other parameter agreed to 1e-5) and the loss curve went
# erratic. optimizeForMKLDNN(training_mode=True), which only pre-converts the filters to
# MKL-DNN's formats, makes the step the CPU engine's (conv1 to 5e-6, the same losses): every
# ideep training run applies it, so for training it is not a --compile choice.
# (the refusal of compiled training is SUPPORT's: TRAIN_TRANSFORM_ALWAYS in __init__)

# Measured with torch 1.8.1's wheel: data_parallel_model on the IDEEP device builds and runs one
# step, and the second step's Gloo Allreduce fails ("[enforce fail at allreduce_ops.h:43]
# current_ == init_. Inputs/outputs have changed"): the op keeps the gradient buffers it was
# created with, and MKL-DNN's backward hands it new ones each step.
IDEEP_ALLREDUCE = (
    "engine ideep with several processes: Caffe2 1.8.1's Gloo Allreduce keeps the gradient "
    "buffers of its first step and MKL-DNN's backward gives new ones every step, so the second "
    "step fails (allreduce_ops.h: Inputs/outputs have changed); use --option engine=cpu, and the "
    "same option for the one-process baseline")

_initialised = []  # type: list


def _global_init():
    # type: () -> None
    """Caffe2's flags, once per process: quiet logs. Threads: Caffe2's OpenMP and MKL pools
    follow OMP_NUM_THREADS / MKL_NUM_THREADS, which the worker sets (dlperf.worker.placement);
    ``--caffe2_omp_num_threads``/``--caffe2_mkl_num_threads`` are not passed as well: they slowed
    the CPU engine (docs/envs.md, caffe2's row)."""
    if _initialised:
        return
    from caffe2.python import workspace

    workspace.GlobalInit(["caffe2", "--caffe2_log_level=2"])
    _initialised.append(True)


def _threads():
    # type: () -> int
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else (os.cpu_count() or 1)


def _gpu_count():
    # type: () -> int
    from caffe2.python import workspace

    if not workspace.has_gpu_support:
        return 0
    return int(workspace.NumCudaDevices())


def check_gpu(gpu_id=0):
    # type: (int) -> Dict[str, Any]
    """The GPU's properties (``workspace.GetDeviceProperties``), or UnsupportedError naming its
    compute capability when it is newer than the wheel's CUDA 10.2 kernels (sm_75)."""
    from caffe2.python import workspace

    props = workspace.GetDeviceProperties(gpu_id)
    capability = (int(props["major"]), int(props["minor"]))
    if capability > MAX_CAPABILITY:
        raise UnsupportedError(
            "device cuda: %s has compute capability %d.%d; Caffe2 in torch 1.8.1's wheel is a "
            "CUDA 10.2 build whose kernels go up to 7.5 (V100, T4); use --device cpu"
            % (props.get("name", "GPU %d" % gpu_id), capability[0], capability[1]))
    return {"gpu_name": props.get("name"), "compute_capability": "%d.%d" % capability,
            "gpu_memory_bytes": props.get("totalGlobalMem")}


def select_device(requested):
    # type: (str) -> str
    """"cuda" or "cpu" for this process; a GPU newer than the wheel supports is refused here,
    before anything is built."""
    check_device_name(requested)
    gpus = _gpu_count()
    if requested == "cuda" and not gpus:
        from caffe2.python import workspace

        raise UnsupportedError(
            "device cuda requested but caffe2 sees no CUDA device (%s)"
            % ("its GPU module loaded, NumCudaDevices() is 0" if workspace.has_gpu_support
               else "caffe2_pybind11_state_gpu did not load: no NVIDIA driver or no GPU"))
    if requested == "cpu" or not gpus:
        return "cpu"
    check_gpu(_local_gpu())
    return "cuda"


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name (``workspace.GetDeviceProperties``), or why the CPU."""
    if select_device(requested) == "cuda":
        return resolved_device("cuda", _local_gpu(), check_gpu(_local_gpu()).get("gpu_name"))
    from caffe2.python import workspace

    return resolved_device("cpu", reason=(
        "caffe2 sees no CUDA device (its GPU module loaded, NumCudaDevices() is 0)"
        if workspace.has_gpu_support else
        "caffe2_pybind11_state_gpu did not load (no NVIDIA driver, or no GPU)"))


def _local_gpu():
    # type: () -> int
    return int(os.environ.get("LOCAL_RANK", "0"))


def engine(cuda, chosen=None):
    # type: (bool, Optional[str]) -> str
    """The CPU engine this process uses: the case's ``engine`` option (``chosen``), else ideep
    where the wheel has it; a GPU run has none ("cuda")."""
    from caffe2.python import workspace

    if cuda:
        if chosen:
            raise UnsupportedError("option engine=%s chooses a CPU engine; this run is on a GPU "
                                   "(drop --option engine, or use --device cpu)" % chosen)
        return "cuda"
    if chosen and chosen not in ENGINES:  # the harness checked it against SUPPORT already
        raise UnsupportedError("option engine=%s: not a Caffe2 engine; use ideep (MKL-DNN) or "
                               "cpu (Caffe2's own CPU operators)" % chosen)
    mkldnn = bool(workspace.C.use_mkldnn)
    if chosen == "ideep" and not mkldnn:
        raise UnsupportedError("option engine=ideep: this caffe2 was built without MKL-DNN "
                               "(workspace.C.use_mkldnn is false); use engine=cpu")
    return chosen or ("ideep" if mkldnn else "cpu")


def wheel_version():
    # type: () -> Optional[str]
    """The version of the torch wheel that carries this caffe2, read from its ``version.py``
    (importing torch would start its own thread pools beside Caffe2's)."""
    import caffe2

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(caffe2.__file__))),
                        "torch", "version.py")
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return None


class Caffe2Workload(CollectiveRanks, Workload):
    """One ``workspace.RunNet`` per step; the loss (or the logits' mean) fetched on demand.
    Several processes: the net holds Gloo's all-reduce of the gradients, and ``collectives``
    (:class:`.distribute.Collectives`) the worker's barrier, vote and probe."""

    def __init__(self, net_name, output, samples_per_step, params, info, cuda, device,
                 param_names, collectives=None):
        # type: (str, str, int, int, Dict[str, Any], bool, Any, List[str], Any) -> None
        super(Caffe2Workload, self).__init__(samples_per_step, params, info)
        self.net_name = net_name
        self.output = output
        self.cuda = cuda
        self.device = device  # the device option the net's blobs live on
        self.param_names = param_names  # the trainable parameters' blobs
        self._collectives = collectives

    def allreduce_probe(self):
        # type: () -> Optional[float]
        if self._collectives is None:
            return None
        return self._collectives.allreduce_seconds(median_seconds)

    def step(self):
        # type: () -> Any
        from caffe2.python import workspace

        workspace.RunNet(self.net_name)
        return self.output

    def sync(self):
        # type: () -> None
        return None  # RunNet returns when the net has run (CUDA ops included: the net syncs)

    def loss_value(self, handle):
        # type: (Any) -> float
        from caffe2.python import workspace

        return float(np.mean(workspace.FetchBlob(handle)))

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if not self.cuda:
            return None
        from caffe2.python import utils

        try:
            stats = utils.GetGPUMemoryUsageStats()
        except Exception:  # needs --caffe2_gpu_memory_tracking; absent = not recorded
            return None
        return int(max(stats.get("max_by_gpu", [0]) or [0]))


def build(case):
    # type: (Dict[str, Any]) -> Workload
    check_built(case["model"], {"resnet50": None}, "caffe2")
    view = CaseView(case)
    _global_init()
    from caffe2.python import workspace

    from dlperf.backends.caffe2 import distribute, resnet

    cuda = select_device(view.device) == "cuda"
    chosen = engine(cuda, parse_options(case.get("options", "")).get("engine"))
    if view.compiled and chosen != "ideep":
        raise UnsupportedError("compile on is Caffe2's MKL-DNN graph optimisation "
                               "(optimizeForMKLDNN), which needs engine ideep; this run's engine "
                               "is %s" % chosen)
    parallel = distribute.world_size() > 1
    if parallel and not view.train:
        raise UnsupportedError("caffe2 infers in one process: data_parallel_model parallelises "
                               "training (its gradients' all-reduce); use --devices 1")
    if parallel and chosen == "ideep":
        raise UnsupportedError(IDEEP_ALLREDUCE)
    check_resnet_batch(view.knobs, view.batch, view.train)
    model, outputs, device, scope = _train_net(view, chosen == "ideep", cuda)

    rank = distribute.rank()
    batch = synthetic.resnet_batch(view.batch, view.knobs["image_size"],
                                   view.knobs["num_classes"], view.seed + rank,
                                   channels_last=False)  # each rank its own batch
    workspace.FeedBlob(scope + resnet.DATA, batch["images"], device_option=device)
    if view.train:
        workspace.FeedBlob(scope + resnet.LABEL, batch["labels"], device_option=device)
    for op in model.param_init_net.Proto().op:  # the fillers draw from the case's seed
        op.device_option.random_seed = view.seed
    workspace.RunNetOnce(model.param_init_net)  # several ranks: the common world, rank 0's weights
    params = resnet.count_params(model)
    ops_before = len(model.net.Proto().op)
    if view.compiled or (view.train and chosen == "ideep"):
        from caffe2.python.transformations import optimizeForMKLDNN

        optimizeForMKLDNN(model.net, training_mode=view.train)
    workspace.CreateNet(model.net, overwrite=True)
    info = _info(view, chosen, cuda, model, ops_before)
    collectives = None
    if parallel:
        collectives = distribute.Collectives(distribute.any_world_blob(), params)
        distribute.activate(collectives)
        info.update(distribute.info())
    output = scope + resnet.LOSS if view.train else str(outputs[0])
    return Caffe2Workload(model.net.Proto().name, output, view.batch, params, info, cuda,
                          device, [str(p) for p in model.GetParams()], collectives)


def _train_net(view, ideep, cuda):
    # type: (CaseView, bool, bool) -> Any
    """(the model helper with its nets, the forward's outputs, the device option, the name
    scope of the model's blobs). Training, on one process or several, goes through
    data_parallel_model (:func:`.distribute.parallelize`) as Caffe2's imagenet_trainer.py builds
    it (with several processes it adds the gradients' all-reduce); inference is the forward
    alone in the engine's device scope."""
    from caffe2.python import core, model_helper

    from dlperf.backends.caffe2 import distribute, resnet

    arg_scope = {"order": "NCHW", "use_cudnn": cuda}
    if ideep:
        arg_scope["training_mode"] = 1 if view.train else 0  # as imagenet_trainer --use_ideep
    model = model_helper.ModelHelper(name="resnet50_" + view.task, arg_scope=arg_scope)
    device = resnet.device_option(ideep, cuda, _local_gpu())
    if view.train:  # one process or several: data_parallel_model, as Caffe2's trainer builds it
        scope = distribute.parallelize(
            model, lambda m, loss_scale: resnet.add_forward(m, view.knobs, True, loss_scale),
            resnet.add_optimizer, device, ideep, NET_TYPE, NET_WORKERS)
        return model, [scope + resnet.LOSS], device, scope
    with core.DeviceScope(device):
        outputs = resnet.add_forward(model, view.knobs, view.train)
        if view.train:
            model.AddGradientOperators(outputs)
            resnet.add_optimizer(model)
    model.param_init_net.Proto().device_option.CopyFrom(device)
    model.net.Proto().device_option.CopyFrom(device)
    # the executor data_parallel_model gives a device (and so Caffe2's trainer, and the
    # data-parallel runs of this backend): the DAG net, 4 worker threads per device
    model.net.Proto().type = NET_TYPE
    model.net.Proto().num_workers = NET_WORKERS
    return model, outputs, device, ""


def _info(view, chosen, cuda, model, ops_before):
    # type: (CaseView, str, bool, Any, int) -> Dict[str, Any]
    from caffe2.python import workspace

    from dlperf.backends.caffe2 import resnet

    threads = _threads()
    info = view.info({
        "caffe2_version": wheel_version(),
        "device": ("CUDA:%d" % _local_gpu()) if cuda else cpu_name(),
        "engine": chosen,
        "engine_set_by": ("the case's option engine" if "engine" in parse_options(
            view.case.get("options", "")) else "dlperf's default (ideep where "
                                               "workspace.C.use_mkldnn)"),
        "mkldnn_built": bool(workspace.C.use_mkldnn),
        "gpu_module": bool(workspace.has_gpu_support),
    })
    if cuda:
        info.update(check_gpu(_local_gpu()))
    info.update({
        "precision": view.precision,
        "layout": "NCHW",
        "optimizer": view.optimizer(resnet.OPTIMIZER),
        "loss": resnet.LOSS_DESC if view.train else None,
        "compile": view.compiled,
        "compile_mode": (COMPILE_MODE + ": BN folded into Conv, Conv+ReLU, Conv+Sum fused"
                         if view.compiled else "the net as built (no transform)"),
        "filters_preconverted": (
            "optimizeForMKLDNN(training_mode=True): needed for a correct IDEEP update"
            if view.train and chosen == "ideep" else None),
        "net_ops": {"built": ops_before, "run": len(model.net.Proto().op)},
        "net_type": "%s, %d workers (data_parallel_model's executor)" % (
            model.net.Proto().type, model.net.Proto().num_workers),
        "data": "synthetic, generated once (numpy, seeded) and fed into the workspace",
        "omp_num_threads": threads,
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS") or (
            "unset: Caffe2's GlobalInit puts MKL on one thread"),
        "denormals": DENORMALS or "not flushed (no x86-64 glibc MXCSR to set)",
        "omp_threads_set_by": placement.threads_set_by("the environment (OMP_NUM_THREADS)"),
        "num_threads": threads,
    })
    return info
