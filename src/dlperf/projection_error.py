"""The projection model's own error, as its validation measured it (docs/projection.md).

A projection's inputs carry their spread (the start's 95 % interval, the links' fit error, the
overlap's range); the model carries an error of its own that only a check against measured or
published figures shows. Each check is declared here once, case by case, with what was
projected, where and how: the docs' validation tables and a recomputation of the published
check are tested against these values. A projected point's interval is widened by the errors of
the check nearest its target (:func:`for_target`): the smallest check whose shapes reach it,
and past every check's shapes the widest one, said to be beyond what was validated.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def median_abs(errors: list[float]) -> float:
    """The median |error| of a check (of an even count, the mean of the middle two), as every
    validation reports it."""
    return statistics.median(abs(e) for e in errors)


@dataclass(frozen=True)
class Check:
    """One validation: per case, (projected - measured) / measured of the throughput."""

    name: str
    what: str  # projected from what to what
    nodes: int  # the largest target it checked: nodes, and devices in all
    devices: int
    where: str  # the machine (or the study) and the date
    command: str
    errors: tuple[tuple[str, float], ...]  # (case, error)

    @property
    def over(self) -> float:
        """The most the model projected above the measured figure (0 when never above)."""
        return max(max(e for _, e in self.errors), 0.0)

    @property
    def under(self) -> float:
        """The most the model projected below the measured figure, as a negative error (0 when
        never below)."""
        return min(min(e for _, e in self.errors), 0.0)

    @property
    def median_abs(self) -> float:
        return median_abs([e for _, e in self.errors])

    def reaches(self, nodes: int, devices: int) -> bool:
        return nodes <= self.nodes and devices <= self.devices

    def text(self) -> str:
        return (f"{self.under:+.1%} to {self.over:+.1%} (the {self.name} check: "
                f"{len(self.errors)} cases, median |error| {self.median_abs:.1%}; {self.where})")


ONE_HOST = Check(
    "one-host", "2 processes on one host from 1 (ResNet-50 at image 32, batch 16 per process; "
    "the overlap window from batch 8, the overhead fitted at batches 4 and 8)", 1, 2,
    "2-core AMD EPYC Zen 3, 2026-11-30",
    "dlperf sweep sweeps/projection-one-host.yaml --db DB; "
    "python benchmarks/projection_validation.py --db DB --one-host",
    (("torch", -0.140), ("tensorflow", 0.041), ("tensorflow1", -0.143), ("jax", -0.004),
     ("paddle", -0.059), ("mxnet", 0.022), ("oneflow", -0.014), ("mindspore", 0.097)))

EMULATED_HOSTS = Check(
    "emulated-hosts", "2 emulated hosts (1 process each) from 1 process, at 10 Gbit/s, 1 Gbit/s "
    "and 100 Mbit/s (ResNet-50; the window from another rate, the overhead unshaped)", 2, 2,
    "AMD EPYC Zen 4, 2026-11-29",
    "sudo dlperf sweep sweeps/link-rates.yaml --emulate-hosts --db DB; "
    "python benchmarks/projection_validation.py --db DB",
    (("torch DDP 10 Gbit/s", -0.014), ("torch DDP 1 Gbit/s", -0.120),
     ("torch DDP 100 Mbit/s", 0.090), ("Horovod 10 Gbit/s", 0.034),
     ("Horovod 1 Gbit/s", -0.048), ("Horovod 100 Mbit/s", 0.050),
     ("TensorFlow 10 Gbit/s", 0.037), ("TensorFlow 1 Gbit/s", -0.034),
     ("TensorFlow 100 Mbit/s", 0.021)))

PUBLISHED = Check(
    "published", "DLPerf v1.0 report's ResNet-50 FP32 throughputs at 1, 2 and 4 nodes of 8 V100 "
    "from each framework's 1-GPU figure (100 Gbit/s InfiniBand, NVLink taken as 400 Gbit/s; the "
    "overlap not stated: the point at half of it)", 4, 32,
    "the study's hardware, a computation (dlperf-report-v1/resnet50-fp32)",
    "dlperf project --published dlperf-report-v1/resnet50-fp32 --intra 400gbit@2us "
    "--inter 100gbit@5us",
    (("OneFlow 1x8", 0.010), ("OneFlow 2x8", -0.002), ("OneFlow 4x8", 0.000),
     ("NGC MXNet 1x8", 0.038), ("NGC MXNet 2x8", 0.070), ("NGC MXNet 4x8", 0.081),
     ("NGC TensorFlow 1.x 1x8", 0.060), ("NGC TensorFlow 1.x 2x8", 0.118),
     ("NGC TensorFlow 1.x 4x8", 0.192), ("NGC PyTorch 1x8", 0.012),
     ("NGC PyTorch 2x8", 0.011), ("NGC PyTorch 4x8", 0.052), ("MXNet 1x8", 0.196),
     ("MXNet 2x8", 0.244), ("MXNet 4x8", 0.253), ("TensorFlow 2.x 1x8", 0.042),
     ("TensorFlow 2.x 2x8", 0.046), ("TensorFlow 2.x 4x8", 0.072), ("PyTorch 1x8", 0.054),
     ("PyTorch 2x8", 0.073), ("PyTorch 4x8", 0.089), ("PaddlePaddle 1x8", 0.069),
     ("PaddlePaddle 2x8", 0.134), ("PaddlePaddle 4x8", 0.181)))

CHECKS = (ONE_HOST, EMULATED_HOSTS, PUBLISHED)


@dataclass(frozen=True)
class ModelError:
    """The model's error applied to one target: its check's largest errors either way."""

    check: Check
    beyond: bool  # the target is past every check's shapes: its error was not validated

    def widen(self, low: float, high: float) -> tuple[float, float]:
        """A throughput interval's ends widened by the model's error: the measured figure is
        projected / (1 + error), so the slow end divides by 1 + the largest error above, the
        fast end by 1 + the largest below."""
        return low / (1 + self.check.over), high / (1 + self.check.under)

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check.name, "under": self.check.under, "over": self.check.over,
                "cases": len(self.check.errors), "median_abs": self.check.median_abs,
                "where": self.check.where, "beyond_validated": self.beyond}


def for_target(nodes: int, devices: int) -> ModelError:
    """The check nearest a target: of those whose shapes reach it, the one of fewest devices
    (then nodes); past them all, the one that reaches furthest, marked beyond."""
    reaching = [c for c in CHECKS if c.reaches(nodes, devices)]
    if reaching:
        return ModelError(min(reaching, key=lambda c: (c.devices, c.nodes)), False)
    return ModelError(max(CHECKS, key=lambda c: (c.devices, c.nodes)), True)
