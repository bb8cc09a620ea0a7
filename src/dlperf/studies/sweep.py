"""Sweep files: a YAML matrix of cases, validated with file and line before anything runs.

A sweep file names defaults, a ``matrix`` whose cartesian product gives the cases, ``exclude``
entries that drop combinations, ``include`` entries that add single cases and an ``on_oom``
policy. Field names are those of :class:`dlperf.spec.Case` (``dlperf run``'s flags, with ``_``
or ``-``), plus model knobs such as ``image_size`` or ``seq_len`` at the top level.

Every error names the file, the line, the field and what is allowed, so a typo on line 40 of a
twelve-hour matrix is caught in a second, not after six hours.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dlperf import models
from dlperf.spec import Case, SpecError

TOP_LEVEL = ("name", "description", "defaults", "matrix", "exclude", "include", "on_oom",
             "order", "tune_db")
ON_OOM = ("halve", "search", "record")
# ``order:`` of the repeats. ``cases``: each case's repeats one after another, case after case;
# ``interleaved``: in rounds, one repeat of every case per round, so a drift of the host over the
# sweep (load, clocks, the neighbours of a VM) falls on every case alike instead of on the
# cases measured when it came (the cases' ratios, e.g. a speedup, are then compared at the same
# moments, as `dlperf ab` does for two)
ORDERS = ("cases", "interleaved")
CASE_FIELDS = tuple(f.name for f in dataclasses.fields(Case))
REQUIRED = ("framework", "model", "batch_size")
ALIASES = {"timeout": "timeout_s"}
# Not a case field: which configuration to measure the case in. ``default``: as written;
# ``best`` / ``best-fixed``: what the newest finished `dlperf tune` of the case found
# (:func:`with_configs`), read from ``tune_db:`` or the sweep's own --db.
CONFIG = "config"
CONFIGS = ("default", "best", "best-fixed")
# A matrix is a product: a few lines (or YAML aliases) can ask for millions of cases. Above this
# the file is refused with its count before a single case is built.
MAX_CASES = 10_000


def knob_names() -> tuple[str, ...]:
    """Every knob of every catalogue model: allowed at the top level of a case entry."""
    names: dict[str, None] = {}
    for model in models.names():
        names.update(dict.fromkeys(models.get(model).knobs))
    return tuple(names)


# case fields a sweep may not set, and why
NOT_IN_SWEEPS = {"plant_slowdown": "a calibration knob (benchmarks/calibration.py, `dlperf run "
                                   "--plant-slowdown`), never part of a sweep"}


def allowed_fields() -> tuple[str, ...]:
    return (tuple(f for f in CASE_FIELDS if f not in NOT_IN_SWEEPS) + (CONFIG,)
            + tuple(k for k in knob_names() if k not in CASE_FIELDS))


@dataclass(frozen=True)
class Value:
    """A value read from the file, with the line it came from and the part of the file."""

    value: Any
    line: int
    origin: str  # "defaults", "matrix", "include"


@dataclass(frozen=True)
class AnyOf:
    """An exclude entry's list: a combination matches when its value is any of these."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Refused:
    """A case asked in a tune's configuration (``config: best``) that has none: stored as an
    ``unsupported`` cell with the reason, under an identity of its own (never the default
    case's)."""

    case: Case
    which: str
    reason: str

    @property
    def key(self) -> str:
        return f"{self.case.key()}+config-{self.which}"

    @property
    def label(self) -> str:
        return f"{self.case.label()} · config {self.which}"


@dataclass
class Sweep:
    """A validated sweep: its cases in file order, duplicates merged."""

    name: str
    path: Path
    cases: list[Case]
    on_oom: str = "record"
    order: str = "cases"
    description: str = ""
    notes: list[str] = field(default_factory=list)
    # ``config:`` of each case that asks a tune's configuration, by its index in ``cases``,
    # until :func:`with_configs` replaces the case with the tuned one
    wants: dict[int, str] = field(default_factory=dict)
    tune_db: Path | None = None  # ``tune_db:``, relative to the sweep file's folder
    # after :func:`with_configs`: the marker each tuned case's result carries, by case key
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)


class _Reader:
    """Turns YAML nodes into values, raising SpecError with ``file:line:`` in front."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._loader = yaml.SafeLoader("")

    def error(self, node: yaml.Node | int, message: str) -> SpecError:
        line = node if isinstance(node, int) else node.start_mark.line + 1
        return SpecError(f"{self.path}:{line}: {message}")

    def scalar(self, node: yaml.Node, where: str) -> Any:
        if isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{where}: a list is not allowed here; one value belongs "
                                   f"here (lists of values go under `matrix:`)")
        if isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{where}: a mapping is not allowed here; one value belongs "
                                   f"here")
        return self.construct(node, where)

    def construct(self, node: yaml.Node, where: str) -> Any:
        """The value of a scalar node; a tag the safe loader refuses (``!!python/name:``) or
        cannot apply (``!!int "abc"``) is an error at its line."""
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error)
            raise self.error(node, f"{where}: {' '.join(str(problem).split())}") from None
        except (ValueError, TypeError, OverflowError) as error:
            raise self.error(node, f"{where}: {node.value!r} is not a valid {node.tag} "
                                   f"({error})") from None

    def mapping(self, node: yaml.Node, where: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """(key, key node, value node) of a mapping node; duplicate keys are an error."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{where}: expected a mapping of field: value")
        seen: dict[str, int] = {}
        items: list[tuple[str, yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(key_node, f"{where}: field names are text")
            key = self.construct(key_node, where)
            if not isinstance(key, str):
                raise self.error(key_node, f"{where}: field names are text, got {key!r}")
            if key in seen:
                raise self.error(key_node, f"{where}: {key!r} given twice (first on line "
                                           f"{seen[key]})")
            seen[key] = key_node.start_mark.line + 1
            items.append((key, key_node, value_node))
        return items

    def sequence(self, node: yaml.Node, where: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{where}: expected a list")
        return list(node.value)

    def field_name(self, key: str, key_node: yaml.Node, where: str) -> str:
        name = ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        allowed = allowed_fields()
        if name in NOT_IN_SWEEPS:
            raise self.error(key_node, f"{where}: {key}: {NOT_IN_SWEEPS[name]}")
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.error(key_node, f"{where}: unknown field {key!r}{hint}; allowed: "
                                       + ", ".join(allowed))
        return name

    def fields(self, node: yaml.Node, where: str, origin: str,
               any_of: bool = False) -> dict[str, Value]:
        """A mapping of case fields with scalar values (``knobs`` may hold a mapping).

        With ``any_of`` (exclude entries) a value may be a list: any of its values matches.
        """
        out: dict[str, Value] = {}
        for key, key_node, value_node in self.mapping(node, where):
            if any_of and isinstance(value_node, yaml.SequenceNode):
                name = self.field_name(key, key_node, where)
                values = tuple(self.scalar(item, f"{where}.{name}") for item in value_node.value)
                out[name] = Value(AnyOf(values), value_node.start_mark.line + 1, origin)
                continue
            name = self.field_name(key, key_node, where)
            if name == "knobs":
                for knob, knob_node, knob_value in self.mapping(value_node, f"{where}.knobs"):
                    knob = knob.replace("-", "_")
                    if knob not in knob_names():
                        raise self.error(knob_node, f"{where}.knobs: unknown knob {knob!r}; "
                                                    f"allowed: {', '.join(knob_names())}")
                    out[knob] = Value(self.scalar(knob_value, f"{where}.knobs.{knob}"),
                                      knob_value.start_mark.line + 1, origin)
                continue
            out[name] = Value(self.scalar(value_node, f"{where}.{name}"),
                              value_node.start_mark.line + 1, origin)
        return out


def _read(path: Path) -> str:
    """The file as UTF-8 text; undecodable bytes are an error at their line."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SpecError(f"{path}: cannot read the sweep file ({error.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte {data[error.start]:#04x}); save "
                        f"the sweep file as UTF-8") from None


def _compose(path: Path) -> yaml.Node:
    text = _read(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError(f"{path}:{line}: not valid YAML: {error.problem}") from None
    except yaml.reader.ReaderError as error:  # a control character, or similar
        line = text[:max(error.position, 0)].count("\n") + 1
        what = (f" #x{error.character:04x}" if isinstance(error.character, int) else "")
        raise SpecError(f"{path}:{line}: not valid YAML: {error.reason}{what}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}:1: not valid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:
        raise SpecError(f"{path}:1: not valid YAML: nested too deeply") from None
    if node is None:
        raise SpecError(f"{path}:1: the sweep file is empty; it needs at least `matrix:` or "
                        f"`include:`")
    return node


def _value_of(name: str, raw: dict[str, Value], model: Any) -> Any:
    """The value a case has for ``name``: as written, else its default."""
    spec = models.CATALOGUE.get(model) if isinstance(model, str) else None
    if name == CONFIG:
        return raw[name].value if name in raw else "default"
    if name in raw:
        item = raw[name]
        if (name not in CASE_FIELDS and spec is not None and name not in spec.knobs
                and item.origin != "include"):
            return None  # a knob meant for the sweep's other models
        return item.value
    if name in CASE_FIELDS:
        default = next(f for f in dataclasses.fields(Case) if f.name == name).default
        return None if default is dataclasses.MISSING else default
    return spec.defaults.get(name) if spec is not None else None


def _matches(entry: dict[str, Value], raw: dict[str, Value]) -> bool:
    model = raw["model"].value if "model" in raw else None
    def hit(name: str, want: Any) -> bool:
        value = _value_of(name, raw, model)
        return value in want.values if isinstance(want, AnyOf) else value == want

    return all(hit(name, want.value) for name, want in entry.items())


def _build_case(reader: _Reader, raw: dict[str, Value], entry_line: int) -> Case:
    """A Case from merged fields; knobs from defaults/matrix apply only to models having them."""
    missing = [name for name in REQUIRED if name not in raw]
    if missing:
        raise reader.error(entry_line, f"{missing[0]}: no value; set it in `defaults:`, "
                                       f"`matrix:` or the `include:` entry")
    model = raw["model"].value
    model_knobs = models.get(model).knobs if model in models.CATALOGUE else ()
    data: dict[str, Any] = {}
    knobs: dict[str, Any] = {}
    for name, item in raw.items():
        if name == CONFIG:
            continue
        if name in CASE_FIELDS:
            data[name] = item.value
        elif name in model_knobs or item.origin == "include" or not model_knobs:
            knobs[name] = item.value
    data["knobs"] = knobs
    try:
        return Case.from_dict(data)
    except SpecError as error:
        message = str(error)
        name = message.split(":", 1)[0].strip()
        line = raw[name].line if name in raw else entry_line
        raise reader.error(line, message) from None
    except TypeError as error:  # a value of the wrong type deep inside validation
        raise reader.error(entry_line, f"invalid case: {error}") from None


def _combinations(matrix: list[tuple[str, list[Value]]]) -> Iterator[dict[str, Value]]:
    names = [name for name, _ in matrix]
    for values in itertools.product(*(vals for _, vals in matrix)):
        yield dict(zip(names, values))


Sections = dict[str, tuple[yaml.Node, yaml.Node]]  # a top-level key: (key node, value node)
Entries = list[tuple[int, dict[str, Value]]]  # exclude or include entries, with their lines


def load(path: str | Path) -> Sweep:
    """Read and validate a sweep file; raise SpecError ``file:line: field: ...`` on bad input."""
    path = Path(path)
    reader = _Reader(path)
    top = _sections(reader, _compose(path))
    name, description, on_oom = _header(reader, top, path.stem)
    order = _order(reader, top, on_oom)
    tune_db = _tune_db(reader, top, path)
    defaults: dict[str, Value] = {}
    if _given(top, "defaults"):
        defaults = reader.fields(top["defaults"][1], "defaults", "defaults")
    matrix, matrix_line = _matrix(reader, top)
    excludes = _entries(reader, top, "exclude", any_of=True)
    includes = _entries(reader, top, "include")
    if not matrix and not includes:
        raise reader.error(1, "the sweep defines no case: add `matrix:` or `include:`")
    _check_size(reader, matrix, matrix_line, len(includes))
    cases, notes, wants = _expand(reader, defaults, matrix, matrix_line, excludes, includes)
    return Sweep(name=name, path=path, cases=cases, on_oom=on_oom, order=order,
                 description=description, notes=notes, wants=wants, tune_db=tune_db)


def _order(reader: _Reader, top: Sections, on_oom: str) -> str:
    """``order:`` of the repeats (:data:`ORDERS`). Interleaved rounds cannot wait on a retry at
    another batch size (``on_oom: halve``/``search`` measure it in the case's place), so the two
    are refused together."""
    if not _given(top, "order"):
        return "cases"
    node = top["order"][1]
    order = reader.scalar(node, "order")
    if order not in ORDERS:
        raise reader.error(node, f"order: {order!r} is not one of {', '.join(ORDERS)}")
    if order == "interleaved" and on_oom != "record":
        raise reader.error(node, f"order: interleaved needs on_oom: record (a retry at another "
                                 f"batch size, on_oom: {on_oom}, runs in its case's place)")
    return order


def _tune_db(reader: _Reader, top: Sections, path: Path) -> Path | None:
    """``tune_db:``: the results file whose tunes ``config: best`` reads (default: the sweep's
    own --db); a relative path is relative to the sweep file's folder."""
    if not _given(top, "tune_db"):
        return None
    value = reader.scalar(top["tune_db"][1], "tune_db")
    if not isinstance(value, str) or not value.strip():
        raise reader.error(top["tune_db"][1], "tune_db: must be the path of a results file "
                                              "(a dlperf database holding `dlperf tune` studies)")
    found = Path(value).expanduser()
    return found if found.is_absolute() else path.parent / found


def _sections(reader: _Reader, root: yaml.Node) -> Sections:
    """The file's top-level sections; an unknown one is an error at its line."""
    top: Sections = {}
    for key, key_node, value_node in reader.mapping(root, "sweep"):
        if key not in TOP_LEVEL:
            close = difflib.get_close_matches(key, TOP_LEVEL, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise reader.error(key_node, f"unknown section {key!r}{hint}; allowed: "
                                         + ", ".join(TOP_LEVEL))
        top[key] = (key_node, value_node)
    return top


def _given(top: Sections, section: str) -> bool:
    """Whether ``section`` is in the file with a value (``exclude:`` alone counts as absent)."""
    return section in top and not _is_null(top[section][1])


def _header(reader: _Reader, top: Sections, stem: str) -> tuple[str, str, str]:
    """The sweep's name (default: the file's stem), description and on_oom policy."""
    name = stem
    if "name" in top:
        name = reader.scalar(top["name"][1], "name")
        if not isinstance(name, str) or not name.strip():
            raise reader.error(top["name"][1], "name: must be non-empty text")
    description = ""
    if "description" in top:
        description = str(reader.scalar(top["description"][1], "description") or "")
    on_oom = "record"
    if "on_oom" in top:
        on_oom = reader.scalar(top["on_oom"][1], "on_oom")
        if on_oom not in ON_OOM:
            raise reader.error(top["on_oom"][1], f"on_oom: {on_oom!r} is not one of "
                                                 f"{', '.join(ON_OOM)}")
    return name, description, on_oom


def _matrix(reader: _Reader, top: Sections) -> tuple[list[tuple[str, list[Value]]], int]:
    """The matrix's fields with their lists of values, and the line of ``matrix:`` (1 without
    one)."""
    matrix: list[tuple[str, list[Value]]] = []
    if not _given(top, "matrix"):
        return matrix, 1
    for key, key_node, value_node in reader.mapping(top["matrix"][1], "matrix"):
        field_name = reader.field_name(key, key_node, "matrix")
        if field_name == "knobs":
            raise reader.error(key_node, "matrix.knobs: list each knob under `matrix:` by "
                                         "name (e.g. `seq_len: [128, 512]`)")
        if not isinstance(value_node, yaml.SequenceNode):
            raise reader.error(value_node, f"matrix.{field_name}: expected a list of values "
                                           f"(e.g. [{reader.scalar(value_node, key)!r}]); "
                                           f"single values go under `defaults:`")
        items = [Value(reader.scalar(item, f"matrix.{field_name}"),
                       item.start_mark.line + 1, "matrix")
                 for item in value_node.value]
        if not items:
            raise reader.error(value_node, f"matrix.{field_name}: the list is empty")
        matrix.append((field_name, items))
    return matrix, top["matrix"][0].start_mark.line + 1


def _entries(reader: _Reader, top: Sections, section: str, any_of: bool = False) -> Entries:
    """The ``exclude`` or ``include`` entries, each with its line."""
    if not _given(top, section):
        return []
    return [(item.start_mark.line + 1,
             reader.fields(item, f"{section} entry", section, any_of=any_of))
            for item in reader.sequence(top[section][1], section)]


def _expand(reader: _Reader, defaults: dict[str, Value],
            matrix: list[tuple[str, list[Value]]], matrix_line: int, excludes: Entries,
            includes: Entries) -> tuple[list[Case], list[str], dict[int, str]]:
    """The cases in file order (the matrix's combinations less the excluded ones, then the
    includes), duplicates merged, the notes on what was dropped, and the ``config:`` of each
    case that asks a tune's configuration (by its index)."""
    cases: list[Case] = []
    wants: dict[int, str] = {}
    seen: set[tuple[str, str]] = set()
    excluded = dict.fromkeys(range(len(excludes)), 0)
    duplicates = 0

    def add(case: Case, raw: dict[str, Value]) -> None:
        nonlocal duplicates
        which = _config_of(reader, raw)
        if (case.key(), which) in seen:
            duplicates += 1
            return
        seen.add((case.key(), which))
        if which != "default":
            wants[len(cases)] = which
        cases.append(case)

    for combo in (list(_combinations(matrix)) if matrix else []):
        raw = {**defaults, **combo}
        hits = [i for i, (_, entry) in enumerate(excludes) if _matches(entry, raw)]
        for i in hits:
            excluded[i] += 1
        if not hits:
            add(_build_case(reader, raw, min((v.line for v in combo.values()),
                                             default=matrix_line)), raw)
    for line, entry in includes:
        raw = {**defaults, **entry}
        add(_build_case(reader, raw, line), raw)
    notes = [f"{reader.path}:{excludes[i][0]}: exclude entry matches no combination"
             for i, count in excluded.items() if count == 0]
    if duplicates:
        notes.append(f"{duplicates} duplicate case(s) merged (same fields once knobs that do "
                     f"not apply to a model are dropped)")
    return cases, notes, wants


def _config_of(reader: _Reader, raw: dict[str, Value]) -> str:
    """The case's ``config:`` (``default`` when not given); another value is an error at its
    line."""
    if CONFIG not in raw:
        return "default"
    item = raw[CONFIG]
    if item.value not in CONFIGS:
        raise reader.error(item.line, f"config: {item.value!r} is not one of "
                                      f"{', '.join(CONFIGS)}")
    return str(item.value)


def _check_size(reader: _Reader, matrix: list[tuple[str, list[Value]]], matrix_line: int,
                includes: int) -> None:
    """Count the combinations before building any: refuse a product above MAX_CASES."""
    total = includes
    product = 1
    for _, values in matrix:
        product *= len(values)
        if product > MAX_CASES:  # stop multiplying: the exact figure may be astronomically big
            break
    total += product if matrix else 0
    if total > MAX_CASES:
        sizes = " x ".join(f"{len(values)} {name}" for name, values in matrix)
        exact = 1
        for _, values in matrix:
            exact *= len(values)
        count = exact + includes if matrix else includes
        raise reader.error(matrix_line, f"matrix: {count:,} cases ({sizes}"
                                        + (f", + {includes} include" if includes else "")
                                        + f"); at most {MAX_CASES:,} per sweep file, split it")


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def halved(case: Case) -> Case | None:
    """The case to try after an out-of-memory failure, or None at batch size 1."""
    if case.batch_size <= 1:
        return None
    return dataclasses.replace(case, batch_size=case.batch_size // 2)


def with_configs(sweep: Sweep, db: str | Path) -> Sweep:
    """The sweep with each ``config: best`` (``best-fixed``) case in the configuration the newest
    finished tune of it found, read from ``tune_db:`` or else ``db`` (the sweep's own --db); a
    case with none becomes a refused cell with the reason, like a backend's refusal. A tuned case
    that is another case of the sweep is measured once (noted). Nothing to do without such
    cases, so calling it twice changes nothing."""
    if not sweep.wants:
        return sweep
    from dlperf.errors import UsageError
    from dlperf.store import Store
    from dlperf.studies import tuned

    source = sweep.tune_db or Path(db)
    cases: list[Case] = []
    configs = dict(sweep.configs)
    refused = list(sweep.refused)
    notes = list(sweep.notes)
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(Store(source, readonly=True)) if source.is_file() else None
        for index, case in enumerate(sweep.cases):
            which = sweep.wants.get(index)
            if which is None:
                cases.append(case)
                continue
            try:
                if store is None:
                    raise UsageError(f"config {which}: {source} does not exist; run `dlperf "
                                     f"tune --framework {case.framework} --model {case.model} "
                                     f"--db {source}` first")
                found = tuned.from_store(store, case, which, flag="config")
            except UsageError as error:
                refused.append(Refused(case, which, str(error)))
                notes.append(f"{case.label()}: no tuned configuration, stored as unsupported: "
                             f"{error}")
                continue
            # the tuned case may be one the sweep measures anyway (the tune found the default
            # best, say): one measurement, as that case
            others = [other for number, other in enumerate(sweep.cases)
                      if number != index and number not in sweep.wants]
            if any(other.key() == found.case.key() for other in cases + others):
                notes.append(f"{case.label()}: {found.line}; that is another case of the sweep "
                             f"(measured once, as that case)")
                continue
            configs[found.case.key()] = found.marker
            notes.append(f"{case.label()}: {found.line}")
            cases.append(found.case)
    return dataclasses.replace(sweep, cases=cases, wants={}, configs=configs, refused=refused,
                               notes=notes)
