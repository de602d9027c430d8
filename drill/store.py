"""Progress, hints, card reviews and settings in one SQLite database.

Every write is one transaction, so a killed process leaves the previous state.
A file that is not a readable database is moved aside (never deleted) and the
user is told where it went.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from drill import paths

SCHEMA_VERSION = 1

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
    cram INTEGER NOT NULL DEFAULT 0, log_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL, question TEXT NOT NULL, at TEXT NOT NULL,
    seconds REAL NOT NULL, answer TEXT NOT NULL, covered_json TEXT NOT NULL,
    score REAL NOT NULL);
"""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class StoreError(Exception):
    """The progress database cannot be opened at all (reported in one line by the CLI)."""


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

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else paths.database()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot use {self.path.parent} for progress ({exc.strerror}); "
                             "set DRILL_HOME to a writable directory") from None
        self.conn = self._open()

    # -- opening ---------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect_and_migrate()
        except sqlite3.DatabaseError as exc:
            moved = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.rename(moved)
            print(
                f"drill: the progress database could not be read ({exc}); it was moved to "
                f"{moved} and a new one was started.",
                file=sys.stderr,
            )
            return self._connect_and_migrate()

    def _connect_and_migrate(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10)
        conn.row_factory = sqlite3.Row
        if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            conn.close()
            raise sqlite3.DatabaseError("integrity check failed")
        with conn:
            conn.executescript(SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        return conn

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
        with self.conn:
            self.conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_workspace(self, topic: str, path: Path) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO workspaces (topic, path, started_at) VALUES (?, ?, ?) "
                "ON CONFLICT (topic) DO UPDATE SET path = excluded.path",
                (topic, str(path), now_iso()),
            )

    def workspace(self, topic: str) -> Path | None:
        row = self.conn.execute("SELECT path FROM workspaces WHERE topic = ?", (topic,)).fetchone()
        return Path(row["path"]) if row else None

    # -- attempts ----------------------------------------------------------
    def record_attempt(self, exercise: str, status: str, file: str, seconds: float, result: dict) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO attempts (exercise, at, status, file, seconds, result_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (exercise, now_iso(), status, file, seconds, json.dumps(result)),
            )

    def attempts(self, exercise: str) -> list[Attempt]:
        rows = self.conn.execute(
            "SELECT * FROM attempts WHERE exercise = ? ORDER BY id", (exercise,)
        ).fetchall()
        return [
            Attempt(r["exercise"], r["at"], r["status"], r["file"], r["seconds"], json.loads(r["result_json"]))
            for r in rows
        ]

    def passed(self, exercise: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM attempts WHERE exercise = ? AND status = 'pass' LIMIT 1", (exercise,)
        ).fetchone()
        return row is not None

    # -- card reviews (FSRS state is opaque JSON here; drill.reviews owns its meaning) ---
    def card_state(self, card_id: str) -> str | None:
        row = self.conn.execute("SELECT state_json FROM cards WHERE card_id = ?", (card_id,)).fetchone()
        return row["state_json"] if row else None

    def card_due_times(self) -> dict[str, str]:
        return {row["card_id"]: row["due"] for row in self.conn.execute("SELECT card_id, due FROM cards")}

    def save_card_states(self, states: list[tuple[str, str, str]],
                         review: tuple[str, str, int, str] | None = None) -> None:
        """Write (card_id, state_json, due) rows and, with `review` = (card_id, at, rating, log_json),
        its log entry, in one transaction: a state never lands without its review."""
        with self.conn:
            self.conn.executemany(
                "INSERT INTO cards (card_id, state_json, due) VALUES (?, ?, ?) "
                "ON CONFLICT (card_id) DO UPDATE SET state_json = excluded.state_json, due = excluded.due",
                states)
            if review is not None:
                self.conn.execute(
                    "INSERT INTO reviews (card_id, at, rating, cram, log_json) VALUES (?, ?, ?, 0, ?)", review)

    # -- mock interviews ---------------------------------------------------------
    def record_mock(self, topic: str, question: str, seconds: float, answer: str, covered: list,
                    score: float) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO mocks (topic, question, at, seconds, answer, covered_json, score) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (topic, question, now_iso(), seconds, answer, json.dumps(covered, ensure_ascii=False), score))

    def mock_order(self, topic: str) -> dict[str, int]:
        """For each question practised in `topic`, the id of its latest attempt (larger is later)."""
        rows = self.conn.execute(
            "SELECT question, MAX(id) AS last FROM mocks WHERE topic = ? GROUP BY question", (topic,))
        return {row["question"]: row["last"] for row in rows}

    # -- hints ---------------------------------------------------------------
    def hints_revealed(self, exercise: str) -> int:
        row = self.conn.execute("SELECT revealed FROM hints WHERE exercise = ?", (exercise,)).fetchone()
        return row["revealed"] if row else 0

    def set_hints_revealed(self, exercise: str, count: int) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO hints (exercise, revealed) VALUES (?, ?) "
                "ON CONFLICT (exercise) DO UPDATE SET revealed = excluded.revealed",
                (exercise, count),
            )
