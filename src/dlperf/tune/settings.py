"""One configuration of a case: the values of the knobs a tune searched.

A configuration is a flat mapping, knob name to value: ``precision``, ``compile``,
``batch_size``, ``threads``, ``allocator`` (case fields) and ``option.NAME`` (one of the
backend's declared options, e.g. ``option.memory_format``). It is stored as JSON with every
trial, and ``--config best`` applies it to the case the command line describes: the same
function makes the tuned case in the search and in every later run, so what was measured is
what is reused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dlperf.errors import UsageError
from dlperf.spec import Case, SpecError
from dlperf.worker.support import format_options, parse_options

OPTION_PREFIX = "option."
CASE_FIELDS = ("precision", "compile", "batch_size", "threads", "allocator")
#: Knobs whose value changes what is computed, not only how fast: a throughput at another batch
#: size or precision is not the same training, so reports show bests with these fixed too.
CHANGES_MATH = ("batch_size", "precision")

Settings = Mapping[str, Any]


def of_case(case: Case, names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The values ``case`` has for the knobs ``names`` (its configuration in that space)."""
    options = parse_options(case.options)
    out: dict[str, Any] = {}
    for name in names:
        if name.startswith(OPTION_PREFIX):
            out[name] = options.get(name[len(OPTION_PREFIX):], "")
        else:
            out[name] = getattr(case, name)
    return out


def apply(case: Case, settings: Settings) -> Case:
    """``case`` with ``settings``; an option set to "" is removed (the backend's default).
    SpecError when the result is not a valid case."""
    fields: dict[str, Any] = {}
    options = parse_options(case.options)
    for name, value in settings.items():
        if name.startswith(OPTION_PREFIX):
            option = name[len(OPTION_PREFIX):]
            if value in ("", None):
                options.pop(option, None)
            else:
                options[option] = str(value)
        elif name in CASE_FIELDS:
            fields[name] = value
        else:
            raise SpecError(f"config: {name!r} is not a tunable setting; allowed: "
                            f"{', '.join(CASE_FIELDS)}, {OPTION_PREFIX}NAME")
    fields["options"] = format_options(options)
    return dataclasses.replace(case, **fields)


def apply_or_refuse(case: Case, settings: Settings, what: str) -> Case:
    """:func:`apply` for a command line: a configuration that no longer makes a valid case
    (a backend that dropped an option) is one line naming ``what``."""
    try:
        return apply(case, settings)
    except SpecError as error:
        raise UsageError(f"{what}: the stored configuration {describe(settings)} does not "
                         f"apply to this case: {error}") from None


def changed(settings: Settings, default: Settings) -> dict[str, Any]:
    """The knobs whose value differs from the default configuration's."""
    return {name: value for name, value in settings.items() if default.get(name) != value}


def changes_math(settings: Settings, default: Settings) -> list[str]:
    """Which knobs of ``settings`` change the mathematics against ``default``."""
    return [name for name in CHANGES_MATH
            if name in settings and settings[name] != default.get(name)]


def value_text(value: Any) -> str:
    if value is None:
        return "default"
    if value == "":
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def describe(settings: Settings) -> str:
    """``compile=on precision=amp-bf16 option.memory_format=contiguous``; sorted by name."""
    if not settings:
        return "(the defaults)"
    return " ".join(f"{name}={value_text(settings[name])}" for name in sorted(settings))
