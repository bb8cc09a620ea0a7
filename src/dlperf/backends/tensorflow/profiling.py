"""``tf.profiler`` for dlperf's profiled steps, and the table that maps TensorFlow's operators to
dlperf's categories (:mod:`dlperf.worker.profile`).

``tf.profiler.experimental.start``/``stop`` writes an XSpace (``*.xplane.pb``) that this module
reads back with the protobuf classes TensorFlow ships (``tsl/profiler/protobuf/xplane_pb2``):

- In a ``tf.function`` graph each executed node is an event on an inter-op thread of the host
  plane, named ``scope/node:Type`` with its type as the metadata's display name. An operator is
  named by its type (``Conv2DBackpropFilter``, ``_MklNativeConv2D``...), prefixed by
  ``optimizer/`` or ``norm/`` where its scope says it is a Keras optimizer's update or part of a
  normalisation layer (:data:`SCOPES`): Keras 3 spells batch and layer normalisation and the
  optimizers' updates as plain ``Mul``/``Sub``/``AssignSubVariableOp``, which only the scope tells
  apart from the model's own arithmetic.
- With XLA (``jit_compile``) the graph is one compiled cluster; the profiler then records the
  compiled module's HLO instructions (``convolution.53``, ``multiply_add_fusion.7``...), which
  are named ``xla:<instruction>`` without their number and mapped by the instruction's kind. A
  fusion is counted by what its name says it computes; nothing is split.
- On a GPU the step's time is the kernels', so the events are the kernels on the device's
  streams, each named by the TensorFlow operator (or HLO instruction) that launched it.
"""

import glob
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from dlperf.backends.tensorflow.scopes import TF_NORM_SCOPE
from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES

# scope -> prefix of the operator's name: what only the node's scope tells (first match wins)
SCOPES = [
    # a Keras optimizer's name scope (sgd, adam_w, loss_scale_optimizer...), first in the path
    (r"^(sgd|adam|adam_w|adamw|adamax|nadam|rmsprop|adagrad|adadelta|ftrl|lion|lamb|"
     r"loss_scale_optimizer|SGD|Adam|AdamW|Momentum|momentum)(_\d+)?/", "optimizer"),
    (TF_NORM_SCOPE, "norm"),
]

# first match wins: ops named by scope, then by type
OPS = [
    (r"^optimizer/", "optimizer"),
    (r"^norm/", "normalization"),
    (r"^(IteratorGetNext|IteratorGetNextSync|IteratorGetNextAsOptional|"
     r"MultiDeviceIteratorGetNextFromShard)$", "input_pipeline", ENCLOSES),
    (r"^(_?Collective\w*|NcclAllReduce|_?NcclAllReduce\w*|AllReduce\w*|xla:all-reduce\w*|"
     r"xla:all-gather\w*|xla:reduce-scatter\w*|xla:collective-permute\w*)$",
     "communication", ENCLOSES),
    # TensorFlow op types
    (r"^(Resource)?(Apply|SparseApply)\w+$|^_FusedApply\w+$", "optimizer"),
    (r"Conv[23]D|DepthwiseConv|^_MklNative(Fused)?Conv|^_MklConv|^_FusedConv",
     "convolution"),
    (r"^(_Mkl|_MklNative|_Fused|_MklFused|_MklNativeFused)?(MatMul|BatchMatMul(V2|V3)?|"
     r"Einsum)$|^_Mkl(Native)?FusedBatchMatMulV2$", "matmul"),
    (r"^(_Mkl|_MklNative)?FusedBatchNorm\w*$|^_MklLayerNorm$|^(_Mkl)?LRN", "normalization"),
    (r"^(_Mkl|_MklNative)?(MaxPool|AvgPool|MaxPoolGrad|AvgPoolGrad|MaxPool3D|AvgPool3D)"
     r"(Grad)?(V2)?$|^MaxPoolGradGrad", "pooling"),
    (r"^(_Mkl)?(Softmax|LogSoftmax|SparseSoftmaxCrossEntropyWithLogits|"
     r"SoftmaxCrossEntropyWithLogits)$", "softmax_loss"),
    (r"^(_Mkl)?(Transpose|ConjugateTranspose|_MklNativeTranspose|Reshape|Pad|PadV2|MirrorPad|"
     r"Concat|ConcatV2|ConcatOffset|Pack|Unpack|Split|SplitV|Slice|StridedSlice|"
     r"StridedSliceGrad|Tile|TileGrad|Reverse|ReverseV2|Cast|Identity|IdentityN|Squeeze|"
     r"ExpandDims|BroadcastTo|Fill|ZerosLike|OnesLike|Snapshot|_MklToTf|_MklInputConversion|"
     r"Bitcast|TensorScatterUpdate|Relayout)$", "layout"),
    (r"^(ReadVariableOp|AssignVariableOp|AssignAddVariableOp|AssignSubVariableOp|"
     r"ResourceGather|GatherV2|Gather|GatherNd|ResourceScatter\w+|ScatterNd\w*|"
     r"UnsortedSegmentSum|SegmentSum|_Send|_Recv|_HostSend|_HostRecv|Const|"
     r"_Arg|_Retval|VarHandleOp|DynamicStitch|ParallelDynamicStitch|EmptyTensorList|"
     r"TensorList\w+|MemcpyH2D|MemcpyD2H|MemcpyD2D|CopyHostToDevice|CopyDeviceToHost)$",
     "memory_copy"),
    (r"^(_Mkl|_MklNative|_MklFused)?(Add|AddV2|AddN|Sub|Mul|RealDiv|Div|DivNoNan|FloorDiv|"
     r"FloorMod|Mod|Neg|Relu|Relu6|Elu|Selu|LeakyRelu|Gelu|Tanh|Sigmoid|Exp|Log|Log1p|Sqrt|"
     r"Rsqrt|Square|SquaredDifference|Pow|Reciprocal|Abs|Sign|Erf|Erfc|Maximum|Minimum|"
     r"Greater|GreaterEqual|Less|LessEqual|Equal|NotEqual|LogicalAnd|LogicalOr|LogicalNot|"
     r"Select|SelectV2|Sum|Mean|Max|Min|Prod|All|Any|ArgMax|ArgMin|L2Loss|BiasAdd|"
     r"BiasAddGrad|BiasAddV1|ReluGrad|Relu6Grad|EluGrad|SeluGrad|LeakyReluGrad|GeluGrad|"
     r"TanhGrad|SigmoidGrad|RsqrtGrad|SqrtGrad|ReciprocalGrad|_UnaryOpsComposition|"
     r"_FusedBatchNormEx|ClipByValue|Round|Floor|Ceil|IsFinite|IsNan|IsInf|Range|"
     r"RandomUniform|RandomStandardNormal|TruncatedNormal|StatelessRandom\w+|"
     r"StatelessRandomGetKeyCounter|StatelessRandomGetKeyCounterAlg|RngReadAndSkip|"
     r"_FusedMulAdd|_FusedAddN|_FusedMulAdd2|_FusedAddMul|Softplus|SoftplusGrad|Swish|"
     r"_MklSwish|OneHot|Cumsum|Cumprod|Shape|ShapeN|Size|Rank|BroadcastGradientArgs|"
     r"NoOp|Assert|DivNoNan|InvertPermutation|LinSpace|Xdivy|Xlogy|Xlog1py|MulNoNan|"
     r"Atan2|Sin|Cos|Clip\w*)$", "elementwise"),
    # XLA's HLO instructions (the number stripped): the kind the instruction's name says
    (r"^xla:(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)",
     "communication"),
    (r"^xla:(\w+_)*convolution|^xla:\w*[Cc]onv", "convolution"),
    (r"^xla:(\w+_)*dot|^xla:(MatMul|BatchMatMul\w*|Einsum|einsum|ynn_fusion|"
     r"\w*[Mm]at[Mm]ul\w*|\w*gemm\w*|cublas\w*)", "matmul"),
    (r"^xla:(\w+_)*(batch-norm|rsqrt)", "normalization"),
    (r"^xla:(\w+_)*reduce-window|^xla:(\w+_)*select-and-scatter", "pooling"),
    (r"^xla:(\w+_)*(gather|scatter|dynamic-slice|dynamic-update-slice|copy-start|copy-done|"
     r"send|recv|infeed|outfeed)", "memory_copy"),
    (r"^xla:((copy|transpose|bitcast|reshape|concatenate|slice|pad|reverse|broadcast|iota|"
     r"convert|tuple|get-tuple-element)[_.-]?)+(fusion)?(\.\d+)?$|^xla:wrapped_(copy|"
     r"transpose|concatenate|slice|pad|reverse|broadcast|iota|convert)", "layout"),
    (r"^xla:", "elementwise"),  # loop and input fusions, wrapped elementwise ops, reductions
]



def hlo_name(instruction):
    # type: (str) -> str
    """``convolution.53`` -> ``xla:convolution``: the instruction without its number."""
    return "xla:" + re.sub(r"(\.\d+)+$", "", instruction)


# the name an executed node is counted under: its type, after the prefix its scope earns
op_name = profile.ScopePrefixes(SCOPES).name


class TFProfiler(profile.Profiler):
    """``tf.profiler.experimental`` over the profiled steps, its XSpace read back as
    operators."""

    def __init__(self, gpu):
        # type: (bool) -> None
        self.gpu = gpu
        self.tool = {"name": "tf.profiler", "version": tf.__version__}
        self.rules = profile.rules(OPS)
        self._logdir = None  # type: Optional[str]

    def start(self):
        # type: () -> None
        self._logdir = tempfile.mkdtemp(prefix="dlperf-tfprof-")
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
        tf.profiler.experimental.start(self._logdir, options=options)

    def stop(self):
        # type: () -> List[profile.Event]
        tf.profiler.experimental.stop()
        try:
            paths = glob.glob(os.path.join(self._logdir or "", "plugins", "profile", "*",
                                           "*.xplane.pb"))
            if not paths:
                raise RuntimeError("tf.profiler wrote no *.xplane.pb")
            return events_of(read_xspace(sorted(paths)[-1]), self.gpu)
        finally:
            shutil.rmtree(self._logdir or "", ignore_errors=True)


def read_xspace(path):
    # type: (str) -> Any
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # type: ignore
    except ImportError:  # older layouts of the package
        from tensorflow.core.profiler.protobuf import xplane_pb2  # type: ignore
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    return space


def _stat(plane, stat):
    # type: (Any, Any) -> Any
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind) if kind else None


def _stats(plane, event, metadata):
    # type: (Any, Any, Any) -> Dict[str, Any]
    out = {}  # type: Dict[str, Any]
    for stat in list(metadata.stats) + list(event.stats):
        name = plane.stat_metadata[stat.metadata_id].name
        if name in ("hlo_op", "tf_op"):
            out[name] = _stat(plane, stat)
    return out


def _name(plane, event, metadata):
    # type: (Any, Any, Any) -> Optional[str]
    """The operator an event is, or None for the profiler's own ranges (executor, allocator,
    thread pool, eager dispatch)."""
    if metadata.display_name and ":" in metadata.name:  # an executed node: scope/node:Type
        return op_name(metadata.name.rsplit(":", 1)[0], metadata.display_name)
    stats = _stats(plane, event, metadata)
    if stats.get("hlo_op"):
        return hlo_name(str(stats["hlo_op"]))
    if stats.get("tf_op"):
        node, _, op_type = str(stats["tf_op"]).rpartition(":")
        return op_name(node, op_type) if node else op_type
    return None


def events_of(space, gpu):
    # type: (Any, bool) -> List[profile.Event]
    """The operators of an XSpace: on a GPU the kernels on the device planes' streams (the host
    events only launched them), else the host plane's executed nodes or HLO instructions."""
    planes = [p for p in space.planes if p.name.startswith("/device:GPU")] if gpu else []
    kernels = _collect(planes, lambda line: line.name.startswith("Stream"), device=True)
    if kernels:
        return kernels
    return _collect([p for p in space.planes if p.name.startswith("/host:CPU")],
                    lambda line: True, device=False)


def _collect(planes, keep_line, device):
    # type: (List[Any], Any, bool) -> List[profile.Event]
    origin = None  # type: Optional[int]
    out = []  # type: List[profile.Event]
    for plane in planes:
        for line in plane.lines:
            if not keep_line(line):
                continue
            if origin is None:
                origin = line.timestamp_ns
            base = (line.timestamp_ns - origin) * 1e-9
            thread = (plane.name, line.id)  # type: Tuple[str, int]
            for event in line.events:
                metadata = plane.event_metadata[event.metadata_id]
                name = _name(plane, event, metadata)
                if name is None and device:
                    name = metadata.name  # a kernel no operator claims: under its own name
                if name is None or event.duration_ps <= 0:
                    continue
                out.append(profile.Event(name, thread, base + event.offset_ps * 1e-12,
                                         event.duration_ps * 1e-12))
    return out
