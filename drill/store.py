"""Progress, hints, card reviews and settings in one SQLite database.

Every write is one transaction, so a killed process leaves the previous state.
Only a file SQLite itself calls damaged ("not a database", "malformed") is moved
aside (never deleted), and only where it can be moved; the user is told where it
went. A lock held by another process is waited for, then reported; a read-only
file or folder is reported. Neither is ever taken for damage. Paths are stored
as text, or as their raw bytes when they are not UTF-8.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from drill import paths
from drill.errors import DrillError

SCHEMA_VERSION = 2  # 2: mutant_outcomes
# How long a command waits for another process to let go of the file (DRILL_LOCK_WAIT overrides).
LOCK_WAIT_S = 15.0
FIRST_WAIT_S = 2.0  # a short wait first, then one message, then the rest

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workspaces (
    topic TEXT PRIMARY KEY, path TEXT NOT NULL, started_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    exercise TEXT NOT NULL,          -- "topic/id"
    at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pass', 'fail', 'error')),
    file TEXT NOT NULL,
    seconds REAL NOT NULL,
    result_json TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS attempts_by_exercise ON attempts (exercise, id);
CREATE TABLE IF NOT EXISTS hints (exercise TEXT PRIMARY KEY, revealed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cards (
    card_id TEXT PRIMARY KEY, state_json TEXT NOT NULL, due TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    card_id TEXT NOT NULL, at TEXT NOT NULL, rating INTEGER NOT NULL,
    log_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL, question TEXT NOT NULL, at TEXT NOT NULL,
    seconds REAL NOT NULL, answer TEXT NOT NULL, covered_json TEXT NOT NULL,
    score REAL NOT NULL);
CREATE TABLE IF NOT EXISTS mutant_outcomes (
    file_key TEXT NOT NULL,          -- hash of the graded file and of its exercise's checks
    mutant_id TEXT NOT NULL,
    exercise TEXT NOT NULL,
    at TEXT NOT NULL,
    outcome_json TEXT NOT NULL,
    PRIMARY KEY (file_key, mutant_id));
"""


def _drop_cram_column(conn: sqlite3.Connection) -> None:
    """Databases from before 2026-11-30 have reviews.cram, always 0 (cram reviews are never
    stored). Dropped where SQLite can (3.35+); elsewhere its default keeps it harmless."""
    columns = [row[1] for row in conn.execute("PRAGMA table_info(reviews)")]
    if "cram" in columns and sqlite3.sqlite_version_info >= (3, 35):
        conn.execute("ALTER TABLE reviews DROP COLUMN cram")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class StoreError(DrillError):
    """The progress database cannot be opened or written (reported in one line by the CLI)."""


def _refuse_unknown_schema(conn: sqlite3.Connection, path: Path) -> None:
    """A database of a schema this drill does not know (a newer drill wrote it) is left untouched."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
        return
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is not None and row[0] not in {str(v) for v in range(1, SCHEMA_VERSION + 1)}:
        raise StoreError(f"the progress database {paths.shown(path)} has schema version {str(row[0])[:20]!r}, which "
                         f"this drill (schema {SCHEMA_VERSION}) does not know: upgrade drill, or set DRILL_HOME "
                         "to another folder")


def _lock_wait_setting() -> float:
    try:
        return max(0.0, float(os.environ.get("DRILL_LOCK_WAIT", LOCK_WAIT_S)))
    except ValueError:
        return LOCK_WAIT_S


def is_locked(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc)


def is_damaged(exc: sqlite3.Error) -> bool:
    """Only SQLite's own verdict that the bytes are not a sound database (never a lock or a permission)."""
    if isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc)
    return name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or text in (
        "file is not a database", "database disk image is malformed", "integrity check failed")


def explain(exc: sqlite3.Error, path: Path, waited: float) -> str:
    """One line for a database that is fine but cannot be used right now."""
    where = paths.shown(path)
    if is_locked(exc):
        return (f"the progress database {where} is locked by another process (another drill command "
                f"still running?); gave up after {waited:g} s. Try again when it has finished.")
    name = getattr(exc, "sqlite_errorname", "")
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or "readonly" in str(exc):
        return (f"cannot write the progress database {where} ({exc}); make it writable, "
                "or set DRILL_HOME to a writable directory")
    return f"cannot use the progress database {where} ({exc}); set DRILL_HOME to use another directory"


def path_to_db(path: os.PathLike | str) -> str | bytes:
    """A path as SQLite can keep it: text when it is UTF-8, else its raw bytes (a BLOB), so a file
    name in another encoding neither crashes the write nor comes back different."""
    raw = os.fsencode(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def path_from_db(value: str | bytes) -> str:
    return os.fsdecode(value) if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Attempt:
    exercise: str
    at: str
    status: str
    file: str
    seconds: float
    result: dict


class Store:
    """A thin, transactional wrapper over the SQLite file."""

    def __init__(self, path: Path | None = None, lock_wait: float | None = None):
        self.path = Path(path) if path else paths.database()
        self.lock_wait = lock_wait if lock_wait is not None else _lock_wait_setting()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot use {paths.shown(self.path.parent)} for progress ({exc.strerror}); "
                             "set DRILL_HOME to a writable directory") from None
        self.conn = self._open()

    # -- opening ---------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        try:
            return self._open_waiting()
        except sqlite3.DatabaseError as exc:
            if not is_damaged(exc):
                # Locked, read-only, unreadable: the file may be fine, so it is never moved.
                raise StoreError(explain(exc, self.path, self.lock_wait)) from None
            self._move_aside(exc)
            try:
                return self._open_waiting()
            except sqlite3.DatabaseError as again:
                raise StoreError(explain(again, self.path, self.lock_wait)) from None

    def _open_waiting(self) -> sqlite3.Connection:
        """Open; when another process holds the lock, say so once and wait up to lock_wait."""
        first = min(FIRST_WAIT_S, self.lock_wait)
        try:
            return self._connect_and_migrate(first)
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or self.lock_wait <= first:
                raise
        print(f"drill: the progress database is in use by another process; waiting up to "
              f"{self.lock_wait - first:g} s more ...", file=sys.stderr, flush=True)
        return self._connect_and_migrate(self.lock_wait - first)

    def _move_aside(self, exc: sqlite3.DatabaseError) -> None:
        moved = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        folder = self.path.parent
        # Never try to move what cannot be moved: a read-only folder ends here in one line.
        if not os.access(folder, os.W_OK):
            raise StoreError(f"the progress database {paths.shown(self.path)} is damaged ({exc}) and its "
                             "folder is read-only; move the file away yourself or set DRILL_HOME "
                             "to a writable directory")
        try:
            os.rename(self.path, moved)
        except OSError as err:
            raise StoreError(f"the progress database {paths.shown(self.path)} is damaged ({exc}) and could "
                             f"not be moved aside ({err.strerror}); move it away yourself or set "
                             "DRILL_HOME to a writable directory") from None
        print(f"drill: the progress database could not be read ({exc}); it was moved to "
              f"{paths.shown(moved)} and a new one was started.", file=sys.stderr)

    def _connect_and_migrate(self, wait: float) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=wait)
        try:
            conn.row_factory = sqlite3.Row
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            _refuse_unknown_schema(conn, self.path)
            with conn:
                conn.executescript(SCHEMA)
                # Tables are only ever added, so an older file is brought up to this version by
                # the script above; a newer one (a later drill) keeps its number.
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE "
                    "SET value = excluded.value WHERE CAST(meta.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
                    (str(SCHEMA_VERSION),))
                _drop_cram_column(conn)
        except BaseException:
            conn.close()
            raise
        # Later statements wait as long as opening did before they give up.
        conn.execute(f"PRAGMA busy_timeout = {int(self.lock_wait * 1000)}")
        return conn

    @contextmanager
    def _writing(self):
        """One transaction; a lock that outlasts the wait or a read-only file becomes a StoreError."""
        try:
            with self.conn:
                yield self.conn
        except sqlite3.OperationalError as exc:
            raise StoreError(explain(exc, self.path, self.lock_wait)) from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- settings and workspaces ------------------------------------------
    def get_setting(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_workspace(self, topic: str, path: Path) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO workspaces (topic, path, started_at) VALUES (?, ?, ?) "
                "ON CONFLICT (topic) DO UPDATE SET path = excluded.path",
                (topic, path_to_db(path), now_iso()),
            )

    def workspace(self, topic: str) -> Path | None:
        row = self.conn.execute("SELECT path FROM workspaces WHERE topic = ?", (topic,)).fetchone()
        return Path(path_from_db(row["path"])) if row else None

    # -- attempts ----------------------------------------------------------
    def record_attempt(self, exercise: str, status: str, file: "os.PathLike | str", seconds: float,
                       result: dict) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO attempts (exercise, at, status, file, seconds, result_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (exercise, now_iso(), status, path_to_db(file), seconds, json.dumps(result)),
            )

    def attempts(self, exercise: str) -> list[Attempt]:
        rows = self.conn.execute(
            "SELECT * FROM attempts WHERE exercise = ? ORDER BY id", (exercise,)
        ).fetchall()
        return [
            Attempt(r["exercise"], r["at"], r["status"], path_from_db(r["file"]), r["seconds"],
                    json.loads(r["result_json"]))
            for r in rows
        ]

    def passed(self, exercise: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM attempts WHERE exercise = ? AND status = 'pass' LIMIT 1", (exercise,)
        ).fetchone()
        return row is not None

    # -- card reviews (FSRS state is opaque JSON here; drill/reviews.py reads and writes it) ---
    def card_state(self, card_id: str) -> str | None:
        row = self.conn.execute("SELECT state_json FROM cards WHERE card_id = ?", (card_id,)).fetchone()
        return row["state_json"] if row else None

    def card_due_times(self) -> dict[str, str]:
        return {row["card_id"]: row["due"] for row in self.conn.execute("SELECT card_id, due FROM cards")}

    def save_card_states(self, states: list[tuple[str, str, str]],
                         review: tuple[str, str, int, str] | None = None) -> None:
        """Write (card_id, state_json, due) rows and, with `review` = (card_id, at, rating, log_json),
        its log entry, in one transaction: a state never lands without its review."""
        with self._writing():
            self.conn.executemany(
                "INSERT INTO cards (card_id, state_json, due) VALUES (?, ?, ?) "
                "ON CONFLICT (card_id) DO UPDATE SET state_json = excluded.state_json, due = excluded.due",
                states)
            if review is not None:
                self.conn.execute(
                    "INSERT INTO reviews (card_id, at, rating, log_json) VALUES (?, ?, ?, ?)", review)

    # -- mock interviews ---------------------------------------------------------
    def record_mock(self, topic: str, question: str, seconds: float, answer: str, covered: list,
                    score: float) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO mocks (topic, question, at, seconds, answer, covered_json, score) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (topic, question, now_iso(), seconds, answer, json.dumps(covered, ensure_ascii=False), score))

    def mock_order(self, topic: str) -> dict[str, int]:
        """For each question practised in `topic`, the id of its latest attempt (larger is later)."""
        rows = self.conn.execute(
            "SELECT question, MAX(id) AS last FROM mocks WHERE topic = ? GROUP BY question", (topic,))
        return {row["question"]: row["last"] for row in rows}

    # -- what-if mutants: graded outcomes, cached (drill/whatif.py reads and writes the JSON) ------
    def mutant_outcomes(self, file_key: str) -> dict[str, dict]:
        rows = self.conn.execute(
            "SELECT mutant_id, outcome_json FROM mutant_outcomes WHERE file_key = ?", (file_key,))
        return {row["mutant_id"]: json.loads(row["outcome_json"]) for row in rows}

    def save_mutant_outcome(self, file_key: str, mutant_id: str, exercise: str, outcome: dict) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO mutant_outcomes (file_key, mutant_id, exercise, at, outcome_json) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (file_key, mutant_id) DO UPDATE "
                "SET at = excluded.at, outcome_json = excluded.outcome_json",
                (file_key, mutant_id, exercise, now_iso(), json.dumps(outcome)))

    # -- hints ---------------------------------------------------------------
    def hints_revealed(self, exercise: str) -> int:
        row = self.conn.execute("SELECT revealed FROM hints WHERE exercise = ?", (exercise,)).fetchone()
        return row["revealed"] if row else 0

    def set_hints_revealed(self, exercise: str, count: int) -> None:
        with self._writing():
            self.conn.execute(
                "INSERT INTO hints (exercise, revealed) VALUES (?, ?) "
                "ON CONFLICT (exercise) DO UPDATE SET revealed = excluded.revealed",
                (exercise, count),
            )
