"""Result objects read from outside this process (a JSON file, a stored row), checked before a
command reads them: every field a reader uses, of the type it uses it as. A malformed one is one
line naming the field (exit 2), never a traceback, and never a verdict of ``gate`` or
``compare``.

``RESULT`` holds the types every reader relies on (the store checks each stored result with
it and ``STORED``); ``SERIES`` (history, gate), ``PROFILED`` (explain) and ``OUTCOME`` (a
stored tune) add what those readers need, and :func:`throughput_problem` the throughputs a
comparison divides. A JSON file is read by :func:`parse_json`, a stored case made a
:class:`~dlperf.spec.Case` by :func:`case_of`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dlperf.errors import UsageError
from dlperf.numbers import is_number

if TYPE_CHECKING:
    from dlperf.spec import Case

MAX_RATE = 1e15  # samples/s: above this a number is corrupt, and ratios of it under/overflow
MAX_NUMBER = 1e300  # any other figure: beyond it, arithmetic on it leaves the floats
MAX_DEPTH = 64  # dlperf's results nest about 6 deep; deeper is not one, and recursion fails

Check = Callable[[Any], "str | None"]


def parse_json(data: bytes) -> Any:
    """The value of JSON ``data``; ValueError saying what it is not (UTF-8, JSON, shallow)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text (byte {error.start} is {data[error.start]:#04x})"
                         ) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    depth_problem = too_deep(value)
    if depth_problem:
        raise ValueError(depth_problem)
    return value


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why ``value`` nests deeper than any result (walked without recursion), or None. Only the
    containers are walked: a long list of numbers (a timeline's column, a window's step times)
    is looked at once, by the types it holds, where a walk of each number was most of reading
    a stored result."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return f"nested too deeply (more than {limit} levels)"
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if not children:
            continue
        if depth == limit:  # a child of it, whatever it is, is one level past the limit
            return f"nested too deeply (more than {limit} levels)"
        if any(issubclass(kind, (dict, list)) for kind in set(map(type, children))):
            stack.extend((child, depth + 1) for child in children
                         if isinstance(child, (dict, list)))
    return None


# -- checks of a present, non-null value: what is wrong with it, or None ---------------------

def text(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be text"


def key(value: Any) -> str | None:
    """Text, or a whole number (another tool's case key or error code), shown as text."""
    return None if isinstance(value, str) or whole(value) is None else "must be text"


def text_or_null(value: Any) -> str | None:
    return None if value is None else text(value)


def obj(value: Any) -> str | None:
    return None if isinstance(value, dict) else "must be an object"


def array(value: Any) -> str | None:
    return None if isinstance(value, list) else "must be a list"


def flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def whole(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2 ** 53
    return None if ok else "must be a whole number >= 0"


def number(value: Any) -> str | None:
    ok = is_number(value) and abs(value) <= MAX_NUMBER
    return None if ok else f"must be a finite number (not {_brief(value)})"


def amount(value: Any) -> str | None:
    ok = is_number(value) and 0 <= value <= MAX_NUMBER
    return None if ok else f"must be a finite number >= 0 (not {_brief(value)})"


def numbers(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be a list of numbers"
    if _plain_numbers(value):
        return None
    bad = next((v for v in value if v is not None and number(v)), None)
    return None if bad is None else f"must hold finite numbers (not {_brief(bad)})"


def _plain_numbers(values: list[Any]) -> bool:
    """True where every one of ``values`` is an int or a float (not a bool) within
    ±MAX_NUMBER, or None: what :func:`number` says of each, at the speed of builtins (the
    checks of long lists were most of reading a stored result). False says only "look at each"."""
    kinds = set(map(type, values))
    if not kinds <= {float, int, type(None)}:
        return False
    present = [v for v in values if v is not None] if type(None) in kinds else values
    try:  # a NaN or infinity fails isfinite; an int past a float's range raises
        return all(map(math.isfinite, present)) and \
            max(map(abs, present), default=0) <= MAX_NUMBER
    except OverflowError:
        return False


def number_or_null(value: Any) -> str | None:
    return None if value is None else number(value)


def columns(value: Any) -> str | None:
    """A timeline's columns: a list per name, of numbers (null: no sample), text for phases."""
    if not isinstance(value, dict):
        return "must be an object"
    for name, column in value.items():
        why = texts(column) if name == "phase" else numbers(column)
        if why:
            return f"column {name!r} {why}"
    return None


def texts(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "must be a list of text"
    return None


def interval(value: Any) -> str | None:
    ok = isinstance(value, list) and len(value) == 2 and all(number(v) is None for v in value)
    return None if ok else "must be [low, high]: two finite numbers"


def count_or_text(value: Any) -> str | None:
    if isinstance(value, str) or whole(value) is None:
        return None
    return "must be a whole number >= 0 or text"


def scalar(value: Any) -> str | None:
    """A setting's value: text, true/false, a finite number, or null (the default)."""
    if value is None or isinstance(value, (str, bool)) or number(value) is None:
        return None
    return f"must be text, true/false, a finite number or null (not {_brief(value)})"


def _brief(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 20:
        return "a number too large for a float"
    return repr(value)[:40]


@dataclasses.dataclass(frozen=True)
class Items:
    """A list of objects, each with these fields."""

    fields: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Set:
    """``check``, and null is not allowed either (a field dlperf never writes as null)."""

    check: "Check | Items | Values"


@dataclasses.dataclass(frozen=True)
class Values:
    """An object whose every value passes ``check`` (named ``field.key``)."""

    check: Check


#: A field: its dotted path, its check (or Set, Items, Values), and whether it must be there
#: (then not null either). A parent comes before its children.
Field = tuple[str, "Check | Set | Items | Values", bool]

# the whole-number fields dlperf never stores as null (`dlperf external`'s records leave the
# others null)
_CASE_SET = ("devices", "nnodes", "repeats", "seed")

#: a profile block's fields, of their types where present (worker/profile.py writes them)
_PROFILE: tuple[Field, ...] = (
    ("profile.tool", obj, False), ("profile.tool.name", text, False),
    ("profile.tool.version", text, False), ("profile.tool.note", text, False),
    ("profile.steps", whole, False), ("profile.step_s", Set(amount), False),
    ("profile.measured_step_s", amount, False), ("profile.overhead", number, False),
    ("profile.coverage", amount, False), ("profile.categories", Values(amount), False),
    ("profile.counts", Values(amount), False), ("profile.trace", obj, False),
    ("profile.trace.path", text, False), ("profile.unavailable", text, False),
    ("profile.error", text, False), ("profile.repeats_step_s", numbers, False),
    ("profile.top_ops", Items((("name", text, True), ("category", text, True),
                               ("s_per_step", amount, True), ("calls_per_step", amount, True))),
     False),
    ("profile.unmapped", Items((("name", text, True),)), False),
)


#: the check of a case field's value, by its annotation in dlperf.spec.Case
_BY_ANNOTATION: dict[str, Any] = {
    "str": Set(text), "int": whole, "int | None": whole, "bool": flag, "bool | None": flag,
    "float": amount, "Mapping[str, Any]": obj, "int | str": count_or_text}


def _case(prefix: str) -> tuple[Field, ...]:
    """A stored case's fields (``Case.to_dict``, or `dlperf external`'s), under ``prefix``:
    each field of :class:`dlperf.spec.Case` checked by its declared type (a field whose type
    has no check here fails at import, so a new field cannot go unchecked)."""
    from dlperf.spec import Case

    fields = []
    for field in dataclasses.fields(Case):
        check = _BY_ANNOTATION[str(field.type)]
        if field.name in _CASE_SET:
            check = Set(check)
        fields.append((f"{prefix}{field.name}", check, False))
    return (*fields, (f"{prefix}external", obj, False))


CASE: tuple[Field, ...] = (("framework", text, True), ("model", text, True), *_case(""))

RESULT: tuple[Field, ...] = (
    ("case", obj, True), *_case("case."),
    ("run_id", whole, False), ("case_key", key, False), ("label", text, False),
    ("status", Set(text), False), ("error", key, False), ("unit", text, False),
    ("device", text, False), ("global_batch", whole, False),
    ("model", Set(obj), False), ("model.params", whole, False),
    ("throughput", obj, False),
    *((f"throughput.{name}", number, False) for name in ("median", "mean", "min", "max", "iqr")),
    ("throughput.cv", amount, False), ("throughput.ci95", interval, False),
    ("throughput.n", Set(whole), False), ("throughput.repeats", numbers, False),
    ("latency_ms", obj, False),
    *((f"latency_ms.{name}", amount, False) for name in ("mean", "p50", "p90", "p95", "p99",
                                                          "p99_9", "min", "max")),
    ("latency_ms.n", whole, False), ("latency_ms.repeats", obj, False),
    ("latency_ms.repeats", Values(numbers), False), ("iteration_ms", amount, False),
    ("timings", obj, False),
    *((f"timings.{name}", numbers, False) for name in ("build_s", "first_step_s", "warmup_s",
                                                       "window_s", "wall_s")),
    ("memory", obj, False), ("memory.peak_host_bytes", whole, False),
    ("memory.peak_device_bytes", whole, False), ("flops", obj, False),
    *((f"flops.{name}", amount, False) for name in ("per_sample", "achieved_per_s",
                                                     "peak_per_s", "mfu")),
    ("roofline", obj, False),
    *((f"roofline.{name}", amount, False) for name in (
        "flops_per_step", "bytes_per_step", "intensity", "achieved_flops_per_s",
        "peak_flops_per_s", "bandwidth_bytes_per_s", "ridge", "roof_flops_per_s", "of_roof",
        "step_s")),
    ("roofline.bound", text, False), ("roofline.bandwidth_source", text, False),
    ("roofline.roof_note", text, False),
    ("monitor", obj, False), ("timeline", obj, False),
    ("timeline.summary", Values(number_or_null), False), ("timeline.median_repeat", whole, False),
    ("timeline.window_means", array, False), ("timeline.median", obj, False),
    ("timeline.median.columns", columns, False), ("timeline.median.points", whole, False),
    ("timeline.median.phases", Set(Items((("name", text, True), ("start", number, True),
                                          ("end", number, True)))), False),
    ("server", obj, False), ("profile", obj, False), *_PROFILE,
    ("data", obj, False), ("warnings", texts, False),
    ("env", obj, False), ("env.cpu", obj, False), ("env.cpu.flags", texts, False),
    ("env.memory_bytes", whole, False), ("env.libraries", Values(text_or_null), False),
    ("env.git", obj, False), ("env.git.commit", text, False),
    ("env.gpus", Items((("name", text, False), ("driver", text, False))), False),
    ("env.worker", obj, False), ("env.worker.thread_variables", Values(text_or_null), False),
    ("env.worker.device", obj, False),
    ("env.worker.device.kind", text, False), ("env.worker.device.index", whole, False),
    ("env.worker.device.name", text, False), ("env.worker.framework", obj, False),
    ("env.worker.framework.device", text, False),
    ("environment", obj, False), ("environment.name", text, False),
    ("environment.framework_version", text, False), ("environment.label", text, False),
    ("launch", obj, False), ("config", obj, False),
    ("ranks", array, False), ("host", array, False),
    ("speedup", amount, False), ("scaling_efficiency", amount, False),
)

#: a stored result: dlperf wrote it, so its case names a framework and a model (a result file
#: compare reads may come from another tool)
STORED: tuple[Field, ...] = RESULT + (("case.framework", text, True),
                                      ("case.model", text, True), ("label", text, True),
                                      ("status", text, True))

#: history and gate: the environment and version a point is shown and selected by
SERIES: tuple[Field, ...] = (
    ("case.framework", text, True), ("env.worker.framework.version", text, False),
)

#: explain: what it reads of the profile block (present, with categories: checked first)
PROFILED: tuple[Field, ...] = (
    ("profile.tool", obj, True), ("profile.step_s", amount, True),
    ("profile.measured_step_s", amount, True), ("profile.categories", obj, True),
)

_CHOSEN = (("settings", obj, True), ("settings", Values(scalar), True),
           ("changed", obj, False), ("changes_math", texts, False),
           ("throughput", number, False), ("trial", whole, False), ("ab", obj, False),
           ("ab.ratio", number, False), ("ab.ci95", interval, False), ("ab.pairs", whole, False),
           ("ab.pairs_asked", whole, False), ("ab.verdict", text, False))

#: a tune's search space (``tune_studies.space``): each knob's values and why
SPACE: tuple[Field, ...] = (("knobs", Values(obj), False), ("batch_limit", whole, False))

#: a finished tune's outcome (``tune_studies.outcome``): what --config best and the report read
OUTCOME: tuple[Field, ...] = (
    ("knobs", obj, False), ("batch_limit", whole, False),
    ("default", obj, False), ("default.settings", obj, False),
    ("default.settings", Values(scalar), False), ("default.throughput", number, False),
    ("best", obj, False), *((f"best.{path}", check, need) for path, check, need in _CHOSEN),
    ("best_fixed", obj, False),
    *((f"best_fixed.{path}", check, need) for path, check, need in _CHOSEN),
    ("search_s", amount, False), ("confirm_s", amount, False), ("budget_s", amount, False),
    ("trials", obj, False), ("trials", Values(whole), False), ("device", text, False),
    ("unit", text, False),
)


def _get(item: dict[str, Any], path: str) -> tuple[bool, bool, Any]:
    """(whether the field's parent object is there, whether the field is, its value)."""
    *parents, name = path.split(".")
    value: Any = item
    for parent in parents:
        value = value.get(parent) if isinstance(value, dict) else None
    if not isinstance(value, dict):
        return False, False, None
    return True, name in value, value.get(name)


def problem(item: Any, fields: tuple[Field, ...], prefix: str = "") -> str | None:
    """What is wrong with ``item`` for a reader of ``fields`` (the first field that is), naming
    the field; None when nothing is."""
    if not isinstance(item, dict):
        return f"is {_kind(item)}, not a result object"
    for path, check, required in fields:
        parent, found, value = _get(item, path)
        name = prefix + path
        if not parent:  # the parent's own entry says what is wrong with it, if anything
            continue
        if not found:
            if required:
                return f"'{name}' is missing"
            continue
        if value is None and not required and not isinstance(check, Set):
            continue
        why = _each(name, value, check.check if isinstance(check, Set) else check)
        if why:
            return why
    return None


def _each(name: str, value: Any, check: Check | Items | Values) -> str | None:
    if isinstance(check, Items):
        if not isinstance(value, list):
            return f"'{name}' must be a list"
        for index, element in enumerate(value):
            why = (problem(element, check.fields, f"{name}[{index}].")
                   if isinstance(element, dict) else f"'{name}[{index}]' must be an object")
            if why:
                return why
        return None
    if isinstance(check, Values):
        if not isinstance(value, dict):
            return f"'{name}' must be an object"
        for key, element in value.items():
            why = check.check(element)
            if why:
                return f"'{name}.{key}' {why}"
        return None
    why = check(value)
    return f"'{name}' {why}" if why else None


def _kind(value: Any) -> str:
    return {"int": "a number", "float": "a number", "str": "text", "bool": "a boolean",
            "NoneType": "null", "list": "a list"}.get(type(value).__name__, "a value")


def _rate_problem(value: Any, allow_none: bool) -> str | None:
    if value is None:
        return None if allow_none else "missing"
    if not is_number(value) or not 0 < value <= MAX_RATE:
        return f"{_brief(value)} is not a throughput in (0, {MAX_RATE:g}]"
    return None


def throughput_problem(item: dict[str, Any]) -> str | None:
    """The throughputs a comparison divides: an ok result's median, and every repeat, in
    (0, MAX_RATE]; a failed result may have none."""
    if "throughput" not in item:
        return "needs 'throughput'"
    throughput = item["throughput"]
    if throughput is None:
        return None if item.get("status") != "ok" else "'throughput' is null on an ok result"
    if not isinstance(throughput, dict):
        return "'throughput' must be an object"
    why = _rate_problem(throughput.get("median"), allow_none=item.get("status") != "ok")
    if why:
        return f"throughput.median {why}"
    repeats = throughput.get("repeats")
    if repeats is not None:
        if not isinstance(repeats, list):
            return "throughput.repeats must be a list"
        for value in repeats:
            why = _rate_problem(value, allow_none=False)
            if why:
                return f"throughput.repeats: {why}"
    return None


def result_problem(item: Any, *more: tuple[Field, ...]) -> str | None:
    """The throughputs a comparison divides (:func:`throughput_problem`), then :func:`problem`
    over ``RESULT`` and ``more``."""
    why = problem(item, ()) or throughput_problem(item)
    for fields in (RESULT, *more):
        why = why or problem(item, fields)
    return why


def case_of(data: Any) -> "Case":
    """The :class:`~dlperf.spec.Case` a stored case object describes; UsageError naming the
    field that keeps it from being one (missing, or refused by the spec)."""
    from dlperf.spec import Case, SpecError  # the spec imports the catalogue: only when needed

    if not isinstance(data, dict):
        raise UsageError("'case' must be an object")
    for field in dataclasses.fields(Case):
        needed = field.default is dataclasses.MISSING and \
            field.default_factory is dataclasses.MISSING
        if needed and field.name not in data:
            raise UsageError(f"'case.{field.name}' is missing")
    try:
        return Case.from_dict(data)
    except SpecError as error:
        raise UsageError(f"case: {error}") from None
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as error:
        raise UsageError(f"case: not a case dlperf can read ({type(error).__name__}: "
                         f"{error})") from None
