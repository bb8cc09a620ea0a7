"""The projection model's own error, as its validation measured it (docs/projection.md).

A projection's inputs carry their spread (the start's 95 % interval, the links' fit error, the
overlap's range); the model carries an error of its own that only a check against measured or
published figures shows. Each check is declared here once, case by case, with what was
projected, where and how: the docs' validation tables and a recomputation of each published
check are tested against these values. A projected point's interval is widened by the errors of
the check nearest its start and target (:func:`for_target`): of the checks that start as it
does, the smallest whose shapes reach it, and past every check's shapes the widest one, said to
be beyond what was validated. Within that check, a projection of an engine with at least
:data:`MIN_ENGINE_CASES` cases of its own takes those cases' errors: the engines miss in their
own ways (MXNet's parameter server by −35 % over a 1 Gbit/s link, torch DDP within 12 %), and
one engine's miss says nothing of another's. A check made on another kind of device than
the start's never narrows its interval: past every check of its own kind, a target takes their
errors too.

Apart from the model because it is data, not arithmetic: the checks' declared errors, traced by
the tests to the docs' tables, and :func:`median_abs`, which every validation reports with.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

#: the fewest cases of one engine for a check to answer for that engine alone
MIN_ENGINE_CASES = 3

#: how a check's case names its engine (dlperf's framework names, Horovod as its own engine):
#: the first prefix of the case's lower-cased name, less a leading "ngc " (NVIDIA's containers)
ENGINE_PREFIXES = (
    ("torch ddp", "torch"), ("horovod", "horovod"), ("tensorflow 1.x", "tensorflow1"),
    ("tensorflow 1.15", "tensorflow1"), ("tensorflow1", "tensorflow1"),
    ("tensorflow 2.x", "tensorflow"), ("tensorflow", "tensorflow"), ("pytorch", "torch"),
    ("torch", "torch"), ("paddlepaddle", "paddle"), ("paddle", "paddle"), ("jax", "jax"),
    ("mxnet", "mxnet"), ("oneflow", "oneflow"), ("mindspore", "mindspore"), ("caffe2", "caffe2"))


def engine_named(name: str) -> str | None:
    """The engine a check's case (or a published study's column) names, None for one that
    names none (a test reads every check's cases through this)."""
    text = name.lower()
    text = text[len("ngc "):] if text.startswith("ngc ") else text
    return next((engine for prefix, engine in ENGINE_PREFIXES if text.startswith(prefix)), None)


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
    start_devices: int = field(kw_only=True)  # its start: 1 device, or a whole node of so many
    device: str = field(kw_only=True)  # the kind of device its cases ran on: "cpu" or "cuda"
    parts: tuple["Check", ...] = field(default=(), kw_only=True)  # the checks it joins (joined)

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
        """Its errors either way, what it is and how many cases, in one short line (where and
        when its cases ran is the stored ``where``: one check's is a paragraph)."""
        kind = {"cpu": "CPUs", "cuda": "GPUs"}
        devices = " and ".join(dict.fromkeys(kind.get(d, d) for d in self.devices_of()))
        return (f"{self.under:+.1%} to {self.over:+.1%} (the {self.name} "
                f"check{'s' if self.parts else ''}: {len(self.errors)} cases on {devices}, "
                f"median |error| {self.median_abs:.1%})")

    def devices_of(self) -> tuple[str, ...]:
        """The kinds of device its cases ran on (a joined check's, each part's)."""
        return tuple(part.device for part in self.parts) or (self.device,)

    def of_engine(self, engine: str | None) -> "Check | None":
        """This check narrowed to ``engine``'s own cases, None where it has fewer than
        :data:`MIN_ENGINE_CASES` of them (or no engine is given)."""
        if engine is None:
            return None
        own = tuple((case, e) for case, e in self.errors if engine_named(case) == engine)
        if len(own) < MIN_ENGINE_CASES:
            return None
        return Check(f"{self.name} ({engine})", self.what, self.nodes, self.devices, self.where,
                     self.command, own, start_devices=self.start_devices, device=self.device)


def joined(checks: list[Check]) -> Check:
    """One check of several checks' cases together: its errors reach as far as any of theirs
    either way, its shapes as far as the furthest; the first one's start and device."""
    first = checks[0]
    parts = tuple(part for c in checks for part in (c.parts or (c,)))
    names = [part.name for part in parts]
    return Check(", ".join(names[:-1]) + " and " + names[-1], "; ".join(c.what for c in checks),
                 max(c.nodes for c in checks), max(c.devices for c in checks),
                 "; ".join(dict.fromkeys(c.where for c in checks)),
                 "; ".join(dict.fromkeys(c.command for c in checks)),
                 tuple(e for c in checks for e in c.errors), start_devices=first.start_devices,
                 device=first.device, parts=parts)

ONE_HOST = Check(
    "one-host", "2 processes on one host from 1 (ResNet-50 at image 32, batch 16 per process; "
    "the overlap window from batch 8, the overhead fitted at batches 4 and 8)", 1, 2,
    "2-core AMD EPYC Zen 3, 2026-11-30, and 2-core AMD EPYC Zen 4, 2026-12-01 (three times: "
    "before and after a 1-process case was pinned to its thread's CPU, and with the sweep's "
    "repeats interleaved; and JAX after its step was fixed, 2026-12-02), and 2-core AMD EPYC "
    "Zen 5, 2026-12-03 (interleaved; TF 1.15 and MXNet again after the window fix), and the "
    "Zen 4 again, 2026-12-04 (interleaved, after the window fix; a noisy host), and a 2-core "
    "Intel Xeon with AMX, 2026-12-04 (interleaved; a quiet host), and a 2-core AVX2-only AMD "
    "EPYC (family 23), 2026-12-06 (interleaved; a quiet host), and Caffe2's there, 2026-12-07, "
    "and another 2-core AMD EPYC Zen 4 (family 25 model 17), 2026-12-07 (interleaved, all nine)",
    "dlperf sweep sweeps/projection-one-host.yaml --db DB; "
    "python benchmarks/projection_validation.py --db DB --one-host",
    (("torch Zen 3", -0.140), ("tensorflow Zen 3", 0.041), ("tensorflow1 Zen 3", -0.143),
     ("jax Zen 3", -0.004), ("paddle Zen 3", -0.059), ("mxnet Zen 3", 0.022),
     ("oneflow Zen 3", -0.014), ("mindspore Zen 3", 0.097),
     ("torch Zen 4", 0.025), ("tensorflow Zen 4", 0.039), ("tensorflow1 Zen 4", 0.028),
     ("jax Zen 4", 0.014), ("paddle Zen 4", 0.000), ("mxnet Zen 4", -0.028),
     ("oneflow Zen 4", 0.091), ("mindspore Zen 4", 0.197),
     ("tensorflow Zen 4 pinned", -0.117), ("tensorflow1 Zen 4 pinned", -0.009),
     ("jax Zen 4 pinned", -0.059), ("paddle Zen 4 pinned", 0.007),
     ("mxnet Zen 4 pinned", 0.221), ("oneflow Zen 4 pinned", -0.140),
     ("mindspore Zen 4 pinned", 0.108),
     ("torch Zen 4 interleaved", -0.081), ("tensorflow Zen 4 interleaved", -0.078),
     ("tensorflow1 Zen 4 interleaved", -0.028), ("jax Zen 4 interleaved", -0.045),
     ("paddle Zen 4 interleaved", -0.120), ("mxnet Zen 4 interleaved", -0.122),
     ("oneflow Zen 4 interleaved", 0.030), ("mindspore Zen 4 interleaved", -0.042),
     ("jax Zen 4 fixed", -0.056),
     ("torch Zen 5", 0.066), ("tensorflow Zen 5", -0.150), ("tensorflow1 Zen 5", -0.255),
     ("jax Zen 5", 0.033), ("paddle Zen 5", -0.038), ("mxnet Zen 5", 0.050),
     ("oneflow Zen 5", 0.015), ("mindspore Zen 5", -0.013),
     ("tensorflow1 Zen 5 fixed", -0.068), ("mxnet Zen 5 fixed", 0.018),
     ("torch Zen 4 again", 0.210), ("tensorflow Zen 4 again", 0.153),
     ("tensorflow1 Zen 4 again", 0.013), ("jax Zen 4 again", -0.061),
     ("paddle Zen 4 again", -0.056), ("mxnet Zen 4 again", 0.145),
     ("oneflow Zen 4 again", -0.130),
     ("torch Xeon", -0.023), ("tensorflow Xeon", -0.061), ("tensorflow1 Xeon", -0.020),
     ("jax Xeon", -0.023), ("paddle Xeon", 0.006), ("mxnet Xeon", 0.015),
     ("oneflow Xeon", 0.006), ("mindspore Xeon", -0.004),
     ("torch AVX2", 0.067), ("tensorflow AVX2", -0.022), ("tensorflow1 AVX2", 0.040),
     ("jax AVX2", -0.025), ("paddle AVX2", 0.000), ("mxnet AVX2", 0.048),
     ("oneflow AVX2", -0.001), ("mindspore AVX2", 0.013), ("caffe2 AVX2", 0.001),
     ("torch Zen 4 12-07", -0.052), ("tensorflow Zen 4 12-07", -0.092),
     ("tensorflow1 Zen 4 12-07", 0.005), ("jax Zen 4 12-07", -0.022),
     ("paddle Zen 4 12-07", 0.011), ("mxnet Zen 4 12-07", -0.028),
     ("oneflow Zen 4 12-07", -0.005), ("mindspore Zen 4 12-07", 0.039),
     ("caffe2 Zen 4 12-07", 0.000)),
    start_devices=1, device="cpu")

EMULATED_HOSTS = Check(
    "emulated-hosts", "2 emulated hosts (1 process each) from 1 process, at 10 Gbit/s, 1 Gbit/s "
    "and 100 Mbit/s, and MXNet's at 5 Gbit/s, 2.5 Gbit/s, 500 Mbit/s, 300 Mbit/s and 200 Mbit/s, "
    "torch's, OneFlow's, TensorFlow's and JAX's at 500 Mbit/s and 250 Mbit/s too, TensorFlow's "
    "at 2 Gbit/s, 750 Mbit/s and 350 Mbit/s, six engines at 5 Gbit/s, 1.5 Gbit/s and 400 Mbit/s, "
    "torch DDP's and OneFlow's at 3 Gbit/s, 1.2 Gbit/s, 800 Mbit/s and 600 Mbit/s, TensorFlow's, "
    "JAX's and Paddle's, then TF 1.15's, MindSpore's, MXNet's and Caffe2's, at 1.2 Gbit/s and "
    "600 Mbit/s, torch DDP's, TensorFlow's, JAX's and Paddle's at 2.2 Gbit/s and 700 Mbit/s "
    "(ResNet-50; the window from another rate, "
    "the overhead unshaped)", 2, 2,
    "AMD EPYC Zen 4, 2026-11-29, 2026-12-01 (twice: before and after a 1-process case was "
    "pinned to its thread's CPU) and 2026-12-02 (interleaved; and the six other engines, JAX's "
    "after its step was fixed, MindSpore's over its all-reduce measured on each link; OneFlow's "
    "measured again with its all-reduce over each link, the window priced as the targets are); "
    "AMD EPYC Zen 5, 2026-12-03 (MXNet's parameter servers over their measured push and pull) "
    "and 2026-12-04 (MXNet's again, at two rates not measured before; OneFlow's and "
    "MindSpore's with their all-reduce over each link); AMD EPYC Zen 4 again, 2026-12-04 "
    "(MindSpore's with its all-reduce over each link, MXNet's parameter servers over their "
    "measured push and pull); a 2-core Intel Xeon with AMX, 2026-12-04 (MXNet's parameter "
    "servers over their measured push and pull, and again at four rates it had not been measured "
    "at; OneFlow's with its all-reduce over each link; torch DDP's and OneFlow's, then "
    "TensorFlow's and JAX's, at four rates, two of them 2x apart); MXNet's cases made again with its exchange overlapping the whole step and its push "
    "and pull fitted over the keys its servers split (2026-12-04 evening); every case with "
    "stored results made again with its window read from the fastest other rate whose step "
    "shows its all-reduce exposed (2026-12-04, night; the nine of 2026-11-29, whose results were "
    "not kept, as made then: the three later runs of that sweep were unchanged by it); every "
    "case of an engine whose messages are one size made again with its measured all-reduce "
    "priced from the sizes near them (2026-12-04, late night; MindSpore's of 2026-12-02, whose "
    "collectives were not kept, as made then); TensorFlow's at 2 Gbit/s, 750 Mbit/s and "
    "350 Mbit/s, its all-reduce measured up to 128 MiB, after that rule was committed (a Xeon, "
    "2026-12-04, late night); and out of sample, the model frozen before the runs: torch "
    "DDP's, TensorFlow's, Paddle's, JAX's, OneFlow's and MindSpore's at 5 Gbit/s, 1.5 Gbit/s "
    "and 400 Mbit/s, rates no sweep had measured (AMD EPYC Zen 4, 2026-12-06); and torch DDP's "
    "and OneFlow's at 3 Gbit/s and 800 Mbit/s, their links measured with 20 calls a size, the "
    "model frozen after a link's price began carrying its calls (the same Zen 4, 2026-12-06); "
    "and the two again on a CPU kind no check had run on, at 1.2 Gbit/s and 600 Mbit/s (an "
    "AVX2-only AMD EPYC, family 23, 2026-12-06), then TensorFlow's, JAX's and Paddle's there "
    "(the same EPYC, 2026-12-06, evening), then TF 1.15's, MindSpore's and MXNet's there, "
    "and Caffe2's, its first (the same EPYC, 2026-12-07); and torch DDP's, TensorFlow's, "
    "JAX's and Paddle's on an AMD EPYC Zen 5 (family 26 model 2) at 2.2 Gbit/s and 700 Mbit/s "
    "(2026-12-08)",
    "sudo dlperf sweep sweeps/link-rates.yaml --emulate-hosts --db DB; "
    "python benchmarks/projection_validation.py --db DB (and the same with "
    "sweeps/link-rates-frameworks.yaml, --sweep link-rates-frameworks)",
    (("torch DDP 10 Gbit/s 11-29", -0.014), ("torch DDP 1 Gbit/s 11-29", -0.120),
     ("torch DDP 100 Mbit/s 11-29", 0.090), ("Horovod 10 Gbit/s 11-29", 0.034),
     ("Horovod 1 Gbit/s 11-29", -0.048), ("Horovod 100 Mbit/s 11-29", 0.050),
     ("TensorFlow 10 Gbit/s 11-29", 0.037), ("TensorFlow 1 Gbit/s 11-29", -0.034),
     ("TensorFlow 100 Mbit/s 11-29", 0.021),
     ("torch DDP 10 Gbit/s 12-01", -0.018), ("torch DDP 1 Gbit/s 12-01", -0.110),
     ("torch DDP 100 Mbit/s 12-01", 0.064), ("Horovod 10 Gbit/s 12-01", -0.003),
     ("Horovod 1 Gbit/s 12-01", -0.023), ("Horovod 100 Mbit/s 12-01", 0.045),
     ("TensorFlow 10 Gbit/s 12-01", 0.254), ("TensorFlow 1 Gbit/s 12-01", 0.016),
     ("TensorFlow 100 Mbit/s 12-01", 0.032),
     ("torch DDP 10 Gbit/s 12-01 pinned", 0.010), ("torch DDP 1 Gbit/s 12-01 pinned", -0.105),
     ("torch DDP 100 Mbit/s 12-01 pinned", 0.058), ("Horovod 10 Gbit/s 12-01 pinned", 0.094),
     ("Horovod 1 Gbit/s 12-01 pinned", 0.006), ("Horovod 100 Mbit/s 12-01 pinned", 0.030),
     ("TensorFlow 10 Gbit/s 12-01 pinned", 0.054), ("TensorFlow 1 Gbit/s 12-01 pinned", 0.064),
     ("TensorFlow 100 Mbit/s 12-01 pinned", 0.025),
     ("torch DDP 10 Gbit/s 12-02 interleaved", -0.008),
     ("torch DDP 1 Gbit/s 12-02 interleaved", -0.051),
     ("torch DDP 100 Mbit/s 12-02 interleaved", 0.046),
     ("Horovod 10 Gbit/s 12-02 interleaved", 0.066),
     ("Horovod 1 Gbit/s 12-02 interleaved", -0.043),
     ("Horovod 100 Mbit/s 12-02 interleaved", 0.024),
     ("TensorFlow 10 Gbit/s 12-02 interleaved", 0.037),
     ("TensorFlow 1 Gbit/s 12-02 interleaved", -0.038),
     ("TensorFlow 100 Mbit/s 12-02 interleaved", 0.039),
     ("TensorFlow 1.15 10 Gbit/s 12-02 frameworks", 0.039),
     ("TensorFlow 1.15 1 Gbit/s 12-02 frameworks", 0.006),
     ("TensorFlow 1.15 100 Mbit/s 12-02 frameworks", 0.016),
     ("JAX 10 Gbit/s 12-02 fixed", 0.007), ("JAX 1 Gbit/s 12-02 fixed", -0.024),
     ("JAX 100 Mbit/s 12-02 fixed", 0.021),
     ("Paddle 10 Gbit/s 12-02 frameworks", 0.036), ("Paddle 1 Gbit/s 12-02 frameworks", 0.017),
     ("Paddle 100 Mbit/s 12-02 frameworks", 0.046),
     ("MXNet 10 Gbit/s 12-02 frameworks", 0.056), ("MXNet 1 Gbit/s 12-02 frameworks", -0.107),
     ("MXNet 100 Mbit/s 12-02 frameworks", 0.200),
     ("OneFlow 10 Gbit/s 12-02 remeasured", 0.050),
     ("OneFlow 1 Gbit/s 12-02 remeasured", 0.215),
     ("OneFlow 100 Mbit/s 12-02 remeasured", -0.007),
     ("MindSpore 10 Gbit/s 12-02 measured", -0.007),
     ("MindSpore 1 Gbit/s 12-02 measured", -0.055),
     ("MindSpore 100 Mbit/s 12-02 measured", 0.042),
     ("MXNet 10 Gbit/s 12-03 servers", 0.018), ("MXNet 1 Gbit/s 12-03 servers", 0.110),
     ("MXNet 100 Mbit/s 12-03 servers", 0.143),
     ("MXNet 2.5 Gbit/s 12-04 more rates", 0.208), ("MXNet 1 Gbit/s 12-04 more rates", 0.078),
     ("MXNet 300 Mbit/s 12-04 more rates", 0.006),
     ("OneFlow 10 Gbit/s 12-04 Zen 5", 0.021), ("OneFlow 1 Gbit/s 12-04 Zen 5", 0.185),
     ("OneFlow 100 Mbit/s 12-04 Zen 5", 0.239),
     ("MindSpore 10 Gbit/s 12-04 Zen 5", 0.013), ("MindSpore 1 Gbit/s 12-04 Zen 5", 0.047),
     ("MindSpore 100 Mbit/s 12-04 Zen 5", 0.027),
     ("MindSpore 10 Gbit/s 12-04 Zen 4", 0.003), ("MindSpore 1 Gbit/s 12-04 Zen 4", -0.002),
     ("MindSpore 100 Mbit/s 12-04 Zen 4", 0.056),
     ("MXNet 10 Gbit/s 12-04 Zen 4", 0.134), ("MXNet 1 Gbit/s 12-04 Zen 4", 0.094),
     ("MXNet 100 Mbit/s 12-04 Zen 4", 0.112),
     ("MXNet 10 Gbit/s 12-04 Xeon", -0.026), ("MXNet 1 Gbit/s 12-04 Xeon", 0.064),
     ("MXNet 100 Mbit/s 12-04 Xeon", 0.064),
     ("MXNet 5 Gbit/s 12-04 Xeon new rates", 0.030),
     ("MXNet 2.5 Gbit/s 12-04 Xeon new rates", 0.112),
     ("MXNet 500 Mbit/s 12-04 Xeon new rates", 0.024),
     ("MXNet 200 Mbit/s 12-04 Xeon new rates", 0.068),
     ("OneFlow 10 Gbit/s 12-04 Xeon", -0.037), ("OneFlow 1 Gbit/s 12-04 Xeon", 0.416),
     ("OneFlow 100 Mbit/s 12-04 Xeon", -0.070),
     ("torch DDP 10 Gbit/s 12-04 Xeon near rates", 0.007),
     ("torch DDP 1 Gbit/s 12-04 Xeon near rates", -0.000),
     ("torch DDP 500 Mbit/s 12-04 Xeon near rates", 0.000),
     ("torch DDP 250 Mbit/s 12-04 Xeon near rates", 0.025),
     ("OneFlow 10 Gbit/s 12-04 Xeon near rates", -0.008),
     ("OneFlow 1 Gbit/s 12-04 Xeon near rates", 0.085),
     ("OneFlow 500 Mbit/s 12-04 Xeon near rates", 0.031),
     ("OneFlow 250 Mbit/s 12-04 Xeon near rates", -0.041),
     ("TensorFlow 10 Gbit/s 12-04 Xeon near rates", 0.110),
     ("TensorFlow 1 Gbit/s 12-04 Xeon near rates", 0.069),
     ("TensorFlow 500 Mbit/s 12-04 Xeon near rates", 0.137),
     ("TensorFlow 250 Mbit/s 12-04 Xeon near rates", 0.048),
     ("JAX 10 Gbit/s 12-04 Xeon near rates", -0.078),
     ("JAX 1 Gbit/s 12-04 Xeon near rates", -0.003),
     ("JAX 500 Mbit/s 12-04 Xeon near rates", 0.002),
     ("JAX 250 Mbit/s 12-04 Xeon near rates", 0.023),
     ("TensorFlow 2 Gbit/s 12-04 Xeon sizes", -0.043),
     ("TensorFlow 750 Mbit/s 12-04 Xeon sizes", 0.034),
     ("TensorFlow 350 Mbit/s 12-04 Xeon sizes", -0.020),
     ("torch DDP 5 Gbit/s 12-06 unseen", 0.014), ("torch DDP 1.5 Gbit/s 12-06 unseen", 0.065),
     ("torch DDP 400 Mbit/s 12-06 unseen", -0.022),
     ("TensorFlow 5 Gbit/s 12-06 unseen", 0.034), ("TensorFlow 1.5 Gbit/s 12-06 unseen", -0.011),
     ("TensorFlow 400 Mbit/s 12-06 unseen", 0.025),
     ("Paddle 5 Gbit/s 12-06 unseen", -0.022), ("Paddle 1.5 Gbit/s 12-06 unseen", 0.005),
     ("Paddle 400 Mbit/s 12-06 unseen", 0.036),
     ("JAX 5 Gbit/s 12-06 unseen", -0.062), ("JAX 1.5 Gbit/s 12-06 unseen", -0.003),
     ("JAX 400 Mbit/s 12-06 unseen", 0.015),
     ("OneFlow 5 Gbit/s 12-06 unseen", 0.006), ("OneFlow 1.5 Gbit/s 12-06 unseen", 0.109),
     ("OneFlow 400 Mbit/s 12-06 unseen", 0.194),
     ("MindSpore 5 Gbit/s 12-06 unseen", 0.050), ("MindSpore 1.5 Gbit/s 12-06 unseen", 0.080),
     ("MindSpore 400 Mbit/s 12-06 unseen", -0.021),
     ("torch DDP 3 Gbit/s 12-06 calls", -0.176), ("torch DDP 800 Mbit/s 12-06 calls", -0.116),
     ("OneFlow 3 Gbit/s 12-06 calls", 0.004), ("OneFlow 800 Mbit/s 12-06 calls", 0.109),
     ("torch DDP 1.2 Gbit/s 12-06 AVX2", 0.086), ("torch DDP 600 Mbit/s 12-06 AVX2", -0.065),
     ("OneFlow 1.2 Gbit/s 12-06 AVX2", 0.059), ("OneFlow 600 Mbit/s 12-06 AVX2", 0.126),
     ("TensorFlow 1.2 Gbit/s 12-06 AVX2 more", 0.022),
     ("TensorFlow 600 Mbit/s 12-06 AVX2 more", 0.006),
     ("JAX 1.2 Gbit/s 12-06 AVX2 more", 0.002), ("JAX 600 Mbit/s 12-06 AVX2 more", -0.002),
     ("Paddle 1.2 Gbit/s 12-06 AVX2 more", -0.007),
     ("Paddle 600 Mbit/s 12-06 AVX2 more", 0.005),
     ("TensorFlow 1.15 1.2 Gbit/s 12-07 AVX2 last", 0.120),
     ("TensorFlow 1.15 600 Mbit/s 12-07 AVX2 last", 0.042),
     ("MindSpore 1.2 Gbit/s 12-07 AVX2 last", 0.069),
     ("MindSpore 600 Mbit/s 12-07 AVX2 last", 0.038),
     ("MXNet 1.2 Gbit/s 12-07 AVX2 last", 0.057), ("MXNet 600 Mbit/s 12-07 AVX2 last", 0.173),
     ("Caffe2 1.2 Gbit/s 12-07 AVX2 Caffe2", 0.005),
     ("Caffe2 600 Mbit/s 12-07 AVX2 Caffe2", -0.195),
     ("torch DDP 2.2 Gbit/s 12-08 Zen 5", 0.149), ("torch DDP 700 Mbit/s 12-08 Zen 5", -0.056),
     ("TensorFlow 2.2 Gbit/s 12-08 Zen 5", 0.005), ("TensorFlow 700 Mbit/s 12-08 Zen 5", -0.003),
     ("JAX 2.2 Gbit/s 12-08 Zen 5", -0.016), ("JAX 700 Mbit/s 12-08 Zen 5", 0.016),
     ("Paddle 2.2 Gbit/s 12-08 Zen 5", -0.087), ("Paddle 700 Mbit/s 12-08 Zen 5", 0.062)),
    start_devices=1, device="cpu")

PUBLISHED = Check(
    "published", "DLPerf v1.0 report's ResNet-50 FP32 throughputs at 1, 2 and 4 nodes of 8 V100 "
    "from each framework's 1-GPU figure (100 Gbit/s InfiniBand, NVLink taken as 400 Gbit/s; the "
    "overlap not stated: the point at half of it)", 4, 32,
    "the study's hardware, a computation (dlperf-report-v1/resnet50-fp32)",
    "dlperf project --published dlperf-report-v1/resnet50-fp32 --intra 400gbit@2us "
    "--inter 100gbit@5us",
    (("OneFlow 1x8", 0.010), ("OneFlow 2x8", -0.008), ("OneFlow 4x8", -0.001),
     ("NGC MXNet 1x8", 0.038), ("NGC MXNet 2x8", 0.064), ("NGC MXNet 4x8", 0.079),
     ("NGC TensorFlow 1.x 1x8", 0.060), ("NGC TensorFlow 1.x 2x8", 0.112),
     ("NGC TensorFlow 1.x 4x8", 0.190), ("NGC PyTorch 1x8", 0.012),
     ("NGC PyTorch 2x8", 0.005), ("NGC PyTorch 4x8", 0.051), ("MXNet 1x8", 0.196),
     ("MXNet 2x8", 0.236), ("MXNet 4x8", 0.251), ("TensorFlow 2.x 1x8", 0.042),
     ("TensorFlow 2.x 2x8", 0.041), ("TensorFlow 2.x 4x8", 0.070), ("PyTorch 1x8", 0.054),
     ("PyTorch 2x8", 0.067), ("PyTorch 4x8", 0.088), ("PaddlePaddle 1x8", 0.069),
     ("PaddlePaddle 2x8", 0.128), ("PaddlePaddle 4x8", 0.180)),
    start_devices=1, device="cuda")

PUBLISHED_FROM_NODE = Check(
    "published-from-node", "DLPerf v1.0 report's ResNet-50 FP32 throughputs at 2 and 4 nodes of 8 "
    "V100 from each framework's 1-node (8-GPU) figure (100 Gbit/s InfiniBand, NVLink taken as "
    "400 Gbit/s; the overlap not stated: the point at half of it)", 4, 32,
    "the study's hardware, a computation (dlperf-report-v1/resnet50-fp32)",
    "dlperf project --published dlperf-report-v1/resnet50-fp32 --from-node --intra 400gbit@2us "
    "--inter 100gbit@5us",
    (("OneFlow 2x8", -0.018), ("OneFlow 4x8", -0.011), ("NGC MXNet 2x8", 0.026),
     ("NGC MXNet 4x8", 0.041), ("NGC TensorFlow 1.x 2x8", 0.050),
     ("NGC TensorFlow 1.x 4x8", 0.124), ("NGC PyTorch 2x8", -0.007), ("NGC PyTorch 4x8", 0.038),
     ("MXNet 2x8", 0.037), ("MXNet 4x8", 0.050), ("TensorFlow 2.x 2x8", -0.001),
     ("TensorFlow 2.x 4x8", 0.028), ("PyTorch 2x8", 0.013), ("PyTorch 4x8", 0.033),
     ("PaddlePaddle 2x8", 0.056), ("PaddlePaddle 4x8", 0.104)),
    start_devices=8, device="cuda")

EMULATED_HOSTS_FROM_NODE = Check(
    "emulated-hosts-from-node", "2 emulated hosts of 2 processes from 1 node of 2 processes (on "
    "one CPU, as each emulated host has one), at 10 Gbit/s, 1 Gbit/s and 100 Mbit/s (ResNet-50 "
    "at image 64, batch 8 a process; each engine's collective measured over each link, the "
    "window from another rate, the overhead unshaped)", 2, 4,
    "2-core Intel Xeon (KVM, AMX), 2026-12-04 (torch DDP, MXNet, TensorFlow; then Paddle and "
    "JAX; torch's, TensorFlow's and Paddle's made again with their all-reduce priced from the "
    "sizes near their messages, late night)",
    "sudo benchmarks/data/from-node-2x2-xeon-2026-12-04/measure.sh torch mxnet tensorflow "
    "(then paddle jax); "
    "python benchmarks/projection_validation.py --results results.json --sweep from-node-2x2",
    (("torch DDP 10 Gbit/s", 0.009), ("torch DDP 1 Gbit/s", 0.026),
     ("torch DDP 100 Mbit/s", -0.003), ("MXNet 10 Gbit/s", 0.015), ("MXNet 1 Gbit/s", 0.055),
     ("MXNet 100 Mbit/s", -0.051), ("TensorFlow 10 Gbit/s", 0.109),
     ("TensorFlow 1 Gbit/s", 0.055), ("TensorFlow 100 Mbit/s", 0.000),
     ("Paddle 10 Gbit/s", -0.046), ("Paddle 1 Gbit/s", -0.026), ("Paddle 100 Mbit/s", -0.015),
     ("JAX 10 Gbit/s", -0.154), ("JAX 1 Gbit/s", 0.191), ("JAX 100 Mbit/s", -0.099)),
    start_devices=2, device="cpu")

CHECKS = (ONE_HOST, EMULATED_HOSTS, PUBLISHED, PUBLISHED_FROM_NODE, EMULATED_HOSTS_FROM_NODE)


@dataclass(frozen=True)
class ModelError:
    """The model's error applied to one target: its check's largest errors either way (of its
    engine's own cases, where the check has enough of them: ``check`` is then that part)."""

    check: Check
    beyond: bool  # the target is past every check's shapes: its error was not validated
    #: where the target is past every check made on its start's kind of device while a check on
    #: another kind reaches it: those checks, joined (their errors are in ``check`` too)
    short_of: Check | None = None

    def widen(self, low: float, high: float) -> tuple[float, float]:
        """A throughput interval's ends widened by the model's error: the measured figure is
        projected / (1 + error), so the slow end divides by 1 + the largest error above, the
        fast end by 1 + the largest below."""
        return low / (1 + self.check.over), high / (1 + self.check.under)

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check.name, "under": self.check.under, "over": self.check.over,
                "cases": len(self.check.errors), "median_abs": self.check.median_abs,
                "where": self.check.where, "beyond_validated": self.beyond,
                "past_its_device": None if self.short_of is None else {
                    "device": self.short_of.device, "nodes": self.short_of.nodes,
                    "devices": self.short_of.devices}}


def for_target(nodes: int, devices: int, *, start_nodes: int, start_devices: int,
               engine: str | None = None, device: str | None = None) -> ModelError:
    """The check nearest a projection from ``start_devices`` on ``start_nodes`` to ``devices``
    on ``nodes``: of the checks that start as it does and whose shapes reach the target, the one
    of fewest devices (then nodes); past them all, the one of them reaching furthest (on a tie,
    the one from 1 device), marked beyond.

    A start of several devices on each node has measured what they lose within it, which
    every check from 1 device counts as the model's error (the published check's 1x8 cases, up
    to +19.6 %). Projected to more nodes of as many devices, it is checked as the checks from a
    whole node were made: a measured node, nodes added. So a CPU start of 1 x 2 processes takes
    the emulated-hosts-from-node check for 2 x 2 (made that way), and the published-from-node
    check to 3 or 4 nodes. A target that adds devices within each node, or that no check from
    a node reaches, takes the checks from 1 device, as a start of 1 does.
    The check chosen answers with ``engine``'s own cases where it has enough of them.

    A check made on another kind of device than the start's ``device`` says nothing of how the
    model misses on this one: a target past every check of its group made on ``device`` (a CPU
    start at 4 nodes, where only the GPU study's figures reach) takes those checks' errors as
    well as the chosen one's, so that its interval is never narrower than at the shapes that
    were checked on its own kind of device (``short_of``)."""
    from_node = start_devices > start_nodes and devices * start_nodes == start_devices * nodes
    applicable = [c for c in CHECKS if c.start_devices == 1 or from_node]
    for group in ([c for c in applicable if c.start_devices > 1],
                  [c for c in applicable if c.start_devices == 1]):
        reaching = [c for c in group if c.reaches(nodes, devices)]
        if reaching:
            chosen = min(reaching, key=lambda c: (c.devices, c.nodes))
            return _on_its_device(chosen, group, False, nodes, devices, engine, device)
    widest = max(applicable, key=lambda c: (c.devices, c.nodes, c.start_devices == 1))
    return _on_its_device(widest, applicable, True, nodes, devices, engine, device)


def _on_its_device(chosen: Check, group: list[Check], beyond: bool, nodes: int, devices: int,
                   engine: str | None, device: str | None) -> ModelError:
    """``chosen``'s error (its engine's part), with the checks of ``group`` made on ``device``
    joined to it where the target is past all of them and ``chosen`` was made on another."""
    own = [c for c in group if c.device == device]
    if device is None or chosen.device == device or not own \
            or any(c.reaches(nodes, devices) for c in own):
        return ModelError(chosen.of_engine(engine) or chosen, beyond)
    mine = joined([c.of_engine(engine) or c for c in own])
    return ModelError(joined([mine, chosen.of_engine(engine) or chosen]), beyond, mine)
