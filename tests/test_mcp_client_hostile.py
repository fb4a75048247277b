"""A hostile MCP server costs its own tools, never the run: an answer over the message limit
is that call's error (the stream goes on), an over-grown stderr log is rotated, and a
malformed listing is one warning line naming the field."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conftest import RunNorma, results
from mcp_servers.support import PYTHON, scripted, tool, write_config

# A raw JSON-RPC server: ``huge`` answers with HUGE bytes of text; ``huge_notice`` first sends
# a notification (no id anywhere) that large; anything else answers "fine".
SERVER = r"""
import json, os, sys
out = sys.stdout.buffer
def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()
def text(value):
    return {"content": [{"type": "text", "text": value}]}
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("huge", "huge_notice", "ok")]
HUGE = int(os.environ["HUGE"])
for line in sys.stdin.buffer:
    req = json.loads(line)
    method, i = req.get("method"), req.get("id")
    if i is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": req["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "big", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": TOOLS}})
    elif req["params"]["name"] == "huge":
        # the TypeScript SDK's order: the id comes last, after the (huge) result
        send({"result": text("B" * HUGE), "jsonrpc": "2.0", "id": i})
    elif req["params"]["name"] == "huge_notice":
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "N" * HUGE}})
        send({"jsonrpc": "2.0", "id": i, "result": text("after the notice")})
    else:
        sys.stderr.write("ok was called\n")
        send({"jsonrpc": "2.0", "id": i, "result": text("fine")})
"""

OVER_LIMIT = (64 << 20) + (1 << 20)  # norma_cli.mcp.stdio.MAX_MESSAGE_BYTES + 1 MiB


def big_server(tmp_path: Path, huge: int, **table: Any) -> dict[str, Any]:
    script = tmp_path / "big_mcp.py"
    script.write_text(SERVER)
    return {"command": PYTHON, "args": [str(script)], "env": {"HUGE": str(huge)}, **table}


def batch(*names: str) -> str:
    return "".join(
        f'{{"type": "tool_use", "id": "c{i}", "name": "mcp__b__{n}", "input": {{}}}}\n'
        for i, n in enumerate(names)
    )


def test_an_answer_over_the_message_limit_is_that_calls_error_and_the_server_goes_on(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "n.toml", {"b": big_server(tmp_path, OVER_LIMIT)})
    proc = norma(
        "--config", str(cfg), "run", "--calls", "-", stdin=batch("huge", "ok"), timeout=120
    )
    huge, ok = results(proc.stdout)
    assert huge["is_error"], huge
    text = huge["content"][0]["text"]
    assert "MCP server b" in text and "over norma's limit" in text and len(text) < 1000
    assert not ok["is_error"] and ok["content"][0]["text"] == "fine", ok
    assert proc.stderr == ""


def test_an_oversized_message_without_an_id_is_dropped_and_the_answer_still_arrives(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "n.toml", {"b": big_server(tmp_path, OVER_LIMIT)})
    proc = norma("--config", str(cfg), "run", "mcp__b__huge_notice", "-i", "{}", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert results(proc.stdout)[0]["content"][0]["text"] == "after the notice"
    assert proc.stderr == ""


def test_a_server_log_over_the_limit_is_rotated_when_the_server_starts(
    norma: RunNorma, tmp_path: Path
) -> None:
    logs = Path(os.environ["NORMA_HOME"]) / "logs" / "mcp"
    logs.mkdir(parents=True)
    old = logs / "b.log"
    with old.open("wb") as f:  # sparse: 11 MiB without writing them
        f.truncate(11 << 20)
    cfg = write_config(tmp_path / "n.toml", {"b": big_server(tmp_path, 0)})
    proc = norma("--config", str(cfg), "run", "mcp__b__ok", "-i", "{}", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (logs / "b.log.1").stat().st_size == 11 << 20
    assert old.read_text() == "ok was called\n"


def test_a_malformed_listing_is_one_warning_naming_the_field(
    norma: RunNorma, tmp_path: Path
) -> None:
    listing = [{"name": "bad", "inputSchema": "just a string"}, tool("echo")]
    cfg = write_config(tmp_path / "n.toml", {"s": scripted(tmp_path / "t.json", listing)})
    proc = norma("--config", str(cfg), "tools", "list", timeout=60)
    assert proc.returncode == 0, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert warning.startswith(
        "norma: warning: MCP server s: tools/list: malformed reply: tools.0.inputSchema: "
        "Input should be a valid dictionary"
    )
    assert warning.endswith("; its tools are unavailable")
    assert "Traceback" not in proc.stderr and "validation error" not in proc.stderr
