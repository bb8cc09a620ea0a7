"""The ``dlperf run`` command line that measures a stored case again: what ``dlperf gate``
prints for a failing case, and what its ``--remeasure`` hands to ``dlperf ab``.

It is the inverse of ``commands._flags.case_from_args``: every field that makes the case what
it is becomes its flag; knobs only where they differ from the model's defaults; the
environment as ``--env`` or ``--python`` and the label as ``--label``. Repeats, the database and
the JSON file are left to the caller.
"""

from __future__ import annotations

import shlex
from typing import Any

from dlperf import models
from dlperf.errors import UsageError
from dlperf.report import reading
from dlperf.spec import VERSION_ENV
from dlperf.worker import steady


def run_flags(case: dict[str, Any]) -> list[str]:
    """``run`` and the flags of ``case`` (a stored case dict), without --repeats/--db/--json;
    one line naming the field that keeps it from being a case."""
    c = reading.case_of(case)
    if c.scenario != "offline":
        raise UsageError(f"a {c.scenario} inference case ({c.label()}) is measured by `dlperf "
                         f"infer --scenario {c.scenario}`, not by `dlperf run`")
    flags = ["run", "--framework", c.framework, "--model", c.model, "--task", c.task,
             "--batch-size", str(c.batch_size), "--precision", c.precision,
             "--compile" if c.compile else "--no-compile", "--device", c.device]
    if c.devices != 1:
        flags += ["--devices", str(c.devices)]
    if c.link:  # a shaped link exists only between emulated hosts: emulate them again
        flags += ["--emulate-hosts", str(c.nnodes), "--link", c.link]
    elif c.nnodes != 1:
        flags += ["--nnodes", str(c.nnodes)]
    if c.threads is not None:
        flags += ["--threads-per-process", str(c.threads)]
    defaults = models.get(c.model).defaults
    for name, value in sorted(c.knobs.items()):
        if value is not None and defaults.get(name) != value:
            flags += ["--knob", f"{name}={value}"]
    flags += ["--warmup-steps", str(c.warmup_steps)]
    if c.warmup_steps == "auto" and c.warmup_max_steps != steady.MAX_STEPS:
        flags += ["--warmup-max-steps", str(c.warmup_max_steps)]
    flags += ["--steps", str(c.steps)]
    if c.min_duration_s:
        flags += ["--min-duration", format(c.min_duration_s, "g")]
    if c.seed:
        flags += ["--seed", str(c.seed)]
    if c.launcher != "native":
        flags += ["--launcher", c.launcher, "--controller", c.controller]
    for option in filter(None, c.options.split(",")):
        flags += ["--option", option]
    if c.allocator:
        flags += ["--allocator", c.allocator]
    if c.data != "synthetic":
        flags += ["--data", c.data, "--loader", c.loader]
        if c.loader_workers is not None:
            flags += ["--loader-workers", str(c.loader_workers)]
        if c.data_only:
            flags.append("--data-only")
        if c.cold_cache:
            flags.append("--cold-cache")
    if c.env:
        flags += ["--env" if VERSION_ENV.fullmatch(c.env) else "--python", c.env]
    if c.run_label:
        flags += ["--label", c.run_label]
    return flags


def command_line(case: dict[str, Any], repeats: int | None = None) -> str:
    """The whole shell command, quoted."""
    flags = run_flags(case)
    if repeats:
        flags += ["--repeats", str(repeats)]
    return shlex.join(["dlperf", *flags])
