"""TensorFlow 1.15's own step tracer for dlperf's profiled steps (``RunOptions(trace_level=
FULL_TRACE)`` with a ``RunMetadata`` on each profiled ``session.run``), and the table that maps
TensorFlow's op types to dlperf's categories (:mod:`dlperf.worker.profile`).

The step stats hold every executed node once per device. On a CPU the ``/host:CPU`` device
(the host tracer) gives each node as ``scope/node:Type`` on the inter-op thread that ran it,
which is what concurrent nodes need; without it the executor's own stats serve (type from the
``node = Type(inputs)`` label, one timeline per device). On a GPU the kernels on the device's
streams (``scope/node:Type``) and the copies on its memcpy stream hold the step's time.

An operator is named by its type (``Conv2DBackpropFilter``, ``FusedBatchNormV3``,
``ApplyMomentum``...), prefixed by ``optimizer/`` or ``norm/`` where its scope says it is the
optimizer's update or part of a normalisation written out in plain arithmetic (:data:`SCOPES`;
BERT's layer norm is ``tf.nn.moments`` and a few ``Mul``/``Sub``).

With XLA auto-clustering a compiled cluster runs as one ``_XlaRun`` op whose HLO this tracer does
not see: the profile is then unavailable rather than split by guess.
"""

import re
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from dlperf.backends.tensorflow.scopes import TF_NORM_SCOPE
from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES

tf1 = tf.compat.v1

# scope -> prefix of the operator's name: what only the node's scope tells (first match wins)
SCOPES = [
    # the optimizer's apply_gradients scope (Momentum, Adam, AdamW's decay...), first in the path
    (r"^(Momentum|Adam|AdamW|GradientDescent|RMSProp|Adagrad|Adadelta|LARS|LAMB|Lamb|"
     r"DistributedMomentum|DistributedAdam\w*)(_\d+)?/", "optimizer"),
    (TF_NORM_SCOPE, "norm"),
]

# first match wins: ops named by scope, then by type
OPS = [
    (r"^optimizer/", "optimizer"),
    (r"^norm/", "normalization"),
    (r"^(IteratorGetNext|IteratorGetNextSync|MultiDeviceIteratorGetNextFromShard|"
     r"DequeueMany\w*|QueueDequeue\w*)$", "input_pipeline", ENCLOSES),
    (r"^(Collective\w*|NcclAllReduce|_?Nccl\w*|Horovod\w*|HorovodAllreduce\w*|"
     r"HorovodAllgather\w*|HorovodBroadcast\w*)$", "communication", ENCLOSES),
    (r"^(Resource)?(Apply|SparseApply)\w+$|^_FusedApply\w+$", "optimizer"),
    (r"Conv[23]D|DepthwiseConv|^_MklConv|^_FusedConv", "convolution"),
    (r"^(_Mkl|_Fused|_MklFused)?(MatMul|BatchMatMul(V2)?|Einsum)$", "matmul"),
    (r"^(_Mkl)?FusedBatchNorm\w*$|^(_Mkl)?LRN", "normalization"),
    (r"^(_Mkl)?(MaxPool|AvgPool|MaxPool3D|AvgPool3D)(Grad)?(V2)?$|^MaxPoolGradGrad",
     "pooling"),
    (r"^(_Mkl)?(Softmax|LogSoftmax|SparseSoftmaxCrossEntropyWithLogits|"
     r"SoftmaxCrossEntropyWithLogits)$", "softmax_loss"),
    (r"^(_Mkl)?(Transpose|ConjugateTranspose|Reshape|Pad|PadV2|MirrorPad|Concat|ConcatV2|"
     r"ConcatOffset|Pack|Unpack|Split|SplitV|Slice|StridedSlice|StridedSliceGrad|Tile|"
     r"TileGrad|Reverse|ReverseV2|Cast|Identity|IdentityN|Squeeze|ExpandDims|BroadcastTo|"
     r"Fill|ZerosLike|OnesLike|Snapshot|_MklToTf|_MklInputConversion|Bitcast)$", "layout"),
    (r"^(VariableV2|Variable|VarHandleOp|ReadVariableOp|AssignVariableOp|Assign|AssignAdd|"
     r"AssignSub|AssignAddVariableOp|AssignSubVariableOp|GatherV2|Gather|GatherNd|"
     r"ResourceGather|ScatterAdd|ScatterSub|ScatterUpdate|ScatterNd\w*|ResourceScatter\w+|"
     r"UnsortedSegmentSum|SegmentSum|Unique|DynamicStitch|ParallelDynamicStitch|_Send|_Recv|"
     r"_HostSend|_HostRecv|Const|HostConst|_Arg|_Retval|MEMCPY\w*|Memcpy\w*)$",
     "memory_copy"),
    (r"^(_Mkl)?(Add|AddV2|AddN|Sub|Mul|RealDiv|Div|DivNoNan|FloorDiv|FloorMod|Mod|Neg|Relu|"
     r"Relu6|Elu|Selu|LeakyRelu|Tanh|Sigmoid|Exp|Log|Log1p|Sqrt|Rsqrt|Square|"
     r"SquaredDifference|Pow|Reciprocal|Abs|Sign|Erf|Erfc|Maximum|Minimum|Greater|"
     r"GreaterEqual|Less|LessEqual|Equal|NotEqual|LogicalAnd|LogicalOr|LogicalNot|Select|"
     r"SelectV2|Sum|Mean|Max|Min|Prod|All|Any|ArgMax|ArgMin|L2Loss|BiasAdd|BiasAddGrad|"
     r"BiasAddV1|ReluGrad|Relu6Grad|EluGrad|SeluGrad|LeakyReluGrad|TanhGrad|SigmoidGrad|"
     r"RsqrtGrad|SqrtGrad|ReciprocalGrad|_UnaryOpsComposition|ClipByValue|Round|Floor|Ceil|"
     r"IsFinite|IsNan|IsInf|Range|RandomUniform|RandomUniformInt|RandomStandardNormal|"
     r"TruncatedNormal|StatelessRandom\w+|_FusedMulAdd|_FusedAddN|Softplus|SoftplusGrad|"
     r"OneHot|Cumsum|Shape|ShapeN|Size|Rank|BroadcastGradientArgs|NoOp|Assert|"
     r"InvertPermutation|Xdivy|Xlogy|MulNoNan|Cos|Sin|CheckNumerics)$", "elementwise"),
    (r"^_XlaRun$|^_XlaCompile$|^XlaLaunch$", "other"),
]

# the name an executed node is counted under: its type, after the prefix its scope earns
op_name = profile.ScopePrefixes(SCOPES).name
_LABEL = re.compile(r"^.*? = (\S+?)\(")
XLA_OPS = ("_XlaRun", "XlaLaunch")



class SessionProfiler(profile.Profiler):
    """FULL_TRACE step stats of the profiled ``session.run`` calls: the workload's step hands
    its run to :meth:`run` while this profiler is started (``workload.tracer``)."""

    def __init__(self, workload, gpu):
        # type: (Any, bool) -> None
        self.workload = workload
        self.gpu = gpu
        self.tool = {"name": "tf.RunMetadata step_stats (FULL_TRACE)", "version": tf.__version__}
        self.rules = profile.rules(OPS)
        self._runs = []  # type: List[Any]
        self._options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)

    def run(self, session, fetches):
        # type: (Any, Any) -> Any
        metadata = tf1.RunMetadata()
        out = session.run(fetches, options=self._options, run_metadata=metadata)
        self._runs.append(metadata)
        return out

    def start(self):
        # type: () -> None
        self._runs = []
        self.workload.tracer = self

    def stop(self):
        # type: () -> List[profile.Event]
        self.workload.tracer = None
        events = []  # type: List[profile.Event]
        origin = None  # type: Optional[int]
        for metadata in self._runs:
            found, origin = events_of(metadata.step_stats, self.gpu, origin)
            events.extend(found)
        clusters = sorted(set(e.name for e in events if e.name in XLA_OPS))
        if clusters:
            raise profile.ProfileUnavailable(
                "XLA auto-clustering: each compiled cluster runs as one %s op and TensorFlow "
                "1.15's step stats do not show the operators inside it"
                % " / ".join(clusters))
        return events


def _parse(node_name, label, device):
    # type: (str, str, bool) -> Tuple[str, str]
    """(node, type) of a node's stats: ``node:Type`` names (host tracer, GPU streams), else
    the ``node = Type(inputs)`` label."""
    if not device and ":" in node_name:
        node, _, op_type = node_name.rpartition(":")
        return node, op_type
    match = _LABEL.match(label)
    if match:
        return node_name, match.group(1)
    if ":" in node_name:
        node, _, op_type = node_name.rpartition(":")
        return node, op_type
    return node_name, node_name


def _streams(step_stats, gpu):
    # type: (Any, bool) -> Tuple[List[Any], bool]
    """The device stats whose nodes are the step's operators, and whether their names are
    ``node:Type`` (host tracer, GPU streams) rather than the executor's (``node`` +
    label)."""
    devices = list(step_stats.dev_stats)
    if gpu:
        streams = [d for d in devices if ("/stream:" in d.device and
                                          not d.device.endswith("/stream:all")) or
                   d.device.endswith("/memcpy")]
        if any(len(d.node_stats) for d in streams):
            return streams, False
    host = [d for d in devices if d.device == "/host:CPU"]
    if any(len(d.node_stats) for d in host) and not gpu:
        return host, False
    return [d for d in devices if "/device:CPU" in d.device or "/cpu:" in d.device.lower()
            or (gpu and "/device:GPU" in d.device and "/stream" not in d.device
                and "memcpy" not in d.device)], True


def events_of(step_stats, gpu, origin=None):
    # type: (Any, bool, Optional[int]) -> Tuple[List[profile.Event], Optional[int]]
    """The operators of one run's step stats (seconds from ``origin``, in nanoseconds, the
    first start seen when None) and the origin used."""
    devices, executor = _streams(step_stats, gpu)
    out = []  # type: List[profile.Event]
    for device in devices:
        for node in device.node_stats:
            if node.all_start_nanos:
                start, dur = node.all_start_nanos, node.all_end_rel_nanos
            else:
                start, dur = node.all_start_micros * 1000, node.all_end_rel_micros * 1000
            if dur < 0:  # under a microsecond the host tracer says 0: kept, for the counts
                continue
            if origin is None:
                origin = start
            name, op_type = _parse(node.node_name, node.timeline_label, executor)
            # the executor's stats have no thread of their own: one timeline per device
            thread = (device.device, node.thread_id)
            out.append(profile.Event(op_name(name, op_type), thread, (start - origin) * 1e-9,
                                     dur * 1e-9))
    return out, origin
