"""``norma catalog sync``: bring the ``tools`` rows in line with the code-defined tools.

* A tool with no row gets one with the defaults: enabled, its code binding (none unless a
  custom tool names ``agents``), its code description, schema and deferred flag.
* An existing row gets the new code digest; its description, schema, deferred flag and custom
  fields follow the code unless the operator edited them. ``enabled`` and ``agents`` are
  never touched once the row exists: they belong to the operator (the seed's rule).
* A row whose tool no code defines any more is marked ``stale`` (never deleted: its edits
  come back if the tool does). Rows an operator created (``catalog add``) are left alone.
  A ``quarantined`` row stays quarantined (MCP pinning decides that, with ``catalog accept``).
* One-shot data migrations run first, each exactly once (recorded in ``data_migrations``).

Everything happens in one transaction, and rows that would not change are not written, so a
second sync of 10,000 unchanged tools writes nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from norma_cli.core.digest import canonical_json
from norma_cli.core.record import field, record
from norma_cli.store.catalog_repo import CatalogRow, CatalogTx, dump_agents, parse_agents

if TYPE_CHECKING:
    from norma_cli.catalog.assembly import Assembly
    from norma_cli.store.catalog_repo import CatalogRepo

# Fields sync refreshes from the code unless the operator edited them.
CODE_FIELDS = (
    "description",
    "input_schema_text",
    "deferred",
    "custom_kind",
    "custom_exec",
    "custom_timeout",
    "custom_max_output",
    "custom_options_text",
)
# row attribute -> the name `catalog set` records in `edited`
EDIT_NAME = {"input_schema_text": "input_schema", "custom_options_text": "custom_options"}


# ----------------------------------------------------------------------------- data migrations
def _normalise_agent_lists(tx: CatalogTx) -> str:
    """Agent bindings written by hand or by older tools as ``"a, b"``, ``"a;b"``, ``"*"`` or an
    unsorted JSON list become one canonical form: a sorted JSON array, or NULL for "all"."""
    changed = 0
    for name, raw in tx.execute("SELECT name, agents FROM tools WHERE agents IS NOT NULL"):
        canonical = dump_agents(parse_agents(raw))
        if canonical != raw:
            tx.execute(
                "UPDATE tools SET agents = ?, updated_at = ? WHERE name = ?",
                (canonical, time.time(), name),
            )
            changed += 1
    return f"normalised {changed} agent list(s)"


DataMigration = Callable[[CatalogTx], str]
DATA_MIGRATIONS: list[tuple[str, DataMigration]] = [
    ("0001_normalise_agent_lists", _normalise_agent_lists),
]


# ----------------------------------------------------------------------------- code rows
def definition_digest(definition: dict[str, Any], schema_text: str = "") -> str:
    """sha256 over the canonical JSON of a definition (its schema passed already encoded, so
    10,000 schemas are encoded once each, not twice)."""
    return hashlib.sha256(f"{canonical_json(definition)}\n{schema_text}".encode()).hexdigest()


def code_row(asm: Assembly, name: str, now: float) -> CatalogRow | None:
    """The row the code would create for ``name`` (None when no code defines it)."""
    c = asm.candidates.get(name)
    if c is None or c.operator_row:
        return None
    if c.custom is not None:
        spec = c.custom
        return CatalogRow(
            name=name,
            source="custom",
            plugin="custom",
            agents=spec.agents,
            description=spec.description,
            input_schema_text=canonical_json(spec.input_schema),
            deferred=spec.deferred,
            custom_kind=spec.kind,
            custom_exec=spec.exec,
            custom_timeout=spec.timeout,
            custom_max_output=spec.max_output,
            custom_options_text=canonical_json(spec.options()),
            code_digest=definition_digest({"source": "custom", "name": name, **spec.definition()}),
            created_at=now,
            updated_at=now,
            synced_at=now,
        )
    tool = asm.registry.get(name)
    if tool is None:
        return None
    orig = asm.originals.get(name, {})
    description = orig.get("description", tool.description) or ""
    schema_text = canonical_json(orig.get("input_schema", tool.input_schema))
    definition = {
        "name": name,
        "source": c.source,
        "plugin": c.plugin,
        "description": description,
        "prompt": orig.get("prompt", tool.prompt),
        "deferred": c.deferred,
        **tool.metadata(),
    }
    return CatalogRow(
        name=name,
        source=c.source,
        plugin=c.plugin,
        agents=c.agents,
        description=description,
        input_schema_text=schema_text,
        deferred=c.deferred,
        code_digest=definition_digest(definition, schema_text),
        created_at=now,
        updated_at=now,
        synced_at=now,
    )


@record
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # code digest changed
    kept_edits: dict[str, list[str]] = field(
        default_factory=dict
    )  # name -> edited fields the code changed
    stale: list[str] = field(default_factory=list)
    reactivated: list[str] = field(default_factory=list)
    migrations: dict[str, str] = field(default_factory=dict)
    unchanged: int = 0
    dry_run: bool = False
    # MCP (SPEC §11): per server "ok" or its error; quarantined tools and why
    mcp: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **({"mcp": self.mcp} if self.mcp else {}),
            "added": self.added,
            "updated": self.updated,
            "kept_edits": self.kept_edits,
            "stale": self.stale,
            "reactivated": self.reactivated,
            "data_migrations": self.migrations,
            "unchanged": self.unchanged,
            "dry_run": self.dry_run,
        }


def plan(
    asm: Assembly, rows: dict[str, CatalogRow], now: float
) -> tuple[list[CatalogRow], SyncReport]:
    """The rows to write and what they mean, without writing anything."""
    report = SyncReport()
    writes: list[CatalogRow] = []
    for name in asm.candidates:
        fresh = code_row(asm, name, now)
        if fresh is None:
            continue
        old = rows.get(name)
        if old is None:
            writes.append(fresh)
            report.added.append(name)
            continue
        changes: dict[str, Any] = {}
        kept: list[str] = []
        for attr in CODE_FIELDS:
            new_value, old_value = getattr(fresh, attr), getattr(old, attr)
            if new_value == old_value:
                continue
            if EDIT_NAME.get(attr, attr) in old.edited:
                kept.append(EDIT_NAME.get(attr, attr))
            else:
                changes[attr] = new_value
        if old.code_digest != fresh.code_digest:
            changes["code_digest"] = fresh.code_digest
            report.updated.append(name)
        if (old.source, old.plugin) != (fresh.source, fresh.plugin):
            changes.update(source=fresh.source, plugin=fresh.plugin)
        if old.status == "stale":
            changes["status"] = "active"
            report.reactivated.append(name)
        if kept and "code_digest" in changes:
            report.kept_edits[name] = kept
        if changes:
            writes.append(old.with_changes(**changes, updated_at=now, synced_at=now))
        else:
            report.unchanged += 1
    for name, old in rows.items():
        if name in asm.candidates or old.created_by == "operator" or old.status != "active":
            continue
        writes.append(old.with_changes(status="stale", updated_at=now, synced_at=now))
        report.stale.append(name)
    for names in (report.added, report.updated, report.stale, report.reactivated):
        names.sort()
    return writes, report


def sync(asm: Assembly, repo: CatalogRepo, *, dry_run: bool = False) -> SyncReport:
    now = time.time()
    # every MCP server is connected and listed; its tools' definitions meet their pins
    mcp = asm.mcp.collect(record=not dry_run) if asm.mcp is not None else {}
    if dry_run:
        applied = repo.applied_data_migrations()
        writes, report = plan(asm, repo.rows(), now)
        report.migrations = {n: "pending" for n, _ in DATA_MIGRATIONS if n not in applied}
        report.dry_run = True
        report.mcp = mcp
        return report
    with repo.tx() as tx:
        applied = tx.applied_data_migrations()
        ran: dict[str, str] = {}
        for name, migrate in DATA_MIGRATIONS:
            if name not in applied:
                ran[name] = migrate(tx)
                tx.record_data_migration(name, ran[name])
        writes, report = plan(asm, tx.rows(), now)
        tx.upsert(writes)
        if asm.mcp is not None:  # rows of quarantined MCP tools say so (new rows included)
            asm.mcp.mirror(tx.execute)
    report.migrations = ran
    report.mcp = mcp
    return report


def new_row_for(asm: Assembly, name: str) -> CatalogRow | None:
    """A row with the code defaults, for ``catalog set`` on a tool that was never synced."""
    return code_row(asm, name, time.time())


__all__ = ["DATA_MIGRATIONS", "SyncReport", "code_row", "new_row_for", "plan", "sync"]
