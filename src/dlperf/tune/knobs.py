"""The search space of a tune: what the backend declares it can honour, and nothing else.

Every knob comes from a declaration: the precisions and compile modes in the backend's
``SUPPORT`` for the device and task, its declared ``options`` (each value with the backend's own
reason), the host's cores (threads per process), the allocators installed on the host, and batch
sizes up to what ``capacity`` found (when the database holds a search) or 4x the given batch.
A knob with one possible value is not a knob. Each says why it may help, which ``dlperf tune``
prints before it searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.worker.cpus import available_cpus
from dlperf.errors import UsageError
from dlperf.host import allocators
from dlperf.spec import Case, expected_device, support
from dlperf.tune.settings import CHANGES_MATH, OPTION_PREFIX
from dlperf.worker.support import parse_options

BATCH_GROWTH = (1, 2, 4)  # multiples of the given batch searched without a capacity bound
DEFAULT = "default"  # how a value that leaves the choice to the framework is shown


@dataclass(frozen=True)
class Knob:
    """One searched setting: its values (the first is the case's own) and why it may help."""

    name: str
    values: tuple[Any, ...]
    why: str

    @property
    def changes_math(self) -> bool:
        return self.name in CHANGES_MATH


def _first(own: Any, values: Sequence[Any]) -> tuple[Any, ...]:
    """The case's own value first (the default configuration), then the others in order."""
    return (own, *[value for value in values if value != own])


def thread_counts(cores: int) -> list[int | None]:
    """None (the framework's own choice), one thread, powers of two, and every core."""
    counts: list[int | None] = [None, 1]
    power = 2
    while power < cores:
        counts.append(power)
        power *= 2
    if cores > 1:
        counts.append(cores)
    return counts


def batch_sizes(batch: int, limit: int | None) -> list[int]:
    """The given batch and its multiples, up to ``limit`` (the largest size capacity ran)."""
    if limit is None:
        return [batch * factor for factor in BATCH_GROWTH]
    sizes = [size for size in (batch * factor for factor in (1, 2, 4, 8, 16)) if size <= limit]
    if limit not in sizes and limit > batch:
        sizes.append(limit)
    return sizes or [batch]


def space(case: Case, batch_limit: int | None = None) -> list[Knob]:
    """Every knob the backend of ``case`` declares for its device and task, in a fixed order."""
    declared = support(case.framework)
    kind = expected_device(case)
    knobs: list[Knob] = []
    precisions = declared.precisions.get(kind, {}).get(case.task, ())
    if case.precision in precisions:
        knobs.append(Knob("precision", _first(case.precision, precisions),
                          f"{case.framework} declares these {case.task} precisions on {kind}: "
                          "lower precisions halve memory traffic and use bf16/fp16 units where "
                          "the hardware has them (changes the mathematics)"))
    modes = declared.modes_for(case.task)
    if len(modes) == 2:
        knobs.append(Knob("compile", _first(bool(case.compile), modes),
                          f"{declared.modes[False]} or {declared.modes[True]}: a compiled step "
                          "fuses operations and drops Python overhead, at a start-up cost"))
    own_options = parse_options(case.options)
    for name in sorted(declared.options):
        option = declared.options[name]
        if not option.applies_to(case.model):
            continue
        knobs.append(Knob(OPTION_PREFIX + name,
                          _first(own_options.get(name, ""), ("", *option.values)),
                          option.help))
    if kind == "cpu":
        knobs.append(Knob("threads", _first(case.threads, thread_counts(available_cpus())),
                          "threads per process (OMP/MKL and the framework's intra-op pool): "
                          "fewer threads can avoid oversubscription and memory-bandwidth "
                          "contention on a small machine"))
    found = sorted(allocators.available())
    if found:
        own = getattr(case, "allocator", "")
        knobs.append(Knob("allocator", _first(own, ["", *found]),
                          "the process's malloc (LD_PRELOAD): training allocates and frees "
                          "large tensors every step; jemalloc and tcmalloc keep them in "
                          "per-thread caches instead of returning them to the system"))
    if case.scenario == "offline":
        knobs.append(Knob("batch_size", _first(case.batch_size,
                                               batch_sizes(case.batch_size, batch_limit)),
                          "a larger batch amortises per-step overhead and gives kernels larger "
                          "matrices (changes the mathematics; bounded by what capacity found)"
                          if batch_limit else
                          "a larger batch amortises per-step overhead and gives kernels larger "
                          "matrices (changes the mathematics; up to 4x: run `dlperf capacity` "
                          "into the same --db to search up to the largest that fits)"))
    return [knob for knob in knobs if len(knob.values) > 1]


def restrict(knobs: list[Knob], names: Sequence[str], framework: str) -> list[Knob]:
    """Only the knobs named (``--search``); a name the backend does not declare is refused."""
    if not names:
        return knobs
    known = {knob.name: knob for knob in knobs}
    for name in names:
        if name not in known:
            raise UsageError(f"--search: {name!r} is not a knob {framework} declares here; its "
                             f"knobs: {', '.join(known) or 'none'}")
    return [known[name] for name in known if name in names]


def fixed_math(knobs: list[Knob]) -> list[Knob]:
    """The space with batch size and precision held at the case's own (like-for-like bests)."""
    return [knob for knob in knobs if not knob.changes_math]


def left_out(case: Case, knobs: list[Knob]) -> list[str]:
    """The pairs of searched values the backend declares it cannot run together (an option
    value that runs in some precisions only), each with the backend's reason."""
    declared = support(case.framework)
    by_name = {knob.name: knob for knob in knobs}
    precisions = by_name["precision"].values if "precision" in by_name else (case.precision,)
    lines = []
    for knob in knobs:
        if not knob.name.startswith(OPTION_PREFIX):
            continue
        option = declared.options[knob.name[len(OPTION_PREFIX):]]
        for value in knob.values:
            for precision in precisions:
                why = option.precision_refusal(value, precision) if value else None
                if why is not None:
                    lines.append(f"{knob.name}={value} with precision {precision}: {why}")
    return lines
