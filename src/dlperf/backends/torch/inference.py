"""Inference-only transformations of a built PyTorch model: pure bf16/fp16 casting and int8.

* ``bf16`` / ``fp16``: the whole model is cast (weights and floating inputs), unlike ``amp-*``
  which autocasts op by op and keeps fp32 weights.
* ``int8``: static post-training quantization with FX graph mode and the ``x86`` quantized
  backend (fbgemm + oneDNN kernels, per-channel int8 weights, uint8 activations), calibrated on a
  held-out slice of data — never on the batch that is then timed. PyTorch's newer PT2E flow now
  lives in the separate ``torchao`` package; FX graph mode still ships inside torch and runs the
  real int8 kernels in eager mode on this CPU.

The helpers take the model builder's ``forward_loss`` closure rather than knowing any model, so
every model of the catalogue the torch backend builds gets these precisions without changes.
``quantize_int8`` and ``capture_inputs`` are public so that an accuracy evaluation can calibrate
the same way on real data.

Valid Python 3.7; imports only torch and the standard library.
"""

import contextlib
import warnings
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

import torch
from torch import nn

from dlperf.worker.workload import UnsupportedError

CALIBRATION_SAMPLES = 32  # held-out samples the int8 observers see
CALIBRATION_BATCH = 8
CALIBRATION_SEED_OFFSET = 10007  # data seed + this = the held-out slice (never the timed batch)
QUANTIZED_ENGINE = "x86"

Inputs = Tuple[Tuple[Any, ...], Dict[str, Any]]


class _Captured(Exception):
    def __init__(self, args, kwargs):
        # type: (Tuple[Any, ...], Dict[str, Any]) -> None
        Exception.__init__(self, "inputs captured")
        self.inputs = (args, kwargs)


class _Recorder(nn.Module):
    """Stands in for the model, records what it is called with, and stops the forward pass."""

    def forward(self, *args, **kwargs):  # type: ignore[override]
        raise _Captured(args, kwargs)


def capture_inputs(forward_loss):
    # type: (Callable[[nn.Module], Any]) -> Inputs
    """The positional and keyword inputs ``forward_loss`` feeds its model, without running it."""
    try:
        forward_loss(_Recorder())
    except _Captured as captured:
        return captured.inputs
    raise RuntimeError("forward_loss never called the model")


class CastInputs(nn.Module):
    """Casts floating-point inputs to the dtype the wrapped (cast) model holds its weights in."""

    def __init__(self, model, dtype):
        # type: (nn.Module, torch.dtype) -> None
        super(CastInputs, self).__init__()
        self.model = model
        self.dtype = dtype

    def _cast(self, value):
        # type: (Any) -> Any
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(self.dtype)
        return value

    def forward(self, *args, **kwargs):  # type: ignore[override]
        return self.model(*[self._cast(a) for a in args],
                          **{k: self._cast(v) for k, v in kwargs.items()})


def cast_model(model, dtype):
    # type: (nn.Module, torch.dtype) -> nn.Module
    """The whole model in ``dtype`` (memory format kept), fed inputs of that dtype."""
    return CastInputs(model.to(dtype), dtype)


def held_out_batches(inputs, seed, samples=CALIBRATION_SAMPLES, batch=CALIBRATION_BATCH):
    # type: (Inputs, int, int, int) -> List[Tuple[Any, ...]]
    """Calibration batches shaped like ``inputs`` but drawn from a different seed.

    Floating inputs (images) are fresh standard-normal draws like the synthetic data; integer
    inputs (token ids, segment ids) are fresh uniform draws within the range of the captured
    batch's first row, so the slice does not depend on the batch size being timed.
    """
    args, kwargs = inputs
    if kwargs:
        raise UnsupportedError("int8 calibration needs positional model inputs; this model is "
                               "called with keywords %s" % ", ".join(sorted(kwargs)))
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) + CALIBRATION_SEED_OFFSET)
    batches = []  # type: List[Tuple[Any, ...]]
    for _ in range(max(1, samples // batch)):
        one = []  # type: List[Any]
        for value in args:
            if not isinstance(value, torch.Tensor):
                one.append(value)
            elif value.is_floating_point():
                shape = (batch,) + tuple(value.shape[1:])
                fresh = torch.randn(shape, generator=gen, dtype=value.dtype)
                if value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last):
                    fresh = fresh.contiguous(memory_format=torch.channels_last)
                one.append(fresh.to(value.device))
            else:
                first = value[:1]
                shape = (batch,) + tuple(value.shape[1:])
                one.append(torch.randint(int(first.min()), int(first.max()) + 1, shape,
                                         generator=gen, dtype=value.dtype).to(value.device))
        batches.append(tuple(one))
    return batches


@contextlib.contextmanager
def _quiet():
    # type: () -> Any
    """FX quantization warns at length that it is deprecated in favour of torchao; the result
    records which path ran, so the warnings only bury the worker log."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def quantize_int8(model, example_args, calibration_batches):
    # type: (nn.Module, Sequence[Any], Iterable[Sequence[Any]]) -> nn.Module
    """Static int8 post-training quantization (FX graph mode, x86 backend) of an eval model.

    Observers are inserted with the backend's default qconfig mapping (per-channel symmetric
    int8 weights, per-tensor affine uint8 activations, histogram observer), fed every
    calibration batch, then folded into real quantized modules.
    """
    if QUANTIZED_ENGINE not in torch.backends.quantized.supported_engines:
        raise UnsupportedError("torch %s has no %r quantized engine on this machine (has: %s)"
                               % (torch.__version__, QUANTIZED_ENGINE,
                                  ", ".join(torch.backends.quantized.supported_engines)))
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.backends.quantized.engine = QUANTIZED_ENGINE
    model = model.eval()
    with _quiet():
        try:
            prepared = prepare_fx(model, get_default_qconfig_mapping(QUANTIZED_ENGINE),
                                  example_inputs=tuple(example_args))
        except Exception as error:  # symbolic tracing refused the model
            raise UnsupportedError("torch int8 (FX graph-mode quantization) cannot trace %s: "
                                   "%s: %s" % (type(model).__name__, type(error).__name__,
                                               str(error).splitlines()[0][:300]))
        with torch.no_grad():
            for batch in calibration_batches:
                prepared(*batch)
        return convert_fx(prepared)


def inference_model(model, forward_loss, precision_name, device, seed, compiled):
    # type: (nn.Module, Callable[[nn.Module], Any], str, torch.device, int, bool) -> Tuple[nn.Module, Dict[str, Any]]
    """The model as it should be timed for ``precision_name``, and facts worth recording."""
    if precision_name in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision_name == "bf16" else torch.float16
        return cast_model(model, dtype), {"cast_dtype": str(dtype).replace("torch.", "")}
    if precision_name != "int8":
        return model, {}
    if compiled:
        raise UnsupportedError(
            "torch int8 here is FX graph-mode quantization, which runs eager quantized kernels; "
            "PyTorch's compiled int8 path (PT2E + X86InductorQuantizer) now lives in torchao, "
            "which dlperf does not use: run int8 without --compile")
    if device.type != "cpu":
        raise UnsupportedError(
            "torch int8 here is FX static quantization on the x86 CPU kernels; on %s use "
            "--framework onnxruntime (CUDA/TensorRT execution providers)" % device.type)
    inputs = capture_inputs(forward_loss)
    batches = held_out_batches(inputs, seed)
    quantized = quantize_int8(model, inputs[0], batches)
    return quantized, {
        "int8": {
            "method": "FX graph-mode static post-training quantization",
            "engine": QUANTIZED_ENGINE,
            "qconfig": "default x86: per-channel int8 weights, per-tensor uint8 activations",
            "calibration": "%d held-out synthetic samples (seed + %d), batches of %d"
                           % (len(batches) * CALIBRATION_BATCH, CALIBRATION_SEED_OFFSET,
                              CALIBRATION_BATCH),
        }
    }
