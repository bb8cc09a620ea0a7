"""Horovod in one worker process, shared by the backends with a ``--launcher horovod`` path
(``backends/<fw>/horovod.py``): ``hvd.init()``, the rank and size, the facts a result records,
and the gather of the ranks' results over ``hvd.allgather``.

Imported by those backends' modules only, never by a light package ``__init__``; Horovod itself is
imported when a case asks for it. Standard library at import time (numpy inside the gather);
valid Python 3.7.
"""

import importlib
from typing import Any, Callable, Dict, List, Optional

from dlperf.backends.common import gather_json
from dlperf.worker.support import Packing

#: how ``hvd.DistributedOptimizer`` hands a step's gradients to its all-reduce: Horovod's tensor
#: fusion packs the tensors ready in a cycle into a buffer of up to HOROVOD_FUSION_THRESHOLD
#: bytes (64 MiB unless set), on every framework and device
PACKING = Packing("Horovod's tensor fusion, HOROVOD_FUSION_THRESHOLD's default 64 MiB",
                  bucket_bytes=64 << 20)


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
