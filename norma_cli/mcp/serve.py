"""``norma mcp serve``: the assembled, guarded tool set as an MCP server.

``tools/list`` answers with the tools the agent's model would be shown (``Assembly.exposed``);
``tools/call`` runs the call through the executor — the whole pipeline: lookup and gate,
schema, permission rules, hooks, the guard and its approvals, output cap, trace. A refusal
reaches the client as an ``isError`` result carrying the reason, and norma's own verdict
(decision, stage, rule, trace id) travels in the result's ``_meta.norma``.

The executor is synchronous (tools block, approvals wait), so each call runs in a worker
thread; the server's event loop keeps answering other requests meanwhile.

No request goes unanswered: on stdio a line that is not a valid message gets a JSON-RPC error
(with the request's id when it has one), and text that is not valid Unicode (lone surrogates a
plugin or an MCP tool produced) reaches the client with U+FFFD in its place.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage

from norma_cli.core.contract import ToolCall
from norma_cli.core.output import printable
from norma_cli.errors import NormaError, UsageError

if TYPE_CHECKING:
    from norma_cli.core.contract import ToolResult
    from norma_cli.runtime import Runtime

# One stdio message at most; far above any tools/call a client sends. A longer line (a client
# piping /dev/zero) is skipped and answered instead of read until memory runs out.
MAX_LINE_BYTES = 64 * 1024 * 1024


def build_server(rt: Runtime) -> Server[Any]:
    from norma_cli import __version__

    asm = rt.assembly

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=t.name,
                description=printable(t.description) if t.description else None,
                input_schema=valid_json(asm.schema_for(t)),
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
    # Text a tool did not check (a plugin's, an MCP server's, a file's raw bytes) may hold lone
    # surrogates; they cannot be encoded as JSON, and the client must still get its answer.
    content: list[Any] = []
    structured: dict[str, Any] | None = None
    for block in result.content:
        if block.type == "text":
            content.append(types.TextContent(type="text", text=printable(block.text)))
        elif block.type == "image":
            content.append(
                types.ImageContent(type="image", data=block.data, mime_type=block.media_type)
            )
        else:
            text = json.dumps(block.data, ensure_ascii=False)
            shown = printable(text)
            content.append(types.TextContent(type="text", text=shown))
            if isinstance(block.data, dict):
                structured = block.data if shown == text else json.loads(shown)
    return types.CallToolResult(
        content=content,
        structured_content=structured,
        is_error=result.is_error,
        _meta={"norma": valid_json(result.meta.to_wire())},
    )


def valid_json(value: Any) -> Any:
    """``value`` (JSON data) with every lone surrogate in its strings replaced by U+FFFD."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return value  # not plain JSON data: left to the SDK's own encoder
    shown = printable(text)
    return value if shown == text else json.loads(shown)


# ---------------------------------------------------------------------------------- stdio
# norma's own stdio transport, not the SDK's ``stdio_server``: that one drops a line it cannot
# parse or validate (a lone surrogate escape, a malformed request) without a word, so a client
# waits forever for the answer to a request whose id was right there; and one response it
# cannot encode ends the whole connection. Here every line gets its answer.


def serve_stdio(rt: Runtime) -> None:
    server = build_server(rt)
    wire_in, wire_out, restore = claim_stdio()
    try:
        anyio.run(_serve_stdio, server, wire_in, wire_out)
    finally:
        restore()


def claim_stdio() -> tuple[BinaryIO, BinaryIO, Callable[[], None]]:
    """Move the wire to private descriptors while serving: fd 0 reads /dev/null and fd 1
    writes to stderr, so a hook, plugin or child process that reads stdin or prints cannot
    steal or corrupt a protocol message. ``restore`` puts both back."""
    # Python leaves sys.stdin/stdout None when fd 0/1 was closed at startup; that number may
    # since belong to a file norma opened (the store), which must never be read or replaced.
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        if stream is None:
            raise UsageError(f"cannot serve MCP on stdio: {name} is closed")
    try:
        wire_in = os.dup(0)  # os.dup: a child process never inherits the wire
    except OSError as exc:
        raise UsageError(f"cannot serve MCP on stdio: stdin: {exc.strerror}") from None
    try:
        wire_out = os.dup(1)
    except OSError as exc:
        os.close(wire_in)
        raise UsageError(f"cannot serve MCP on stdio: stdout: {exc.strerror}") from None
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)

    # closefd=False: a reader thread abandoned at shutdown may still block on the descriptor
    return (
        os.fdopen(wire_in, "rb", closefd=False),
        os.fdopen(wire_out, "wb", closefd=False),
        restore,
    )


async def _serve_stdio(server: Server[Any], wire_in: BinaryIO, wire_out: BinaryIO) -> None:
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_read_messages, wire_in, inbound_send, outbound.clone())
        tg.start_soon(_write_messages, wire_out, outbound_receive)
        await server.run(inbound, outbound, server.create_initialization_options())


async def _read_messages(
    wire: BinaryIO,
    inbound: MemoryObjectSendStream[SessionMessage | Exception],
    outbound: MemoryObjectSendStream[SessionMessage],
) -> None:
    """One message a line. What cannot be read as one is answered here, on ``outbound``."""
    async with inbound, outbound:
        while True:
            line = await anyio.to_thread.run_sync(_next_line, wire, abandon_on_cancel=True)
            if line is None:
                return
            if isinstance(line, int):
                reply = _error(
                    None, types.INVALID_REQUEST, f"Invalid request: longer than {line:,} bytes"
                )
                await outbound.send(SessionMessage(reply))
                continue
            text = line.decode("utf-8", "replace")  # invalid UTF-8 reads as U+FFFD, as in the SDK
            if not text.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
            except Exception:  # pydantic's ValidationError, whatever the line holds
                rejection = rejected(text)
                if rejection is not None:
                    await outbound.send(SessionMessage(rejection))
                continue
            if isinstance(message, types.JSONRPCNotification) and '"id"' in text:
                rejection = misread_request(text)
                if rejection is not None:
                    await outbound.send(SessionMessage(rejection))
                    continue
            await inbound.send(SessionMessage(message))


def _next_line(wire: BinaryIO) -> bytes | int | None:
    """The next line; ``None`` at end of input; the cap (an int) for a line over it, skipped."""
    line = wire.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line
    while (rest := wire.readline(1 << 20)) and not rest.endswith(b"\n"):
        pass
    return MAX_LINE_BYTES


def rejected(text: str) -> types.JSONRPCError | None:
    """The answer to a line that is not a valid JSON-RPC message (JSON-RPC 2.0 §5.1): a parse
    error when it is not JSON, else an invalid request carrying the request's id when it has
    one that can be sent back. A malformed notification or response is never answered."""
    try:
        data = json.loads(text)  # lenient where the SDK is not: it reads a lone surrogate
    except (ValueError, RecursionError):
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    if isinstance(data, dict):
        if "method" not in data and ("result" in data or "error" in data):
            return None
        if "id" not in data and "method" in data:
            return None
    request_id = data.get("id") if isinstance(data, dict) else None
    if not _sendable_id(request_id):
        request_id = None
    if valid_json(data) is not data:
        why = "a string holds a lone surrogate escape, which is not valid Unicode"
    else:
        why = "not a valid JSON-RPC 2.0 request, notification or response"
    return _error(request_id, types.INVALID_REQUEST, f"Invalid request: {why}")


def misread_request(text: str) -> types.JSONRPCError | None:
    """A request whose id is neither a string nor an integer (``true``, ``1.5``, ``null``)
    validates as a notification, which is never answered; its sender waits for an answer."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(data, dict) and "id" in data):
        return None
    why = "Invalid request: the id must be a string or an integer"
    return _error(None, types.INVALID_REQUEST, why)


def _sendable_id(value: Any) -> bool:
    if isinstance(value, str):
        return printable(value) == value
    return isinstance(value, int) and not isinstance(value, bool)


def _error(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


async def _write_messages(
    wire: BinaryIO, outbound: MemoryObjectReceiveStream[SessionMessage]
) -> None:
    broken = False
    async with outbound:
        async for item in outbound:
            if broken:
                continue  # the client is gone; keep draining so no handler blocks on a send
            data = frame(item.message)
            if data is None:
                continue
            try:
                await anyio.to_thread.run_sync(_write, wire, data)
            except OSError:
                broken = True


def _write(wire: BinaryIO, data: bytes) -> None:
    wire.write(data)
    wire.flush()


def frame(message: types.JSONRPCMessage) -> bytes | None:
    """``message`` as one line of JSON. What cannot be encoded as it is (a lone surrogate that
    reached a result some other way) is sent with U+FFFD in its place; a response that cannot
    be encoded at all becomes an error with its id, never silence."""
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
    except Exception:
        pass
    try:
        data = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return printable(json.dumps(data, ensure_ascii=False)).encode() + b"\n"
    except Exception:
        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return None  # a request or notification of the server's own: nobody waits on it
        fallback = _error(message.id, types.INTERNAL_ERROR, "the response could not be encoded")
        return fallback.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


# ---------------------------------------------------------------------------------- http
def serve_http(rt: Runtime, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Streamable HTTP on ``http://HOST:PORT/mcp``; port 0 picks a free one. The socket is
    bound before anything is announced, so a busy port or a bad host is one error line;
    ``announce`` gets the URL once the server can be reached."""
    import uvicorn

    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    app = build_server(rt).streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    announce(f"http://{shown}:{sock.getsockname()[1]}/mcp")
    uvicorn.Server(config).run(sockets=[sock])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``; a failure is one line naming both."""
    where = f"[{host}]:{port}" if ":" in host else f"{host or repr(host)}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise UsageError(f"cannot listen on {where}: unknown host ({reason})") from None
    try:
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise NormaError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise NormaError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return sock
