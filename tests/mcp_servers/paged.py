"""A stdio MCP server written with the ``mcp`` package's low-level ``Server`` whose tool list
comes in pages of three, chained by ``nextCursor`` (norma must follow it to the end)."""

from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(
        name=f"tool_{i}",
        description=f"tool number {i}",
        input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    )
    for i in range(8)
]
PAGE = 3


async def list_tools(
    ctx: object, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + PAGE
    return types.ListToolsResult(
        tools=TOOLS[start:end], next_cursor=str(end) if end < len(TOOLS) else None
    )


async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{params.name} got {params.arguments}")]
    )


async def main() -> None:
    server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
