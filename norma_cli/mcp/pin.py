"""Definition pinning: a digest of each MCP tool's full definition, and what a change means.

The definition pinned is the server's own: ``name``, ``title``, ``description``,
``inputSchema``, ``outputSchema`` and ``annotations``, as canonical JSON. Per server, the
first listing recorded in a writable store is the baseline (``catalog sync`` or the first
connect, whichever comes first): every tool in it is pinned. After that, at every connect,
``catalog sync`` and ``notifications/tools/list_changed``, the live definitions are compared:

* same digest as the pin                    → ``pinned`` (callable)
* a different digest                        → ``changed``  (quarantined)
* a tool the baseline did not have          → ``new``      (quarantined)
* ... whose definition matches one that vanished in the same listing → ``renamed`` (quarantined)
* a pinned tool the server no longer lists  → ``vanished`` (not callable; back when it returns)

Before any baseline, or when only a read-only view of the store exists (``tools list``),
tools are ``unpinned``. A quarantined tool stays so until ``norma catalog accept NAME`` pins
the definition that ``norma catalog diff NAME`` shows.

Tables ``mcp_pins`` and ``mcp_servers`` (migration 5 in ``norma_cli.store.sqlite``); the SQL
is portable to PostgreSQL.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.digest import canonical_json
from norma_cli.core.record import record, replace
from norma_cli.errors import StoreError, UsageError

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

DEFINITION_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
QUARANTINED = ("changed", "new", "renamed")
RENAME_SIMILARITY = 0.8  # mean difflib ratio of description and schema to call it a rename
_SIMILARITY_MAX_CHARS = 20_000  # above this, a field counts as similar only when identical
_SIMILARITY_MAX_PAIRS = 2_500  # a listing that swaps more than this: identical renames only

_COLUMNS = (
    "server",
    "tool",
    "name",
    "state",
    "live_digest",
    "live_definition",
    "pinned_digest",
    "pinned_definition",
    "previous",
    "note",
    "pinned_at",
    "seen_at",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM mcp_pins"
_UPSERT = (
    f"INSERT INTO mcp_pins ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"
    " ON CONFLICT (server, tool) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("server", "tool"))
)


def canonical_definition(tool: dict[str, Any]) -> str:
    """The pinned part of a ``tools/list`` entry (wire names), as canonical JSON."""
    return canonical_json({k: tool[k] for k in DEFINITION_FIELDS if tool.get(k) is not None})


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@record(frozen=True)
class Pin:
    server: str
    tool: str  # the server's own name for it
    name: str  # the registered name, mcp__SERVER__TOOL
    state: str  # pinned | changed | new | renamed | vanished | unpinned
    live_digest: str
    live_definition: str
    pinned_digest: str | None = None
    pinned_definition: str | None = None
    previous: str | None = None  # renamed: the vanished tool it looks like
    note: str = ""
    pinned_at: float | None = None
    seen_at: float = 0.0

    @property
    def quarantined(self) -> bool:
        return self.state in QUARANTINED

    @property
    def live(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.live_definition)
        return value

    def values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in _COLUMNS)

    @classmethod
    def from_db(cls, row: Sequence[Any]) -> Pin:
        return cls(**dict(zip(_COLUMNS, row, strict=True)))

    def refusal(self) -> str | None:
        """Why the gate refuses this tool, or None when it is callable."""
        review = (
            f"review with `norma catalog diff {self.name}`, then `norma catalog accept {self.name}`"
        )
        if self.state == "changed":
            return f"{self.name} is quarantined: its definition on MCP server {self.server} changed since it was pinned; {review}"
        if self.state == "new":
            return f"{self.name} is quarantined: a tool MCP server {self.server} did not offer when it was pinned; {review}"
        if self.state == "renamed":
            return f"{self.name} is quarantined: {self.note}; {review}"
        if self.state == "vanished":
            return f"{self.name} is no longer offered by MCP server {self.server}"
        return None


# ----------------------------------------------------------------------------- comparison
def compare(
    baselined: bool, old: dict[str, Pin], live: dict[str, tuple[str, str]], now: float
) -> dict[str, Pin]:
    """The pins after seeing ``live`` (tool -> (registered name, canonical definition)).

    Pure: reads nothing, writes nothing. Vanished pins are kept (their state says so).
    """
    out: dict[str, Pin] = {}
    fresh: list[str] = []
    for tool, (name, text) in live.items():
        d = digest(text)
        prev = old.get(tool)
        if not baselined:
            out[tool] = Pin(
                tool=tool,
                server="",
                name=name,
                state="pinned",
                live_digest=d,
                live_definition=text,
                pinned_digest=d,
                pinned_definition=text,
                pinned_at=now,
                seen_at=now,
            )
        elif prev is not None and prev.pinned_digest is not None:
            state = "pinned" if prev.pinned_digest == d else "changed"
            out[tool] = replace(
                prev,
                name=name,
                state=state,
                live_digest=d,
                live_definition=text,
                previous=None,
                note="",
                seen_at=now,
            )
        else:
            fresh.append(tool)
            out[tool] = Pin(
                tool=tool,
                server="",
                name=name,
                state="new",
                live_digest=d,
                live_definition=text,
                seen_at=now,
            )
    gone = {t: p for t, p in old.items() if t not in live and p.pinned_definition is not None}
    for tool, (was, how) in _renames({t: out[t].live_definition for t in fresh}, gone).items():
        out[tool] = replace(
            out[tool],
            state="renamed",
            previous=was,
            note=f"likely a rename of {old[was].name} ({how} definition)",
        )
    for tool, prev in old.items():
        if tool not in live:
            out[tool] = replace(prev, state="vanished")
    return out


def _renames(fresh: dict[str, str], gone: dict[str, Pin]) -> dict[str, tuple[str, str]]:
    """New tools that look like vanished ones: identical apart from name and title, or with
    a similar description and schema. Best pairs first; each vanished tool matches once."""
    pairs: list[tuple[float, str, str]] = []
    fuzzy = len(fresh) * len(gone) <= _SIMILARITY_MAX_PAIRS
    for tool, text in fresh.items():
        mine = _body(text)
        for was, pin in gone.items():
            theirs = _body(pin.pinned_definition or "{}")
            score = 2.0 if mine == theirs else _similarity(mine, theirs) if fuzzy else 0.0
            if score >= RENAME_SIMILARITY:
                pairs.append((score, tool, was))
    out: dict[str, tuple[str, str]] = {}
    used: set[str] = set()
    for score, tool, was in sorted(pairs, reverse=True):
        if tool not in out and was not in used:
            out[tool] = (was, "an identical" if score == 2.0 else "a similar")
            used.add(was)
    return out


def _body(text: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    return {k: v for k, v in value.items() if k not in ("name", "title")}


def _similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Mean of the description's and the input schema's similarity (difflib ratios)."""
    ratios = []
    for left, right in (
        (a.get("description") or "", b.get("description") or ""),
        (canonical_json(a.get("inputSchema")), canonical_json(b.get("inputSchema"))),
    ):
        if len(left) > _SIMILARITY_MAX_CHARS or len(right) > _SIMILARITY_MAX_CHARS:
            ratios.append(1.0 if left == right else 0.0)
        else:
            ratios.append(difflib.SequenceMatcher(None, left, right, autojunk=False).ratio())
    return sum(ratios) / len(ratios)


def diff_text(pin: Pin, previous: Pin | None = None) -> str:
    """A unified diff of the pinned definition against the one last seen."""
    base = previous if pin.state == "renamed" and previous is not None else pin
    before = _pretty(base.pinned_definition) if base.pinned_definition else []
    after = _pretty(pin.live_definition)
    label = base.name if base is not pin else pin.name
    lines = difflib.unified_diff(
        before,
        after,
        fromfile=f"{label} (pinned {base.pinned_digest[:12] if base.pinned_digest else 'never'})",
        tofile=f"{pin.name} (seen {pin.live_digest[:12]})",
        lineterm="",
    )
    return "\n".join(lines)


def _pretty(text: str) -> list[str]:
    return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False).splitlines()


# ----------------------------------------------------------------------------- the table
class PinBook:
    """``mcp_pins`` / ``mcp_servers`` over the read-write store, or read-only over the file
    (a command without a store, like ``tools list``: it compares but never records)."""

    def __init__(self, store: Store | None = None, path: Path | None = None) -> None:
        self._store = store
        self._path = path
        self._ro: sqlite3.Connection | None = None
        self.recording = True  # false: compare only (catalog sync --dry-run)

    @property
    def writable(self) -> bool:
        return self._store is not None

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self._store is not None:
            return [tuple(r) for r in self._store.query(sql, params)]
        if self._path is None or not self._path.exists():
            return []
        try:
            if self._ro is None:
                self._ro = sqlite3.connect(
                    f"file:{self._path}?mode=ro", uri=True, check_same_thread=False
                )
                self._ro.execute("PRAGMA busy_timeout = 10000")
            return self._ro.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a database from before migration 5: nothing pinned yet
            raise StoreError(f"cannot read MCP pins in {self._path}: {exc}") from None
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read MCP pins in {self._path}: {exc}") from None

    def load(self, servers: Iterable[str]) -> tuple[dict[str, dict[str, Pin]], set[str]]:
        """Pins per server, and which servers have a baseline. One query each, whatever the
        number of servers (a run with MCP configured pays this much, and no connection)."""
        wanted = set(servers)
        if not wanted:
            return {}, set()
        pins: dict[str, dict[str, Pin]] = {s: {} for s in wanted}
        for row in self._query(_SELECT):
            if row[0] in wanted:
                pin = Pin.from_db(row)
                pins[pin.server][pin.tool] = pin
        baselined = {r[0] for r in self._query("SELECT server FROM mcp_servers") if r[0] in wanted}
        return pins, baselined

    def get(self, name: str) -> Pin | None:
        rows = self._query(_SELECT + " WHERE name = ?", (name,))
        pins = [Pin.from_db(r) for r in rows]
        # a vanished pin may share its name with a live one; the live one is the answer
        pins.sort(key=lambda p: p.state == "vanished")
        return pins[0] if pins else None

    def pin_of(self, server: str, tool: str) -> Pin | None:
        rows = self._query(_SELECT + " WHERE server = ? AND tool = ?", (server, tool))
        return Pin.from_db(rows[0]) if rows else None

    def record(self, server: str, live: dict[str, tuple[str, str]]) -> dict[str, Pin]:
        """Compare a live listing with the pins and, when writable, record the outcome (the
        first recorded listing of a server is its baseline). Returns every pin of the server."""
        now = time.time()
        if self._store is None or not self.recording:
            pins, listed = self.load([server])
            if server not in listed:
                return {
                    t: Pin(
                        server=server,
                        tool=t,
                        name=n,
                        state="unpinned",
                        live_digest=digest(x),
                        live_definition=x,
                        seen_at=now,
                    )
                    for t, (n, x) in live.items()
                }
            return _with_server(server, compare(True, pins[server], live, now))
        try:
            with self._store.write() as conn:
                old = {
                    r[1]: Pin.from_db(r)
                    for r in conn.execute(_SELECT + " WHERE server = ?", (server,)).fetchall()
                }
                has_baseline = bool(
                    conn.execute("SELECT 1 FROM mcp_servers WHERE server = ?", (server,)).fetchall()
                )
                new = _with_server(server, compare(has_baseline, old, live, now))
                changed = [p for t, p in new.items() if old.get(t) != p]
                conn.executemany(_UPSERT, [p.values() for p in changed])
                conn.execute(
                    "INSERT INTO mcp_servers (server, baseline_at, seen_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (server) DO UPDATE SET seen_at = excluded.seen_at",
                    (server, now, now),
                )
                _mirror(conn.execute, new.values(), now)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot record MCP pins: {exc}") from None
        return new

    def accept(self, name: str) -> Pin:
        """Pin the definition last seen for ``name`` (what ``diff`` shows)."""
        if self._store is None:
            raise StoreError("no store: cannot accept")
        pin = self.get(name)
        if pin is None:
            raise UsageError(
                f"{name}: no MCP tool by that name has been seen (run `norma catalog sync`)"
            )
        if pin.state == "vanished":
            raise UsageError(
                f"{name}: MCP server {pin.server} no longer offers it; nothing to accept"
            )
        if pin.state == "pinned":
            return pin
        now = time.time()
        accepted = replace(
            pin,
            state="pinned",
            pinned_digest=pin.live_digest,
            pinned_definition=pin.live_definition,
            previous=None,
            note="",
            pinned_at=now,
        )
        with self._store.write() as conn:
            conn.execute(_UPSERT, accepted.values())
            _mirror(conn.execute, [accepted], now)
        return accepted

    def close(self) -> None:
        if self._ro is not None:
            self._ro.close()
            self._ro = None


def _with_server(server: str, pins: dict[str, Pin]) -> dict[str, Pin]:
    return {t: replace(p, server=server) for t, p in pins.items()}


def _mirror(execute: Any, pins: Iterable[Pin], now: float) -> None:
    """The catalog row of an MCP tool says quarantined while its pin does (``catalog list``
    shows it; the assembly refuses it either way)."""
    for p in pins:
        if p.quarantined:
            execute(
                "UPDATE tools SET status = 'quarantined', updated_at = ?"
                " WHERE name = ? AND source = 'mcp' AND status <> 'quarantined'",
                (now, p.name),
            )
        elif p.state == "pinned":
            execute(
                "UPDATE tools SET status = 'active', updated_at = ?"
                " WHERE name = ? AND source = 'mcp' AND status = 'quarantined'",
                (now, p.name),
            )


def mirror_statuses(execute: Any, pins: Iterable[Pin]) -> None:
    """``_mirror`` for catalog sync, inside its transaction (rows it just created included)."""
    _mirror(execute, pins, time.time())
