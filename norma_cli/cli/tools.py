"""``norma tools list | show | lint``."""

from __future__ import annotations

from typing import Any

import click


@click.group("tools")
def tools() -> None:
    """Inspect and lint the registered tools."""


@tools.command("list")
@click.option(
    "--all", "show_all", is_flag=True, help="Include tools hidden from the model (deferred)."
)
@click.option("--explain", is_flag=True, help="Per tool: exists / exposed / callable, and why not.")
@click.option("--agent", "agent_key", metavar="KEY", help="Agent key (same as the global --agent).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_tools(
    app: Any, *, show_all: bool, explain: bool, agent_key: str | None, as_json: bool
) -> None:
    """List the tools a model is shown (with --all: every callable tool).

    The set depends on --agent, the catalog and the skills invoked (SPEC §8).
    """
    if agent_key is not None:
        app.options["agent"] = agent_key
    rt = app.runtime(with_store=False)
    if rt.mcp is not None:
        rt.mcp.load()  # MCP servers never listed yet (the others: their last recorded listing)
    if explain:
        from norma_cli.cli.catalog import print_explain

        print_explain(rt.assembly, as_json)
        return
    chosen = rt.assembly.callable_tools() if show_all else rt.assembly.exposed()
    rows = [
        {
            "name": t.name,
            "plugin": t.plugin,
            "hidden": rt.registry.is_hidden(t.name),
            **t.metadata(),
            "description": (t.description or "").strip().splitlines()[0] if t.description else "",
            **((rt.mcp.describe(t.name) or {}) if rt.mcp is not None else {}),  # server, pin
        }
        for t in chosen
    ]
    if rt.mcp is not None and rt.mcp.quarantined():
        held = rt.mcp.quarantined()
        click.echo(
            f"norma: {len(held)} MCP tool(s) quarantined, not listed: {', '.join(p.name for p in held)}"
            " (see `norma catalog diff NAME`)",
            err=True,
        )
    if as_json:
        import json

        click.echo(json.dumps(rows, indent=2))
        return
    width = max((len(r["name"]) for r in rows), default=4)
    pins = any("pin" in r for r in rows)
    for r in rows:
        flags = "".join(
            [
                "R" if r["read_only"] else "-",
                "C" if r["concurrency_safe"] else "-",
                "A" if r["requires_approval"] else "-",
                "H" if r["hidden"] else "-",
            ]
        )
        pin = f"{r.get('pin', ''):<9} " if pins else ""
        click.echo(
            f"{r['name']:<{width}}  {flags}  {r['plugin']:<12}  {pin}{r['description'][:80]}"
        )
    if rows and not as_json:
        click.echo(
            "\nflags: R read-only, C concurrency-safe, A approval-required, H hidden", err=True
        )


@tools.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_tool(app: Any, *, name: str, as_json: bool) -> None:
    """Show one tool's definition, prompt and metadata."""
    import json

    from norma_cli.errors import NormaError

    rt = app.runtime(with_store=False)
    tool = rt.registry.get(name)
    if tool is None:
        raise NormaError(f"unknown tool: {name}")
    info = {
        **tool.definition(),
        "prompt": tool.prompt,
        "plugin": tool.plugin,
        "hidden": rt.registry.is_hidden(name),
        **tool.metadata(),
    }
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{tool.name}  (plugin: {tool.plugin})")
    click.echo(f"  {'  '.join(k for k, v in tool.metadata().items() if v) or 'no flags'}")
    click.echo(f"\n{tool.description}\n")
    if tool.prompt:
        click.echo(f"{tool.prompt}\n")
    click.echo(json.dumps(tool.input_schema, indent=2))


def _attach_lint() -> None:
    from norma_cli.cli.lint import lint

    tools.add_command(lint)


_attach_lint()
