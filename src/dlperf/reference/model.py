"""What a stored published figure is: the study it comes from, its table, and the value itself.

A :class:`Study` is one published document at one version (a README at a commit, a paper); its
:class:`Table` objects are laid out as they were published (label columns, then value columns,
rows in the published order), and each cell holds one or more :class:`Cell` values (a cell such as
"29171.69 w/XLA / 24734.22" holds two). :class:`Published` is the long view a comparison needs:
one value with its unit, its source and every key that identifies it (table, row, column and cell
keys merged, plus ``gpus`` derived from ``nodes`` and ``gpus_per_node``).

The vocabularies below (quantities, units, keys) are the one place their names are declared:
the schema check refuses anything else, and ``docs/reference.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

from dlperf.spec import PRECISIONS

Key = Union[str, int, bool]

#: what a value measures -> its meaning
QUANTITIES = {
    "throughput": "samples per second over all the value's devices",
    "speedup": "throughput on the value's devices over throughput on one device, same batch "
               "per device",
    "scaling-efficiency": "speedup divided by the number of devices",
    "precision-speedup": "throughput at the value's precision over throughput at its baseline "
                         "precision",
    "latency": "time to serve one batch (key statistic: avg, p50, p90, p95, p99)",
    "latency-speedup": "latency at the baseline precision over latency at the value's precision",
    "step-time": "time of one training iteration",
    "memory": "device memory in use",
    "memory-ratio": "memory of the value's framework over memory of its baseline framework",
    "max-classes": "the largest number of classes that trained without running out of memory",
    "accuracy": "validation accuracy (key metric: top1 or top5, where the study says which)",
    "accuracy-difference": "the difference between the accuracy at the value's precision and at "
                           "its baseline, as the study states it (it may not say which way)",
    "time-to-train": "wall time of the whole training run",
    "time-to-train-speedup": "time to train at the baseline precision over time at the value's",
    "improvement": "how much faster the value's case is than its baseline case, in percent",
    "p2p-speedup": "speedup of peer-to-peer GPU memory transfers over the baseline interconnect",
    "storage-read": "disk read throughput of the training job",
    "network-traffic": "network throughput of one node while training",
    "spec": "a hardware specification figure",
}

#: unit -> its meaning
UNITS = {
    "img/s": "images per second",
    "sentences/s": "sentences (sequences) per second",
    "ms": "milliseconds",
    "h": "hours",
    "MB": "megabytes",
    "MB/s": "megabytes per second",
    "GB/s": "gigabytes per second",
    "MHz": "megahertz",
    "TOPS": "tera operations per second",
    "%": "percent",
    "pp": "percentage points",
    "x": "a ratio (times)",
    "fraction": "a ratio to 1, as published without a unit",
    "count": "a number of things (cores, classes)",
}

#: key -> (type, meaning); a key is set only where the study states it
KEYS: dict[str, tuple[type, str]] = {
    "framework": (str, "the framework, as dlperf names it where it has a backend (oneflow, "
                       "tensorflow1, tensorflow, torch, mxnet, paddle, mindspore, caffe2), "
                       "else the study's name (hugectr, tensorrt)"),
    "implementation": (str, "whose training scripts the study ran (the study's Source column)"),
    "model": (str, "the model, as dlperf's catalogue names it where it has it"),
    "task": (str, "train or infer"),
    "precision": (str, "fp32, tf32, amp-fp16 (mixed precision with FP16), int8 ..."),
    "baseline": (str, "what a ratio is taken against: a precision, a framework or a device"),
    "batch_size": (int, "samples per device"),
    "largest_batch": (bool, "the batch per device was the largest that fit (the study's bsz=max)"),
    "nodes": (int, "nodes (servers)"),
    "gpus_per_node": (int, "GPUs on each node"),
    "xla": (bool, "TensorFlow's XLA compiler on"),
    "dali": (bool, "NVIDIA DALI input pipeline"),
    "grad_clip": (bool, "gradient clipping by global norm (BERT)"),
    "fp16": (bool, "the study's FP16 switch, where it does not say which kind of FP16"),
    "model_parallel": (bool, "model-parallel classification layer (InsightFace)"),
    "partial_fc": (bool, "Partial FC sampling of class centres (InsightFace)"),
    "vocab_size": (int, "embedding vocabulary size (Wide & Deep)"),
    "epochs": (int, "training epochs"),
    "metric": (str, "top1 or top5 accuracy"),
    "statistic": (str, "which statistic of many: avg, p50, p90, p95, p99, mean, stdev, min, max"),
    "device": (str, "the GPU model, where a table compares devices"),
    "interconnect": (str, "the link between GPUs, where a table compares links"),
    "bound": (str, "min or max: the ends of a range the study states"),
    "case": (str, "what the row is, where no other key says it"),
}
#: keys that are derived, never written in a file
DERIVED_KEYS = ("gpus",)
TASKS = ("train", "infer")
STATISTICS = ("avg", "p50", "p90", "p95", "p99", "mean", "stdev", "min", "max")
METRICS = ("top1", "top5")
BOUNDS = ("min", "max")
#: keys whose value is one of a closed set
CHOICES: dict[str, tuple[str, ...]] = {"task": TASKS, "precision": PRECISIONS,
                                       "statistic": STATISTICS, "bound": BOUNDS,
                                       "metric": METRICS}
#: what a hardware block must say
HARDWARE_REQUIRED = ("gpu", "count", "interconnect")


@dataclass(frozen=True)
class Study:
    """One published document at one version, and what it states for all of its tables."""

    id: str
    title: str
    authors: str
    kind: str  # readme, report, documentation page, paper
    version: str
    date: str
    url: str | None
    seed: str | None  # its file under ../shared/seeds, when it is one of the seed studies
    notes: tuple[str, ...]
    hardware: Mapping[str, Key]
    software: Mapping[str, str]
    settings: Mapping[str, Key]
    file: str  # the data file it was read from


@dataclass(frozen=True)
class Source:
    """Where in the study a table is: its section, table or figure, and how it was read."""

    location: str
    read_off_plot: bool
    version: str | None = None  # when the table's version differs from the study's
    url: str | None = None


@dataclass(frozen=True)
class Column:
    id: str
    label: str  # as published
    quantity: str | None  # None when rows say it (a table of specifications)
    unit: str | None
    keys: Mapping[str, Key]
    footnotes: tuple[str, ...]


@dataclass(frozen=True)
class Cell:
    """One value in a published cell; a cell may hold several (with and without XLA)."""

    value: float | None
    text: str  # as published: 22.50 stays 22.50, "-" and "OOM" stay themselves
    status: str  # ok (a number), oom, or none (a published "-" or "N/A": not measured or given)
    label: str | None  # the cell's own note as published: "w/XLA", "bsz=96"
    keys: Mapping[str, Key]
    footnotes: tuple[str, ...]
    approx: bool  # the study wrote it as approximate (~550 MB/s)


@dataclass(frozen=True)
class Row:
    label: tuple[str, ...]  # one string per label column, as published
    keys: Mapping[str, Key]
    cells: tuple[tuple[Cell, ...], ...]  # one tuple per value column
    footnotes: tuple[str, ...]
    quantity: str | None  # set where the rows, not the columns, say what is measured
    unit: str | None


@dataclass(frozen=True)
class Table:
    """A table or figure as published, with the settings and hardware it states."""

    id: str
    title: str
    study: Study
    source: Source
    keys: Mapping[str, Key]
    label_columns: tuple[str, ...]
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    footnotes: Mapping[str, str]
    notes: tuple[str, ...]
    own_hardware: Mapping[str, Key]
    own_software: Mapping[str, str]
    own_settings: Mapping[str, Key]

    @property
    def hardware(self) -> dict[str, Key]:
        return {**self.study.hardware, **self.own_hardware}

    @property
    def software(self) -> dict[str, str]:
        return {**self.study.software, **self.own_software}

    @property
    def settings(self) -> dict[str, Key]:
        return {**self.study.settings, **self.own_settings}

    @property
    def version(self) -> str:
        return self.source.version or self.study.version

    @property
    def url(self) -> str | None:
        return self.source.url or self.study.url

    def citation(self) -> str:
        """The table's source in one line: study, version, where in it."""
        return f"{self.study.title} ({self.study.authors}; {self.version}), {self.source.location}"

    def values(self) -> list[Published]:
        """Every value of the table, each with its unit, source and merged keys."""
        found = []
        for row in self.rows:
            for column, cell_values in zip(self.columns, row.cells):
                for cell in cell_values:
                    keys: dict[str, Key] = {**self.keys, **row.keys, **column.keys, **cell.keys}
                    if "nodes" in keys and "gpus_per_node" in keys:
                        keys["gpus"] = int(keys["nodes"]) * int(keys["gpus_per_node"])
                    marks = column.footnotes + row.footnotes + cell.footnotes
                    found.append(Published(
                        table=self.id, study=self.study.id, source=self.citation(),
                        quantity=str(column.quantity or row.quantity),
                        unit=str(column.unit or row.unit), keys=keys, value=cell.value,
                        text=cell.text, status=cell.status, label=cell.label,
                        row=" ".join(row.label), column=column.label,
                        footnotes=tuple(self.footnotes[m] for m in dict.fromkeys(marks)),
                        read_off_plot=self.source.read_off_plot, approx=cell.approx))
        return found


@dataclass(frozen=True)
class Published:
    """One published value with everything needed to compare a measurement against it."""

    table: str
    study: str
    source: str
    quantity: str
    unit: str
    keys: Mapping[str, Key]
    value: float | None
    text: str
    status: str
    label: str | None
    row: str
    column: str
    footnotes: tuple[str, ...]
    read_off_plot: bool
    approx: bool
