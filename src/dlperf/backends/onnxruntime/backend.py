"""ONNX Runtime backend (inference only): ``build(case) -> Workload``.

The model is the torch backend's own network for the case (so the parameter count is the
catalogue's), exported once with ``torch.onnx`` to a cached file with a dynamic batch axis; fp16
is that export converted by onnxruntime's float16 converter, int8 onnxruntime's static QDQ
quantization of it, calibrated on held-out data. The session
uses the best execution provider present (TensorRT, then CUDA, then CPU) unless ``device`` says
``cpu``. Everything one-off (export, quantization, session creation, graph optimisation) happens
here, outside the timed window; the first ``run`` is timed apart by the loop as usual.

Precisions: fp32 and int8 everywhere; fp16/bf16 where the chosen providers have kernels for them
(probed with a one-Conv model before anything is exported); autocast (``amp-*``) and tf32 are
PyTorch notions and are ``unsupported`` here, as are training and ``--compile``.

Valid Python 3.7; imports numpy, onnxruntime and (for export) torch.
"""

import os
from typing import Any, Dict, List, Tuple

import numpy as np

from dlperf.backends.common import CaseView
from dlperf.backends.onnxruntime import export
from dlperf.worker.support import resolved_device
from dlperf.worker.workload import UnsupportedError, Workload

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
CAST_PRECISIONS = {"fp16": "float16", "bf16": "bfloat16"}


def _import_ort():
    # type: () -> Any
    try:
        import onnxruntime
    except ImportError as error:
        raise UnsupportedError("onnxruntime is not installed in this environment (%s); "
                               "pip install -e '.[onnxruntime]'" % error)
    return onnxruntime


def select_providers(ort, device):
    # type: (Any, str) -> List[str]
    """TensorRT, CUDA, CPU — those present, best first; ``cpu`` forces the CPU provider."""
    available = ort.get_available_providers()
    if device == "cpu":
        return ["CPUExecutionProvider"]
    gpu = [p for p in GPU_PROVIDERS if p in available]
    if device == "cuda" and not gpu:
        raise UnsupportedError("device cuda requested but onnxruntime %s has no CUDA or TensorRT "
                               "execution provider (it has: %s)"
                               % (ort.__version__, ", ".join(available)))
    return gpu + ["CPUExecutionProvider"]


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where the first of :func:`select_providers` runs (:func:`resolved_device`): GPU 0 (the
    providers' default ``device_id``; ONNX Runtime names no GPU: the harness takes the name
    from the host's GPUs), or why the CPU."""
    ort = _import_ort()
    providers = select_providers(ort, requested)
    if providers[0] != "CPUExecutionProvider":
        return resolved_device("cuda", 0)
    return resolved_device("cpu", reason=(
        "onnxruntime %s has no CUDA or TensorRT execution provider (the CPU package); install "
        "onnxruntime-gpu with `dlperf envs install onnxruntime --variant cuda`" % ort.__version__))


def probe_dtype(ort, providers, dtype_name):
    # type: (Any, List[str], str) -> None
    """Run a one-Conv, one-MatMul graph in ``dtype_name``; UnsupportedError if no kernel has it."""
    from onnx import TensorProto, helper

    elem = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[dtype_name]
    x = helper.make_tensor_value_info("x", elem, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", elem, [1, 2, 2, 2])
    w = helper.make_tensor("w", elem, [2, 2, 3, 3], [1.0] * 36)
    m = helper.make_tensor("m", elem, [2, 2], [1.0] * 4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("MatMul", ["c", "m"], ["y"])]
    graph = helper.make_graph(nodes, "probe", [x], [y], [w, m])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    try:  # kernels are looked up when the session is made: no run needed
        ort.InferenceSession(model.SerializeToString(), providers=providers)
    except Exception as error:
        raise UnsupportedError(
            "precision %s: onnxruntime %s with %s has no %s Conv/MatMul kernels (%s)"
            % ({"float16": "fp16", "bfloat16": "bf16"}[dtype_name], ort.__version__,
               ", ".join(providers), dtype_name, str(error).strip().splitlines()[0][:200]))


def torch_network(view):
    # type: (CaseView) -> Tuple[Any, Tuple[Any, ...], int]
    """The torch backend's network for this case, in eval mode, its inputs, and its params."""
    import torch

    from dlperf.backends.torch import backend as torch_backend
    from dlperf.backends.torch.inference import capture_inputs
    from dlperf.backends.torch.workload import count_params

    name = view.name
    torch.manual_seed(view.seed)  # the same weights the torch backend times
    gen = torch.Generator(device="cpu")
    gen.manual_seed(view.seed)
    # NCHW: the exported graph fixes no memory layout (ONNX Runtime chooses its own)
    parts = torch_backend.BUILDERS[name](view.knobs, view.batch, torch.device("cpu"), gen, False,
                                         "contiguous")
    model = parts.model.eval()
    args, kwargs = capture_inputs(parts.forward_loss)
    if kwargs:
        raise UnsupportedError("model %s is called with keyword inputs, which the ONNX export "
                               "here does not map" % name)
    return model, tuple(a.contiguous() for a in args), count_params(model)


def cast_network(model, example, dtype_name):
    # type: (Any, Tuple[Any, ...], str) -> Any
    """The whole network in ``dtype_name``, taking the same inputs as the fp32 one (the feeds
    stay float32: numpy has no bfloat16), a floating input cast inside the graph. The exporter
    keeps the batch axis dynamic only for a module whose forward names its inputs (the torch
    backend's CastInputs takes ``*args``), hence a one-input wrapper of its own."""
    import torch

    dtype = getattr(torch, dtype_name)
    cast = model.to(dtype)
    floating = [a for a in example if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floating:  # token ids and masks: integers, as they are
        return cast
    if len(example) != 1:
        raise UnsupportedError("precision %s: the export casts one floating input; this model "
                               "takes %d inputs" % (dtype_name, len(example)))

    class CastInput(torch.nn.Module):
        """``model(x.to(dtype))``: one input, named."""

        def __init__(self):
            # type: () -> None
            super(CastInput, self).__init__()
            self.model = cast

        def forward(self, x):  # type: ignore[override]
            return self.model(x.to(dtype))

    return CastInput()


def _feeds(names, args):
    # type: (List[str], Sequence[Any]) -> Dict[str, np.ndarray]
    return {n: np.ascontiguousarray(a.detach().cpu().numpy()) for n, a in zip(names, args)}


def onnx_file(view, model, args):
    # type: (CaseView, Any, Tuple[Any, ...]) -> Tuple[str, Dict[str, Any]]
    """The cached ONNX file for this case's precision (made if missing) and how it was made:
    fp32 the export; fp16 and int8 made from it (converted, quantized); bf16 (no converter
    makes it) the export of the network cast to bfloat16."""
    import torch

    from dlperf.backends.torch.inference import held_out_batches

    precision = view.precision
    identity = {"model": view.name, "knobs": view.knobs, "seed": view.seed,
                "torch": torch.__version__, "recipe": export.EXPORT_VERSION,
                "dtype": "bfloat16" if precision == "bf16" else "float32"}
    example = export.export_inputs(args)

    def make_exported(path):
        # type: (str) -> Dict[str, Any]
        if precision == "bf16":
            return export.export(cast_network(model, example, CAST_PRECISIONS[precision]),
                                 example, path)
        return export.export(model, example, path)

    exported_path = export.artefact_path("bf16" if precision == "bf16" else "fp32", identity)
    try:
        hit, facts = export.cached(exported_path, make_exported)
    except UnsupportedError:
        raise
    except Exception as error:
        raise UnsupportedError("torch.onnx could not export %s: %s: %s"
                               % (view.name, type(error).__name__,
                                  str(error).strip().splitlines()[0][:300]))
    facts = dict(facts, cached=hit, path=exported_path)
    names = facts["input_names"]
    if precision == "fp16":
        half_path, facts16 = export.fp16_file(exported_path, identity)
        return half_path, {"export": facts, "fp16": dict(facts16, path=half_path),
                           "input_names": names}
    if precision != "int8":
        return exported_path, facts

    calibration = held_out_batches((args, {}), view.seed)
    batches = [_feeds(names, batch) for batch in calibration]
    int8_identity = dict(identity, calibration="held-out synthetic, %d batches" % len(batches))
    int8_path = export.artefact_path("int8", int8_identity)
    hit8, facts8 = export.cached(int8_path, lambda path: export.quantize_int8(exported_path,
                                                                             path, batches))
    facts8 = dict(facts8, cached=hit8, path=int8_path, input_names=names,
                  calibration_data="held-out synthetic samples (data seed + %d), never the timed "
                                   "batch" % _offset())
    return int8_path, {"export": facts, "int8": facts8, "input_names": names}


def _offset():
    # type: () -> int
    from dlperf.backends.torch.inference import CALIBRATION_SEED_OFFSET
    return CALIBRATION_SEED_OFFSET


class OrtWorkload(Workload):
    """One onnxruntime session and one batch of inputs already in host memory."""

    def __init__(self, session, feeds, samples, params, info, path, intra_op_threads):
        # type: (Any, Dict[str, np.ndarray], int, int, Dict[str, Any], str, int) -> None
        self.session = session
        self.feeds = feeds
        self.path = path  # the model file, for the profiling session (profiling.py)
        self.intra_op_threads = intra_op_threads
        super(OrtWorkload, self).__init__(samples, params, info)

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.onnxruntime.profiling import OrtProfiler

        return OrtProfiler(self, _import_ort())

    def step(self):
        # type: () -> Any
        return self.session.run(None, self.feeds)

    def sync(self):
        # type: () -> None
        return None  # InferenceSession.run returns only once the outputs are in host memory

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(sum(np.asarray(out, dtype=np.float64).mean() for out in handle
                         if np.issubdtype(np.asarray(out).dtype, np.floating)))


def build(case):
    # type: (Dict[str, Any]) -> Workload
    view = CaseView(case)
    ort = _import_ort()
    providers = select_providers(ort, view.device)
    precision = view.precision
    if precision in CAST_PRECISIONS:
        probe_dtype(ort, providers, CAST_PRECISIONS[precision])
    model, args, params = torch_network(view)
    path, facts = onnx_file(view, model, args)
    names = facts["input_names"]

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:  # the same knob torch's intra-op pool follows
        options.intra_op_num_threads = int(threads)
    try:
        session = ort.InferenceSession(path, options, providers=providers)
    except Exception as error:
        text = str(error)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            raise UnsupportedError("precision %s: onnxruntime %s has no kernel for part of %s: %s"
                                   % (precision, ort.__version__, case["model"],
                                      text.strip().splitlines()[0][:300]))
        raise
    feeds = _feeds(names, args)
    import torch

    info = {
        "onnxruntime_version": ort.__version__,
        "torch_version": torch.__version__,
        "providers": session.get_providers(),
        "providers_available": ort.get_available_providers(),
        "device": "cuda" if set(session.get_providers()) & set(GPU_PROVIDERS) else "cpu",
        "graph_optimization_level": "ORT_ENABLE_ALL",
        "intra_op_threads": options.intra_op_num_threads or "auto (one per physical core)",
        "intra_op_threads_from": "OMP_NUM_THREADS" if options.intra_op_num_threads else "default",
        "cpu_count": os.cpu_count(),
        "model": view.name,
        "knobs": view.knobs,
        "precision": precision,
        "task": "infer",
        "onnx": facts,
        "inputs": "host numpy arrays: any copy to a device is inside each timed run",
        "data": "synthetic, generated once (the torch backend's batch for this seed)",
    }  # type: Dict[str, Any]
    return OrtWorkload(session, feeds, view.batch, params, info, path,
                       options.intra_op_num_threads)
