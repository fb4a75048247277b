"""Reading the hash-chained trace: filters, lookup by id, paging, and ``verify``.

The hash definition lives in ``trace`` (the writing side); this module walks the chain and
recomputes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import record
from norma_cli.errors import StoreError
from norma_cli.store.trace import COLUMNS, CONTENT, GENESIS, entry_hash

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

_PAGE = 2000
MAX_SEQ = 2**63 - 1  # SQLite INTEGER (a signed 64-bit integer)


@record
class TraceEntry:
    seq: int
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
    reason: str
    status: str
    is_error: bool
    duration_ms: float
    spill_path: str | None
    spill_sha256: str | None
    pending_id: str | None
    events: list[dict[str, Any]]
    created_at: float
    prev_hash: str
    hash: str

    @classmethod
    def from_row(cls, row: Any) -> TraceEntry:
        values = dict(zip(COLUMNS, row, strict=True))
        try:
            values["events"] = json.loads(values["events"])
        except (TypeError, ValueError):
            values["events"] = [{"state": "unreadable", "raw": values["events"]}]
        values["is_error"] = bool(values["is_error"])
        values["reason"] = values["reason"] or ""
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COLUMNS}


@record
class TraceFilter:
    session: str | None = None
    tool: str | None = None
    agent: str | None = None
    status: str | None = None
    since: float | None = None
    limit: int | None = None


@record
class Problem:
    """The first entry at which the chain does not hold."""

    seq: int
    trace_id: str | None
    message: str

    def __str__(self) -> str:
        who = f"entry {self.seq}" + (f" (trace {self.trace_id})" if self.trace_id else "")
        return f"{who}: {self.message}"


@record
class Verification:
    entries: int
    head_seq: int
    head_hash: str
    problem: Problem | None = None
    unchained: int = 0  # rows written before the chain existed (migration 2)

    @property
    def ok(self) -> bool:
        return self.problem is None


class TraceStore:
    """Queries over the chained trace of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def select(self, f: TraceFilter) -> list[TraceEntry]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("session_id", f.session),
            ("tool", f.tool),
            ("agent", f.agent),
            ("status", f.status),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if f.since is not None:
            where.append("created_at >= ?")
            params.append(f.since)
        sql = f"SELECT {', '.join(COLUMNS)} FROM traces"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC"
        if f.limit:
            sql += f" LIMIT {int(f.limit)}"
        rows = self.store.query(sql, tuple(params))
        return [TraceEntry.from_row(r) for r in reversed(rows)]

    def find(self, key: str) -> list[TraceEntry]:
        """Entries whose trace id, tool_use id or seq (``#12`` or ``12``) is ``key``; a trace
        id may be abbreviated to a unique prefix of at least 6 characters. One tool_use id can
        name calls of several sessions: all of them are returned."""
        cols = ", ".join(COLUMNS)
        digits = key.lstrip("#")
        # ASCII digits only (int() refuses some that isdigit() accepts), and within SQLite's
        # INTEGER: a seq beyond it names no entry rather than overflowing the bind
        seq = digits.lstrip("0") or "0"
        if digits.isascii() and digits.isdigit() and len(seq) <= 19 and int(seq) <= MAX_SEQ:
            rows = self.store.query(f"SELECT {cols} FROM traces WHERE seq = ?", (int(seq),))
            if rows:
                return [TraceEntry.from_row(r) for r in rows]
        rows = self.store.query(
            f"SELECT {cols} FROM traces WHERE id = ? OR tool_use_id = ? ORDER BY seq", (key, key)
        )
        if not rows and len(key) >= 6:
            pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.store.query(
                f"SELECT {cols} FROM traces WHERE id LIKE ? ESCAPE '\\' ORDER BY seq", (pattern,)
            )
            if len(rows) > 1:
                ids = ", ".join(r[1] for r in rows[:5])
                raise StoreError(f"trace id {key!r} is ambiguous ({ids}); give more of it")
        return [TraceEntry.from_row(r) for r in rows]

    def iter_all(self) -> Iterator[TraceEntry]:
        """Every entry in chain order, read a page at a time (the trace may be large)."""
        for row in self._pages():
            yield TraceEntry.from_row(row)

    def _pages(self) -> Iterator[Any]:
        last = -(2**62)
        while True:
            rows = self.store.query(
                f"SELECT {', '.join(COLUMNS)} FROM traces WHERE seq > ? ORDER BY seq LIMIT {_PAGE}",
                (last,),
            )
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    def head(self) -> tuple[int, str]:
        rows = self.store.query("SELECT seq, hash FROM traces ORDER BY seq DESC LIMIT 1")
        return (rows[0][0], rows[0][1]) if rows else (0, GENESIS)

    def verify(self, anchor: tuple[int, str] | None = None) -> Verification:
        """Walk the chain from the first entry; stop at the first entry that does not hold."""
        expected_seq, prev, count = 1, GENESIS, 0
        anchored = anchor is None
        problem: Problem | None = None
        for row in self._pages():
            values = dict(zip(COLUMNS, row, strict=True))
            seq, trace_id = values["seq"], values["id"]
            if seq != expected_seq:
                missing = (
                    f"entry {expected_seq}"
                    if seq == expected_seq + 1
                    else f"entries {expected_seq}-{seq - 1}"
                )
                problem = Problem(
                    seq,
                    trace_id,
                    f"{missing} before it {'is' if seq == expected_seq + 1 else 'are'} missing (deleted?)",
                )
                break
            if values["prev_hash"] != prev:
                problem = Problem(
                    seq,
                    trace_id,
                    "does not link to the entry before it (reordered, or the entry before it was replaced)",
                )
                break
            content = tuple(values[c] for c in CONTENT)
            if entry_hash(prev, seq, content) != values["hash"]:
                problem = Problem(seq, trace_id, "content does not match its hash (edited)")
                break
            if anchor is not None and seq == anchor[0]:
                if values["hash"] != anchor[1]:
                    problem = Problem(
                        seq, trace_id, f"hash {values['hash']} differs from the anchor {anchor[1]}"
                    )
                    break
                anchored = True
            prev, expected_seq, count = values["hash"], seq + 1, count + 1
        if problem is None and not anchored and anchor is not None:
            problem = Problem(
                anchor[0],
                None,
                f"anchored entry missing: the chain ends at entry {expected_seq - 1} (truncated?)",
            )
        unchained = self.store.query("SELECT COUNT(*) FROM traces_unchained")[0][0]
        return Verification(count, expected_seq - 1, prev, problem, unchained)


def parse_since(text: str, now: float | None = None) -> float:
    """``30s``/``10m``/``2h``/``7d`` ago, an ISO date or date-time, or epoch seconds."""
    now = time.time() if now is None else now
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if text and text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        return now - float(text[:-1]) * units[text[-1]]
    try:
        return float(text)
    except ValueError:
        pass
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise StoreError(
            f"--since {text!r}: expected 10m, 2h, 7d, an ISO date/time or epoch seconds", 2
        ) from None
    return moment.timestamp()
