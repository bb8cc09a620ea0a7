"""What every backend's ``build`` does alike, written once: the view of a case that every
``build`` starts from, the JSON gather of the ranks' results, and the checks and recipes several
frameworks share. (The package's contract is :mod:`dlperf.backends.contract`, CPU counts are
:mod:`dlperf.worker.cpus`, Horovod's process is :mod:`dlperf.backends.horovod`.)

Each framework's own knowledge (its devices, collectives, networks, precisions) stays in its
folder; what is here takes the framework-specific part as an argument (a callable, a dtype).
Imported by the light ``backends/<fw>/__init__.py`` too (for a shared reason's text), so it
imports only the standard library and stdlib-only dlperf modules at import time (numpy inside
the functions that need it).
Valid Python 3.7.
"""

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from dlperf import models
from dlperf.worker.workload import UnsupportedError

#: The devices a case may ask for.
DEVICES = ("auto", "cpu", "cuda")
#: Why a CPU run refuses tf32, for a backend whose SUPPORT declares it on CUDA devices only.
CPU_TF32 = "precision tf32 needs a CUDA device (TensorFloat-32 tensor cores); this run is on cpu"


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
