"""A stdio transport whose child sees exactly the environment norma gives it.

The ``mcp`` package's own ``stdio_client`` always merges its "safe defaults" (``HOME``,
``PATH``, ``USER``, ...) into the child's environment; norma's contract is an explicit
allowlist, so the process is spawned here with the environment built by ``ServerSpec``. The
rest follows the MCP lifecycle: newline-delimited JSON-RPC on stdin/stdout, and on close
stdin is closed, the server gets a grace period, then its whole process group is killed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import IO, Any

import anyio
import mcp_types
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

GRACE_S = 2.0  # for the server to exit on its own once stdin closes
KILL_WAIT_S = 2.0
MAX_MESSAGE_BYTES = 64 << 20  # one message norma holds in memory; a bigger one is refused
EDGE_BYTES = 4096  # kept of each end of a refused message, to find its id


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    errlog: IO[str],
    on_exit: Callable[[], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """``on_exit`` is told when the server's stdout ends (it exited, or is closing down)."""
    process = await anyio.open_process(
        [command, *args], env=env, cwd=cwd, stderr=errlog, start_new_session=True
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        framer = Framer()
        async with read_writer:
            try:
                async for chunk in process.stdout:
                    for line in framer.feed(chunk):
                        if isinstance(line, Oversize):
                            await read_writer.send(line.refusal())
                        elif line and not line.isspace():
                            await read_writer.send(_parse(line))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass  # closing down, or the server went away: the session sees the stream end
        if on_exit is not None:
            on_exit()

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: end the session, not hang

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tg.cancel_scope.cancel()


class Oversize:
    """A message over ``MAX_MESSAGE_BYTES``, read past without being kept: its size and ends."""

    def __init__(self, size: int, head: bytes, tail: bytes, limit: int) -> None:
        self.size, self.head, self.tail, self.limit = size, head, tail, limit

    def refusal(self) -> SessionMessage | Exception:
        """An error answer for the request it answers, when its id is at either end (where the
        SDKs put it); else an error the session reports (the call then meets call_timeout)."""
        what = f"a message of {self.size} bytes, over norma's limit of {self.limit} bytes"
        found = _ID_AT_HEAD.match(self.head) or _ID_AT_TAIL.search(self.tail)
        if found is None:
            return ValueError(f"the server sent {what}; dropped")
        raw = found.group(1)
        error = mcp_types.ErrorData(
            code=mcp_types.INTERNAL_ERROR, message=f"the server answered with {what}"
        )
        return SessionMessage(
            mcp_types.JSONRPCError(
                jsonrpc="2.0",
                id=raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw),
                error=error,
            )
        )


# The id of a JSON-RPC message at the top level of its object: first (after "jsonrpc"), as the
# Python SDK writes it, or last, as the TypeScript SDK does ({result, jsonrpc, id}).
_ID = rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")'
_ID_AT_HEAD = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?' + _ID)
_ID_AT_TAIL = re.compile(_ID + rb"\s*\}\s*\Z")


class Framer:
    """Newline-delimited messages out of stdout chunks, in time linear in their size.

    Re-joining the pending bytes with every chunk (``buffer + chunk``) copies a long line once
    per 64 KiB read: quadratic, a 60 MB result took ~30 s. Only each new chunk is searched
    for a newline here, and a line over ``MAX_MESSAGE_BYTES`` stops being kept (``Oversize``).
    """

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.over: Oversize | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversize]:
        lines: list[bytes | Oversize] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._take(chunk, start, end)
            lines.append(self._finish())
            start = end + 1
        self._take(chunk, start, len(chunk))
        return lines

    def _take(self, chunk: bytes, start: int, end: int) -> None:
        if start == end:
            return
        over = self.over
        if over is not None:  # past the limit: count it and keep only the last bytes
            over.size += end - start
            over.tail = (over.tail + chunk[max(start, end - EDGE_BYTES) : end])[-EDGE_BYTES:]
            return
        self.buffer += memoryview(chunk)[start:end]
        if len(self.buffer) > self.limit:
            buf = self.buffer
            head, tail = bytes(buf[:EDGE_BYTES]), bytes(buf[-EDGE_BYTES:])
            self.over = Oversize(len(buf), head, tail, self.limit)
            self.buffer = bytearray()

    def _finish(self) -> bytes | Oversize:
        if self.over is not None:
            over, self.over = self.over, None
            return over
        line = bytes(self.buffer)
        self.buffer.clear()
        return line


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # a stray non-JSON line: the session reports it, the stream goes on
        return exc


async def _stop(process: Any) -> None:
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, GRACE_S):
        with suppress(ProcessLookupError, OSError):
            await terminate_posix_process_tree(process, KILL_WAIT_S)
        await _exited(process, KILL_WAIT_S)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def _exited(process: Any, timeout: float) -> bool:
    # Polling returncode, not process.wait(): wait() also waits for pipe EOF, which a
    # grandchild holding the pipe would delay.
    deadline = anyio.current_time() + timeout
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.01)
    return True
