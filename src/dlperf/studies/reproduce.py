"""The studies dlperf was built from, each reproduced by one command: ``dlperf reproduce STUDY``.

A study is the published tables it is judged by (``dlperf reference`` ids) and the matrix that
measures them, at one of two scales:

- ``cpu``: what this machine runs whole, CPU processes at small shapes, read from the study's sweep
  file (``sweeps/reproduce-STUDY.yaml``), so that ``dlperf sweep`` runs exactly the same cases;
- ``published``: the study's own shapes (GPUs, nodes, batch sizes, precisions), derived from the
  published values themselves (their keys say framework, model, precision, batch, nodes and GPUs
  per node), plus the few settings a study states only in prose (:attr:`Study.batch`).

Both are measured as a sweep (:mod:`dlperf.studies.sweep_runner`: crash-safe, resumable); the
report that sets each measured cell beside its published value is
:mod:`dlperf.report.reproduction`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf import models, reference
from dlperf.errors import UsageError
from dlperf.spec import Case, SpecError, frameworks
from dlperf.studies import sweep as sweep_mod

SCALES = ("cpu", "published")
#: where the studies' CPU sweep files are: the repository's sweeps/ folder
SWEEPS_DIR = Path(__file__).resolve().parents[3] / "sweeps"
#: a published GPU precision -> what stands for it on a CPU: mixed precision there is bf16
#: autocast (AVX-512 BF16, AMX), and TF32 is a GPU tensor-core format (fp32 on a CPU)
CPU_PRECISIONS = {"amp-fp16": "amp-bf16", "fp16": "bf16", "tf32": "fp32"}
#: --tiny: every case at the smallest shapes that still run the real step, one short repeat, so
#: that a whole reproduction (sweep, report) runs in a minute; its numbers mean nothing
TINY_FIELDS: dict[str, Any] = {"repeats": 1, "warmup_steps": 1, "steps": 2,
                               "min_duration_s": 0.0, "timeout_s": 300.0}
TINY_KNOBS: dict[str, dict[str, int]] = {  # by the model's kind; a study's axes stay its own
    "vision": {"image_size": 32},
    "language": {"seq_len": 16, "layers": 1, "hidden": 64, "heads": 2, "intermediate": 128,
                 "vocab_size": 1000},
    "recommendation": {"hidden_units": 1, "hidden_size": 64},
    "face": {"image_size": 32},
}
#: the published quantities a measurement stands beside
MEASURED = ("throughput", "speedup", "scaling-efficiency", "latency", "precision-speedup",
            "latency-speedup", "improvement", "step-time", "memory")


@dataclass(frozen=True)
class Study:
    """One study: its published tables, in the order the report lays them out."""

    name: str
    title: str
    tables: tuple[str, ...]
    # a published framework's name -> the dlperf backend that stands for it, where they differ
    frameworks: Mapping[str, str] = field(default_factory=dict)
    # (framework, precision) -> batch per device at the published scale, for the tables that
    # state the batch in prose only
    batch: Mapping[tuple[str, str], int] = field(default_factory=dict)
    sweep: str = ""  # the CPU scale's sweep file, sweeps/SWEEP.yaml (default reproduce-NAME)

    @property
    def sweep_name(self) -> str:
        return self.sweep or f"reproduce-{self.name}"

    def reference_tables(self) -> list[reference.Table]:
        return [reference.table(table_id) for table_id in self.tables]

    def framework(self, published: Any) -> str | None:
        """The dlperf backend for a published framework name, None where dlperf has none."""
        if published is None:
            return None
        name = self.frameworks.get(str(published), str(published))
        return name if name in frameworks() else None


_DLPERF_REPORT = tuple(f"dlperf-report-v1/{name}" for name in (
    "resnet50-fp32", "resnet50-amp", "bert-base-fp32-bsz32", "bert-base-fp32-max",
    "bert-base-amp-bsz64", "bert-base-amp-max"))
_NVIDIA = tuple(f"nvidia-mxnet-rn50/{name}" for name in (
    "train-dgxa100", "train-dgx1", "train-dgx2", "infer-dgxa100", "infer-dgx1", "infer-t4"))
# Dell EMC's batch per GPU (the paper's settings: the largest that fit, FP32 64 for MXNet and
# Caffe2 and 128 for TensorFlow, doubled for FP16); Figure 9 spans batch sizes and its text
# states one INT8 speedup, measured here at 64
_DELL_BATCH = {("mxnet", "fp32"): 64, ("caffe2", "fp32"): 64, ("tensorflow1", "fp32"): 128,
               ("mxnet", "amp-fp16"): 128, ("caffe2", "amp-fp16"): 128,
               ("tensorflow1", "amp-fp16"): 256,
               ("onnxruntime", "int8"): 64, ("onnxruntime", "fp32"): 64}

STUDIES = {study.name: study for study in (
    Study("dlperf", "DLPerf: ResNet-50 v1.5 and BERT-Base per framework, FP32 and AMP, "
                    "1n1g to 4n8g (OneFlow, 2020-2021)",
          ("dlperf-readme-2021/resnet50", "dlperf-readme-2021/bert-base", *_DLPERF_REPORT)),
    Study("nvidia-mxnet-rn50", "NVIDIA DeepLearningExamples' MXNet ResNet-50 v1.5: training "
                               "throughput and weak scaling over GPUs, inference latency over "
                               "batch sizes", _NVIDIA),
    Study("dell-emc", "Dell EMC, Deep Learning at Scale on NVIDIA V100 (PMBS'18): TensorFlow, "
                      "MXNet and Caffe2 scaling, FP16 against FP32, INT8 against FP32 inference",
          ("dell-emc-v100/fig2-scaling", "dell-emc-v100/fig5-fp16-over-fp32",
           "dell-emc-v100/fig9-tensorrt-int8"),
          # TensorRT has no dlperf backend: ONNX Runtime's int8 inference stands for it
          frameworks={"tensorrt": "onnxruntime"}, batch=_DELL_BATCH),
    Study("dlperf-wide-deep", "DLPerf: Wide & Deep step time and memory over the vocabulary, "
                              "OneFlow and HugeCTR (HugeCTR's published columns beside)",
          ("dlperf-readme-2021/wide-deep",),
          # dlperf's Wide & Deep is the torch backend's (and JAX's): it stands beside both
          frameworks={"oneflow": "torch", "hugectr": "torch"}, sweep="wide-deep-vocab"),
)}


def get(name: str) -> Study:
    if name not in STUDIES:
        raise UsageError(f"study: {name!r} is not one of {', '.join(STUDIES)}")
    return STUDIES[name]


def cpu_precision(precision: str) -> str:
    return CPU_PRECISIONS.get(precision, precision)


def translate(precision: str, scale: str) -> str:
    """The precision that stands for a published one at ``scale``."""
    return cpu_precision(precision) if scale == "cpu" else precision


@dataclass(frozen=True)
class Plan:
    """What one reproduction measures: the sweep (named by study, scale and --tiny) and the
    cases of the whole study at that scale, before any --framework filter (the report shows
    every stored result of those)."""

    study: Study
    scale: str
    sweep: sweep_mod.Sweep
    all_keys: frozenset[str]
    tiny: bool


def sweep_file(study: Study, given: Path | None) -> Path:
    path = given or SWEEPS_DIR / f"{study.sweep_name}.yaml"
    if not path.is_file():
        raise UsageError(f"--sweep: {path} does not exist"
                         + ("" if given else " (dlperf installed without its repository's "
                                             "sweeps/ folder): give the CPU scale's sweep file "
                                             "with --sweep FILE"))
    return path


def plan(study: Study, scale: str, sweep_path: Path | None = None,
         only: Iterable[str] = (), tiny: bool = False) -> Plan:
    """The reproduction's sweep at ``scale``: the CPU sweep file, or the published shapes;
    ``only`` keeps those frameworks' cases, ``tiny`` shrinks every case (:data:`TINY_FIELDS`)."""
    if scale not in SCALES:
        raise UsageError(f"--scale: {scale!r} is not one of {', '.join(SCALES)}")
    if scale == "cpu":
        loaded = sweep_mod.load(sweep_file(study, sweep_path))
        name = loaded.name
    else:
        if sweep_path is not None:
            raise UsageError("--sweep: the published scale's cases are the study's own; a "
                             "sweep file sets the CPU scale's (--scale cpu)")
        name = f"{study.sweep_name}-published"
        loaded = sweep_mod.Sweep(name=name, path=Path(f"<{study.name}: published shapes>"),
                                 cases=published_cases(study),
                                 description=f"{study.title}, at the study's own shapes")
    # --tiny may make two cases one (they differed in a knob it sets): measured once
    cases = list({case.key(): case for case in
                  (shrunk(c) if tiny else c for c in loaded.cases)}.values())
    all_keys = frozenset(case.key() for case in cases)
    wanted = tuple(dict.fromkeys(only))
    if wanted:
        known = tuple(dict.fromkeys(case.framework for case in cases))
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise UsageError(f"--framework: {unknown[0]} is not measured by study "
                             f"{study.name}; its frameworks: {', '.join(known)}")
        cases = [case for case in cases if case.framework in wanted]
    sweep_name = name + ("-tiny" if tiny else "")
    return Plan(study, scale, dataclasses.replace(loaded, name=sweep_name, cases=cases),
                all_keys, tiny)


def shrunk(case: Case) -> Case:
    """``case`` at --tiny's shapes: its model kind's small knobs, one short repeat."""
    spec = models.get(case.model)
    tiny = TINY_KNOBS.get(spec.kind, {})
    knobs = {**case.knobs, **{k: v for k, v in tiny.items() if k in spec.knobs}}
    timeout = min(case.timeout_s, TINY_FIELDS["timeout_s"])
    return dataclasses.replace(case, **{**TINY_FIELDS, "timeout_s": timeout}, knobs=knobs)


def gpus(value: reference.Published) -> int:
    """The devices a published value was measured on (one where the study states none)."""
    return int(value.keys.get("nodes", 1)) * int(value.keys.get("gpus_per_node", 1))


def published_case(study: Study, value: reference.Published, precision: str | None = None,
                   one_device: bool = False) -> Case | None:
    """The case a published value was measured as, at the study's shapes (on a GPU); None where
    dlperf has no counterpart: a framework or model without a backend, DALI input (dlperf
    measures synthetic data), a batch the study does not state."""
    keys = value.keys
    framework = study.framework(keys.get("framework"))
    model = keys.get("model")
    if framework is None or model not in models.CATALOGUE or keys.get("dali"):
        return None
    precision = precision or str(keys.get("precision", "fp32"))
    batch = keys.get("batch_size") or study.batch.get((framework, precision))
    if batch is None:
        return None
    # a key that is one of the model's knobs (Wide & Deep's vocab_size) sets it
    knobs = {name: keys[name] for name in models.get(str(model)).knobs if name in keys}
    if keys.get("grad_clip") is False:
        knobs["clip_grad_norm"] = 0
    data: dict[str, Any] = {
        "framework": framework, "model": model, "task": keys.get("task", "train"),
        "precision": precision, "batch_size": int(batch), "device": "cuda",
        "nnodes": 1 if one_device else int(keys.get("nodes", 1)),
        "devices": 1 if one_device else int(keys.get("gpus_per_node", 1)), "knobs": knobs}
    if "xla" in keys:
        data["compile"] = bool(keys["xla"])
    try:
        return Case.from_dict(data)
    except SpecError:
        return None


def published_cases(study: Study) -> list[Case]:
    """Every case the study's tables need at its own shapes, each once, in table order: a
    value's own case, the 1-GPU case its speedup is taken over, the baseline precision's case
    its precision speedup is taken over."""
    found: dict[str, Case] = {}
    for table in study.reference_tables():
        for value in table.values():
            if value.quantity not in MEASURED or value.quantity == "improvement":
                continue  # an improvement is a range over the other tables' cases
            needed = [published_case(study, value)]
            if value.quantity in ("speedup", "scaling-efficiency"):
                needed.append(published_case(study, value, one_device=True))
            if "baseline" in value.keys and value.quantity.endswith("speedup"):
                needed.append(published_case(study, value, str(value.keys["baseline"])))
            for case in needed:
                if case is not None:
                    found.setdefault(case.key(), case)
    return list(found.values())


def lacking(cases: list[Case], gpus_here: int, nodes_here: int, why_nodes: str) -> str | None:
    """What this machine lacks to run ``cases``, in words (None: nothing): GPUs per node,
    nodes."""
    gpu_cases = [case for case in cases if case.device == "cuda"]
    if not gpu_cases:
        return None
    parts = []
    per_node = max(case.devices for case in gpu_cases)
    if gpus_here < per_node:
        have = f"has {gpus_here}" if gpus_here else "has none: NVML lists no GPU"
        parts.append(f"{per_node} NVIDIA GPUs per node (this machine {have})")
    nodes = max(case.nnodes for case in cases)
    if nodes > nodes_here:
        parts.append(f"{nodes} nodes ({why_nodes or f'this allocation has {nodes_here}'})")
    return " and ".join(parts) or None
