"""``norma catalog sync | list | show | set | add | remove | diff | accept``: the rows that
enable, bind and describe tools (SPEC §8). Edits made here are recorded per field and never
reverted by ``sync``. ``add`` and ``set`` apply the checks ``[[custom_tools]]`` get in config,
so no row they write can stop a later command; ``remove`` deletes what ``add`` made. ``diff``
and ``accept`` review and re-pin changed MCP tool definitions (§11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from norma_cli.catalog.assembly import Assembly
    from norma_cli.catalog.sync import SyncReport
    from norma_cli.store.catalog_repo import CatalogRepo, CatalogRow


@click.group("catalog")
def catalog() -> None:
    """The tool catalog: enable, bind and describe tools per agent."""


def _open(app: Any, *, any_agent: bool = False) -> tuple[Assembly, CatalogRepo]:
    from norma_cli.errors import NormaError

    if any_agent:  # sync looks at every code-defined tool, whatever --agent says
        app.options["agent"] = None
    rt = app.runtime()
    asm = rt.assembly
    if asm.repo is None or not asm.repo.writable:
        raise NormaError(f"the tool catalog cannot be opened: {asm.fallback or 'no store'}", 2)
    return asm, asm.repo


@catalog.command("sync")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def sync_cmd(app: Any, *, dry_run: bool, as_json: bool) -> None:
    """Add rows for new code-defined tools, refresh code digests, mark vanished tools stale.

    Operator edits (enabled, agents, description, schema, ...) are never reverted; one-shot
    data migrations run once.
    """
    from norma_cli.catalog.sync import sync

    asm, repo = _open(app, any_agent=True)
    report = sync(asm, repo, dry_run=dry_run)
    if as_json:
        import json

        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_sync(report, dry_run)
    unlisted = sorted(s for s, st in (report.mcp.get("servers") or {}).items() if st != "ok")
    if unlisted:
        # a CI job syncing to catch changed MCP definitions must not pass when some were
        # never seen: the rest is synced, the exit says what was not checked
        from norma_cli.errors import NormaError

        several = len(unlisted) > 1
        raise NormaError(
            f"catalog sync: MCP server{'s' if several else ''} {', '.join(unlisted)} could not"
            f" be listed; {'their' if several else 'its'} tools were not checked against their pins"
        )


def _print_sync(report: SyncReport, dry_run: bool) -> None:
    head = "catalog sync (dry run, nothing written)" if dry_run else "catalog sync"
    click.echo(
        f"{head}: {len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.stale)} stale, {report.unchanged} unchanged"
    )
    for name in report.added:
        click.echo(f"  + {name}")
    for name in report.updated:
        kept = report.kept_edits.get(name)
        click.echo(
            f"  ~ {name}: code changed"
            + (f"; kept operator edits of {', '.join(kept)}" if kept else "")
        )
    for name in report.reactivated:
        click.echo(f"  ^ {name}: back in code, active again")
    for name in report.stale:
        click.echo(f"  - {name}: no code defines it; marked stale")
    for name, detail in report.migrations.items():
        click.echo(f"  data migration {name}: {detail}")
    for server, status in (report.mcp.get("servers") or {}).items():
        if status != "ok":
            click.echo(f"  ! MCP server {server}: {status}")
    for why in (report.mcp.get("quarantined") or {}).values():
        click.echo(f"  ! {why}")


def _row_json(row: CatalogRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "source": row.source,
        "plugin": row.plugin,
        "enabled": row.enabled,
        "agents": list(row.agents) if row.agents is not None else None,
        "description": row.description,
        "input_schema": row.input_schema,
        "deferred": row.deferred,
        "custom_kind": row.custom_kind,
        "custom_exec": row.custom_exec,
        "custom_timeout": row.custom_timeout,
        "custom_max_output": row.custom_max_output,
        "custom_options": row.custom_options,
        "code_digest": row.code_digest,
        "status": row.status,
        "edited": sorted(row.edited),
        "created_by": row.created_by,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


@catalog.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_cmd(app: Any, *, as_json: bool) -> None:
    """List the catalog rows (`norma catalog sync` creates them)."""
    _, repo = _open(app)
    rows = sorted(repo.rows().values(), key=lambda r: r.name)
    if as_json:
        import json

        click.echo(json.dumps([_row_json(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo(
            "no catalog rows yet: every tool runs with its code defaults (run `norma catalog sync`)",
            err=True,
        )
        return
    width = max(len(r.name) for r in rows)
    click.echo(
        f"{'NAME':<{width}}  {'SOURCE':<7}  {'ON':<3}  {'DEF':<3}  {'STATUS':<11}  {'AGENTS':<16}  EDITED"
    )
    for r in rows:
        agents = "*" if r.agents is None else ",".join(r.agents) or "(none)"
        click.echo(
            f"{r.name:<{width}}  {r.source:<7}  {'yes' if r.enabled else 'no':<3}  "
            f"{'yes' if r.deferred else 'no':<3}  {r.status:<11}  {agents:<16}  {','.join(sorted(r.edited))}"
        )


@catalog.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_cmd(app: Any, *, name: str, as_json: bool) -> None:
    """One row, in full, and what it means for this run."""
    import json

    from norma_cli.errors import NormaError

    asm, repo = _open(app)
    row = repo.row(name)
    if row is None:
        raise NormaError(f"no catalog row {name!r} (run `norma catalog sync`)")
    info = _row_json(row)
    state = next((s for s in asm.explain() if s.name == name), None)
    if state is not None:
        info["this_run"] = {
            "agent": asm.agent.name if asm.agent else None,
            "exists": state.exists,
            "exposed": state.exposed,
            "callable": state.callable,
            "reasons": state.reasons,
        }
    click.echo(json.dumps(info, indent=2) if as_json else _show_text(info))


def _show_text(info: dict[str, Any]) -> str:
    import json

    lines = [f"{info['name']}  ({info['source']}, {info['status']})"]
    for key in (
        "plugin",
        "enabled",
        "agents",
        "deferred",
        "description",
        "custom_kind",
        "custom_exec",
        "custom_timeout",
        "custom_max_output",
        "code_digest",
        "edited",
        "created_by",
    ):
        if info.get(key) not in (None, "", [], {}):
            lines.append(f"  {key}: {info[key]}")
    if "this_run" in info:
        lines.append(f"  this run: {json.dumps(info['this_run'])}")
    if info.get("input_schema"):
        lines.append(json.dumps(info["input_schema"], indent=2))
    return "\n".join(lines)


def _schema_arg(text: str) -> dict[str, Any]:
    import json

    from norma_cli.errors import UsageError

    if text.startswith("@"):
        from norma_cli.userfiles import read_text

        text = read_text(text[1:], "schema file")  # never forever: /dev/zero is refused
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--schema is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError("--schema is not valid JSON: nested too deeply") from None
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise UsageError('--schema must be a JSON Schema object with "type": "object"')
    from norma_cli.core.schema import CompiledSchema, InvalidSchema

    try:
        CompiledSchema(schema)
    except InvalidSchema as exc:
        raise UsageError(f"--schema: {exc}") from None
    return schema


def _agents_arg(text: str) -> tuple[str, ...] | None:
    from norma_cli.store.catalog_repo import parse_agents

    return () if not text.strip() else parse_agents(text)


def _warn_unknown_agents(app: Any, agents: tuple[str, ...] | None) -> None:
    from norma_cli.catalog.agents import agent_names

    known = set(agent_names(app.runtime().config))
    for a in agents or ():
        if a not in known:
            click.echo(f"norma: warning: no [agents.{a}] in the config (yet)", err=True)


@catalog.command("set")
@click.argument("name")
@click.option("--enable/--disable", "enabled", default=None, help="Turn the tool on or off.")
@click.option(
    "--agents", metavar="A,B", help="Bind to these agents only ('*' = every agent, '' = none)."
)
@click.option("--description", metavar="TEXT", help="Replace the description a model sees.")
@click.option(
    "--schema",
    metavar="JSON|@FILE",
    help="Replace the input schema (defaults fill missing inputs).",
)
@click.option(
    "--deferred/--no-deferred",
    "deferred",
    default=None,
    help="Hide the schema (SearchExtraTools finds it).",
)
@click.option(
    "--exec", "exec_", metavar="TEXT", help="Custom tools: the command template, script or hint."
)
@click.option("--timeout", type=float, help="Custom tools: seconds.")
@click.option("--max-output", type=int, help="Custom tools: characters kept.")
@click.option(
    "--reset",
    multiple=True,
    metavar="FIELD",
    help="Forget an edit: the code's value applies again (repeatable).",
)
@click.pass_obj
def set_cmd(
    app: Any,
    *,
    name: str,
    enabled: bool | None,
    agents: str | None,
    description: str | None,
    schema: str | None,
    deferred: bool | None,
    exec_: str | None,
    timeout: float | None,
    max_output: int | None,
    reset: tuple[str, ...],
) -> None:
    """Edit a row; each edited field is recorded and never reverted by `catalog sync`."""
    import time

    from norma_cli.catalog.sync import new_row_for
    from norma_cli.core.digest import canonical_json
    from norma_cli.errors import UsageError
    from norma_cli.store.catalog_repo import EDITABLE

    asm, repo = _open(app)
    row = repo.row(name) or new_row_for(asm, name)
    if row is None:
        raise UsageError(
            f"no tool {name!r}: not in the catalog and no code defines it (custom tools: `catalog add`)"
        )
    changes: dict[str, Any] = {}
    edited = set(row.edited)
    if enabled is not None:
        changes["enabled"] = enabled
    if agents is not None:
        changes["agents"] = _agents_arg(agents)
        _warn_unknown_agents(app, changes["agents"])
    if description is not None:
        changes["description"] = description
    if schema is not None:
        changes["input_schema_text"] = canonical_json(_schema_arg(schema))
        edited.add("input_schema")
    if deferred is not None:
        changes["deferred"] = deferred
    custom = {"custom_exec": exec_, "custom_timeout": timeout, "custom_max_output": max_output}
    if any(v is not None for v in custom.values()) and row.source != "custom":
        raise UsageError(f"{name} is not a custom tool: --exec/--timeout/--max-output do not apply")
    changes.update({k: v for k, v in custom.items() if v is not None})
    edited.update(k for k in changes if k in EDITABLE)
    for field_name in reset:
        if field_name not in EDITABLE:
            raise UsageError(f"--reset {field_name}: expected one of {', '.join(EDITABLE)}")
        edited.discard(field_name)
    if not changes and not reset:
        raise UsageError("nothing to set (see `norma catalog set --help`)")
    updated = row.with_changes(**changes, edited=frozenset(edited), updated_at=time.time())
    if updated.source == "custom":
        _check_custom(asm, updated)
    repo.save([updated])
    click.echo(
        f"{name}: "
        + ", ".join(sorted(set(changes) | {f"reset {f}" for f in reset})).replace(
            "input_schema_text", "input_schema"
        )
    )


def _check_custom(asm: Assembly, row: CatalogRow) -> None:
    """An edited custom row must still make a valid tool (the same checks as config)."""
    from norma_cli.catalog.custom import CustomToolSpec, check
    from norma_cli.errors import ConfigError, UsageError

    base = asm.custom_specs.get(row.name) or CustomToolSpec(row.name, row.custom_kind or "")
    try:
        check(base.with_row(row, all_fields=row.created_by == "operator"))
    except ConfigError as exc:
        raise UsageError(str(exc).replace("catalog: ", "")) from None


@catalog.command("add")
@click.argument("name")
@click.option("--kind", type=click.Choice(["shell", "command", "script", "http"]), required=True)
@click.option(
    "--exec",
    "exec_",
    metavar="TEXT",
    default="",
    help="Command template, script (code or @path) or CLI hint.",
)
@click.option("--description", default="", help="What the tool does, for the model.")
@click.option(
    "--schema", metavar="JSON|@FILE", help="Input schema (command: inferred from {{placeholders}})."
)
@click.option("--url", default="", help="http: the URL template.")
@click.option("--method", default="GET", help="http: the method.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="http: a header template (repeatable).",
)
@click.option("--body", default=None, help="http: the body template ({{param}} is JSON-encoded).")
@click.option("--timeout", type=float, default=None, help="Seconds (default 60).")
@click.option("--max-output", type=int, default=None, help="Characters kept (default 100000).")
@click.option("--deferred", is_flag=True, help="Hide the schema (found with SearchExtraTools).")
@click.option("--agents", metavar="A,B", default=None, help="Bind to these agents only.")
@click.pass_obj
def add_cmd(
    app: Any,
    *,
    name: str,
    kind: str,
    exec_: str,
    description: str,
    schema: str | None,
    url: str,
    method: str,
    headers: tuple[str, ...],
    body: str | None,
    timeout: float | None,
    max_output: int | None,
    deferred: bool,
    agents: str | None,
) -> None:
    """Create a custom tool that lives in the catalog (not in config)."""
    import time

    from norma_cli.catalog.custom import (
        DEFAULT_MAX_OUTPUT,
        DEFAULT_TIMEOUT_S,
        CustomToolSpec,
        check,
    )
    from norma_cli.core.digest import canonical_json
    from norma_cli.errors import ConfigError, UsageError
    from norma_cli.store.catalog_repo import CatalogRow

    asm, repo = _open(app)
    if (name in asm.candidates and not asm.candidates[name].operator_row) or repo.row(
        name
    ) is not None:
        raise UsageError(f"{name} already exists (edit it with `norma catalog set {name}`)")
    header_map: dict[str, str] = {}
    for item in headers:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--header {item!r}: expected NAME=VALUE")
        header_map[key.strip()] = value
    binding = _agents_arg(agents) if agents is not None else None
    spec = CustomToolSpec(
        name=name,
        kind=kind,
        exec=exec_,
        description=description,
        input_schema=_schema_arg(schema) if schema else {},
        timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,  # 0 is refused, not 60
        max_output=DEFAULT_MAX_OUTPUT if max_output is None else max_output,
        deferred=deferred,
        agents=binding,
        method=method.upper(),
        url=url,
        headers=header_map,
        body=body,
        source="catalog add",
        base_dir=str(app.runtime().session.cwd),
    )
    try:
        spec = check(spec)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    now = time.time()
    repo.save(
        [
            CatalogRow(
                name=name,
                source="custom",
                plugin="custom",
                agents=binding,
                description=description,
                input_schema_text=canonical_json(spec.input_schema),
                deferred=deferred,
                custom_kind=kind,
                custom_exec=spec.exec,
                custom_timeout=spec.timeout,
                custom_max_output=spec.max_output,
                custom_options_text=canonical_json(spec.options()),
                status="active",
                created_by="operator",
                created_at=now,
                updated_at=now,
            )
        ]
    )
    click.echo(f"{name}: added ({kind} custom tool in the catalog)")


@catalog.command("remove")
@click.argument("name")
@click.pass_obj
def remove_cmd(app: Any, *, name: str) -> None:
    """Delete a custom tool made with `catalog add`. (Rows of code-defined tools stay, as
    their edits do: turn such a tool off with `catalog set NAME --disable`.)"""
    from norma_cli.errors import UsageError

    _, repo = _open(app)
    row = repo.row(name)
    if row is None:
        raise UsageError(f"no catalog row {name!r} (see `norma catalog list`)")
    if row.created_by != "operator":
        raise UsageError(
            f"{name} is defined by code ({row.source}), not by `catalog add`: turn it off with"
            f" `norma catalog set {name} --disable`"
        )
    with repo.tx() as tx:
        tx.execute("DELETE FROM tools WHERE name = ? AND created_by = 'operator'", (name,))
    click.echo(f"{name}: removed from the catalog")


# ----------------------------------------------------------------------------- MCP pins (SPEC §11)
@catalog.command("diff")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def diff_cmd(app: Any, *, name: str, as_json: bool) -> None:
    """How an MCP tool's definition differs from its pin (as last seen at a connect or sync)."""
    from norma_cli.mcp.pin import diff_text

    book = _pin_book(app)
    pin = _seen_pin(book, name)
    previous = book.pin_of(pin.server, pin.previous) if pin.previous else None
    text = diff_text(pin, previous)
    if as_json:
        import json

        click.echo(json.dumps({
            "name": pin.name, "server": pin.server, "tool": pin.tool, "state": pin.state,
            "note": pin.note, "previous": previous.name if previous else None,
            "pinned_digest": pin.pinned_digest, "live_digest": pin.live_digest, "diff": text,
        }, indent=2))  # fmt: skip
        return
    click.echo(f"{pin.name}: {pin.state}" + (f" ({pin.note})" if pin.note else ""))
    click.echo(text or "no change: the definition seen is the one pinned")


@catalog.command("accept")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.pass_obj
def accept_cmd(app: Any, *, names: tuple[str, ...]) -> None:
    """Pin the definition an MCP tool was last seen with (the one `catalog diff` shows): a
    quarantined tool becomes callable again."""
    book = _pin_book(app)
    for name in names:
        before = _seen_pin(book, name)
        pin = book.accept(name)
        done = "already pinned" if before.state == "pinned" else f"{before.state} → pinned"
        click.echo(f"{name}: {done} ({pin.live_digest[:12]})")


def _pin_book(app: Any) -> Any:
    from norma_cli.errors import NormaError
    from norma_cli.mcp.pin import PinBook

    store = app.runtime().store
    if store is None:
        raise NormaError("no store: MCP pins live in the store", 2)
    return PinBook(store)


def _seen_pin(book: Any, name: str) -> Any:
    from norma_cli.errors import UsageError

    pin = book.get(name)
    if pin is None:
        raise UsageError(
            f"{name}: no MCP tool by that name has been seen (run `norma catalog sync`)"
        )
    return pin


# ----------------------------------------------------------------------------- tools list --explain
def print_explain(asm: Assembly, as_json: bool) -> None:
    """Per tool, the three states the seed tells apart (exists in source, exposed to the model,
    callable through the gate), and the reason for each "no"."""
    states = asm.explain()
    if as_json:
        import json

        from norma_cli.core.record import asdict

        payload = {
            "agent": asm.agent.name if asm.agent else None,
            "catalog": asm.fallback or "ok",
            "tools": [asdict(s) for s in states],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    who = f"agent {asm.agent.name}" if asm.agent else "no agent"
    click.echo(
        f"# {who}; catalog: {'unreadable, code defaults (' + asm.fallback + ')' if asm.fallback else 'ok'}"
    )
    width = max((len(s.name) for s in states), default=4)
    click.echo(f"{'NAME':<{width}}  {'SOURCE':<7}  EXISTS  EXPOSED  CALLABLE  WHY")
    for s in states:
        yes = {True: "yes", False: "no"}
        why = "; ".join(s.reasons + s.notes)
        click.echo(
            f"{s.name:<{width}}  {s.source:<7}  {yes[s.exists]:<6}  {yes[s.exposed]:<7}  "
            f"{yes[s.callable]:<8}  {why}"
        )
