"""What varies among a section's results, and the words a report names it by.

A report shows what its database can answer: a comparison figure is titled by what varies among
its bars, a summary column is there because something varies (a ratio of precisions, a speedup
over devices), and two results are compared only when they differ along what is being compared
and in nothing else (:func:`match_key`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dlperf.results.codec import case_with_defaults, read_result
from dlperf.results.model import ResultLike
from dlperf.scaling import config
from dlperf.spec import environment_name, frameworks, support

#: beside the baseline's fields (dlperf.scaling.config): what else makes two results two
#: measurements of different things (how many devices, which engine, which label)
EXTRA_FIELDS = ("devices", "nnodes", "launcher", "controller", "run_label", "link")
CONFIG = "config"  # not a case field: the tune configuration a result ran with (``config.which``)
R = TypeVar("R", bound=ResultLike)


def field(result: ResultLike, name: str) -> Any:
    """A case field of ``result`` as its default fills it; ``config`` is the tune config's name."""
    typed = read_result(result)
    if name == CONFIG:
        return typed.config_which or ""
    if name == "compile":
        return bool(typed.case["compile"])
    value = typed.case.get(name)
    return case_with_defaults({}).get(name) if value is None and name in EXTRA_FIELDS else value


@dataclass(frozen=True)
class Axis:
    """One thing a report can vary: its name in a title and the fields it is made of."""

    name: str
    fields: tuple[str, ...]

    def value(self, result: ResultLike) -> str:
        return json.dumps([field(result, name) for name in self.fields], sort_keys=True,
                          default=str)

    def describe(self, result: ResultLike) -> str:
        """The result's value along this axis in words: ``amp-bf16``, ``torch.compile``."""
        typed = read_result(result)
        framework = str(typed.case.get("framework"))
        if self.name == "versions":
            env, label = field(result, "env"), field(result, "run_label")
            return environment_name(framework, env) + (f" label {label}" if label else "")
        if self.name == "compile settings":
            compiled = field(result, "compile")
            if framework in frameworks():
                return support(framework).mode(compiled)
            return "compiled" if compiled else "eager"
        if self.name == "settings":
            words = [f"{name} {field(result, name)}" for name in ("options", "allocator",
                                                                   CONFIG)
                     if field(result, name)]
            if field(result, "launcher") != field({}, "launcher"):
                words.append(f"{field(result, 'launcher')} · {field(result, 'controller')}")
            return " ".join(words) or "defaults"
        if self.name == "batch sizes":
            return f"batch {typed.case.get('batch_size')}"
        if self.name == "device counts":
            count = typed.devices
            return f"{count} device" + ("s" if count > 1 else "")
        return str(field(result, self.fields[0]))


FRAMEWORKS = Axis("frameworks", ("framework",))
VERSIONS = Axis("versions", ("env", "run_label"))
COMPILE = Axis("compile settings", ("compile",))
SETTINGS = Axis("settings", ("options", "allocator", "launcher", "controller", CONFIG))
PRECISIONS = Axis("precisions", ("precision",))
BATCH = Axis("batch sizes", ("batch_size",))
DEVICE_COUNTS = Axis("device counts", ("devices", "nnodes"))
AXES = (FRAMEWORKS, VERSIONS, COMPILE, SETTINGS, PRECISIONS, BATCH, DEVICE_COUNTS)
#: what tells a summary row from another (beside the device it ran on): a row is a framework
#: in one mode, environment, label and set of settings
ROW = (FRAMEWORKS, VERSIONS, COMPILE, SETTINGS)


def ok(results: Sequence[R]) -> list[R]:
    """The results with a throughput: only they can vary in a figure or a ratio."""
    return [r for r in results if read_result(r).median is not None]


def varying(results: Sequence[ResultLike], axes: tuple[Axis, ...] = AXES) -> list[Axis]:
    """The axes along which the successful ``results`` take more than one value."""
    shown = ok(results)
    return [axis for axis in axes if len({axis.value(r) for r in shown}) > 1]


def differ(a: ResultLike, b: ResultLike, axes: tuple[Axis, ...] = AXES) -> list[Axis]:
    """The axes along which two results differ."""
    return [axis for axis in axes if axis.value(a) != axis.value(b)]


def names(a: ResultLike, b: ResultLike) -> tuple[str, str]:
    """The shortest names that tell two results apart: their values where they differ."""
    along = differ(a, b) or [VERSIONS]
    return (" ".join(axis.describe(a) for axis in along),
            " ".join(axis.describe(b) for axis in along))


def title(axes: list[Axis]) -> str:
    """``Frameworks and precisions``: a list of axes as a title's subject."""
    words = [axis.name for axis in axes]
    text = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return text[:1].upper() + text[1:]


def match_key(result: ResultLike, free: tuple[Axis, ...]) -> str:
    """Everything that makes ``result`` the measurement it is (the baseline's fields, the device
    it resolved to, the device count, engine and label) less the fields of the ``free`` axes:
    two results of one key differ along those axes only, so their ratio is about them."""
    loose = {name for axis in free for name in axis.fields}
    out = {name: value for name, value in config(result).items() if name not in loose}
    out.update({name: field(result, name) for name in (*EXTRA_FIELDS, CONFIG)
                if name not in loose})
    return json.dumps(out, sort_keys=True, default=str)
