"""``paddle.profiler`` for dlperf's profiled steps, and the table that maps Paddle's operator
names to dlperf's categories (:mod:`dlperf.worker.profile`).

The operators come from the profiler's own event tree (``profiler_result.get_data()``: per
thread, the host ranges nested as they ran), not from an exported file. Paddle names one
operator several ways, nested: in dygraph ``conv2d pybind_imperative_func`` holds
``conv2d dygraph``, which holds ``conv2d infer_meta``, ``conv2d node_creation`` and
``conv2d kernel launch`` (on a CPU the kernel runs inside its launch); its gradient is
``Global_Conv2dGradNodeFinal`` > ``Local_Conv2dGradNodeFinal`` > ``conv2d_grad kernel launch``.
Under ``paddle.jit.to_static`` the program runs on the executor's threads as ``pd_op.conv2d`` >
``conv2d kernel launch``, while the Python thread waits in ``interpreter_core_run``. Every
spelling of an operator maps to its category, so the innermost wins and the dispatch around a
kernel stays with its operator. The nn.Layer ranges (event type Forward: user class names) and
the step marker are left out; ``Optimization Step`` claims the optimizer's update.

On CUDA the step's time is the kernels': the events are the device's kernels and copies on
their streams, each named by the host operator that launched it, so one table serves both.
"""

from typing import Any, List, Optional

import paddle

from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES

# host ranges that are no operator: the nn.Layer calls (named after the user's classes) and the
# profiler's own step marker
SKIPPED_TYPES = ("Forward", "ProfileStep")
# the host ranges a device kernel is named after: the innermost enclosing one of these types
LAUNCHING_TYPES = ("Operator", "OperatorInner", "DygraphKernelLaunch", "StaticKernelLaunch")


def _op(names):
    # type: (str) -> str
    """Every spelling of the operators ``names`` (a regex alternation): ``conv2d dygraph``,
    ``conv2d_grad infer_meta``, ``momentum_ dygraph``, ``pd_op.relu_``..."""
    return r"^(?:pd_op\.)?(?:%s)(?:_grad)*_?(?: |$)" % names


def _grad(names):
    # type: (str) -> str
    """The autograd nodes of the operators ``names`` (CamelCase): ``Global_Conv2dGradNode``,
    ``Local_Conv2dGradNodeFinal``..."""
    return r"^(?:Global|Local)_(?:%s)GradNode" % names


# first match wins: ranges that enclose others first, then the wrappers that are no operator of
# their own (None: part of whatever encloses them), then the operators by kind
OPS = [
    (r"^Optimization Step$", "optimizer", ENCLOSES),
    (r"(?i)dataloader|dali", "input_pipeline", ENCLOSES),
    (r"all_reduce|allreduce|all_gather|allgather|broadcast|reduce_scatter|^c_(?:sync|comm)|"
     r"ProcessGroup|^nccl|^gloo", "communication", ENCLOSES),
    (r"^(?:Gradient Backward|backward|interpreter_core_run|fetch_and_gc|"
     r"get_interpretercore_cache|construct_grad_tensor|PhiKernelInstruction::\w+|"
     r"builtin_\w+|run_program|Global_Dy2StGradNode|Local_Dy2StGradNode|"
     r"Global_RunProgramGradNode|Local_RunProgramGradNode)$|"
     r" pybind_patch_func$|^pd_op\.(?:data|feed|fetch)$", None),
    (_op("momentum|merged_momentum|sgd|adam|adamw|merged_adam|lamb|rmsprop|adagrad|"
         "check_finite_and_unscale|update_loss_scaling|squared_l2_norm|clip_by_norm") +
     r"|GradNodeAccumulation|clear_grad", "optimizer"),
    (r"(?i)conv", "convolution"),
    (_op("matmul|matmul_v2|mul|fc|linear|bmm|addmm|einsum|mv|dot|fused_gemm_epilogue|"
         "fused_linear|flash_attn\\w*|memory_efficient_attention|fused_attention|"
         "fused_feedforward|multihead_matmul|scaled_dot_product_attention") +
     "|" + _grad("Matmul|MatmulV2|Mul|Fc|Linear|Bmm|Addmm|Einsum|Mv|Dot|FusedGemmEpilogue|"
                 "FusedLinear|FlashAttn\\w*|MemoryEfficientAttention|FusedAttention|"
                 "FusedFeedforward"), "matmul"),
    (_op("batch_norm|sync_batch_norm|layer_norm|group_norm|instance_norm|rms_norm|"
         "fused_bn_add_activation|fused_batch_norm_act|fused_layer_norm|"
         "fused_bias_dropout_residual_layer_norm|skip_layernorm|data_norm") +
     "|" + _grad("BatchNorm|SyncBatchNorm|LayerNorm|GroupNorm|InstanceNorm|RmsNorm|"
                 "FusedBnAddActivation|FusedBatchNormAct|FusedBiasDropoutResidualLayerNorm"),
     "normalization"),
    (r"(?i)pool", "pooling"),
    (_op("softmax|log_softmax|cross_entropy|cross_entropy2|cross_entropy_with_softmax|"
         "c_softmax_with_cross_entropy|softmax_with_cross_entropy|nll_loss|"
         "sigmoid_cross_entropy_with_logits|bce_loss|fused_softmax_mask\\w*") +
     "|" + _grad("Softmax|LogSoftmax|CrossEntropy|CrossEntropy2|CrossEntropyWithSoftmax|"
                 "NllLoss|SigmoidCrossEntropyWithLogits|BceLoss|FusedSoftmaxMask\\w*"),
     "softmax_loss"),
    (_op("cast|transpose|transpose2|reshape|reshape2|flatten|flatten_contiguous_range|"
         "unsqueeze|unsqueeze2|squeeze|squeeze2|concat|stack|split|split_with_num|unbind|"
         "slice|strided_slice|assign|assign_value|assign_raw|assign_out|share_data|contiguous|"
         "expand|expand_v2|"
         "expand_as|tile|transfer_layout|view_shape|view_dtype|view_slice|pad|pad3d|"
         "set_value|set_value_with_tensor|shape|shape64|unstack|chunk|as_strided|tensor_unfold|"
         "trans_layout|layout_transform") +
     "|" + _grad("Cast|Transpose|Reshape|Flatten|Unsqueeze|Squeeze|Concat|Stack|Split|"
                 "SplitWithNum|Unbind|Slice|StridedSlice|Assign|Expand|ExpandAs|Tile|Pad|"
                 "Pad3d|SetValue\\w*|Unstack|AsStrided"), "layout"),
    (_op("memcpy|memcpy_h2d|memcpy_d2h|embedding|lookup_table|lookup_table_v2|gather|"
         "gather_nd|index_select|index_sample|scatter|scatter_nd_add|take_along_axis|"
         "put_along_axis|one_hot|one_hot_v2|index_put|index_add|masked_select|c_embedding") +
     "|" + _grad("Embedding|LookupTable|LookupTableV2|Gather|GatherNd|IndexSelect|IndexSample|"
                 "Scatter|ScatterNdAdd|TakeAlongAxis|PutAlongAxis|IndexPut|IndexAdd|"
                 "MaskedSelect|CEmbedding"), "memory_copy"),
    (_op("add|add_n|sum|subtract|multiply|divide|elementwise_\\w+|scale|relu|relu6|gelu|"
         "tanh|sigmoid|silu|swish|hardswish|hard_swish|leaky_relu|elu|softplus|mish|dropout|"
         "full|full_like|full_int_array|full_with_tensor|fill_constant|fill_any_like|"
         "fill|zeros_like|ones_like|mean|mean_all|reduce_\\w+|max|min|maximum|minimum|amax|"
         "amin|argmax|argmin|not_equal|equal|greater_than|greater_equal|less_than|"
         "less_equal|logical_\\w+|bitwise_\\w+|where|pow|sqrt|rsqrt|exp|log|abs|square|"
         "clip|erf|reciprocal|sign|neg|floor|ceil|round|remainder|floor_divide|isfinite|"
         "isinf|isnan|uniform|uniform_random|gaussian|gaussian_random|bernoulli|randint|"
         "arange|arange_tensor|range|increment|p_norm|norm|frobenius_norm|cumsum|any|all|"
         "fused_bias_act|fused_dropout_add|fused_elemwise_\\w+|swiglu|tril|triu|"
         "fused_bias_residual_layernorm_dummy") +
     "|" + _grad("Add|AddN|Sum|Subtract|Multiply|Divide|Elementwise\\w*|Scale|Relu|Relu6|"
                 "Gelu|Tanh|Sigmoid|Silu|Swish|Hardswish|LeakyRelu|Elu|Softplus|Mish|"
                 "Dropout|Mean|MeanAll|Max|Min|Maximum|Minimum|Amax|Amin|Where|Pow|Sqrt|"
                 "Rsqrt|Exp|Log|Abs|Square|Clip|Erf|Reciprocal|Neg|PNorm|Norm|Cumsum|"
                 "FusedBiasAct|FusedDropoutAdd|Swiglu|Tril|Triu"), "elementwise"),
]


class PaddleProfiler(profile.Profiler):
    """``paddle.profiler.Profiler`` over the profiled steps: the host operators on a CPU, the
    device's kernels named by their launching operator on CUDA."""

    def __init__(self, device):
        # type: (str) -> None
        self.gpu = device.startswith("gpu")
        self.tool = {"name": "paddle.profiler", "version": paddle.__version__,
                     "events": ("device kernels named by their launching operator" if self.gpu
                                else "host operator ranges (event tree)")}
        self.rules = profile.rules(OPS)
        self._session = None  # type: Any

    def start(self):
        # type: () -> None
        from paddle.profiler import Profiler, ProfilerTarget

        targets = [ProfilerTarget.CPU]
        if self.gpu:
            targets.append(ProfilerTarget.GPU)
        # on_trace_ready: the default writes a trace file into ./profiler_log
        self._session = Profiler(targets=targets, on_trace_ready=lambda prof: None)
        self._session.start()

    def stop(self):
        # type: () -> List[profile.Event]
        self._session.stop()
        trees = self._session.profiler_result.get_data()  # thread id -> root node
        events = []  # type: List[profile.Event]
        for thread, root in trees.items():
            for node in root.children_node:
                _collect(node, thread, self.gpu, None, events)
        return events


def _type(node):
    # type: (Any) -> str
    return str(node.type).rpartition(".")[2]


def _collect(node, thread, gpu, launcher, out):
    # type: (Any, Any, bool, Optional[str], List[profile.Event]) -> None
    """The host ranges under ``node`` (inclusive), or on CUDA the device work they launched,
    named by the innermost enclosing operator range (``launcher``)."""
    kind = _type(node)
    if gpu:
        if kind in LAUNCHING_TYPES:
            launcher = node.name
        for runtime in node.runtime_node:
            for kernel in runtime.device_node:
                if kernel.end_ns > kernel.start_ns:
                    out.append(profile.Event(
                        launcher or kernel.name, ("gpu", kernel.device_id, kernel.stream_id),
                        kernel.start_ns / 1e9, (kernel.end_ns - kernel.start_ns) / 1e9))
    elif kind not in SKIPPED_TYPES and node.end_ns > node.start_ns:
        out.append(profile.Event(node.name, thread, node.start_ns / 1e9,
                                 (node.end_ns - node.start_ns) / 1e9))
    for child in node.children_node:
        _collect(child, thread, gpu, launcher, out)

