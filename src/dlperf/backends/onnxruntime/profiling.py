"""ONNX Runtime's session profiling for dlperf's profiled steps, and the table that maps ONNX
operator types to dlperf's categories.

Profiling is a session option, fixed when a session is made, so the measured session never
profiles: the profiled steps run in a second session of the same model file, options and
providers, with ``enable_profiling`` on. Its first run (allocating its arena) happens in
``start``, before the profiled steps are timed, and its events are dropped. Each node's event
(``cat`` Node, ``args.op_name`` its ONNX type: Conv, MatMul, ...) is an operator; on the CUDA
and TensorRT providers the node events time the kernel launches as ONNX Runtime reports them.
"""

import json
import os
import tempfile
from typing import Any, Dict, List

from dlperf.worker import profile

OPS = [
    (r"^(Conv|ConvTranspose|FusedConv|NchwcConv|QLinearConv|ConvInteger)$", "convolution"),
    (r"^(MatMul|Gemm|FusedGemm|MatMulInteger|QLinearMatMul|DynamicQuantizeMatMul|"
     r"MatMulIntegerToFloat|FusedMatMul|QGemm|Attention|MultiHeadAttention)$", "matmul"),
    (r"^(BatchNormalization|LayerNormalization|SkipLayerNormalization|"
     r"SimplifiedLayerNormalization|InstanceNormalization|GroupNorm|"
     r"EmbedLayerNormalization)$", "normalization"),
    (r"Pool$|^(NchwcMaxPool|NchwcAveragePool|ReduceMean)$", "pooling"),
    (r"^(Softmax|LogSoftmax)$", "softmax_loss"),
    (r"^(Transpose|Reorder\w*|ReorderInput|ReorderOutput|Cast|Reshape|Flatten|Squeeze|"
     r"Unsqueeze|Concat|Split|Slice|Expand|Identity|Shape|QuantizeLinear|"
     r"DequantizeLinear|DynamicQuantizeLinear|MemcpyToHost|MemcpyFromHost)$", "layout"),
    (r"^(Gather|GatherElements|GatherND|ScatterND|ScatterElements)$", "memory_copy"),
    (r"^(Add|Sub|Mul|Div|Relu|Gelu|FastGelu|BiasGelu|Tanh|Sigmoid|Erf|Pow|Sqrt|Where|Equal|"
     r"Not|Neg|Clip|LeakyRelu|QLinearAdd|QLinearMul|Sum|ReduceSum|Max|Min|Sign|Abs|Exp|"
     r"BiasAdd|SkipSimplifiedLayerNormalization|ConstantOfShape|Range|Trilu|Less|Greater)$",
     "elementwise"),
]


class OrtProfiler(profile.Profiler):
    """The workload's model in a profiling session for the profiled steps."""

    def __init__(self, workload, ort):
        # type: (Any, Any) -> None
        self.workload = workload
        self.ort = ort
        self.tool = {"name": "onnxruntime session profiling", "version": ort.__version__}
        self.rules = profile.rules(OPS)
        self._measured = None  # type: Any
        self._session = None  # type: Any

    def start(self):
        # type: () -> None
        measured = self.workload.session
        options = self.ort.SessionOptions()
        options.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        options.intra_op_num_threads = self.workload.intra_op_threads
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(), "dlperf-ort-profile")
        self._session = self.ort.InferenceSession(self.workload.path, options,
                                                  providers=measured.get_providers())
        self._session.run(None, self.workload.feeds)  # its arena: before the timed steps
        self._measured = measured
        self.workload.session = self._session

    def stop(self):
        # type: () -> List[profile.Event]
        self.workload.session = self._measured
        path = self._session.end_profiling()
        try:
            with open(path) as handle:
                events = json.load(handle)
        finally:
            os.remove(path)
        runs = sorted((e for e in events if e.get("name") == "model_run"),
                      key=lambda e: e["ts"])
        after = runs[0]["ts"] + runs[0]["dur"] if runs else float("-inf")  # the arena's run
        out = []  # type: List[profile.Event]
        for event in events:
            if event.get("cat") != "Node" or event["ts"] < after:
                continue
            args = event.get("args") or {}  # type: Dict[str, Any]
            out.append(profile.Event(str(args.get("op_name") or event["name"]),
                                     event.get("tid"), event["ts"] / 1e6, event["dur"] / 1e6))
        return out
