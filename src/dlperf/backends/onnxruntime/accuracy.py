"""ONNX Runtime side of ``dlperf accuracy``: the trained torch network, exported, run by ORT.

fp32 is the ``torch.onnx`` export of the trained weights; int8 is onnxruntime's static QDQ
quantization of that export (the onnxruntime backend's own
:func:`dlperf.backends.onnxruntime.export.quantize_int8`), calibrated on *training* images only;
fp16 is that export converted to float16 (the backend's own
:func:`dlperf.backends.onnxruntime.export.convert_fp16`: fed float32, cast inside the graph),
where the providers have fp16 kernels. The files are cached beside the backend's other
artefacts, keyed by a digest of the trained weights, so a re-run with the same weights reuses
them.

Valid Python 3.7; imports numpy, onnxruntime and torch.
"""

import time
from typing import Any, Dict, Iterator, List

import numpy as np

from dlperf.backends.onnxruntime import export
from dlperf.worker.workload import UnsupportedError

CAST = {"fp16": "float16"}


def _session(path, providers):
    # type: (str, List[str]) -> Any
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=providers)


def onnx_model(trained, precision, data, request, facts):
    # type: (Any, str, Any, Dict[str, Any], Dict[str, Any]) -> str
    """The cached ONNX file of ``trained`` at ``precision`` (made if missing)."""
    import torch

    from dlperf.backends.torch.accuracy import calibration_batches

    identity = {"model": request["model"], "knobs": request["knobs"],
                "weights_sha256": trained.digest, "torch": torch.__version__,
                "recipe": export.EXPORT_VERSION, "purpose": "accuracy", "dtype": "float32"}
    size = int(request["knobs"]["image_size"])
    example = torch.zeros(export.EXPORT_BATCH, 3, size, size).contiguous(
        memory_format=torch.channels_last)
    float_path = export.artefact_path("fp32", identity)
    hit, made = export.cached(float_path,
                              lambda path: export.export(trained.model, (example,), path))
    facts["export"] = dict(made, cached=hit)
    if precision == "fp16":
        half_path, facts["fp16"] = export.fp16_file(float_path, identity)
        return half_path
    if precision != "int8":
        return float_path
    names = made["input_names"]
    batches = [{names[0]: b} for b in calibration_batches(data, request)]
    int8_identity = dict(identity, calibration="training images: %d, seed %d"
                         % (int(request["calibration_samples"]), int(request["seed"])))
    int8_path = export.artefact_path("int8", int8_identity)
    hit8, made8 = export.cached(int8_path,
                                lambda path: export.quantize_int8(float_path, path, batches))
    facts["int8"] = dict(made8, cached=hit8,
                         calibration_data="training images only (never held-out ones)")
    return int8_path


GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def predict(trained, precision, data, request, facts):
    # type: (Any, str, Any, Dict[str, Any], Dict[str, Any]) -> Iterator[np.ndarray]
    """Logits of the held-out split, batch by batch, from ONNX Runtime at ``precision``."""
    from dlperf.backends.onnxruntime.backend import _import_ort, probe_dtype, select_providers

    ort = _import_ort()
    if precision not in ("fp32", "int8") and precision not in CAST:
        raise UnsupportedError("onnxruntime accuracy has no precision %r (has fp32, fp16 where "
                               "the providers have kernels, int8)" % precision)
    providers = select_providers(ort, request.get("device", "cpu"))
    if precision in CAST:
        probe_dtype(ort, providers, CAST[precision])
    start = time.perf_counter()
    path = onnx_model(trained, precision, data, request, facts)
    facts["prepare_s"] = time.perf_counter() - start
    try:
        session = _session(path, providers)
    except Exception as error:
        text = str(error)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            raise UnsupportedError("precision %s: onnxruntime %s has no kernel for part of %s: "
                                   "%s" % (precision, ort.__version__, request["model"],
                                           text.strip().splitlines()[0][:300]))
        raise
    facts.update({"onnxruntime_version": ort.__version__, "providers": session.get_providers()})
    # the device of the provider that runs the model: CUDA's and TensorRT's are GPUs
    facts["device"] = "cuda" if facts["providers"][0] in GPU_PROVIDERS else "cpu"
    name = session.get_inputs()[0].name
    for images, _ in data.test.batches(int(request["eval_batch"])):  # float32 at every precision
        yield session.run(None, {name: images.astype(np.float32)})[0].astype(np.float32)
