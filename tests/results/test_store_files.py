"""Results files: read-only commands never create or change one, and a file that is not a usable
dlperf database is one line naming it (exit 2), left exactly as it was.

The commands run through dlperf's main in this process (conftest.dlperf_main): a fresh
interpreter's imports cost ~1 CPU-s a call, 40 calls here. test_fuzz_cli checks that real
processes answer alike, bad databases among its inputs; the database they read is written by a
real `dlperf external` process."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

READERS = (("results", "--db", "{db}"), ("report", "--db", "{db}"), ("compare", "{db}", "{db}"),
           ("compare", "1", "1", "--db", "{db}"))
RATE = ["--metric", r"imgs_per_sec : ([\d.]+)"]
SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
# refusals come before any measurement: other measurements on this host must not delay them
LOCK = own_lock("test_store_files")


@pytest.fixture(scope="module")
def real_db(tmp_path_factory) -> Path:
    """A database written by a real `dlperf external` run."""
    db = tmp_path_factory.mktemp("store") / "real.db"
    dlperf("external", "--name", "fake", *RATE, "--repeats", "1", "--db", str(db), "--",
           sys.executable, SCRIPT, timeout=120, check=True, env=LOCK)
    return db


@pytest.fixture
def copy(real_db, tmp_path) -> Path:
    target = tmp_path / "copy.db"
    shutil.copy(real_db, target)
    return target


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def edit(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    db.close()


def refused(*args: str, says: str) -> str:
    proc = dlperf_main(*args, timeout=120, env=LOCK)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert says in lines[0], lines[0]
    return lines[0]


def each_reader(db: Path, says: str, readers: tuple[tuple[str, ...], ...] = READERS) -> None:
    for args in readers:
        refused(*(a.format(db=db) for a in args), says=says)


def test_a_missing_file_is_not_created(tmp_path):
    typo = tmp_path / "typo.db"
    line = refused("results", "--db", str(typo), says=f"--db: {typo} does not exist")
    assert "dlperf results" in line
    refused("report", "--db", str(typo), says="does not exist")
    refused("compare", "1", "2", "--db", str(typo), says=str(typo))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", ["results", "report"])
def test_memory_and_directories_are_refused(command, tmp_path):
    refused(command, "--db", ":memory:", says="--db: ':memory:' is not allowed")
    refused(command, "--db", str(tmp_path), says="is a directory")


def test_reading_changes_nothing_not_even_the_journal_mode(copy):
    edit(copy, "PRAGMA journal_mode=DELETE")
    before = fingerprint(copy)
    for args in READERS:
        proc = dlperf_main(*(a.format(db=copy) for a in args), timeout=120)
        assert proc.returncode == 0, (args, proc.stderr)
    assert fingerprint(copy) == before
    with sqlite3.connect(copy) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


def test_another_apps_database_is_refused_untouched(tmp_path):
    other = tmp_path / "other.db"
    edit(other, "CREATE TABLE photos (id INTEGER, name TEXT)",
         "INSERT INTO photos VALUES (1, 'cat')")
    before = fingerprint(other)
    each_reader(other, "is not a dlperf database")
    # a measuring command is refused before it starts, and adds no table either
    refused("external", "--name", "x", *RATE, "--repeats", "1", "--db", str(other), "--",
            sys.executable, SCRIPT, says=f"{other} is not a dlperf database")
    assert fingerprint(other) == before


def test_a_newer_schema_is_refused_untouched(copy):
    edit(copy, "UPDATE meta SET value='2' WHERE key='schema_version'")
    before = fingerprint(copy)
    each_reader(copy, "schema version 2, written by a newer dlperf")
    refused("external", "--name", "x", *RATE, "--repeats", "1", "--db", str(copy), "--",
            sys.executable, SCRIPT, says="schema version 2")
    assert fingerprint(copy) == before


def test_an_unparsable_schema_version(copy):
    edit(copy, "UPDATE meta SET value='one' WHERE key='schema_version'")
    each_reader(copy, "unreadable schema version 'one'")


def test_a_text_file_named_db(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database at all\n" * 100)
    before = fingerprint(text)
    refused("results", "--db", str(text), says="not a usable dlperf database (file is not a "
            "database)")
    each_reader(text, "dlperf database")  # compare reads it as a JSON file that is not one
    assert fingerprint(text) == before


def test_an_unreadable_stored_row_names_the_run(copy):
    edit(copy, "UPDATE runs SET result_json='{\"status\": ' WHERE id=1")
    each_reader(copy, "run 1 has an unreadable result_json")
    edit(copy, "UPDATE runs SET result_json='[1, 2]' WHERE id=1")
    refused("results", "--db", str(copy), says="run 1 has an unreadable result_json")


def test_a_damaged_file(tmp_path):
    """Bytes overwritten in the middle of a real, many-page database."""
    from dlperf.store import Store

    damaged = tmp_path / "damaged.db"
    with Store(damaged) as store:
        for index in range(60):
            run = store.start_run(f"k{index}", "label", {"pad": "x" * 2000}, {})
            store.finish_run(run, {"status": "ok", "case": {}, "pad": "y" * 3000})
    size = damaged.stat().st_size
    assert size > 100_000
    with open(damaged, "r+b") as handle:
        handle.seek(size // 2 - 8192)
        handle.write(b"\xff" * 16384)
    before = fingerprint(damaged)
    line = refused("results", "--db", str(damaged), says="database disk image is malformed")
    assert str(damaged) in line and ".recover" in line
    each_reader(damaged, "malformed", READERS[:3])  # run 1 alone sits in a sound page
    # a measuring command checks the whole file before it appends to it
    refused("external", "--name", "x", *RATE, "--repeats", "1", "--db", str(damaged), "--",
            sys.executable, SCRIPT, says="malformed")
    assert fingerprint(damaged) == before


def test_a_row_read_again_is_its_own_object_and_a_changed_row_is_checked_again(copy):
    """A process checks a stored text once (store._SOUND) and parses it on every read: each
    read is an object of its own, so one reader's changes never reach the next; and a row
    whose text changed under it, even to one that differs only past the checks' first look,
    is checked again and refused."""
    from dlperf.store import Store, StoreError

    with Store(copy, readonly=True) as store:
        first, again = (store.decode(next(store.runs("id = 1"))) for _ in range(2))
    assert first == again and first is not again
    first["throughput"]["median"] = -1.0
    with Store(copy, readonly=True) as store:
        assert store.decode(next(store.runs("id = 1")))["throughput"]["median"] > 0
    # the same row damaged deep inside a list of numbers: the throughput's repeats
    edit(copy, "UPDATE runs SET result_json = json_set(result_json, "
               "'$.throughput.repeats[0]', 'fast') WHERE id=1")
    with Store(copy, readonly=True) as store:
        with pytest.raises(StoreError, match="run 1 has a malformed result_json"):
            store.decode(next(store.runs("id = 1")))
