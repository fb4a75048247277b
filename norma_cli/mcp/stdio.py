"""A stdio transport whose child sees exactly the environment norma gives it.

The ``mcp`` package's own ``stdio_client`` always merges its "safe defaults" (``HOME``,
``PATH``, ``USER``, ...) into the child's environment; norma's contract is an explicit
allowlist, so the process is spawned here with the environment built by ``ServerSpec``. The
rest follows the MCP lifecycle: newline-delimited JSON-RPC on stdin/stdout, and on close
stdin is closed, the server gets a grace period, then its whole process group is killed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import IO, Any

import anyio
import mcp_types
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

GRACE_S = 2.0  # for the server to exit on its own once stdin closes
KILL_WAIT_S = 2.0


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
        buffer = b""
        async with read_writer:
            try:
                async for chunk in process.stdout:
                    lines = (buffer + chunk).split(b"\n")
                    buffer = lines.pop()
                    for line in lines:
                        if line.strip():
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
