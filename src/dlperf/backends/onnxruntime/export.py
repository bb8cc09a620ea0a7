"""ONNX artefacts of the project's own PyTorch models: export, int8 quantization, and their cache.

The network ONNX Runtime runs is the one the torch backend builds (same code, same seed, same
parameter count), exported with ``torch.onnx`` (the dynamo exporter) with a dynamic batch axis,
so one file serves every batch size. FP16 is that export's graph converted to float16 by
onnxruntime's own converter (inputs and outputs stay float32, cast inside the graph; an operator
without float16 kernels stays float32 between casts): a second export of the cast network took
as long as the first (ResNet-152: 19 s against 3 s to convert). The converter skips ONNX shape
inference: the export already types every value, and for every catalogue model the converted
graph came out the same without it (nodes and initializers; the bytes too, but for BERT's names
of unknown dimensions), ResNet-152's conversion 1.7 CPU-s down to 0.75. INT8 is ONNX Runtime's
static post-training quantization (QDQ format, per-channel int8 weights, uint8 activations, MinMax
calibration) of that export, calibrated on a held-out slice of data. The files are cached under ``$DLPERF_CACHE/onnx``
(default ``~/.cache/dlperf/onnx``), keyed by everything that changes their contents, written
atomically under a lock so concurrent workers never read half a file.

Valid Python 3.7; imports torch, onnx and onnxruntime only when a file has to be made.
"""

import hashlib
import json
import os
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dlperf.worker.cache import locked, private_dir, save_facts, store, verified_facts

EXPORT_VERSION = 1  # bump when the export recipe changes, so cached files are remade
FP16_RECIPE = ("onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True, "
               "disable_shape_infer=True)")
EXPORT_BATCH = 2  # torch.export specialises a dimension of size 1, so never export at batch 1
Batch = Dict[str, np.ndarray]


def cache_dir():
    # type: () -> str
    root = os.environ.get("DLPERF_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "dlperf")
    private_dir(root)
    return private_dir(os.path.join(root, "onnx"))


def artefact_path(kind, identity):
    # type: (str, Dict[str, Any]) -> str
    """Where the file described by ``identity`` lives; its hash names it."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), "%s-%s-%s.onnx" % (identity["model"], kind, digest))


def cached(path, make):
    # type: (str, Callable[[str], Dict[str, Any]]) -> Tuple[bool, Dict[str, Any]]
    """Return (was it cached, facts); otherwise ``make(tmp_path)`` writes it and we rename it in.

    The facts ``make`` returns (times, settings) are kept beside the file as JSON, with the
    file's sha256: a file whose bytes no longer match is made again, never loaded.
    """
    meta = path + ".json"
    with locked(path):
        facts = verified_facts(path, meta)
        if facts is not None:
            return True, facts
        facts, digest = store(path, ".onnx", make)
        facts["sha256"] = digest
        save_facts(meta, facts)
        return False, facts


def export_inputs(args):
    # type: (Sequence[Any]) -> Tuple[Any, ...]
    """Example inputs for the exporter: batch >= EXPORT_BATCH so the batch axis stays dynamic."""
    import torch

    out = []
    for value in args:
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] < EXPORT_BATCH:
            reps = (EXPORT_BATCH + value.shape[0] - 1) // value.shape[0]
            value = value.repeat((reps,) + (1,) * (value.dim() - 1))[:EXPORT_BATCH]
        out.append(value)
    return tuple(out)


def export(model, args, path):
    # type: (Any, Sequence[Any], str) -> Dict[str, Any]
    """Export ``model`` (eval mode) called as ``model(*args)`` to ``path``, batch axis dynamic."""
    import torch

    names = ["input%d" % i for i in range(len(args))]
    batch = torch.export.Dim("batch", min=1, max=65536)
    dynamic = tuple({0: batch} for _ in args)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(args), path, dynamo=True, dynamic_shapes=dynamic,
                          input_names=names, external_data=False, verbose=False)
    return {"export_s": time.perf_counter() - start, "input_names": names,
            "exporter": "torch.onnx.export(dynamo=True), torch %s" % torch.__version__}


def convert_fp16(fp32_path, out_path):
    # type: (str, str) -> Dict[str, Any]
    """``fp32_path``'s graph in float16 (:data:`FP16_RECIPE`), written to ``out_path``: its
    weights and activations float16, its inputs and outputs float32."""
    import onnx
    import onnxruntime
    from onnxruntime.transformers.float16 import convert_float_to_float16

    start = time.perf_counter()
    model = onnx.load(fp32_path)
    half = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)
    onnx.save(half, out_path)
    return {"convert_s": time.perf_counter() - start,
            "converter": "%s, onnxruntime %s" % (FP16_RECIPE, onnxruntime.__version__),
            "clamped": "weights beyond float16's range to +-65504, nonzero ones nearer 0 than "
                       "5.96e-08 to +-5.96e-08",
            "input_names": [value.name for value in half.graph.input]}


def fp16_file(fp32_path, identity):
    # type: (str, Dict[str, Any]) -> Tuple[str, Dict[str, Any]]
    """The cached fp16 conversion of ``fp32_path`` (made if missing; ``identity`` is the fp32
    file's), and how it was made, ``cached`` saying whether it already was."""
    path = artefact_path("fp16", dict(identity, dtype="float16", converter=FP16_RECIPE))
    hit, facts = cached(path, lambda out: convert_fp16(fp32_path, out))
    return path, dict(facts, cached=hit)


class _Reader(object):
    """onnxruntime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, batches):
        # type: (List[Batch]) -> None
        self._batches = iter(batches)

    def get_next(self):
        # type: () -> Optional[Batch]
        return next(self._batches, None)

    def rewind(self):
        # type: () -> None
        pass


def quantize_int8(fp32_path, out_path, calibration_batches):
    # type: (str, str, List[Batch]) -> Dict[str, Any]
    """Static int8 quantization of an fp32 ONNX file, calibrated on ``calibration_batches``.

    Pre-processing (ONNX shape inference + graph optimisation) first, as onnxruntime recommends;
    if a model's shapes defeat it the raw export is quantized instead and the facts say so. Its
    symbolic shape inference is skipped: the dynamo export already gives every value its shape,
    the batch axis named, and for every catalogue model (BERT included) the quantized graph was
    the same without it and its outputs bit-identical (onnxruntime 1.31), while it cost
    ResNet-152 1.4 of its 10.6 CPU-s, and a worker that quantizes once sympy's import too.
    """
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    start = time.perf_counter()
    source = fp32_path
    preprocessed = True
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out_path)) as work:
        pre = os.path.join(work, "pre.onnx")
        try:
            quant_pre_process(fp32_path, pre, skip_symbolic_shape=True)
            source = pre
        except Exception:  # pre-processing is an optimisation; quantizing without it still works
            preprocessed = False
        quantize_static(source, out_path, _Reader(calibration_batches),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
    return {
        "quantize_s": time.perf_counter() - start,
        "method": "onnxruntime.quantization.quantize_static",
        "format": "QDQ",
        "weights": "int8 per-channel",
        "activations": "uint8 per-tensor",
        "calibration_method": "MinMax",
        "calibration_batches": len(calibration_batches),
        "calibration_samples": int(sum(next(iter(b.values())).shape[0]
                                       for b in calibration_batches)),
        "preprocessed": preprocessed,
    }
