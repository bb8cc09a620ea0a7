"""Reading a reference file: YAML checked against the schema, every error one line naming the
file and the field (``nvidia-mxnet-rn50.yaml: tables[3].rows[2].cells[4]: ...``).

Numbers keep their published spelling (22.50 is not 22.5 in a table shown as published), dates
stay text, and a cell is a number, ``"-"`` (nothing published), ``"OOM"``, a mapping with its own
label, keys and footnotes, or a list of those when one published cell holds several values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dlperf.errors import UsageError
from dlperf.reference.model import (CHOICES, DERIVED_KEYS, HARDWARE_REQUIRED, KEYS, QUANTITIES,
                                    UNITS, Cell, Column, Key, Row, Source, Study,
                                    Table)

SCHEMA = 1
ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
TABLE_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*$")
#: how a published cell that holds no number is written, and its status
WORDS = {"-": "none", "N/A": "none", "OOM": "oom"}


class ReferenceFileError(UsageError):
    """A reference file that does not match the schema: the message names file and field."""


class Number(float):
    """A float that remembers how it was written, so a table shows 22.50 as published."""

    text: str

    def __new__(cls, value: float, text: str) -> Number:
        number = super().__new__(cls, value)
        number.text = text
        return number


class _Loader(yaml.SafeLoader):
    """The safe loader, keeping each float's spelling and each date as text."""


def _float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Number:
    return Number(loader.construct_yaml_float(node), str(node.value))


def _text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(node.value)


_Loader.add_constructor("tag:yaml.org,2002:float", _float)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _text)


class _Fields:
    """One mapping of the file: typed getters that raise with the file and the field's path."""

    def __init__(self, file: str, where: str, data: Any, allowed: tuple[str, ...]) -> None:
        self.file, self.where = file, where
        if not isinstance(data, dict):
            raise self.error("", f"expected a mapping, got {type(data).__name__}")
        unknown = [name for name in data if name not in allowed]
        if unknown:
            raise self.error(str(unknown[0]), f"unknown field; allowed: {', '.join(allowed)}")
        self.data = data

    def path(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where and name else (self.where or name)

    def error(self, name: str, message: str) -> ReferenceFileError:
        return ReferenceFileError(f"reference file {self.file}: {self.path(name)}: {message}")

    def text(self, name: str, required: bool = True) -> str | None:
        value = self.data.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(name, "expected a non-empty text")
        return value

    def flag(self, name: str) -> bool:
        value = self.data.get(name)
        if not isinstance(value, bool):
            raise self.error(name, "expected true or false (it must be stated)")
        return value

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(name, "expected a list of texts")
        return tuple(value)

    def scalars(self, name: str) -> dict[str, Key]:
        """A free mapping of names to texts, integers, numbers or booleans (hardware,
        settings)."""
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.error(name, "expected a mapping")
        for key, item in value.items():
            if not isinstance(key, str) or not isinstance(item, (str, int, float, bool)):
                raise self.error(f"{name}.{key}", "expected a text, a number or true/false")
        return {key: (item.text if isinstance(item, Number) else item)
                for key, item in value.items()}

    def keys(self, name: str = "keys") -> dict[str, Key]:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.error(name, "expected a mapping of keys")
        for key, item in value.items():
            field = f"{name}.{key}"
            if key in DERIVED_KEYS:
                raise self.error(field, "derived (nodes x gpus_per_node); do not write it")
            if key not in KEYS:
                raise self.error(field, f"unknown key; allowed: {', '.join(KEYS)}")
            wanted = KEYS[key][0]
            if type(item) is not wanted:  # bool is an int: the exact type is checked
                raise self.error(field, f"expected {wanted.__name__}, got {item!r}")
            if key in CHOICES and item not in CHOICES[key]:
                raise self.error(field, f"{item!r} is not one of {', '.join(CHOICES[key])}")
        return dict(value)

    def vocabulary(self, name: str, words: Mapping[str, str], required: bool) -> str | None:
        value = self.data.get(name)
        if value is None and not required:
            return None
        if value not in words:
            raise self.error(name, f"{value!r} is not one of {', '.join(words)}")
        return str(value)

    def footnotes(self, known: Mapping[str, str], name: str = "footnotes") -> tuple[str, ...]:
        marks = tuple(str(mark) for mark in self.data.get(name, []))
        missing = [mark for mark in marks if mark not in known]
        if missing:
            raise self.error(name, f"footnote {missing[0]!r} is not in the table's footnotes "
                                   f"({', '.join(known) or 'none'})")
        return marks


def read(path: Path) -> tuple[Study, list[Table]]:
    """The study of one reference file and its tables, checked against the schema."""
    file = path.name
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except (OSError, yaml.YAMLError) as error:
        raise ReferenceFileError(f"reference file {file}: cannot be read: "
                                 f"{' '.join(str(error).split())}") from None
    top = _Fields(file, "", data, ("schema", "study", "tables"))
    if data.get("schema") != SCHEMA:
        raise top.error("schema", f"expected {SCHEMA}, got {data.get('schema')!r}")
    study = _study(file, data.get("study"))
    if file != f"{study.id}.yaml":
        raise top.error("study.id", f"the file of study {study.id!r} must be named "
                                    f"{study.id}.yaml")
    tables = data.get("tables")
    if not isinstance(tables, list) or not tables:
        raise top.error("tables", "expected a non-empty list of tables")
    return study, [_table(file, f"tables[{i}]", item, study) for i, item in enumerate(tables)]


def _study(file: str, data: Any) -> Study:
    fields = _Fields(file, "study", data, ("id", "title", "authors", "kind", "version", "date",
                                           "url", "seed", "notes", "hardware", "software",
                                           "settings"))
    study_id = str(fields.text("id"))
    if not ID.match(study_id):
        raise fields.error("id", "lower-case letters, digits, '.' and '-' only")
    return Study(id=study_id, title=str(fields.text("title")),
                 authors=str(fields.text("authors")), kind=str(fields.text("kind")),
                 version=str(fields.text("version")), date=str(fields.text("date")),
                 url=fields.text("url", required=False), seed=fields.text("seed", required=False),
                 notes=fields.texts("notes"), hardware=fields.scalars("hardware"),
                 software={k: str(v) for k, v in fields.scalars("software").items()},
                 settings=fields.scalars("settings"), file=file)


def _table(file: str, where: str, data: Any, study: Study) -> Table:
    fields = _Fields(file, where, data, ("id", "title", "source", "keys", "hardware", "software",
                                         "settings", "footnotes", "notes", "label_columns",
                                         "columns", "rows"))
    table_id = str(fields.text("id"))
    if not TABLE_ID.match(table_id) or not table_id.startswith(study.id + "/"):
        raise fields.error("id", f"expected {study.id}/NAME (lower-case letters, digits, '.', "
                                 f"'-')")
    footnotes = data.get("footnotes", {})
    if not isinstance(footnotes, dict) or not all(isinstance(v, str) and v
                                                  for v in footnotes.values()):
        raise fields.error("footnotes", "expected a mapping of mark -> text")
    footnotes = {str(mark): text for mark, text in footnotes.items()}
    hardware = {**study.hardware, **fields.scalars("hardware")}
    missing = [name for name in HARDWARE_REQUIRED if name not in hardware]
    if missing:
        raise fields.error("hardware", f"must state {', '.join(missing)} (here or in the study)")
    software = fields.scalars("software")
    if not {**study.software, **software}:
        raise fields.error("software", "must state the software versions (here or in the study)")
    labels = fields.texts("label_columns")
    keys = fields.keys()
    columns = data.get("columns")
    if not isinstance(columns, list) or not columns:
        raise fields.error("columns", "expected a non-empty list of value columns")
    parsed = tuple(_column(file, f"{where}.columns[{i}]", c, footnotes)
                   for i, c in enumerate(columns))
    ids = [c.id for c in parsed]
    if len(set(ids)) != len(ids):
        raise fields.error("columns", f"column ids repeat: {ids}")
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise fields.error("rows", "expected a non-empty list of rows")
    return Table(id=table_id, title=str(fields.text("title")), study=study,
                 source=_source(file, f"{where}.source", data.get("source")), keys=keys,
                 label_columns=labels, columns=parsed,
                 rows=tuple(_row(file, f"{where}.rows[{i}]", r, labels, parsed, keys, footnotes)
                            for i, r in enumerate(rows)),
                 footnotes=footnotes, notes=fields.texts("notes"),
                 own_hardware=fields.scalars("hardware"),
                 own_software={k: str(v) for k, v in software.items()},
                 own_settings=fields.scalars("settings"))


def _source(file: str, where: str, data: Any) -> Source:
    fields = _Fields(file, where, data, ("location", "read_off_plot", "version", "url"))
    return Source(location=str(fields.text("location")), read_off_plot=fields.flag("read_off_plot"),
                  version=fields.text("version", required=False),
                  url=fields.text("url", required=False))


def _column(file: str, where: str, data: Any, footnotes: Mapping[str, str]) -> Column:
    fields = _Fields(file, where, data, ("id", "label", "quantity", "unit", "keys", "footnotes"))
    column_id = str(fields.text("id"))
    quantity = fields.vocabulary("quantity", QUANTITIES, required=False)
    unit = fields.vocabulary("unit", UNITS, required=False)
    if (quantity is None) != (unit is None):
        raise fields.error("unit" if unit is None else "quantity",
                           "a column states both its quantity and its unit, or neither (then "
                           "every row states them)")
    return Column(id=column_id, label=str(fields.text("label")), quantity=quantity, unit=unit,
                  keys=fields.keys(), footnotes=fields.footnotes(footnotes))


def _row(file: str, where: str, data: Any, labels: tuple[str, ...], columns: tuple[Column, ...],
         table_keys: Mapping[str, Key], footnotes: Mapping[str, str]) -> Row:
    fields = _Fields(file, where, data, ("label", "keys", "cells", "footnotes", "quantity",
                                         "unit"))
    label = fields.texts("label")
    if len(label) != len(labels):
        raise fields.error("label", f"expected {len(labels)} texts, one per label column "
                                    f"({', '.join(labels)})")
    keys = fields.keys()
    quantity = fields.vocabulary("quantity", QUANTITIES, required=False)
    unit = fields.vocabulary("unit", UNITS, required=False)
    for column in columns:
        if (column.quantity or quantity) is None or (column.unit or unit) is None:
            raise fields.error("unit", f"column {column.id!r} states no quantity and unit, so "
                                       f"the row must")
        for key, value in {**table_keys, **column.keys}.items():
            if key in keys and keys[key] != value:
                raise fields.error(f"keys.{key}", f"{keys[key]!r} contradicts {value!r} of the "
                                                  f"table or column {column.id!r}")
    cells = data.get("cells")
    if not isinstance(cells, list) or len(cells) != len(columns):
        raise fields.error("cells", f"expected a list of {len(columns)} cells, one per value "
                                    f"column ({', '.join(c.id for c in columns)})")
    return Row(label=label, keys=keys,
               cells=tuple(_cells(file, f"{where}.cells[{i}]", cell, footnotes)
                           for i, cell in enumerate(cells)),
               footnotes=fields.footnotes(footnotes), quantity=quantity, unit=unit)


def _cells(file: str, where: str, data: Any, footnotes: Mapping[str, str]) -> tuple[Cell, ...]:
    if isinstance(data, list):
        if len(data) < 2:
            raise ReferenceFileError(f"reference file {file}: {where}: a list holds the several "
                                     f"values of one published cell (two or more)")
        return tuple(_cell(file, f"{where}[{i}]", item, footnotes) for i, item in enumerate(data))
    return (_cell(file, where, data, footnotes),)


def _cell(file: str, where: str, data: Any, footnotes: Mapping[str, str]) -> Cell:
    bare = not isinstance(data, dict)  # a plain number or word, not a mapping
    if bare:
        data = {"value": data}
    fields = _Fields(file, where, data, ("value", "label", "keys", "footnotes", "approx"))
    value = data.get("value")
    approx = data.get("approx", False)
    if not isinstance(approx, bool):
        raise fields.error("approx", "expected true or false")
    if isinstance(value, str) and value in WORDS:
        number, text, status = None, value, WORDS[value]
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        number = float(value)
        text, status = (value.text if isinstance(value, Number) else str(value)), "ok"
    else:
        raise fields.error("" if bare else "value", f"expected a finite number, "
                           f"{' or '.join(map(repr, WORDS))}, got {value!r}")
    return Cell(value=number, text=text, status=status, label=fields.text("label", required=False),
                keys=fields.keys(), footnotes=fields.footnotes(footnotes), approx=approx)
