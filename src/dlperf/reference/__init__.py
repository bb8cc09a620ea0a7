"""Published figures of the studies dlperf was built from, stored as data with their provenance.

Each ``*.yaml`` file beside this module is one study (a document at one version) and its tables
as published: DLPerf's README (two versions) and its v1.0 report, NVIDIA DeepLearningExamples'
MXNet ResNet-50 page, the Dell EMC V100 paper and Horovod's README benchmarks. This module reads
them (checked against the schema in :mod:`dlperf.reference.parse`), lists them and looks values
up by key, so that a measurement or a projection can be put beside the published figure::

    from dlperf import reference
    for value in reference.lookup(quantity="speedup", framework="oneflow", model="resnet50",
                                  precision="fp32", gpus=32):
        print(value.value, value.unit, value.source)

How the values were transcribed and how to add a table: ``docs/reference.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from dlperf.reference.model import (DERIVED_KEYS, KEYS, QUANTITIES, UNITS, Cell, Column, Key,
                                    Published, Row, Source, Study, Table)
from dlperf.reference.parse import ReferenceFileError, read

__all__ = ["DATA_DIR", "KEYS", "QUANTITIES", "UNITS", "Cell", "Column", "Key", "Published",
           "ReferenceFileError", "Row", "Source", "Study", "Table", "files", "load", "lookup",
           "one", "studies", "table", "tables"]

#: where the shipped reference files live (package data)
DATA_DIR = Path(__file__).resolve().parent


def files(directory: Path = DATA_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


@functools.lru_cache(maxsize=8)
def _load(directory: Path) -> tuple[Table, ...]:
    found: dict[str, Table] = {}
    paths = files(directory)
    if not paths:
        raise ReferenceFileError(f"no reference files (*.yaml) in {directory}")
    for path in paths:
        _, parsed = read(path)
        for table in parsed:
            if table.id in found:
                raise ReferenceFileError(f"reference file {path.name}: table {table.id!r} is "
                                         f"also in {found[table.id].study.file}")
            found[table.id] = table
    return tuple(found.values())


def load(directory: Path | None = None) -> tuple[Table, ...]:
    """Every table of every reference file in ``directory`` (default: the shipped ones), in
    file order; the first file that does not match the schema raises
    :class:`ReferenceFileError` naming the file and the field."""
    return _load((directory or DATA_DIR).resolve())


def tables(directory: Path | None = None) -> tuple[Table, ...]:
    return load(directory)


def studies(directory: Path | None = None) -> list[Study]:
    return list({t.study.id: t.study for t in load(directory)}.values())


def table(table_id: str, directory: Path | None = None) -> Table:
    """One table by id; an unknown id raises with the ids that exist."""
    known = {t.id: t for t in load(directory)}
    if table_id not in known:
        raise ReferenceFileError(f"no reference table {table_id!r}; known: {', '.join(known)}")
    return known[table_id]


def values(directory: Path | None = None) -> list[Published]:
    return [value for t in load(directory) for value in t.values()]


def lookup(quantity: str | None = None, in_tables: Iterable[str] | None = None,
           directory: Path | None = None, **keys: Key) -> list[Published]:
    """The published values whose keys include every ``keys`` item (``gpus`` is
    ``nodes * gpus_per_node``), of ``quantity`` when given, from the tables ``in_tables`` names
    when given. A value that lacks a key asked for does not match: keys are set only where a
    study states them."""
    unknown = [k for k in keys if k not in KEYS and k not in DERIVED_KEYS]
    if unknown:
        raise ReferenceFileError(f"lookup: unknown key {unknown[0]!r}; known: "
                                 f"{', '.join((*KEYS, *DERIVED_KEYS))}")
    if quantity is not None and quantity not in QUANTITIES:
        raise ReferenceFileError(f"lookup: unknown quantity {quantity!r}; known: "
                                 f"{', '.join(QUANTITIES)}")
    wanted = None if in_tables is None else set(in_tables)
    return [value for value in values(directory)
            if (quantity is None or value.quantity == quantity)
            and (wanted is None or value.table in wanted)
            and all(k in value.keys and value.keys[k] == v for k, v in keys.items())]


def one(quantity: str, in_tables: Iterable[str] | None = None, directory: Path | None = None,
        **keys: Key) -> Published:
    """The single published value that matches, or an error saying how many did and where."""
    found = lookup(quantity, in_tables, directory, **keys)
    if len(found) != 1:
        where = "; ".join(f"{v.table} {v.row} / {v.column} = {v.text}" for v in found[:6])
        asked = ", ".join(f"{k}={v}" for k, v in keys.items())
        raise ReferenceFileError(f"{len(found)} published {quantity} values match {asked}"
                                 + (f": {where}" if where else ""))
    return found[0]
