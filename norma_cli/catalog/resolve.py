"""Catalog resolve (assembly step 5): what a ``tools`` row does to one code candidate.

Rules, per field:

* ``enabled`` and ``agents`` (the binding) are the operator's: whenever a row exists, its
  values apply (a tool with no row is enabled and unbound — norma works before any
  ``catalog sync``).
* ``description``, ``input_schema``, ``deferred`` and the custom fields apply only when the
  operator edited them; otherwise the live code-defined value applies, so a changed plugin is
  seen at once, not only after the next sync. Operator-created rows (``catalog add``) are
  their own definition: every field applies.
* ``status``: ``quarantined`` refuses the tool; ``stale`` is a note (the code that defined it
  had vanished at the last sync; if it is back, the row applies again).

The result says, per tool, whether the gate refuses it and why, in words ``tools list
--explain`` prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record

if TYPE_CHECKING:
    from norma_cli.catalog.agents import AgentSpec
    from norma_cli.catalog.custom import CustomToolSpec
    from norma_cli.store.catalog_repo import CatalogRow


@record
class Candidate:
    """A code-defined tool before the catalog is consulted."""

    name: str
    source: str  # builtin | plugin | custom | skill
    plugin: str | None = None
    custom: CustomToolSpec | None = None
    deferred: bool = False  # code default
    agents: tuple[str, ...] | None = None  # code default binding (custom tools may set one)
    base: bool = True  # subject to the agent's `tools` list (built-ins and plugin tools)
    server: str | None = None  # an MCP tool's server (visible per the agent's `mcp` list)
    operator_row: bool = False  # defined by a `catalog add` row, not by code


@record
class Resolved:
    name: str
    source: str
    plugin: str | None
    row: CatalogRow | None = None
    refusal: str | None = None  # why the gate refuses it, when it does
    deferred: bool = False
    description: str | None = None  # catalog override
    schema: dict[str, Any] | None = None  # catalog override
    notes: list[str] = field(default_factory=list)


def _edited(row: CatalogRow | None, name: str) -> bool:
    return row is not None and (name in row.edited or row.created_by == "operator")


def resolve(
    c: Candidate,
    row: CatalogRow | None,
    agent: AgentSpec | None,
    skill_servers: frozenset[str] = frozenset(),
) -> Resolved:
    """``skill_servers``: MCP servers a skill visible to the agent names (their tools are
    reachable, locked, even when the agent does not see the server directly)."""
    r = Resolved(c.name, c.source, c.plugin, row, deferred=c.deferred)
    refusals: list[str] = []
    if agent is not None and c.base and not agent.has_base(c.name):
        refusals.append(f"not one of agent {agent.name}'s tools ([agents.{agent.name}] tools)")
    if (
        agent is not None
        and c.server is not None
        and not agent.sees_server(c.server)
        and c.server not in skill_servers
    ):
        refusals.append(
            f"from MCP server {c.server}, which agent {agent.name} does not see ([agents.{agent.name}] mcp)"
        )
    if row is not None:
        if row.status == "quarantined":
            refusals.append("quarantined: its definition changed; review with `norma catalog diff`")
        elif row.status == "stale":
            r.notes.append("row marked stale at the last sync (run `norma catalog sync`)")
        if not row.enabled:
            refusals.append(f"disabled in the catalog (`norma catalog set {c.name} --enable`)")
    binding = row.agents if row is not None else c.agents
    if binding is not None:
        if agent is None:
            refusals.append(
                f"bound to agents {', '.join(binding) or '(none)'}; this run has no --agent"
            )
        elif agent.name not in binding:
            refusals.append(f"bound to agents {', '.join(binding) or '(none)'}, not {agent.name}")
    if _edited(row, "description") and row is not None and row.description is not None:
        r.description = row.description
        r.notes.append("description from the catalog")
    if _edited(row, "input_schema") and row is not None and row.input_schema_text:
        r.schema = row.input_schema
        r.notes.append("input schema from the catalog")
    if _edited(row, "deferred") and row is not None:
        r.deferred = row.deferred
    if refusals:
        r.refusal = f"{c.name} is " + "; ".join(refusals)
    return r
