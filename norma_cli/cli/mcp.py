"""``norma mcp serve``: norma's assembled, guarded tool set as an MCP server."""

from __future__ import annotations

from typing import Any

import click


@click.group("mcp")
def mcp() -> None:
    """MCP: serve norma's tools to any MCP client, through norma's policy."""


@mcp.command("serve")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio, or streamable HTTP on --host/--port at /mcp.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="http: the address to listen on."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="http: the port (0 picks a free one; the URL is printed on stderr).",
)
@click.option(
    "--agent", metavar="KEY", help="Serve this agent's tool set (same as the global --agent)."
)
@click.pass_obj
def serve(app: Any, *, transport: str, host: str, port: int, agent: str | None) -> None:
    """Expose the agent's tools as an MCP server. Every call runs through norma's whole
    pipeline (rules, hooks, guard, approvals, trace); a refused call is an isError result
    with the reason. Asks nobody answers in time are denied: there is no terminal to ask."""
    if agent:
        app.options["agent"] = agent
    rt = app.runtime(interactive=False)
    if rt.mcp is not None:
        rt.mcp.load()  # servers never listed yet: their tools must be in the first tools/list
    rt.session.start("mcp-serve")
    from norma_cli.mcp import serve as gateway

    if transport == "stdio":
        gateway.serve_stdio(rt)
        return
    tools = len(rt.assembly.exposed())
    gateway.serve_http(
        rt,
        host,
        port,
        lambda url: click.echo(f"norma: serving {tools} tools, listening on {url}", err=True),
    )
