"""``mindspore.Profiler`` for dlperf's profiled steps, and the table that maps MindSpore's
operator types to dlperf's categories (:mod:`dlperf.worker.profile`).

On the CPU MindSpore's profiler records every kernel it launches (``HostCpuOps``), graph mode
and PyNative alike; ``analyse()`` writes them as a Chrome trace,
``ASCEND_PROFILER_OUTPUT/trace_view.json`` under the output path (the "CPU OP" process: one
complete event per launch, named by the kernel's full name, ``Default/Conv2D-op12``,
``Default/network-.../BatchNorm-op3``), which is what is read here, with the standard library.
The operators run one after another on that one timeline.
"""

import glob
import json
import re
import os
import shutil
import tempfile
from typing import Any, List, Sequence

import mindspore as ms

from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES


def _types(names):
    # type: (Sequence[str]) -> str
    """A kernel's full name whose last part is one of these operator types (``Type-opN``)."""
    return r"(^|/)(%s)(-op\d+)?$" % "|".join(names)


# by the operator's type, the last part of its full name; first match wins
OPS = [
    (_types(["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll", "AlltoAll",
             r"Hcom\w*", r"Mccl\w*"]), "communication", ENCLOSES),
    # a kernel expanded from a softmax's (or its gradient's) graph: Expand/_SoftmaxBackward/Sub
    (r"(^|/)_?\w*Softmax\w*/", "softmax_loss"),
    (_types([r"\w*Conv\w*", r"Conv2D\w*", r"Conv3D\w*", r"DepthwiseConv2dNative\w*"]),
     "convolution"),
    (_types([r"MatMul\w*", r"BatchMatMul\w*", r"Dense\w*", "Baddbmm", "Addmm", "Einsum"]),
     "matmul"),
    (_types([r"BatchNorm\w*", r"LayerNorm\w*", r"GroupNorm\w*", r"InstanceNorm\w*",
             r"RmsNorm\w*"]), "normalization"),
    (_types([r"MaxPool\w*", r"AvgPool\w*", r"AdaptiveAvgPool\w*", r"AdaptiveMaxPool\w*"]),
     "pooling"),
    (_types([r"\w*Softmax\w*", r"\w*CrossEntropy\w*", r"NLLLoss\w*", r"LogSoftmax\w*"]),
     "softmax_loss"),
    (_types([r"Apply\w+", r"\w*Adam\w*", "Lamb", "SGD", "Momentum", r"Fused\w*Adam\w*",
             r"ClipByNorm\w*"]), "optimizer"),
    (_types([r"Gather\w*", r"EmbeddingLookup\w*", r"Embedding\w*", r"Scatter\w*",
             r"TensorScatter\w*", r"UnsortedSegment\w*", "IndexSelect", "IndexAdd",
             "MaskedFill", "OneHot", r"\w*Gather\w*"]), "memory_copy"),
    (_types([r"Pad\w*", r"Transpose\w*", "Reshape", r"Concat\w*", "Tile", "Cast",
             r"StridedSlice\w*", r"Slice\w*", r"Split\w*", "BroadcastTo", "ExpandDims",
             "Squeeze", "Flatten", "Identity", r"Contiguous\w*", r"TensorCopy\w*",
             r"Copy\w*", "Stack", "Unstack", "Permute", "View", "Depend", "Load",
             "MakeTuple", "TupleGetItem", "TensorMove", "Unsqueeze", r"ReverseV2"]), "layout"),
    (_types(["ReLU", "ReluGrad", "ReLU6", r"ReLU\w*", r"Gelu\w*", r"GeLU\w*", r"FastGeLU\w*",
             r"Add\w*", r"Sub\w*", r"Mul\w*", r"RealDiv\w*", r"Div\w*", r"FloorDiv\w*",
             r"BiasAdd\w*", r"Reduce\w*", r"Sum\w*", r"Mean\w*", r"Zeros\w*", r"Ones\w*",
             r"Fill\w*", r"Assign\w*", r"Sqrt\w*", r"Rsqrt\w*", "Exp", "Log", "Neg",
             "Square", "Tanh", "TanhGrad", r"Sigmoid\w*", "Erf", r"Pow\w*", r"Dropout\w*",
             r"Select\w*", "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
             "Maximum", "Minimum", "MaximumGrad", "MinimumGrad", "Sign", "Abs", r"Clip\w*",
             "Reciprocal", "LogicalAnd", "LogicalOr", "LogicalNot", r"IsFinite", r"IsInf",
             r"IsNan", "Range", r"Arange\w*", "Floor", "Ceil", r"Uniform\w*",
             r"StandardNormal\w*", r"Random\w*", r"Rand\w*", "Mod", r"Square\w*", "Where",
             r"Norm\w*", "L2Normalize", r"Silu\w*", r"Cumsum\w*", r"Argmax\w*",
             r"Max\w*", r"Min\w*", "Round", "All", "Any", r"InplaceCopy\w*", r"Inplace\w*",
             "Lerp", r"AllFinite\w*"]), "elementwise"),
]


class MindSporeProfiler(profile.Profiler):
    """``mindspore.Profiler`` over the profiled steps: its CPU kernel launches, read from the
    Chrome trace its ``analyse()`` writes."""

    def __init__(self):
        # type: () -> None
        self.tool = {"name": "mindspore.Profiler", "version": ms.__version__}
        self.rules = profile.rules(OPS)
        self._dir = None  # type: Any
        self._session = None  # type: Any

    def start(self):
        # type: () -> None
        self._dir = tempfile.mkdtemp(prefix="dlperf-mindspore-profile-")
        self._session = ms.Profiler(output_path=self._dir, start_profile=False)
        self._session.start()

    def stop(self):
        # type: () -> List[profile.Event]
        try:
            self._session.stop()
            self._session.analyse()
            found = glob.glob(os.path.join(self._dir, "*", "ASCEND_PROFILER_OUTPUT",
                                           "trace_view.json"))
            if not found:
                raise profile.ProfileUnavailable(
                    "mindspore.Profiler wrote no trace_view.json on %s"
                    % ms.get_context("device_target"))
            with open(found[0]) as handle:
                trace = json.load(handle)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        return read_trace(trace)


def read_trace(trace):
    # type: (Any) -> List[profile.Event]
    """The kernel launches of a trace_view.json: the complete events of its operator processes
    (the "CPU OP" process on a CPU), not its scope-layer ranges."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    processes = {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = str(event.get("args", {}).get("name", ""))
    out = []  # type: List[profile.Event]
    for event in events:
        if event.get("ph") != "X":
            continue
        process = processes.get(event.get("pid"), "")
        if "OP" not in process.upper().split():  # "CPU OP": kernels; "Scope Layer": ranges
            continue
        start, dur = float(event["ts"]), float(event.get("dur", 0))  # microseconds
        if dur <= 0:
            continue
        # one name per operator type in its scope: "Default/Conv2D-op16" and "-op3" are two
        # launches of Default/Conv2D, which the top operators should add up
        name = re.sub(r"-op\d+$", "", str(event["name"]))
        out.append(profile.Event(name, (event.get("pid"), event.get("tid")), start / 1e6,
                                 dur / 1e6))
    return out
