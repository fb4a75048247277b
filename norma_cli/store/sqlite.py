"""The embedded SQLite store: connection settings, numbered migrations, trace rows.

WAL journal, ``BEGIN IMMEDIATE`` for writes, a busy timeout so concurrent ``norma`` processes
queue instead of failing. Migrations are numbered and each is recorded once in
``schema_migrations``. SQL here sticks to what PostgreSQL also runs (no SQLite-only syntax in
table definitions or queries) so a second backend stays a small step.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from norma_cli.core.record import field, record
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
    # 2: the trace becomes a hash chain (store/trace.py). Rows written before it stay, unchained,
    # in traces_unchained; seq is the chain position (an INTEGER PRIMARY KEY: the rowid in SQLite).
    (
        2,
        [
            "ALTER TABLE traces RENAME TO traces_unchained",
            """CREATE TABLE traces (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                tool_use_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                agent TEXT,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                decision TEXT,
                stage TEXT NOT NULL,
                rule TEXT,
                rule_source TEXT,
                reason TEXT NOT NULL,
                status TEXT NOT NULL,
                is_error INTEGER NOT NULL,
                duration_ms DOUBLE PRECISION NOT NULL,
                spill_path TEXT,
                spill_sha256 TEXT,
                pending_id TEXT,
                events TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                prev_hash TEXT NOT NULL,
                hash TEXT NOT NULL
            )""",
            "CREATE INDEX trace_session ON traces (session_id)",
            "CREATE INDEX trace_tool ON traces (tool)",
        ],
    ),
    # 3: approvals (store/approvals.py) and the record surfaces (store/records.py).
    (
        3,
        [
            """CREATE TABLE approvals (
                id TEXT PRIMARY KEY,
                tool TEXT NOT NULL,
                input_digest TEXT NOT NULL,
                input TEXT NOT NULL,
                agent TEXT,
                session_id TEXT NOT NULL,
                requester TEXT NOT NULL,
                stage TEXT NOT NULL,
                rule TEXT,
                rule_source TEXT,
                reason TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                decider TEXT,
                decision_reason TEXT,
                decided_at DOUBLE PRECISION,
                consumed_at DOUBLE PRECISION,
                consumed_by TEXT
            )""",
            "CREATE INDEX approvals_call ON approvals (tool, input_digest)",
            "CREATE INDEX approvals_status ON approvals (status)",
            """CREATE TABLE activity (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                event TEXT NOT NULL,
                reason TEXT,
                agent TEXT,
                cwd TEXT,
                pid INTEGER,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX activity_session ON activity (session_id)",
            """CREATE TABLE llm_records (
                id TEXT PRIMARY KEY,
                purpose TEXT NOT NULL,
                provider TEXT,
                model TEXT,
                url TEXT,
                session_id TEXT,
                trace_id TEXT,
                tool_use_id TEXT,
                request TEXT,
                response TEXT,
                status INTEGER,
                error TEXT,
                duration_ms DOUBLE PRECISION,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE traffic (
                id TEXT PRIMARY KEY,
                tool TEXT,
                session_id TEXT,
                tool_use_id TEXT,
                method TEXT NOT NULL,
                url TEXT NOT NULL,
                status INTEGER,
                request_bytes INTEGER NOT NULL,
                response_bytes INTEGER NOT NULL,
                request_sha256 TEXT,
                response_sha256 TEXT,
                duration_ms DOUBLE PRECISION,
                error TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE VIEW tool_usage AS
                SELECT tool, agent, session_id,
                       COUNT(*) AS calls,
                       SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed,
                       SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed,
                       SUM(CASE WHEN status = 'denied' THEN 1 ELSE 0 END) AS denied,
                       SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END) AS pending,
                       SUM(duration_ms) AS total_ms,
                       MIN(created_at) AS first_at,
                       MAX(created_at) AS last_at
                FROM traces GROUP BY tool, agent, session_id""",
        ],
    ),
    # 4: the tool catalog, one-shot data migrations, per-session skill unlocks
    # (norma_cli/store/catalog_repo.py reads and writes these).
    (
        4,
        [
            """CREATE TABLE tools (
                name TEXT PRIMARY KEY,
                source TEXT NOT NULL,
                plugin TEXT,
                enabled INTEGER NOT NULL,
                agents TEXT,
                description TEXT,
                input_schema TEXT,
                deferred INTEGER NOT NULL,
                custom_kind TEXT,
                custom_exec TEXT,
                custom_timeout DOUBLE PRECISION,
                custom_max_output INTEGER,
                custom_options TEXT,
                code_digest TEXT,
                status TEXT NOT NULL,
                edited TEXT NOT NULL,
                created_by TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                synced_at DOUBLE PRECISION
            )""",
            """CREATE TABLE data_migrations (
                name TEXT PRIMARY KEY,
                detail TEXT,
                applied_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE session_unlocks (
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                skill TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (session_id, tool)
            )""",
        ],
    ),
    # 5: MCP definition pins and per-server baselines (norma_cli/mcp/pin.py).
    (
        5,
        [
            """CREATE TABLE mcp_pins (
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                name TEXT NOT NULL,
                state TEXT NOT NULL,
                live_digest TEXT NOT NULL,
                live_definition TEXT NOT NULL,
                pinned_digest TEXT,
                pinned_definition TEXT,
                previous TEXT,
                note TEXT NOT NULL,
                pinned_at DOUBLE PRECISION,
                seen_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (server, tool)
            )""",
            "CREATE INDEX mcp_pins_name ON mcp_pins (name)",
            """CREATE TABLE mcp_servers (
                server TEXT PRIMARY KEY,
                baseline_at DOUBLE PRECISION NOT NULL,
                seen_at DOUBLE PRECISION NOT NULL
            )""",
        ],
    ),
    # 6: agent session messages, as in each session's transcript.jsonl (norma_cli/agent/transcript.py).
    (
        6,
        [
            """CREATE TABLE messages (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                content TEXT NOT NULL,
                agent TEXT,
                provider TEXT,
                model TEXT,
                input_tokens INTEGER,
                output_tokens INTEGER,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX messages_session ON messages (session_id, seq)",
        ],
    ),
]


@record
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
    reason: str = ""
    pending_id: str | None = None


@cache
def expected_objects() -> frozenset[str]:
    """The tables and views MIGRATIONS leave behind, replayed from their statements (CREATE
    TABLE/VIEW adds a name, ALTER TABLE ... RENAME TO moves one, DROP removes one), so a new
    migration is covered without a list to keep in step."""
    import re

    create = re.compile(r"\s*CREATE\s+(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
    rename = re.compile(r"\s*ALTER\s+TABLE\s+(\w+)\s+RENAME\s+TO\s+(\w+)", re.I)
    drop = re.compile(r"\s*DROP\s+(?:TABLE|VIEW)\s+(?:IF\s+EXISTS\s+)?(\w+)", re.I)
    names: set[str] = {"schema_migrations"}
    for _, stmts in MIGRATIONS:
        for stmt in stmts:
            if m := create.match(stmt):
                names.add(m[1])
            elif m := rename.match(stmt):
                names.discard(m[1])
                names.add(m[2])
            elif m := drop.match(stmt):
                names.discard(m[1])
    return frozenset(names)


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
                str(path),
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
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
        self.failed: str | None = None  # the first write failure of this process, if any
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
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error | StoreError):
                    self.failed = str(exc)
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                self.failed = str(exc)
                raise StoreError(f"store {self.path}: commit failed: {exc}") from None

    def _rollback(self) -> None:
        # SQLite may already have rolled back itself (a full disk, an I/O error): a second
        # ROLLBACK would fail and hide the error that matters.
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: {exc}") from None

    def migrate(self) -> None:
        """Apply the pending migrations; refuse a store this norma cannot safely write: one a
        newer norma migrated further, or one missing a table its migrations created (a call
        must never run when its trace cannot be written)."""
        with self._lock:
            try:
                names = self._schema_names()
                have = self._applied_versions(names)
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path} is unreadable: {exc}") from None
            known = max(v for v, _ in MIGRATIONS)
            newest = max(have, default=0)
            if newest > known:
                raise StoreError(
                    f"store {self.path} was written by a newer norma (schema {newest}, this norma"
                    f" knows up to {known}); upgrade norma or point [store] url elsewhere"
                )
            pending = [(v, stmts) for v, stmts in MIGRATIONS if v not in have]
            if pending:
                self._apply(pending)
                try:
                    names = self._schema_names()
                except sqlite3.Error as exc:
                    raise StoreError(f"store {self.path} is unreadable: {exc}") from None
            missing = sorted(expected_objects() - names)
            if missing:
                raise StoreError(
                    f"store {self.path} is damaged: {', '.join(missing)} missing (schema"
                    f" {known}); restore it from a backup or move it aside"
                )

    def _apply(self, pending: list[tuple[int, list[str]]]) -> None:
        try:
            with self.write() as conn:
                # another process may have migrated since the first look
                have = self._applied_versions(self._schema_names())
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

    def _schema_names(self) -> set[str]:
        """The tables and views in the database: one read of the schema SQLite has already
        parsed (a second backend asks its own catalog, e.g. information_schema)."""
        rows = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        ).fetchall()
        return {row[0] for row in rows}

    def _applied_versions(self, names: set[str]) -> set[int]:
        if "schema_migrations" not in names:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            return set()
        return {row[0] for row in self._conn.execute("SELECT version FROM schema_migrations")}

    def append_trace(self, rec: TraceRecord) -> tuple[int, str]:
        """Append one call's trace to the hash chain (store/trace.py); returns (seq, hash)."""
        return self.append_traces([rec])

    def append_traces(self, recs: list[TraceRecord]) -> tuple[int, str]:
        """Append several traces, in order, in one transaction (one commit for a batch group)."""
        from norma_cli.store import trace

        try:
            with self.write() as conn:
                return trace.append_many(conn, recs)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot write trace: {exc}") from None

    # Record surfaces (store/records.py): one row each, outside the trace chain.
    def record_traffic(self, **fields: Any) -> None:
        """One outbound HTTP request made by norma itself; see ``records.record_traffic``."""
        from norma_cli.store import records

        records.record_traffic(self, **fields)

    def record_llm(self, **fields: Any) -> None:
        """One model request/response (secrets redacted); see ``records.record_llm``."""
        from norma_cli.store import records

        records.record_llm(self, **fields)

    def record_activity(self, **fields: Any) -> None:
        """One session event (start, end); see ``records.record_activity``."""
        from norma_cli.store import records

        records.record_activity(self, **fields)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
