"""``norma mcp serve``: the assembled, guarded tool set as an MCP server.

``tools/list`` answers with the tools the agent's model would be shown (``Assembly.exposed``);
``tools/call`` runs the call through the executor — the whole pipeline: lookup and gate,
schema, permission rules, hooks, the guard and its approvals, output cap, trace. A refusal
reaches the client as an ``isError`` result carrying the reason, and norma's own verdict
(decision, stage, rule, trace id) travels in the result's ``_meta.norma``.

The executor is synchronous (tools block, approvals wait), so each call runs in a worker
thread; the server's event loop keeps answering other requests meanwhile.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from norma_cli.core.contract import ToolCall

if TYPE_CHECKING:
    from norma_cli.core.contract import ToolResult
    from norma_cli.runtime import Runtime


def build_server(rt: Runtime) -> Server[Any]:
    from norma_cli import __version__

    asm = rt.assembly

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=t.name,
                description=t.description or None,
                input_schema=asm.schema_for(t),
                annotations=types.ToolAnnotations(
                    read_only_hint=t.read_only, destructive_hint=t.destructive
                ),
            )
            for t in asm.exposed()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        call = ToolCall(
            id=f"mcp_{os.urandom(12).hex()}", name=params.name, input=dict(params.arguments or {})
        )
        result = await anyio.to_thread.run_sync(rt.executor.run, call)
        return to_call_result(result)

    agent = f" as agent {rt.options.agent}" if rt.options.agent else ""
    return Server(
        "norma",
        version=__version__,
        instructions=f"Tools run through norma's policy pipeline{agent}: a refused call is an error result with the reason.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def to_call_result(result: ToolResult) -> types.CallToolResult:
    content: list[Any] = []
    structured: dict[str, Any] | None = None
    for block in result.content:
        if block.type == "text":
            content.append(types.TextContent(type="text", text=block.text))
        elif block.type == "image":
            content.append(
                types.ImageContent(type="image", data=block.data, mime_type=block.media_type)
            )
        else:
            content.append(
                types.TextContent(type="text", text=json.dumps(block.data, ensure_ascii=False))
            )
            if isinstance(block.data, dict):
                structured = block.data
    return types.CallToolResult(
        content=content,
        structured_content=structured,
        is_error=result.is_error,
        _meta={"norma": result.meta.to_wire()},
    )


def serve_stdio(rt: Runtime) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(rt)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def serve_http(rt: Runtime, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Streamable HTTP on ``http://HOST:PORT/mcp``; port 0 picks a free one (announced)."""
    import uvicorn

    app = build_server(rt).streamable_http_app(host=host)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    announce(f"http://{shown}:{bound}/mcp")
    uvicorn.Server(config).run(sockets=[sock])
