"""The results database: one SQLite file, written the moment each repeat finishes.

Why SQLite: a single file that survives a killed process (WAL journaling, one transaction per
repeat), that several tools can read, and that needs nothing beyond the standard library.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_DB = "dlperf.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    case_key TEXT NOT NULL,
    label TEXT NOT NULL,
    case_json TEXT NOT NULL,
    sweep TEXT,
    env_json TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT,
    error TEXT,
    result_json TEXT
);
CREATE INDEX IF NOT EXISTS runs_case_key ON runs (case_key);
CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep);
CREATE TABLE IF NOT EXISTS repeats (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    repeat_index INTEGER NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    throughput REAL,
    window_s REAL,
    samples INTEGER,
    build_s REAL,
    first_step_s REAL,
    warmup_s REAL,
    peak_host_bytes INTEGER,
    peak_device_bytes INTEGER,
    detail_json TEXT NOT NULL,
    stderr_tail TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, repeat_index)
);
"""


class StoreError(RuntimeError):
    """The database cannot be used (wrong schema version, not a dlperf database)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Store:
    """A results database. Every write is its own committed transaction."""

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        try:
            self.db = sqlite3.connect(self.path, timeout=30.0)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            with self.db:
                self.db.executescript(SCHEMA)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as error:
            raise StoreError(f"{self.path}: not a usable dlperf database ({error})") from None
        version = int(self.db.execute(
            "SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version}, this dlperf reads "
                             f"{SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(self, case_key: str, label: str, case: dict[str, Any],
                  env: dict[str, Any], sweep: str | None = None) -> int:
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO runs (case_key, label, case_json, sweep, env_json, started_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (case_key, label, json.dumps(case), sweep, json.dumps(env), _now()))
        return int(cursor.lastrowid)

    def add_repeat(self, run_id: int, index: int, repeat: dict[str, Any]) -> None:
        """Store one finished repeat; ``repeat`` is the runner's per-repeat record."""
        with self.db:
            self.db.execute(
                "INSERT INTO repeats (run_id, repeat_index, status, error, throughput, window_s,"
                " samples, build_s, first_step_s, warmup_s, peak_host_bytes, peak_device_bytes,"
                " detail_json, stderr_tail, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, repeat["status"], repeat.get("error"), repeat.get("throughput"),
                 repeat.get("window_s"), repeat.get("samples"), repeat.get("build_s"),
                 repeat.get("first_step_s"), repeat.get("warmup_s"),
                 repeat.get("peak_host_bytes"), repeat.get("peak_device_bytes"),
                 json.dumps(repeat), repeat.get("stderr_tail"), _now()))

    def finish_run(self, run_id: int, result: dict[str, Any]) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET finished_at=?, status=?, error=?, result_json=? WHERE id=?",
                (_now(), result["status"], result.get("error"), json.dumps(result), run_id))

    def repeats(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT detail_json FROM repeats WHERE run_id=? ORDER BY repeat_index", (run_id,))
        return [json.loads(row[0]) for row in rows]

    def runs(self, where: str = "1=1", params: tuple[Any, ...] = ()) -> Iterator[sqlite3.Row]:
        yield from self.db.execute(f"SELECT * FROM runs WHERE {where} ORDER BY id", params)

    # -- sweeps (issue 3): resume needs the latest run of a case within a sweep --------------

    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def max_run_id(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0])

    def latest_run(self, case_key: str, sweep: str, after_id: int = 0) -> sqlite3.Row | None:
        """The newest run of ``case_key`` stored by ``sweep`` with an id above ``after_id``."""
        return self.db.execute(
            "SELECT * FROM runs WHERE case_key=? AND sweep=? AND id>? ORDER BY id DESC LIMIT 1",
            (case_key, sweep, after_id)).fetchone()

    def sweeps(self) -> list[str]:
        """Names of the sweeps with stored runs, in the order they first appeared."""
        rows = self.db.execute("SELECT sweep FROM runs WHERE sweep IS NOT NULL "
                               "GROUP BY sweep ORDER BY MIN(id)")
        return [str(row[0]) for row in rows]

    def results(self, where: str = "result_json IS NOT NULL",
                params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Finished results (the JSON contract), oldest first."""
        return [json.loads(row["result_json"]) for row in self.runs(where, params)]
