"""The catalog's tables behind one small repository: ``tools``, ``data_migrations`` and
``session_unlocks`` (migration 4 in ``norma_cli.store.sqlite``).

Every statement is written once, in SQL that PostgreSQL also runs (``ON CONFLICT ... DO
UPDATE``, no ``INSERT OR REPLACE``, no SQLite functions), with ``?`` placeholders that
``_sql`` turns into the driver's parameter style. Nothing outside this module writes catalog
SQL, so a second backend is one adapter, not a hunt through the code.

A repository is opened over the read-write ``Store`` or, when a command runs without one
(``tools list``), over a read-only connection that never creates the database file.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record, replace
from norma_cli.errors import StoreError

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

# Fields an operator may edit; an edited field is never reverted by `catalog sync`.
EDITABLE = (
    "enabled",
    "agents",
    "description",
    "input_schema",
    "deferred",
    "custom_kind",
    "custom_exec",
    "custom_timeout",
    "custom_max_output",
    "custom_options",
)
STATUSES = ("active", "quarantined", "stale")
SOURCES = ("builtin", "plugin", "mcp", "custom", "skill")

COLUMNS = (
    "name",
    "source",
    "plugin",
    *EDITABLE,
    "code_digest",
    "status",
    "edited",
    "created_by",
    "created_at",
    "updated_at",
    "synced_at",
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM tools"
# What a run needs: the large text columns only where they matter (an operator edited the row,
# or created it); elsewhere the code's own values apply, so they are not even transferred.
_HEAVY = ("description", "input_schema", "custom_exec", "custom_options")
_SELECT_LIGHT = "SELECT " + ", ".join("NULL" if c in _HEAVY else c for c in COLUMNS) + " FROM tools"
_EDITED = " WHERE edited <> '[]' OR created_by = 'operator'"
_UPSERT = (
    f"INSERT INTO tools ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
    " ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in ("name", "created_at"))
)


class CatalogUnreadable(StoreError):
    """The catalog could not be read (missing permissions, a corrupt file, a broken table)."""


def _sql(text: str, paramstyle: str) -> str:
    """``?`` placeholders in the driver's style (``qmark`` for sqlite3, ``format`` for psycopg)."""
    return text.replace("?", "%s") if paramstyle == "format" else text


def parse_agents(raw: Any) -> tuple[str, ...] | None:
    """An ``agents`` value as stored: a JSON array, or a legacy comma list; NULL/``*`` = all."""
    if raw is None:
        return None
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except ValueError:
                raw = text.strip("[]").replace('"', "").split(",")
        else:
            raw = text.replace(";", ",").split(",")
    names: list[str] = []
    for item in raw if isinstance(raw, list | tuple) else [raw]:
        name = str(item).strip()
        if name == "*":
            return None
        if name and name not in names:
            names.append(name)
    return tuple(sorted(names))


def dump_agents(agents: Sequence[str] | None) -> str | None:
    return None if agents is None else json.dumps(sorted(set(agents)))


@record
class CatalogRow:
    """One ``tools`` row. JSON columns stay text until asked for (10,000 rows load fast)."""

    name: str
    source: str
    plugin: str | None = None
    enabled: bool = True
    agents: tuple[str, ...] | None = None
    description: str | None = None
    input_schema_text: str | None = None
    deferred: bool = False
    custom_kind: str | None = None
    custom_exec: str | None = None
    custom_timeout: float | None = None
    custom_max_output: int | None = None
    custom_options_text: str | None = None
    code_digest: str | None = None
    status: str = "active"
    edited: frozenset[str] = frozenset()
    created_by: str = "sync"
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    synced_at: float | None = None

    @property
    def input_schema(self) -> dict[str, Any] | None:
        return json.loads(self.input_schema_text) if self.input_schema_text else None

    @property
    def custom_options(self) -> dict[str, Any]:
        return json.loads(self.custom_options_text) if self.custom_options_text else {}

    def values(self) -> tuple[Any, ...]:
        return (
            self.name,
            self.source,
            self.plugin,
            int(self.enabled),
            dump_agents(self.agents),
            self.description,
            self.input_schema_text,
            int(self.deferred),
            self.custom_kind,
            self.custom_exec,
            self.custom_timeout,
            self.custom_max_output,
            self.custom_options_text,
            self.code_digest,
            self.status,
            json.dumps(sorted(self.edited)),
            self.created_by,
            self.created_at,
            self.updated_at,
            self.synced_at,
        )

    def with_changes(self, **changes: Any) -> CatalogRow:
        return replace(self, **changes)

    @classmethod
    def from_db(cls, r: Sequence[Any]) -> CatalogRow:
        try:
            edited = frozenset(json.loads(r[15])) if r[15] and r[15] != "[]" else frozenset()
        except ValueError:
            edited = frozenset()
        return cls(
            name=r[0],
            source=r[1],
            plugin=r[2],
            enabled=bool(r[3]),
            agents=parse_agents(r[4]),
            description=r[5],
            input_schema_text=r[6],
            deferred=bool(r[7]),
            custom_kind=r[8],
            custom_exec=r[9],
            custom_timeout=r[10],
            custom_max_output=r[11],
            custom_options_text=r[12],
            code_digest=r[13],
            status=r[14],
            edited=edited,
            created_by=r[16],
            created_at=r[17],
            updated_at=r[18],
            synced_at=r[19],
        )


class CatalogRepo:
    """Reads and writes the catalog tables. ``tx()`` yields a cursor-like connection for a
    group of writes that must commit together (``BEGIN IMMEDIATE`` on SQLite)."""

    paramstyle = "qmark"

    def __init__(
        self,
        store: Store | None = None,
        *,
        readonly: sqlite3.Connection | None = None,
        label: str = "",
    ) -> None:
        self._store = store
        self._ro = readonly
        self.label = label or (str(store.path) if store is not None else "catalog")

    @classmethod
    def read_only(cls, path: Path) -> CatalogRepo | None:
        """A reader that never creates the file; None when there is no database yet."""
        if not path.exists():
            return None
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
        except sqlite3.Error as exc:
            raise CatalogUnreadable(f"cannot read the catalog in {path}: {exc}", 2) from None
        return cls(readonly=conn, label=str(path))

    @property
    def writable(self) -> bool:
        return self._store is not None

    # ------------------------------------------------------------------ reading
    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        sql = _sql(sql, self.paramstyle)
        try:
            if self._ro is not None:
                return self._ro.execute(sql, params).fetchall()
            assert self._store is not None
            return self._store.query(sql, params)
        except StoreError as exc:
            raise CatalogUnreadable(f"cannot read the catalog: {exc}", 2) from None
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc) and self._ro is not None:
                return []  # a database from before migration 4: no catalog yet
            raise CatalogUnreadable(f"cannot read the catalog in {self.label}: {exc}", 2) from None
        except sqlite3.Error as exc:
            raise CatalogUnreadable(f"cannot read the catalog in {self.label}: {exc}", 2) from None

    def rows(self, *, for_run: bool = False) -> dict[str, CatalogRow]:
        """Every row by name. ``for_run``: what a run needs, in one query when nobody edited
        a row — the large columns are read only for edited or operator-made rows (elsewhere
        the code's own values apply)."""
        if not for_run:
            return {r[0]: CatalogRow.from_db(r) for r in self._query(_SELECT)}
        rows = {r[0]: CatalogRow.from_db(r) for r in self._query(_SELECT_LIGHT)}
        if any(r.edited or r.created_by == "operator" for r in rows.values()):
            rows.update((r[0], CatalogRow.from_db(r)) for r in self._query(_SELECT + _EDITED))
        return rows

    def row(self, name: str) -> CatalogRow | None:
        found = self._query(_SELECT + " WHERE name = ?", (name,))
        return CatalogRow.from_db(found[0]) if found else None

    def applied_data_migrations(self) -> set[str]:
        return {r[0] for r in self._query("SELECT name FROM data_migrations")}

    def unlocks(self, session_id: str) -> dict[str, str]:
        """Tools a session has unlocked, with the skill that unlocked each."""
        rows = self._query(
            "SELECT tool, skill FROM session_unlocks WHERE session_id = ?", (session_id,)
        )
        return {r[0]: r[1] for r in rows}

    # ------------------------------------------------------------------ writing
    @contextmanager
    def tx(self) -> Iterator[CatalogTx]:
        if self._store is None:
            raise StoreError(f"{self.label}: the catalog is open read-only")
        try:
            with self._store.write() as conn:
                yield CatalogTx(conn, self.paramstyle)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write the catalog in {self.label}: {exc}") from None

    def save(self, rows: Iterable[CatalogRow]) -> None:
        with self.tx() as tx:
            tx.upsert(rows)

    def add_unlocks(self, session_id: str, tools: Iterable[str], skill: str) -> None:
        with self.tx() as tx:
            tx.unlock(session_id, tools, skill)

    def close(self) -> None:
        if self._ro is not None:
            self._ro.close()


class CatalogTx:
    """Writes inside one transaction (see ``CatalogRepo.tx``)."""

    def __init__(self, conn: Any, paramstyle: str) -> None:
        self.conn = conn
        self.paramstyle = paramstyle

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return list(self.conn.execute(_sql(sql, self.paramstyle), params).fetchall())

    def upsert(self, rows: Iterable[CatalogRow]) -> None:
        self.conn.executemany(_sql(_UPSERT, self.paramstyle), [r.values() for r in rows])

    def rows(self) -> dict[str, CatalogRow]:
        return {r[0]: CatalogRow.from_db(r) for r in self.execute(_SELECT)}

    def applied_data_migrations(self) -> set[str]:
        return {r[0] for r in self.execute("SELECT name FROM data_migrations")}

    def record_data_migration(self, name: str, detail: str) -> None:
        self.execute(
            "INSERT INTO data_migrations (name, detail, applied_at) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (name, detail, time.time()),
        )

    def unlock(self, session_id: str, tools: Iterable[str], skill: str) -> None:
        now = time.time()
        self.conn.executemany(
            _sql(
                "INSERT INTO session_unlocks (session_id, tool, skill, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (session_id, tool) DO NOTHING",
                self.paramstyle,
            ),
            [(session_id, t, skill, now) for t in tools],
        )
