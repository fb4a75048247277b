"""`norma mcp serve` against hostile input: every stdio line that carries a request is answered
(a client never waits forever), a result holding text that is not valid Unicode still reaches
the client, and an HTTP address that cannot be listened on is one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

NORMA = [sys.executable, "-m", "norma_cli"]
INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "qa", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LAST = {"jsonrpc": "2.0", "id": "last", "method": "tools/list"}


def session(
    tmp_path: Path,
    lines: list[str | bytes],
    env: dict[str, str] | None = None,
    wait_for: tuple[Any, ...] = (),
) -> list[dict[str, Any]]:
    """Send ``lines`` (then a final tools/list, id "last") to `norma mcp serve` on stdio; every
    message it wrote up to the answers to "last" and to the ids in ``wait_for`` (tool calls run
    in worker threads, so their answers may come after "last"'s)."""
    proc = subprocess.Popen(
        [*NORMA, "mcp", "serve"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdin is not None and proc.stdout is not None
    wire = [json.dumps(INIT), json.dumps(INITIALIZED), *lines, json.dumps(LAST)]
    for line in wire:
        proc.stdin.write(line if isinstance(line, bytes) else line.encode())
        proc.stdin.write(b"\n")
    proc.stdin.flush()
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line))
            if {"last", *wait_for} <= {m.get("id") for m in seen}:
                break
    finally:
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert {"last", *wait_for} <= {m.get("id") for m in seen}, f"requests left unanswered: {seen}"
    assert seen[0].get("id") == "init" and "result" in seen[0]
    return [m for m in seen[1:] if m.get("id") != "last"]


def errors(replies: list[dict[str, Any]]) -> list[tuple[Any, int, str]]:
    return [(r["id"], r["error"]["code"], r["error"]["message"]) for r in replies]


def test_every_line_that_is_not_a_message_is_answered_in_order(tmp_path: Path) -> None:
    replies = session(
        tmp_path,
        [
            "garbage",
            b"\xff\xfe not utf-8 either",
            "[" * 100_000,  # deeper than any JSON parser's recursion limit
            "[1, 2]",
            '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": 7}',
            '{"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": {"name": "\\udfff"}}',
            '{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}',
            '{"id": 8, "method": "tools/list"}',
        ],
    )
    assert errors(replies) == [
        (None, -32700, "Parse error: the line is not JSON"),
        (None, -32700, "Parse error: the line is not JSON"),
        (None, -32700, "Parse error: the line is not JSON"),
        (None, -32600, "Invalid request: not a valid JSON-RPC 2.0 request, notification or response"),
        (7, -32600, "Invalid request: not a valid JSON-RPC 2.0 request, notification or response"),
        ("s", -32600, "Invalid request: a string holds a lone surrogate escape, which is not valid Unicode"),
        # an id that cannot be sent back (not valid Unicode itself) is null, as for a parse error
        (None, -32600, "Invalid request: a string holds a lone surrogate escape, which is not valid Unicode"),
        (8, -32600, "Invalid request: not a valid JSON-RPC 2.0 request, notification or response"),
    ]  # fmt: skip


@pytest.mark.parametrize("request_id", ["true", "1.5", "null"])
def test_a_request_with_an_id_of_the_wrong_type_is_answered(
    tmp_path: Path, request_id: str
) -> None:
    # the SDK reads such a request as a notification, which nobody answers
    line = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/list"}}'
    replies = session(tmp_path, [line])
    assert errors(replies) == [
        (None, -32600, "Invalid request: the id must be a string or an integer")
    ]


def test_malformed_notifications_and_responses_and_blank_lines_get_no_answer(
    tmp_path: Path,
) -> None:
    # JSON-RPC 2.0: a notification is never answered, nor is a response (the client's answer
    # to a request of the server's); answering would invite an error storm between two peers
    replies = session(
        tmp_path,
        [
            "",
            "   ",
            '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 7}',
            '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"v": "\\ud800"}}',
            '{"jsonrpc": "2.0", "id": 99, "result": 7}',
            '{"jsonrpc": "2.0", "id": 98, "error": "no"}',
        ],
    )
    assert replies == []


def test_a_request_that_fails_the_methods_own_validation_is_answered(tmp_path: Path) -> None:
    replies = session(
        tmp_path,
        [
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}',
            '{"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}',
        ],
    )
    assert sorted((r["id"], r["error"]["code"]) for r in replies) == [(1, -32602), (2, -32601)]


def test_a_line_over_the_cap_is_skipped_and_answered(tmp_path: Path) -> None:
    from norma_cli.mcp.serve import MAX_LINE_BYTES

    huge = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"p": "'
    huge += b"x" * MAX_LINE_BYTES + b'"}}'
    replies = session(tmp_path, [huge])
    assert errors(replies) == [
        (None, -32600, f"Invalid request: longer than {MAX_LINE_BYTES:,} bytes")
    ]


# ------------------------------------------------------------------ results that are not Unicode
PLUGIN = '''
from norma_cli import hookimpl
from norma_cli.core.contract import ContentBlock, ToolOutput


@hookimpl
def register_tools(register):
    def lone() -> ToolOutput:
        """A result holding lone surrogates, as a careless plugin or decoder makes them."""
        return ToolOutput(
            [ContentBlock("text", text="a\\ud800b"), ContentBlock("json", data={"k": "c\\udfffd"})]
        )

    register(lone, read_only=True)
'''


@pytest.fixture
def lone_plugin(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    (site / "lone_plugin").mkdir(parents=True)
    (site / "lone_plugin" / "__init__.py").write_text(PLUGIN)
    dist = site / "lone_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lone-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[norma]\nlone = lone_plugin\n")
    return {"PYTHONPATH": str(site), "NORMA_LOAD_PLUGINS": "lone"}


def test_a_result_with_lone_surrogates_is_answered_on_stdio(
    tmp_path: Path, lone_plugin: dict[str, str]
) -> None:
    (tmp_path / "raw.txt").write_bytes(b"ok\xffbad\n")  # Read keeps the byte as U+DCFF
    call = {"jsonrpc": "2.0", "method": "tools/call"}
    replies = session(
        tmp_path,
        [
            json.dumps({**call, "id": 1, "params": {"name": "lone", "arguments": {}}}),
            json.dumps(
                {**call, "id": 2, "params": {"name": "Read", "arguments": {"file_path": "raw.txt"}}}
            ),
        ],
        env=lone_plugin,
        wait_for=(1, 2),
    )
    by_id = {r["id"]: r["result"] for r in replies}
    lone, read = by_id[1], by_id[2]
    assert not lone["isError"] and lone["content"][0]["text"] == "a\ufffdb"
    assert json.loads(lone["content"][1]["text"]) == {"k": "c\ufffdd"}
    assert lone["structuredContent"] == {"k": "c\ufffdd"}
    assert lone["_meta"]["norma"]["decision"] == "allow"
    assert not read["isError"] and "ok\ufffdbad" in read["content"][0]["text"]


def test_a_result_with_lone_surrogates_is_answered_over_http(
    tmp_path: Path, lone_plugin: dict[str, str]
) -> None:
    proc = subprocess.Popen(
        [*NORMA, "mcp", "serve", "--transport", "http", "--port", "0"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **lone_plugin},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("norma: serving ") and " tools, listening on http://" in line
        url = line.split("listening on ", 1)[1].strip()

        async def main() -> Any:
            async with Client(url, mode="legacy") as client:
                return await client.call_tool("lone", {})

        result = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(10)
    assert not result.is_error
    assert result.content[0].text == "a\ufffdb"
    assert result.structured_content == {"k": "c\ufffdd"}


# ------------------------------------------------------------------ http addresses
@pytest.mark.parametrize(
    ("host", "code"), [("256.1.1.1", 2), ("a..b", 2), ("192.0.2.1", 1)], ids=str
)
def test_an_address_that_cannot_be_listened_on_is_one_line(
    tmp_path: Path, host: str, code: int
) -> None:
    # 192.0.2.1 (TEST-NET-1) resolves but is no address of this machine
    proc = subprocess.run(
        [*NORMA, "mcp", "serve", "--transport", "http", "--host", host, "--port", "8765"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.startswith(f"norma: error: cannot listen on {host}:8765: ")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("stream", ["stdin", "stdout"])
def test_stdio_on_a_closed_stream_is_one_line(tmp_path: Path, stream: str) -> None:
    fd = 0 if stream == "stdin" else 1
    proc = subprocess.run(
        ["bash", "-c", f'exec {fd}<&-; exec "$@"', "_", *NORMA, "mcp", "serve"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("norma: error: ") and stream in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
