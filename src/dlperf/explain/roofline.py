"""Where a result sits under this machine's roofline: achieved FLOP/s against the measured
GEMM peak and copy bandwidth (`dlperf sysinfo --probe`), at the step's arithmetic intensity.

The intensity needs the bytes a step moves, which no profiler here measures; it is estimated
from the catalogue, and the block says so:

- parameters: training reads the weights forward and backward, writes and reads their
  gradients, reads and writes the optimizer's state (momentum) and writes the weights:
  8 passes over the parameters in fp32 (master weights stay fp32 under AMP); inference reads
  them once, in the compute precision;
- activations: the forward pass writes every layer output (the catalogue's
  ``activations_per_sample``) and training reads it back in backward, writes its gradient and
  reads that once more: 4 passes (inference 2), in the compute precision.

Caches make the real traffic lower, so a "memory-bound" verdict means the step could be held
by bandwidth, not that it is; the distance from the roof is the useful number.
"""

from __future__ import annotations

from typing import Any

from dlperf import models
from dlperf.host import peak
from dlperf.spec import Case

DTYPE_BYTES = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "int8": 1}
TRAIN_PARAM_PASSES, INFER_PARAM_PASSES = 8, 1
TRAIN_ACTIVATION_PASSES, INFER_ACTIVATION_PASSES = 4, 2
METHOD = ("estimate: parameters x 8 fp32 passes (training) or 1 (inference), activations x 4 "
          "passes (training) or 2 (inference) in the compute precision; caches move less")


def bytes_per_step(case: Case) -> float | None:
    """The estimated bytes one step of ``case`` moves on one device (None where the catalogue
    does not count the model's activations)."""
    spec = models.get(case.model)
    knobs = dict(case.knobs)
    activations = spec.activations_per_sample(knobs)
    if activations is None:
        return None
    compute = DTYPE_BYTES.get(peak.PRECISION_DTYPE.get(case.precision, "float32"), 4)
    train = case.task == "train"
    params = spec.params(knobs) * (TRAIN_PARAM_PASSES * 4 if train else INFER_PARAM_PASSES
                                   * compute)
    passes = TRAIN_ACTIVATION_PASSES if train else INFER_ACTIVATION_PASSES
    return float(params + passes * activations * compute * case.batch_size)


def block(case: Case, flops: dict[str, Any], env: dict[str, Any],
          throughput_median: float | None, units: int = 1) -> dict[str, Any] | None:
    """The roofline of a result: intensity (FLOP per byte), the ridge point, the bound and how
    far the achieved rate is from the roof (``units``: the roofs the job ran under, as its
    MFU counts them); None for a case with no model (data only)."""
    if case.data_only or not flops.get("per_sample"):
        return None
    moved = bytes_per_step(case)
    per_step = flops["per_sample"] * case.batch_size
    peaks = (peak.cached(env) if env.get("cpu") else None) or {}
    on_gpu = bool(env.get("gpus")) and case.device != "cpu"
    bandwidth = None if on_gpu else peaks.get("host_copy_bytes_per_s")
    out: dict[str, Any] = {
        "flops_per_step": per_step, "bytes_per_step": moved, "method": METHOD,
        "intensity": per_step / moved if moved else None,
        "achieved_flops_per_s": flops.get("achieved_per_s"),
        "peak_flops_per_s": flops.get("peak_per_s"), "bandwidth_bytes_per_s": bandwidth,
        "bandwidth_source": ("dlperf sysinfo --probe (host copy)" if bandwidth else
                             "no device memory bandwidth probed" if on_gpu else
                             "not probed: run `dlperf sysinfo --probe`"),
        "ridge": None, "bound": None, "roof_flops_per_s": None, "of_roof": None,
        "step_s": case.global_batch / throughput_median if throughput_median else None,
    }
    if out["intensity"] and bandwidth and out["peak_flops_per_s"]:
        ridge = out["peak_flops_per_s"] / bandwidth
        roof = min(out["peak_flops_per_s"], out["intensity"] * bandwidth)
        out.update(ridge=ridge, bound="compute" if out["intensity"] >= ridge else "memory",
                   roof_flops_per_s=roof)
        reach = (out["achieved_flops_per_s"] / (roof * units) if out["achieved_flops_per_s"]
                 else None)
        if reach is not None and reach > 1.0:  # as MFU: a probe below the achieved rate
            out["roof_note"] = (f"the achieved rate is {reach:.0%} of the roof, so the probe is "
                                f"no ceiling (taken on a busy host?): re-probe on a quiet "
                                f"machine with `dlperf sysinfo --probe`")
            reach = None
        out["of_roof"] = reach
    return out
