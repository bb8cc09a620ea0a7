"""``torch.profiler`` for dlperf's profiled steps, and the table that maps PyTorch's operator
names (ATen ops, autograd nodes, the optimizer's and DDP's record_function ranges) to dlperf's
categories (:mod:`dlperf.worker.profile`).

On the CPU the operators are the CPU events; on CUDA the step's time is the kernels', so the
events are the kernels on their streams, each named by the ATen operator that launched it (the
profiler's correlation link), so one table serves both devices.
"""

from typing import Any, Dict, List

import torch

from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES

# first match wins: ranges that enclose others first, views and allocations (part of whatever
# encloses them) before the arithmetic whose names they share a prefix with
OPS = [
    (r"^Optimizer\.(step|zero_grad)", "optimizer", ENCLOSES),
    (r"DataLoader|dali", "input_pipeline", ENCLOSES),
    (r"all_reduce|allreduce|all_gather|allgather|broadcast|reduce_scatter|^gloo:|^nccl:|"
     r"^c10d::|^record_param_comms", "communication", ENCLOSES),
    (r"^aten::(empty|empty_like|empty_strided|view|_unsafe_view|as_strided|resize_|expand|"
     r"select|slice|detach|detach_|alias|unsqueeze|squeeze|reshape|_reshape_alias|t|"
     r"transpose|permute|numel|size|stride|result_type|lift_fresh|set_|split|chunk|unbind|"
     r"narrow|is_nonzero|item|_local_scalar_dense|flatten|view_as|expand_as|"
     r"resolve_conj|resolve_neg|as_strided_)$|^detach$|^(View|T|Transpose|Permute|Unsqueeze|"
     r"Squeeze|Reshape|Expand|Select|Slice|Split|Unsafe\w*)Backward\d*$", None),
    (r"^(autograd::engine::evaluate_function: )?(torch::autograd::AccumulateGrad|"
     r"AccumulateGrad)$|^aten::_foreach_|^aten::_fused_(sgd|adam|adamw)", "optimizer"),
    (r"onv|^aten::_nnpack|^mkldnn::_convolution", "convolution"),
    (r"^aten::(addmm|mm|bmm|baddbmm|matmul|linear|dot|einsum|_addmm_activation)$|"
     r"scaled_dot_product|"
     r"(Addmm|Mm|Bmm|Baddbmm|Linear)Backward|^mkl::_mkl_linear|^mkldnn::_linear",
     "matmul"),
    (r"(batch_norm|layer_norm|group_norm|BatchNorm|LayerNorm|GroupNorm)", "normalization"),
    (r"pool|Pool", "pooling"),
    (r"softmax|Softmax|cross_entropy|nll_loss|NllLoss|CrossEntropy", "softmax_loss"),
    (r"^aten::(_to_copy|to|contiguous|clone|_to_dense|to_dense|to_mkldnn|_copy_from|"
     r"_copy_from_and_resize)$|ToCopyBackward|CloneBackward|^aten::(copy_|cat|stack)$|"
     r"(Cat|Stack)Backward|^aten::(select|slice)_backward$", "layout"),
    (r"^aten::(embedding|embedding_dense_backward|embedding_backward|index_select|gather|"
     r"scatter|scatter_add_|index|index_put_|index_add_|masked_fill|masked_fill_)$|"
     r"(Embedding|IndexSelect|Gather|Index)Backward", "memory_copy"),
    (r"^aten::(add|add_|sub|sub_|mul|mul_|div|div_|relu|relu_|gelu|gelu_backward|tanh|"
     r"tanh_backward|sigmoid|threshold_backward|threshold|dropout|native_dropout|"
     r"native_dropout_backward|where|fill_|zero_|zeros|zeros_like|ones_like|ones|full|pow|"
     r"sqrt|rsqrt|exp|neg|clamp|clamp_|clamp_min|clamp_min_|sum|mean|abs|lt|gt|eq|ne|ge|le|"
     r"bitwise_\w+|logical_\w+|maximum|minimum|erf|reciprocal|square|lerp_|addcmul_|"
     r"addcdiv_|sign|norm|linalg_vector_norm|max|min|argmax|masked_scatter|rand|"
     r"bernoulli_|uniform_|normal_|randn|_softmax_backward_data|mse_loss|silu|"
     r"hardtanh|hardtanh_|all|any|arange|isneginf|isinf|isnan|scalar_tensor)$|(Relu|Gelu|Add|Sub|Mul|Div|Tanh|Sigmoid|Threshold|Dropout|"
     r"Sum|Mean|Pow|Sqrt|Rsqrt|Exp|Neg|Where|Clamp|Silu|Norm)Backward|"
     r"autograd::engine::evaluate_function", "elementwise"),
    (r"^(CompiledFunction|Torch-Compiled Region|## Call CompiledFxGraph)", None),
]


class TorchProfiler(profile.Profiler):
    """``torch.profiler.profile`` over the profiled steps: CPU operators, and on CUDA the
    kernels (CUDA activity) named by their launching operator."""

    def __init__(self, device):
        # type: (torch.device) -> None
        self.device = device
        self.tool = {"name": "torch.profiler", "version": torch.__version__}
        self.rules = profile.rules(OPS)
        self._session = None  # type: Any

    def start(self):
        # type: () -> None
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._session = torch.profiler.profile(activities=activities)
        self._session.__enter__()

    def stop(self):
        # type: () -> List[profile.Event]
        from torch.autograd import DeviceType

        self._session.__exit__(None, None, None)
        if self.device.type == "cuda":
            return _kernels(self._session.profiler.kineto_results.events())
        return [_event(e, e.name, e.thread) for e in self._session.events()
                if not e.is_async and e.device_type == DeviceType.CPU
                and e.time_range.end > e.time_range.start]


def _kernels(kineto_events):
    # type: (Any) -> List[profile.Event]
    """The CUDA kernels, each named by the operator that launched it. Read from the Kineto
    events themselves, which carry the correlation link in every torch 2.x;
    ``FunctionEvent.linked_correlation_id`` is missing in torch 2.11 (AttributeError on an
    H100)."""
    from torch.autograd import DeviceType

    launched_by = {}  # type: Dict[int, str]
    for event in kineto_events:
        if event.device_type() == DeviceType.CPU and event.linked_correlation_id() == 0:
            launched_by[event.correlation_id()] = event.name()
    kernels = []  # type: List[profile.Event]
    for event in kineto_events:
        if event.device_type() != DeviceType.CUDA or event.duration_ns() <= 0:
            continue
        name = launched_by.get(event.linked_correlation_id(), event.name())
        kernels.append(profile.Event(name, ("cuda", event.device_index(),
                                            event.device_resource_id()),
                                     event.start_ns() / 1e9, event.duration_ns() / 1e9))
    return kernels


def _event(event, name, thread):
    # type: (Any, str, Any) -> profile.Event
    start, end = event.time_range.start, event.time_range.end  # microseconds
    return profile.Event(name, thread, start / 1e6, (end - start) / 1e6)
