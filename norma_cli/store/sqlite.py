"""The embedded SQLite store: connection settings, numbered migrations, trace rows.

WAL journal, ``BEGIN IMMEDIATE`` for writes, a busy timeout so concurrent ``norma`` processes
queue instead of failing. Migrations are numbered and each is recorded once in
``schema_migrations``. SQL here sticks to what PostgreSQL also runs (no SQLite-only syntax in
table definitions or queries) so a second backend stays a small step.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from norma_cli.errors import StoreError

BUSY_TIMEOUT_MS = 10_000

# (version, statements). Never edit a released migration: add a new one.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE traces (
                id TEXT PRIMARY KEY,
                tool_use_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                agent TEXT,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                decision TEXT,
                stage TEXT NOT NULL,
                rule TEXT,
                rule_source TEXT,
                status TEXT NOT NULL,
                is_error INTEGER NOT NULL,
                duration_ms DOUBLE PRECISION NOT NULL,
                spill_path TEXT,
                spill_sha256 TEXT,
                events TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX traces_session ON traces (session_id)",
            "CREATE INDEX traces_tool ON traces (tool)",
        ],
    ),
]


@dataclass
class TraceRecord:
    id: str
    tool_use_id: str
    session_id: str
    agent: str | None
    tool: str
    input_digest: str
    decision: str | None
    stage: str
    rule: str | None
    rule_source: str | None
    status: str
    is_error: bool
    duration_ms: float
    spill_path: str | None = None
    spill_sha256: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)


def sqlite_path(url: str) -> Path:
    """``sqlite:///abs/path.db`` or ``sqlite:///rel.db`` → a filesystem path."""
    if not url.startswith("sqlite:///"):
        raise StoreError(f"unsupported store url {url!r} (expected sqlite:///PATH)", 2)
    return Path(url[len("sqlite:///") :]).expanduser()


class Store:
    """One SQLite database. Thread-safe: one connection guarded by a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if not mode or mode[0].lower() != "wal":
                raise StoreError(f"store {path}: cannot switch to WAL journal mode")
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc.strerror or exc}") from None
        self._lock = threading.RLock()
        self.migrate()

    @classmethod
    def open(cls, url: str) -> Store:
        return cls(sqlite_path(url))

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken with BEGIN IMMEDIATE (no lock upgrade deadlocks)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: {exc}") from None
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"store {self.path}: commit failed: {exc}") from None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: {exc}") from None

    def migrate(self) -> None:
        with self._lock:
            try:
                have = self._applied_versions()
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path} is unreadable: {exc}") from None
            pending = [(v, stmts) for v, stmts in MIGRATIONS if v not in have]
            if not pending:
                return
            try:
                with self.write() as conn:
                    have = self._applied_versions()  # another process may have migrated
                    for version, stmts in pending:
                        if version in have:
                            continue
                        for stmt in stmts:
                            conn.execute(stmt)
                        conn.execute(
                            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                            (version, time.time()),
                        )
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: migration failed: {exc}") from None

    def _applied_versions(self) -> set[int]:
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        return {row[0] for row in self._conn.execute("SELECT version FROM schema_migrations")}

    def append_trace(self, rec: TraceRecord) -> None:
        try:
            with self.write() as conn:
                conn.execute(
                    "INSERT INTO traces (id, tool_use_id, session_id, agent, tool, input_digest, decision, stage,"
                    " rule, rule_source, status, is_error, duration_ms, spill_path, spill_sha256, events, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rec.id, rec.tool_use_id, rec.session_id, rec.agent, rec.tool, rec.input_digest,
                        rec.decision, rec.stage, rec.rule, rec.rule_source, rec.status, int(rec.is_error),
                        rec.duration_ms, rec.spill_path, rec.spill_sha256,
                        json.dumps(rec.events, separators=(",", ":"), default=str), rec.created_at,
                    ),
                )
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot write trace: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
