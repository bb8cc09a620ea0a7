"""The results database: one SQLite file, written the moment each repeat finishes.

Why SQLite: a single file that survives a killed process (WAL journaling, one transaction per
repeat), that several tools can read, and that needs nothing beyond the standard library.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlperf.report import reading
from dlperf.results import codec
from dlperf.results.model import Result

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
CREATE TABLE IF NOT EXISTS accuracy (
    id INTEGER PRIMARY KEY,
    accuracy_key TEXT NOT NULL,
    model TEXT NOT NULL,
    framework TEXT NOT NULL,
    precision TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    fp32_top1 REAL,
    fp32_top5 REAL,
    top1 REAL,
    top5 REAL,
    diff_top1 REAL,
    diff_top5 REAL,
    changed_top1 INTEGER,
    samples INTEGER,
    dataset_key TEXT NOT NULL,
    dataset_json TEXT NOT NULL,
    detail_json TEXT NOT NULL,
    env_json TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS accuracy_key ON accuracy (accuracy_key);
CREATE TABLE IF NOT EXISTS tune_studies (
    id INTEGER PRIMARY KEY,
    study TEXT NOT NULL UNIQUE,
    base_key TEXT NOT NULL,
    framework TEXT NOT NULL,
    model TEXT NOT NULL,
    task TEXT NOT NULL,
    case_json TEXT NOT NULL,
    space_json TEXT NOT NULL,
    budget_s REAL NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    outcome_json TEXT
);
CREATE INDEX IF NOT EXISTS tune_studies_base ON tune_studies (base_key);
CREATE TABLE IF NOT EXISTS tune_trials (
    id INTEGER PRIMARY KEY,
    study TEXT NOT NULL REFERENCES tune_studies (study),
    number INTEGER NOT NULL,
    settings_json TEXT NOT NULL,
    state TEXT NOT NULL,
    value REAL,
    rungs_json TEXT NOT NULL,
    error TEXT,
    wall_s REAL NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (study, number)
);
CREATE TABLE IF NOT EXISTS collectives (
    id INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    framework TEXT NOT NULL,
    path TEXT NOT NULL,
    env TEXT NOT NULL,
    device TEXT NOT NULL,
    nproc INTEGER NOT NULL,
    nnodes INTEGER NOT NULL,
    link TEXT,
    emulated INTEGER NOT NULL,
    host TEXT NOT NULL,
    op TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    iters INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    time_us REAL NOT NULL,
    time_p10_us REAL NOT NULL,
    time_p90_us REAL NOT NULL,
    algbw_gbs REAL NOT NULL,
    busbw_gbs REAL NOT NULL,
    times_json TEXT NOT NULL,
    detail_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (run, op, bytes)
);
CREATE INDEX IF NOT EXISTS collectives_key ON collectives (framework, path, op, nproc, nnodes);
CREATE TABLE IF NOT EXISTS projections (
    id INTEGER PRIMARY KEY,
    source_run INTEGER,
    case_key TEXT,
    label TEXT NOT NULL,
    projection_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""
#: Tables added after a file's schema version was set. They come with no new version (older
#: files gain them at their next write; readers treat a missing one as empty), because an added
#: table changes nothing an older dlperf reads; changing or removing a column needs a new one.
ADDED_TABLES = ("accuracy", "tune_studies", "tune_trials", "collectives", "projections")
ACCURACY_COLUMNS = ("model", "framework", "precision", "status", "error", "fp32_top1",
                    "fp32_top5", "top1", "top5", "diff_top1", "diff_top5", "changed_top1",
                    "samples")
ACCURACY_TEXT = ("model", "framework", "precision", "status", "error")
#: stored JSON checked field by field as it is read (dlperf.report.reading)
CHECKED = {("runs", "result_json"): reading.STORED,
           ("tune_studies", "case_json"): reading.CASE,
           ("tune_studies", "space_json"): reading.SPACE,
           ("tune_studies", "outcome_json"): reading.OUTCOME}
#: a stored projection, checked as it is read: what the report draws from it
PROJECTION = (("kind", reading.text, True), ("label", reading.text, True),
              ("model", reading.obj, True),
              ("points", reading.Items((("nodes", reading.whole, True),
                                        ("devices_per_node", reading.whole, True),
                                        ("devices", reading.whole, True),
                                        ("throughput", reading.obj, True),
                                        ("speedup", reading.obj, True),
                                        ("scaling_efficiency", reading.obj, True))), True))
#: ``dlperf collectives``: one row per (run, operation, message size), each column's check
COLLECTIVE_COLUMNS = {
    "run": reading.whole, "framework": reading.text, "path": reading.text, "env": reading.text,
    "device": reading.text, "nproc": reading.whole, "nnodes": reading.whole,
    "link": reading.text_or_null, "emulated": reading.whole, "host": reading.text,
    "op": reading.text, "bytes": reading.whole, "iters": reading.whole, "warmup": reading.whole,
    "time_us": reading.amount, "time_p10_us": reading.amount, "time_p90_us": reading.amount,
    "algbw_gbs": reading.amount, "busbw_gbs": reading.amount}
RUNGS = (("rungs", reading.Items((("value", reading.number, False),
                                  ("run_id", reading.whole, False),
                                  ("repeats", reading.whole, False),
                                  ("wall_s", reading.amount, False))), True),)


#: the stored texts this process has found sound (a digest per table, column and text): one
#: read again is parsed, not checked again. A command reads the same results several times
#: (``dlperf project``: each row two or three times; the validation tables, a process of many
#: projections, dozens), and the checks took about nine tenths of reading a row, the JSON
#: parse the rest. A digest, not the text: the texts are tens of kilobytes each.
_SOUND: set[bytes] = set()
#: past this many digests the set starts again (16 bytes each: about 3 MB of digests at most)
_SOUND_MOST = 100_000


def _text_key(table: str, column: str, text: object) -> bytes | None:
    """The digest :data:`_SOUND` keeps for a stored text; None for what is not text."""
    if not isinstance(text, str):
        return None
    digest = hashlib.blake2b(f"{table}\0{column}\0".encode(), digest_size=16)
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


def _seen_sound(key: bytes) -> None:
    if len(_SOUND) >= _SOUND_MOST:
        _SOUND.clear()
    _SOUND.add(key)


class StoreError(RuntimeError):
    """The database cannot be used (wrong schema version, not a dlperf database, damaged)."""


DAMAGED_FIX = ("the file is damaged: restore it from a copy, or salvage it with "
               "`sqlite3 FILE .recover | sqlite3 NEW.db`")
TABLES = ("meta", "runs")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _check_path(path: Path, flag: str, readonly: bool) -> None:
    """Refuse what cannot hold results before SQLite touches anything."""
    if str(path) in (":memory:", "") or str(path).startswith("file:"):
        raise StoreError(f"{flag}: {str(path)!r} is not allowed; results need a file path")
    if path.is_dir():
        raise StoreError(f"{flag}: {path} is a directory; name a results file")
    if readonly and not path.exists():
        raise StoreError(f"{flag}: {path} does not exist; measure something first "
                         f"(dlperf run / dlperf sweep) or point {flag} at a results file")


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write: no journal switch, no tables, no file created."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=30.0)


def _foreign(db: sqlite3.Connection) -> str | None:
    """What marks a file without tables as another application's (its views, indexes or
    triggers, its user_version or application_id), or None for an empty database."""
    objects = [f"{kind} {name!r}" for kind, name in
               db.execute("SELECT type, name FROM sqlite_master ORDER BY rowid LIMIT 3")]
    if objects:
        return f"it holds {', '.join(objects)} and no dlperf table"
    for pragma in ("user_version", "application_id"):
        value = db.execute(f"PRAGMA {pragma}").fetchone()[0]
        if value:
            return f"its {pragma} is {value}"
    return None


def _verify(db: sqlite3.Connection, path: Path, flag: str, empty_ok: bool) -> None:
    """The file is a dlperf database of this schema (or, where ``empty_ok``, an empty one: no
    schema objects at all, nothing another application set)."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables and empty_ok:
        foreign = _foreign(db)
        if foreign is None:
            return
        raise StoreError(f"{flag}: {path} is not a dlperf database ({foreign}); point {flag} "
                         f"at a dlperf results file or at a new path")
    missing = [name for name in TABLES if name not in tables]
    if missing:
        raise StoreError(f"{flag}: {path} is not a dlperf database (no {', '.join(missing)} "
                         f"table); point {flag} at a dlperf results file")
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    text = None if row is None else row[0]
    try:
        version = int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise StoreError(f"{flag}: {path} has an unreadable schema version {text!r}; it was not "
                         f"written by dlperf, or was edited by hand") from None
    if version != SCHEMA_VERSION:
        newer = "a newer dlperf" if version > SCHEMA_VERSION else "an older dlperf"
        raise StoreError(f"{flag}: {path} has schema version {version}, written by {newer}; "
                         f"this dlperf reads {SCHEMA_VERSION}")
    for table, wanted in _columns().items():  # a table edited by hand: refused before a query
        if table in tables:
            have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            missing = [name for name in wanted if name not in have]
            if missing:
                raise StoreError(f"{flag}: {path}: table {table} has no column {missing[0]}; "
                                 f"it was not written by dlperf, or was edited by hand: "
                                 f"restore the file from a copy")


@functools.lru_cache(maxsize=1)
def _columns() -> dict[str, tuple[str, ...]]:
    """Each table's columns, as SCHEMA makes them (no column was added to a table since)."""
    memory = sqlite3.connect(":memory:")
    try:
        memory.executescript(SCHEMA)
        names = [row[0] for row in memory.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: tuple(row[1] for row in memory.execute(f"PRAGMA table_info({name})"))
                for name in names}
    finally:
        memory.close()


class Store:
    """A results database. Every write is its own committed transaction.

    ``readonly`` (results, report, compare): the file must exist and is opened with SQLite's
    ``mode=ro``, so reading never creates, converts or extends it. A writable store checks an
    existing file the same way, read-only, before its first write: a file without tables is
    taken only when nothing else marks it (``empty_ok`` takes it read-only too: :meth:`peek`).
    Each stored result is checked as it is decoded (:mod:`dlperf.report.reading`).
    """

    def __init__(self, path: str | Path = DEFAULT_DB, readonly: bool = False,
                 flag: str = "--db", empty_ok: bool = False) -> None:
        self.path = Path(path)
        self.flag = flag
        _check_path(self.path, flag, readonly)
        try:
            if readonly or (self.path.exists() and self.path.stat().st_size > 0):
                probe = _open_readonly(self.path)
                try:
                    _verify(probe, self.path, flag, empty_ok=empty_ok or not readonly)
                    if not readonly:  # never append results to a damaged file
                        problem = probe.execute("PRAGMA quick_check(1)").fetchone()[0]
                        if problem != "ok":
                            raise sqlite3.DatabaseError(f"database disk image is malformed "
                                                        f"({problem})")
                finally:
                    if not readonly:
                        probe.close()
            if readonly:
                self.db = probe
            else:
                self.db = sqlite3.connect(self.path, timeout=30.0)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA foreign_keys=ON")
                with self.db:
                    self.db.executescript(SCHEMA)
                    self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                                    (str(SCHEMA_VERSION),))
            self.db.row_factory = sqlite3.Row
            # damaged text reaches decode(), which names the run, instead of failing the query
            self.db.text_factory = lambda raw: raw.decode("utf-8", "replace")
        except sqlite3.DatabaseError as error:
            raise self._damaged(error) from None

    @classmethod
    def peek(cls, path: str | Path, flag: str = "--db") -> "Store | None":
        """The database a writing command is about to use, opened read-only for the checks it
        makes first (so a refusal has created, converted and extended nothing); None where
        there is nothing to read yet (no file, an empty one). Another application's file is
        refused here, untouched."""
        path = Path(path)
        _check_path(path, flag, readonly=False)
        if not path.exists() or path.stat().st_size == 0:
            return None
        store = cls(path, readonly=True, flag=flag, empty_ok=True)
        if not store.has_table("runs"):
            store.close()
            return None
        return store

    def _damaged(self, error: sqlite3.Error) -> StoreError:
        text = " ".join(str(error).split())[:200]
        if "malformed" in text or "corrupt" in text or "decode" in text:
            return StoreError(f"{self.flag}: {self.path}: {text}; "
                              + DAMAGED_FIX.replace("FILE", str(self.path)))
        return StoreError(f"{self.flag}: {self.path} is not a usable dlperf database ({text})")

    def _unreadable(self, row: sqlite3.Row, column: str, table: str, why: object,
                    kind: str = "an unreadable") -> StoreError:
        what = "run" if table == "runs" else f"{table} row"
        return StoreError(f"{self.flag}: {self.path}: {what} {row['id']} has {kind} {column} "
                          f"({str(why)[:200]}); delete that {what} (DELETE FROM {table} WHERE "
                          f"id={row['id']}) or restore the file from a copy")

    def _load(self, row: sqlite3.Row, column: str, table: str, kind: type,
              checked: bool = False) -> Any:
        """One stored JSON value of type ``kind``; else one line naming the file and row id.
        ``checked``: its text passed every check already (:func:`_seen_sound`), so only parsed."""
        try:
            value = json.loads(row[column])
        except RecursionError:
            value = "nested too deeply"
        except (TypeError, ValueError) as error:
            value = error
        else:
            if not checked:
                value = reading.too_deep(value) or value
        if not isinstance(value, kind):
            raise self._unreadable(row, column, table, value)
        return value

    def decode(self, row: sqlite3.Row, column: str = "result_json",
               table: str = "runs") -> dict[str, Any]:
        """One stored JSON object, its fields of the types readers rely on
        (:mod:`dlperf.report.reading`); a damaged row is one line naming the file and row id.
        Each call gives an object of its own to change as the caller likes."""
        key = _text_key(table, column, row[column])
        checked = key is not None and key in _SOUND
        value = self._load(row, column, table, dict, checked)
        fields = CHECKED.get((table, column))
        why = reading.problem(value, fields) if fields and not checked else None
        if why:
            raise self._unreadable(row, column, table, why, "a malformed")
        if key is not None and not checked:
            _seen_sound(key)
        if table == "runs" and column == "result_json":
            # a result of any version, as this one reads it (dlperf.results.codec)
            return codec.to_dict(value)
        return value

    def result(self, row: sqlite3.Row) -> Result:
        """One stored result, typed (:mod:`dlperf.results`)."""
        return codec.read_result(self.decode(row))

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
        assert cursor.lastrowid is not None  # set by every INSERT
        return cursor.lastrowid

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
                (_now(), result["status"], result.get("error"), codec.write_result(result),
                 run_id))

    def repeats(self, run_id: int) -> list[dict[str, Any]]:
        rows = self._rows("SELECT run_id AS id, detail_json FROM repeats WHERE run_id=? "
                          "ORDER BY repeat_index", (run_id,))
        return [self.decode(row, "detail_json") for row in rows]

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """All rows of a query; a damaged file is one line naming it, not a traceback."""
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as error:
            raise self._damaged(error) from None

    def runs(self, where: str = "1=1", params: tuple[Any, ...] = ()) -> Iterator[sqlite3.Row]:
        yield from self._rows(f"SELECT * FROM runs WHERE {where} ORDER BY id", params)

    # -- sweeps: resume needs the latest run of a case within a sweep ------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key=?", (key,))
        return None if not rows else str(rows[0][0])

    def set_meta(self, key: str, value: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def max_run_id(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(id), 0) FROM runs")[0][0])

    def latest_run(self, case_key: str, sweep: str, after_id: int = 0) -> sqlite3.Row | None:
        """The newest run of ``case_key`` stored by ``sweep`` with an id above ``after_id``."""
        rows = self._rows(
            "SELECT * FROM runs WHERE case_key=? AND sweep=? AND id>? ORDER BY id DESC LIMIT 1",
            (case_key, sweep, after_id))
        return rows[0] if rows else None

    def sweeps(self) -> list[str]:
        """Names of the sweeps with stored runs, in the order they first appeared."""
        rows = self._rows("SELECT sweep FROM runs WHERE sweep IS NOT NULL "
                          "GROUP BY sweep ORDER BY MIN(id)")
        return [str(row[0]) for row in rows]

    # -- accuracy: one row per model, engine and lower precision, as it finishes --------------

    def has_table(self, name: str) -> bool:
        return bool(self._rows("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                               (name,)))

    def add_accuracy(self, key: str, row: dict[str, Any], dataset: dict[str, Any],
                     detail: dict[str, Any], env: dict[str, Any]) -> int:
        """Store one row of ``dlperf accuracy``'s table, committed at once."""
        dataset_text = json.dumps(dataset, sort_keys=True)
        dataset_key = hashlib.sha256(dataset_text.encode()).hexdigest()[:16]
        with self.db:
            cursor = self.db.execute(
                f"INSERT INTO accuracy (accuracy_key, {', '.join(ACCURACY_COLUMNS)}, dataset_key,"
                f" dataset_json, detail_json, env_json, created_at) VALUES "
                f"({', '.join('?' * (len(ACCURACY_COLUMNS) + 6))})",
                (key, *(row.get(name) for name in ACCURACY_COLUMNS), dataset_key, dataset_text,
                 json.dumps(detail), json.dumps(env), _now()))
        assert cursor.lastrowid is not None  # set by every INSERT
        return cursor.lastrowid

    def accuracy(self) -> list[dict[str, Any]]:
        """Every stored accuracy row, oldest first, with its dataset, detail and env decoded;
        none from a file written before the table existed."""
        if not self.has_table("accuracy"):
            return []
        out = []
        for row in self._rows("SELECT * FROM accuracy ORDER BY id"):
            item = {name: row[name] for name in row.keys()
                    if not name.endswith("_json")}
            for column in ("dataset_json", "detail_json", "env_json"):
                item[column[:-5]] = self.decode(row, column, "accuracy") if row[column] else {}
            for name in ACCURACY_COLUMNS:  # SQLite keeps any type in any column
                check = reading.text if name in ACCURACY_TEXT else reading.number
                why = None if item[name] is None else check(item[name])
                if why:
                    raise self._unreadable(row, name, "accuracy", why, "a malformed")
            out.append(item)
        return out

    # -- tune: a study per searched case, a row per trial as it ends --------------------------

    def tune_study(self, study: str) -> dict[str, Any] | None:
        """One stored study (its case, space and outcome decoded), or None."""
        if not self.has_table("tune_studies"):
            return None
        rows = self._rows("SELECT * FROM tune_studies WHERE study=?", (study,))
        return self._study(rows[0]) if rows else None

    def tune_studies(self, base_key: str | None = None) -> list[dict[str, Any]]:
        """Every stored study (of one base case), oldest first; none in an older file."""
        if not self.has_table("tune_studies"):
            return []
        where, params = ("base_key=?", (base_key,)) if base_key else ("1=1", ())
        rows = self._rows(f"SELECT * FROM tune_studies WHERE {where} ORDER BY id", params)
        return [self._study(row) for row in rows]

    def _study(self, row: sqlite3.Row) -> dict[str, Any]:
        item = {name: row[name] for name in row.keys() if not name.endswith("_json")}
        for column in ("case_json", "space_json", "outcome_json"):
            item[column[:-5]] = (self.decode(row, column, "tune_studies") if row[column]
                                 else None)
        return item

    def start_tune_study(self, study: str, base_key: str, case: dict[str, Any],
                         space: dict[str, Any], budget_s: float) -> None:
        """Record a study before its first trial (kept as it is when it already exists)."""
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO tune_studies (study, base_key, framework, model, task, "
                "case_json, space_json, budget_s, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (study, base_key, case["framework"], case["model"], case["task"],
                 json.dumps(case), json.dumps(space), budget_s, _now()))

    def finish_tune_study(self, study: str, outcome: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("UPDATE tune_studies SET finished_at=?, outcome_json=? WHERE study=?",
                            (_now(), json.dumps(outcome), study))

    def add_tune_trial(self, study: str, number: int, trial: dict[str, Any]) -> None:
        """Store one ended trial (its settings, state, value, rungs, error, wall time)."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO tune_trials (study, number, settings_json, state, value, "
                "rungs_json, error, wall_s, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (study, number, json.dumps(trial["settings"]), trial["state"],
                 trial.get("value"), json.dumps(trial.get("rungs") or []), trial.get("error"),
                 float(trial.get("wall_s") or 0.0), _now()))

    def tune_trials(self, study: str) -> list[dict[str, Any]]:
        """The study's ended trials in their order."""
        if not self.has_table("tune_trials"):
            return []
        out = []
        for row in self._rows("SELECT * FROM tune_trials WHERE study=? ORDER BY number",
                              (study,)):
            for name, check in (("number", reading.whole), ("state", reading.text),
                                ("value", reading.number_or_null), ("error", reading.text_or_null),
                                ("wall_s", reading.amount)):
                why = check(row[name])  # SQLite keeps any type in any column
                if why:
                    raise self._unreadable(row, name, "tune_trials", why, "a malformed")
            out.append({"number": row["number"], "state": row["state"], "value": row["value"],
                        "error": row["error"], "wall_s": row["wall_s"],
                        "created_at": row["created_at"],
                        "settings": self.decode(row, "settings_json", "tune_trials"),
                        "rungs": self._rungs(row)})
        return out

    def _rungs(self, row: sqlite3.Row) -> list[dict[str, Any]]:
        if not row["rungs_json"]:
            return []
        rungs = self._load(row, "rungs_json", "tune_trials", list)
        why = reading.problem({"rungs": rungs}, RUNGS)
        if why:
            raise self._unreadable(row, "rungs_json", "tune_trials", why, "a malformed")
        return rungs

    # -- collectives: one row per operation and message size of a run -----------------------

    def add_collectives(self, rows: list[dict[str, Any]]) -> int:
        """Store one ``dlperf collectives`` run's rows (each with :data:`COLLECTIVE_COLUMNS`,
        ``times`` and ``detail``) in one transaction, under the next run number; that number."""
        names = tuple(COLLECTIVE_COLUMNS)[1:]
        sql = (f"INSERT INTO collectives (run, {', '.join(names)}, times_json, detail_json, "
               f"created_at) VALUES ({', '.join('?' * (len(names) + 4))})")
        now = _now()
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")  # the run number and its rows: one writer
            run = int(self.db.execute("SELECT COALESCE(MAX(run), 0) + 1 FROM collectives"
                                      ).fetchone()[0])
            for row in rows:
                self.db.execute(sql, (run, *(row[name] for name in names),
                                      json.dumps(row["times"]), json.dumps(row["detail"]), now))
        return run

    def collectives(self, where: str = "1=1",
                    params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Stored collectives rows (``where`` over their columns), oldest first, each column
        checked and ``times`` / ``detail`` decoded; none from a file older than the table."""
        if not self.has_table("collectives"):
            return []
        out = []
        for row in self._rows(f"SELECT * FROM collectives WHERE {where} ORDER BY id", params):
            for name, check in COLLECTIVE_COLUMNS.items():  # SQLite keeps any type anywhere
                why = check(row[name])
                if why:
                    raise self._unreadable(row, name, "collectives", why, "a malformed")
            item = {name: row[name] for name in COLLECTIVE_COLUMNS}
            item["times"] = self._load(row, "times_json", "collectives", list)
            why = reading.numbers(item["times"])
            if why:
                raise self._unreadable(row, "times_json", "collectives", why, "a malformed")
            item["detail"] = self.decode(row, "detail_json", "collectives")
            item["created_at"] = row["created_at"]
            out.append(item)
        return out

    def results(self, where: str = "result_json IS NOT NULL",
                params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Finished results (the JSON contract), oldest first."""
        return [self.decode(row) for row in self.runs(where, params)]

    def typed_results(self, where: str = "result_json IS NOT NULL",
                      params: tuple[Any, ...] = ()) -> list[Result]:
        """Finished results, typed (:mod:`dlperf.results`), oldest first."""
        return [self.result(row) for row in self.runs(where, params)]

    # -- projections: `dlperf project`, never mixed with measured runs -----------------------

    def add_projection(self, projection: dict[str, Any]) -> int:
        """Store one projection (:meth:`dlperf.projection.model.Projection.to_dict`); its id."""
        source = projection.get("source") or {}
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO projections (source_run, case_key, label, projection_json, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (source.get("run_id"), source.get("case_key"), str(projection["label"]),
                 json.dumps(projection), _now()))
        return int(cursor.lastrowid or 0)

    def projections(self) -> list[dict[str, Any]]:
        """Stored projections, oldest first, each with its ``id``; none from a file older than
        the table."""
        if not self.has_table("projections"):
            return []
        out = []
        for row in self._rows("SELECT * FROM projections ORDER BY id"):
            item = self._load(row, "projection_json", "projections", dict)
            why = reading.problem(item, PROJECTION)
            if why:
                raise self._unreadable(row, "projection_json", "projections", why,
                                       "a malformed")
            item["id"] = row["id"]
            out.append(item)
        return out
