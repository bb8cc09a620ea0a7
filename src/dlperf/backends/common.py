"""What every backend does alike, written once: the lazy faces of a backend package, the view of a
case that every ``build`` starts from, CPU counts, the JSON gather of the ranks' results, and
the checks and recipes several frameworks share.

Each framework's own knowledge (its devices, collectives, networks, precisions) stays in its
folder; what is here takes the framework-specific part as an argument (a callable, a dtype).
Imported by the light ``backends/<fw>/__init__.py`` too, so it imports only the standard library
and stdlib-only dlperf modules at import time (numpy inside the functions that need it).
Valid Python 3.7.
"""

import importlib
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from dlperf import models
from dlperf.worker.workload import UnsupportedError

#: The most loader workers a dataset pipeline starts by default.
DEFAULT_MAX_WORKERS = 4
#: The devices a case may ask for.
DEVICES = ("auto", "cpu", "cuda")
#: Why a CPU run refuses tf32, for a backend whose SUPPORT declares it on CUDA devices only.
CPU_TF32 = "precision tf32 needs a CUDA device (TensorFloat-32 tensor cores); this run is on cpu"


# --------------------------------------------------------------------------------------------
# the faces of a backend package
# --------------------------------------------------------------------------------------------


def lazy(target):
    # type: (str) -> Callable[..., Any]
    """A function that imports ``"package.module:name"`` when first called and calls it.

    A backend package must stay light (the harness reads its ``SUPPORT`` without the
    framework), so its ``resolve_device``, ``build`` and ``gather_results`` are faces that
    import the heavy module only inside the worker, when the worker calls them.
    """
    module, _, name = target.partition(":")

    def call(*args, **kwargs):
        # type: (*Any, **Any) -> Any
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = "%s from %s, imported when first called." % (name, module)
    return call


# --------------------------------------------------------------------------------------------
# the case, as every build reads it
# --------------------------------------------------------------------------------------------


class CaseView(object):
    """The fields of a case every backend's ``build`` reads, with the model's knobs resolved
    (defaults filled in, validated by the catalogue)."""

    def __init__(self, case):
        # type: (Dict[str, Any]) -> None
        self.case = case
        self.name = case["model"]  # type: str
        self.knobs = models.resolve_knobs(self.name, case.get("knobs") or {})
        self.task = case["task"]  # type: str
        self.train = self.task == "train"
        self.batch = int(case["batch_size"])
        self.seed = int(case.get("seed", 0))
        self.compiled = bool(case.get("compile", False))
        self.precision = case["precision"]  # type: str
        self.device = case.get("device", "auto")  # type: str
        # a dataset folder instead of the synthetic batch: the next batch every step
        self.dataset = case.get("data", "synthetic") != "synthetic"
        self.data_only = bool(case.get("data_only"))

    def info(self, *facts):
        # type: (*Mapping[str, Any]) -> Dict[str, Any]
        """A result's ``info``: each mapping of ``facts`` in turn (the framework's runtime, its
        precision...), then which model, its knobs and which task; the backend adds the rest."""
        info = {}  # type: Dict[str, Any]
        for fact in facts:
            info.update(fact)
        info.update({"model": self.name, "knobs": self.knobs, "task": self.task})
        return info

    def optimizer(self, description):
        # type: (str) -> Optional[str]
        """What a result records as its optimizer: none for inference."""
        return description if self.train else None


def check_device_name(requested):
    # type: (str) -> None
    """Refuse a device a case cannot name (before a backend looks for it)."""
    if requested not in DEVICES:
        raise UnsupportedError("unknown device %r; allowed: auto, cpu, cuda" % requested)


def element_count(shape):
    # type: (Any) -> int
    """How many elements a tensor of ``shape`` (any sequence of integer-likes) holds."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_built(name, builders, framework):
    # type: (str, Mapping[str, Any], str) -> None
    """Refuse a model ``framework``'s backend has no builder for, naming those it has."""
    if name not in builders:
        raise UnsupportedError("the %s backend does not build model %r; it builds: %s"
                               % (framework, name, ", ".join(sorted(builders))))


def check_resnet_batch(knobs, batch, train):
    # type: (Mapping[str, int], int, bool) -> None
    """Refuse a ResNet-50 training batch whose last feature map leaves BatchNorm one value per
    channel (every framework's BatchNorm fails there, each with its own message)."""
    size = knobs["image_size"]
    final = models.resnet50_convs(size)[-1].size_out
    if train and batch * final * final < 2:
        raise UnsupportedError(
            "resnet50 training at image_size %d ends at %dx%d, so batch %d gives BatchNorm a "
            "single value per channel; use batch >= 2 or a larger image"
            % (size, final, final, batch))


# --------------------------------------------------------------------------------------------
# CPU counts
# --------------------------------------------------------------------------------------------


def available_cpus():
    # type: () -> int
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_workers():
    # type: () -> int
    """min(4, the CPUs this worker may run on): enough to feed a small model, never more loader
    workers than cores (torch's DataLoader advice; every dataset pipeline here uses it)."""
    return max(1, min(DEFAULT_MAX_WORKERS, available_cpus()))


def loader_workers(case):
    # type: (Dict[str, Any]) -> Tuple[int, Optional[int]]
    """(how many loader workers to start, how many the case asked for: None = the default,
    :func:`default_workers`)."""
    requested = case.get("loader_workers")
    return (default_workers() if requested is None else int(requested)), requested


def default_omp_threads(marker):
    # type: (str) -> None
    """Set ``OMP_NUM_THREADS`` to every available CPU unless the user set it, and set
    ``marker`` so the backend can record that dlperf chose it. For a framework that sizes its
    CPU pools from that variable once, at import, and would otherwise take fewer cores than the
    other frameworks get."""
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(available_cpus())
        os.environ[marker] = "1"


# --------------------------------------------------------------------------------------------
# the ranks' collectives
# --------------------------------------------------------------------------------------------


class CollectiveRanks(object):
    """The workload contract's barrier and warm-up vote for a workload that holds
    ``_collectives``: the framework's collectives object across processes (with ``barrier()``
    and ``gather_ints(value)``), or None for one process (then the contract's single-process
    answers). TensorFlow's workloads, whose collectives are ops of the strategy, use it."""

    _collectives = None  # type: Any

    def barrier(self):
        # type: () -> None
        if self._collectives is not None:
            self._collectives.barrier()

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        if self._collectives is None:
            return [value]
        return self._collectives.gather_ints(value)


# --------------------------------------------------------------------------------------------
# the ranks' results, gathered at rank 0
# --------------------------------------------------------------------------------------------


def gather_json(payload, all_gather, root, size_dtype="int64", byte_dtype="uint8"):
    # type: (Dict[str, Any], Callable[[Any], Any], bool, str, str) -> Optional[List[Dict[str, Any]]]
    """Every rank's ``payload`` at the root (None elsewhere), as JSON bytes, never pickles: the
    root must not unpickle bytes that came over the network.

    ``all_gather(vector)`` is the framework's collective: given this rank's 1-D numpy vector
    (the same length on every rank) it returns every rank's, one row each in rank order. The
    lengths go first (a ``size_dtype`` vector), then the bytes padded to the longest (a
    ``byte_dtype`` vector: a collective without uint8 kernels carries each byte in a wider
    integer or a float, all exact for 0..255)."""
    import numpy

    data = numpy.frombuffer(json.dumps(payload).encode("utf-8"), dtype=numpy.uint8)
    sizes = numpy.asarray(all_gather(numpy.array([data.size], dtype=size_dtype))).reshape(-1)
    lengths = [int(n) for n in sizes]
    padded = numpy.zeros(max(lengths), dtype=byte_dtype)
    padded[:data.size] = data
    rows = numpy.asarray(all_gather(padded)).reshape(len(lengths), -1)
    if not root:
        return None
    return [json.loads(row[:n].astype(numpy.uint8).tobytes().decode("utf-8"))
            for row, n in zip(rows, lengths)]


class Horovod(object):
    """Horovod in one worker process, for a backend's ``--launcher horovod`` path: ``hvd.init()``
    once, the rank and size, the controller and the facts a result records, and the results'
    gather over ``hvd.allgather`` (JSON bytes, :func:`gather_json`). ``binding`` is the
    framework's Horovod module (``"horovod.torch"``), imported only when a case asks for it:
    the environment without Horovod runs every other case."""

    def __init__(self, binding):
        # type: (str) -> None
        self.binding = binding
        self.hvd = None  # type: Any
        self.version = None  # type: Optional[str]

    def start(self, case):
        # type: (Dict[str, Any]) -> Optional[Any]
        """``hvd.init()`` for a Horovod case (once), the binding module; None for any other."""
        if case.get("launcher") != "horovod":
            return None
        if self.hvd is None:
            import horovod

            hvd = importlib.import_module(self.binding)
            hvd.init()
            self.hvd, self.version = hvd, horovod.__version__
        return self.hvd

    def started(self):
        # type: () -> bool
        return self.hvd is not None

    def rank(self):
        # type: () -> int
        return int(self.hvd.rank())

    def size(self):
        # type: () -> int
        return int(self.hvd.size())

    def controller(self):
        # type: () -> Optional[str]
        hvd = self.hvd
        return "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else None

    def facts(self, how):
        # type: (str) -> Dict[str, Any]
        """What a result records: ``data_parallel`` ("Horovod 0.28.1: " + ``how``, in which
        ``%(size)d`` and ``%(controller)s`` are filled in), the version, the controller, and
        this rank's place (also as ``world_size`` / ``rank``, the native paths' names)."""
        place = {"size": self.size(), "controller": self.controller()}
        return {"data_parallel": "Horovod %s: %s" % (self.version, how % place),
                "horovod_version": self.version, "horovod_controller": place["controller"],
                "horovod_rank": self.rank(), "horovod_size": self.size(),
                "world_size": self.size(), "rank": self.rank()}

    def gather_json(self, payload, to_tensor, to_numpy):
        # type: (Dict[str, Any], Callable[[Any], Any], Callable[[Any], Any]) -> Optional[List[Dict[str, Any]]]
        """Every rank's ``payload`` at rank 0 (None elsewhere) through ``hvd.allgather``, which
        concatenates the ranks' vectors in rank order; ``to_tensor(vector)`` makes the
        framework's tensor of a numpy vector, ``to_numpy(tensor)`` reads one back."""
        import numpy

        def all_gather(vector):
            # type: (Any) -> Any
            out = self.hvd.allgather(to_tensor(vector), name="dlperf_gather_%s" % vector.dtype)
            return numpy.asarray(to_numpy(out)).reshape(self.size(), -1)
        return gather_json(payload, all_gather, self.rank() == 0)


def summed_rows(all_reduce_sum, rank, world):
    # type: (Callable[[Any], Any], int, int) -> Callable[[Any], Any]
    """An ``all_gather`` for :func:`gather_json` made of a sum all-reduce, for a framework whose
    collective only sums: each rank writes its vector into its own row of a zero matrix, and the
    sum over every rank holds them all."""
    import numpy

    def all_gather(vector):
        # type: (Any) -> Any
        rows = numpy.zeros((world, vector.size), dtype=vector.dtype)
        rows[rank] = vector
        return all_reduce_sum(rows)
    return all_gather


# TensorFlow 1 and 2 (their profiling.py): tf.nn.moments / tf.nn.batch_normalization, and
# layers named as normalisation layers (bn1, downsample_bn, ln1, mlm_ln, batch_normalization,
# layer_normalization, LayerNorm), whose ops are otherwise plain Mul/Sub/Mean
TF_NORM_SCOPE = (r"(^|/)(moments|batchnorm)/|(^|/)([A-Za-z0-9]+_)*(bn|ln|norm|"
                 r"batch_normalization|layer_normalization|LayerNorm|BatchNorm)\d*(_\d+)*/")
