"""One live connection to one MCP server, on norma's background event loop.

An ``async with Client(...)`` must be entered and left by the same task, so each connection
has an *owner* task that opens the transport and the session, then waits to be told to close;
listings and calls are separate tasks on the same loop using that session. Every wait is
bounded (``timeout`` for connect + initialize + listing, ``call_timeout`` per call): a dead
or hanging server is an error for its tools, never a hang of norma.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any

import anyio
import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError

from norma_cli.core.contract import ContentBlock, ToolOutput
from norma_cli.errors import NormaError
from norma_cli.mcp import ServerUnavailable
from norma_cli.mcp.config import ServerSpec

MAX_PAGES = 1000  # a server whose cursor never ends cannot keep norma listing forever
LOG_TAIL_CHARS = 600
LOG_ROTATE_BYTES = 10 << 20  # a server's stderr log over this is moved to NAME.log.1 at start
REASON_CHARS = 300  # a server's error text quoted on stderr: its first line, this long at most
CLOSE_WAIT_S = 8.0  # stdin close + grace + kill of a stdio server, or an HTTP session's DELETE


class ServerConnection:
    def __init__(
        self,
        spec: ServerSpec,
        *,
        cwd: Path,
        log_path: Path,
        on_tools_changed: Callable[[ServerConnection, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.spec = spec
        self.cwd = cwd
        self.log_path = log_path
        self.on_tools_changed = on_tools_changed
        self.client: Client | None = None
        self.error: str | None = None
        self.closed = False
        self._closing: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._relist_task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.closed

    # ------------------------------------------------------------------ lifecycle
    async def open_and_list(self) -> list[dict[str, Any]]:
        """Start the server, initialise the session and list every tool, within ``timeout``."""
        try:
            with anyio.fail_after(self.spec.timeout):
                await self._open()
                return await self.list_tools()
        except TimeoutError:
            await self.close()
            raise ServerUnavailable(
                self._describe(f"no answer within {self.spec.timeout:g}s (timeout)")
            ) from None
        except ServerUnavailable:
            await self.close()
            raise
        except Exception as exc:  # an error answer, a transport fault: this server's failure only
            await self.close()
            raise ServerUnavailable(self._describe(_reason(exc))) from None
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> None:
        ready = anyio.Event()
        self._closing, self._done = anyio.Event(), anyio.Event()
        self._owner = asyncio.get_running_loop().create_task(self._own(ready))
        await ready.wait()
        if self.client is None:
            raise ServerUnavailable(self._describe(self.error or "could not connect"))

    async def _own(self, ready: anyio.Event) -> None:
        assert self._closing is not None and self._done is not None
        log: IO[str] | None = None
        try:
            async with AsyncExitStack() as stack:
                if self.spec.transport == "stdio":
                    _rotate(self.log_path)
                    log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
                transport = await self._transport(stack, log)
                client = Client(
                    transport,
                    mode="legacy",  # every server speaks the initialize handshake; no probe round trip
                    cache=None,
                    message_handler=self._on_message,
                    client_info=mcp_types.Implementation(name="norma", version=_version()),
                )
                await stack.enter_async_context(client)
                self.client = client
                ready.set()
                await self._closing.wait()
        except (
            Exception
        ) as exc:  # this server's error, reported by _open; never raised out of the loop
            self.error = _reason(exc)
        finally:
            self.client = None
            self.closed = True
            if log is not None:
                log.close()
            ready.set()
            self._done.set()

    async def _transport(self, stack: AsyncExitStack, log: IO[str] | None) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            from norma_cli.mcp.stdio import stdio_transport

            assert log is not None
            command = spec.resolved_command(self.cwd)
            return stdio_transport(
                command,
                list(spec.args),
                spec.child_env(),
                spec.cwd or str(self.cwd),
                log,
                on_exit=self._server_exited,
            )
        headers = spec.http_headers()
        if spec.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(
                spec.url,
                headers=headers,
                timeout=spec.timeout,
                sse_read_timeout=max(300.0, spec.call_timeout),
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(
            headers=headers,
            timeout=httpx2.Timeout(spec.timeout, read=max(300.0, spec.call_timeout)),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(spec.url, http_client=http)

    async def close(self) -> None:
        """Leave the session and stop the server (bounded: the stdio transport gives the
        process a grace period, then kills its process group)."""
        self.closed = True
        owner = self._owner
        if owner is None or owner.done():
            return
        assert self._closing is not None and self._done is not None
        self._closing.set()
        if self.client is None:
            owner.cancel()  # still connecting (a server that never answers): stop waiting for it
        with anyio.move_on_after(CLOSE_WAIT_S):
            await self._done.wait()
        if not owner.done():
            owner.cancel()

    # ------------------------------------------------------------------ requests
    async def list_tools(self) -> list[dict[str, Any]]:
        """Every page of ``tools/list``, following ``nextCursor``."""
        client = self._client()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            try:
                page = await client.list_tools(cursor=cursor)
            except (MCPError, ValueError) as exc:
                # The SDK validates a page as a whole (a pydantic ValidationError is a
                # ValueError): one malformed definition fails the listing, and with it this
                # server, never the run (callers handle ServerUnavailable, not pydantic's errors).
                raise ServerUnavailable(self._describe(f"tools/list: {_reason(exc)}")) from None
            tools.extend(
                t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                return tools
            if cursor in seen:
                raise ServerUnavailable(
                    f"MCP server {self.spec.name}: tools/list repeats cursor {cursor!r}"
                )
            seen.add(cursor)
        raise ServerUnavailable(
            f"MCP server {self.spec.name}: tools/list did not end after {MAX_PAGES} pages"
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        """One ``tools/call``; ``isError``, protocol errors and timeouts become error results."""
        spec = self.spec
        try:
            client = self._client()
            with anyio.fail_after(spec.call_timeout + 1):  # the request timeout below fires first
                result = await client.call_tool(
                    tool, arguments, read_timeout_seconds=spec.call_timeout
                )
        except (TimeoutError, ServerUnavailable) as exc:
            text = str(exc) if isinstance(exc, ServerUnavailable) else ""
            return ToolOutput.error(
                text
                or f"MCP server {spec.name}: no answer within {spec.call_timeout:g}s (call_timeout)"
            )
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return ToolOutput.error(
                    f"MCP server {spec.name}: no answer within {spec.call_timeout:g}s (call_timeout)"
                )
            if exc.code == mcp_types.CONNECTION_CLOSED and exc.message == "Connection closed":
                # the SDK's own code for a closed transport (a server may send -32000 too)
                await self.close()
                return ToolOutput.error(self._describe("the server closed the connection"))
            return ToolOutput.error(f"MCP server {spec.name}: error {exc.code}: {exc.message}")
        except (
            Exception
        ) as exc:  # a malformed result, an output-schema violation, a transport fault
            return ToolOutput.error(f"MCP server {spec.name}: {_reason(exc)}")
        return to_output(result)

    def _server_exited(self) -> None:
        # The next call starts the server again (and re-checks its pins) instead of failing.
        self.closed = True
        if self._closing is not None:
            self._closing.set()

    def _client(self) -> Client:
        if self.client is None or self.closed:
            raise ServerUnavailable(self._describe("not connected"))
        return self.client

    async def _on_message(self, message: Any) -> None:
        if (
            isinstance(message, mcp_types.ToolListChangedNotification)
            and self.on_tools_changed is not None
        ):
            # Re-list in a task of its own: awaiting a request inside the notification handler
            # would park the session's receive loop that has to deliver the answer.
            self._relist_task = asyncio.get_running_loop().create_task(self._relist())

    @property
    def relisting(self) -> bool:
        return self._relist_task is not None and not self._relist_task.done()

    async def settle(self) -> None:
        """Wait for a re-listing in progress (a call must not slip in before its outcome)."""
        task = self._relist_task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=self.spec.timeout)

    async def _relist(self) -> None:
        try:
            with anyio.fail_after(self.spec.timeout):
                tools = await self.list_tools()
        except Exception:
            return
        if self.on_tools_changed is not None:
            self.on_tools_changed(self, tools)

    def _describe(self, what: str) -> str:
        text = f"MCP server {self.spec.name}: {what}"
        tail = self.log_tail()
        return f"{text} (server log {self.log_path}: {tail})" if tail else text

    def log_tail(self) -> str:
        if self.spec.transport != "stdio":
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - LOG_TAIL_CHARS))
                data = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in data.splitlines()[-4:] if line.strip())


# ----------------------------------------------------------------------------- results
def to_output(result: mcp_types.CallToolResult) -> ToolOutput:
    """MCP content blocks as norma's: text and images as such, anything else (audio, embedded
    resources, resource links) as its JSON; ``structuredContent`` as one more JSON block."""
    blocks: list[ContentBlock] = []
    for c in result.content:
        if isinstance(c, mcp_types.TextContent):
            blocks.append(ContentBlock("text", text=c.text))
        elif isinstance(c, mcp_types.ImageContent):
            blocks.append(ContentBlock("image", data=c.data, media_type=c.mime_type))
        else:
            blocks.append(
                ContentBlock(
                    "json", data=c.model_dump(by_alias=True, exclude_none=True, mode="json")
                )
            )
    if result.structured_content is not None:
        blocks.append(ContentBlock("json", data=result.structured_content))
    return ToolOutput(blocks, is_error=bool(result.is_error))


def _reason(exc: BaseException) -> str:
    """One short line for an exception, looking inside the exception groups anyio raises.

    A server's text is its first line, clipped: it ends up on stderr, where a server that
    answers with 500 KB of error message must not become a 500 KB line."""
    from pydantic import ValidationError

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        if exc.code == mcp_types.CONNECTION_CLOSED and exc.message == "Connection closed":
            return "the server closed the connection"
        return f"error {exc.code}: {_line(exc.message)}"
    if isinstance(exc, NormaError):
        return str(exc)
    if isinstance(exc, FileNotFoundError | PermissionError):
        return f"cannot start: {exc.strerror}: {exc.filename}"
    if isinstance(exc, ValidationError) and exc.errors():
        # pydantic's text is a multi-line report; its first error says enough
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _line(f"malformed reply: {where}: {first.get('msg', '')}")
    text = _line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _line(text: object) -> str:
    lines = str(text or "").strip().splitlines()
    first = lines[0].strip() if lines else ""
    return first if len(first) <= REASON_CHARS else first[:REASON_CHARS] + "…"


def _rotate(log_path: Path) -> None:
    """Start a server's stderr log, moving one over ``LOG_ROTATE_BYTES`` to ``NAME.log.1``
    first: the log is appended across runs and would otherwise grow without limit."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if log_path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(log_path, log_path.with_name(log_path.name + ".1"))
    except OSError:
        pass  # no log yet, or another run just moved it


def _quiet_sdk_logging() -> None:
    """The ``mcp`` SDK logs through ``logging``; norma configures no handler, so Python's
    last-resort handler would print its warnings (with whole tracebacks) on stderr, where
    every line is norma's. What the SDK reports reaches the user as the server's error."""
    for name in ("mcp", "client"):  # mcp/client/session.py logs to a logger named "client"
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


_quiet_sdk_logging()


def _version() -> str:
    from norma_cli import __version__

    return __version__
