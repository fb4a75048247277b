"""``norma plugins list``."""

from __future__ import annotations

from typing import Any

import click


@click.group("plugins")
def plugins() -> None:
    """Installed plugins and what they provide."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_plugins(app: Any, *, as_json: bool) -> None:
    """Show each loaded plugin: name, version, hooks, and the tools it registered."""
    rt = app.runtime(with_store=False)
    by_plugin: dict[str, list[str]] = {}
    for tool in rt.registry.all():
        by_plugin.setdefault(tool.plugin, []).append(tool.name)
    rows = [
        {
            "name": info.name,
            "version": info.version,
            "module": info.module,
            "entry_point": info.entry_point,
            "hooks": info.hooks,
            "tools": by_plugin.get(info.name, []),
        }
        for info in rt.plugins.info.values()
    ]
    replaced = [
        {"tool": r.name, "was": r.old_plugin, "now": r.new_plugin} for r in rt.registry.replacements
    ]
    if as_json:
        import json

        click.echo(json.dumps({"plugins": rows, "replaced_tools": replaced}, indent=2))
        return
    if not rows:
        click.echo("no plugins loaded")
    for row in rows:
        click.echo(f"{row['name']} {row['version']}  ({row['entry_point'] or row['module']})")
        click.echo(f"  hooks: {', '.join(row['hooks']) or '-'}")
        if row["tools"]:
            click.echo(f"  tools: {', '.join(row['tools'])}")
    for r in replaced:
        click.echo(f"tool {r['tool']}: registered by {r['was']}, replaced by {r['now']}")
