"""The hash-chained trace: one entry per call, each entry's hash covering the previous one.

An entry is one row of ``traces``. Its hash is the sha256 of the compact canonical JSON of
``[prev_hash, seq, <every content column in a fixed order>]``; ``prev_hash`` is the hash of the
entry before it (64 zeros for the first). Editing any column, deleting an entry or moving one
breaks the chain at that entry, and ``verify`` names it. Deleting entries at the *end* leaves a
shorter chain that is still consistent: that is what the printed head is for (anchor it
elsewhere and pass it back with ``--anchor``).

Appends run inside ``BEGIN IMMEDIATE`` and read the current head there, so concurrent
processes writing one store serialize on SQLite's write lock and the chain never forks.
This module is the writing side (imported by every call that records); reading, filtering and
verifying live in ``trace_query``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import TYPE_CHECKING, Any

from norma_cli.core.digest import canonical_json

if TYPE_CHECKING:
    from norma_cli.store.sqlite import TraceRecord

GENESIS = "0" * 64
# Content columns in hash order. Never reorder: old entries would stop verifying.
CONTENT = (
    "id", "tool_use_id", "session_id", "agent", "tool", "input_digest", "decision", "stage",
    "rule", "rule_source", "reason", "status", "is_error", "duration_ms", "spill_path",
    "spill_sha256", "pending_id", "events", "created_at",
)  # fmt: skip
COLUMNS = ("seq", *CONTENT, "prev_hash", "hash")
_EVENTS = json.JSONEncoder(separators=(",", ":"), default=str)  # built once, not per call
_INSERT = f"INSERT INTO traces ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


def entry_hash(prev_hash: str, seq: int, content: tuple[Any, ...]) -> str:
    return hashlib.sha256(canonical_json([prev_hash, seq, *content]).encode("utf-8")).hexdigest()


def content_of(rec: TraceRecord) -> tuple[Any, ...]:
    """The stored values of a record, typed as SQLite will hand them back (so hashes verify)."""
    return (
        rec.id, rec.tool_use_id, rec.session_id, rec.agent, rec.tool, rec.input_digest,
        rec.decision, rec.stage, rec.rule, rec.rule_source, rec.reason or "", rec.status,
        int(rec.is_error), float(rec.duration_ms), rec.spill_path, rec.spill_sha256,
        rec.pending_id, _EVENTS.encode(rec.events),
        float(rec.created_at),
    )  # fmt: skip


def append(conn: sqlite3.Connection, rec: TraceRecord) -> tuple[int, str]:
    """Append one entry; the caller holds a ``BEGIN IMMEDIATE`` transaction on ``conn``."""
    return append_many(conn, [rec])


def append_many(conn: sqlite3.Connection, recs: list[TraceRecord]) -> tuple[int, str]:
    """Append entries in order under one head read (a batch's group commit); the caller
    holds a ``BEGIN IMMEDIATE`` transaction on ``conn``. Returns the new head."""
    head = conn.execute("SELECT seq, hash FROM traces ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev = (head[0], head[1]) if head else (0, GENESIS)
    rows = []
    for rec in recs:
        seq += 1
        content = content_of(rec)
        digest = entry_hash(prev, seq, content)
        rows.append((seq, *content, prev, digest))
        prev = digest
    conn.executemany(_INSERT, rows)
    return seq, prev
