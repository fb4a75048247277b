"""Helpers shared by the MCP tests: where the third-party servers are, config files, ports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NODE_BIN = REPO / "node_modules" / ".bin"
PYTHON = sys.executable


def node_tool(name: str) -> Path:
    """An npm-installed executable (package.json devDependencies), or skip saying how to get it."""
    path = NODE_BIN / name
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the npm MCP servers cannot run")
    if not path.exists():
        pytest.skip(f"{path} missing: run scripts/setup-venv (it runs `npm ci` when npm exists)")
    return path


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON-compatible for these
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(value)


def write_config(
    path: Path,
    servers: dict[str, dict[str, Any]],
    *,
    allow: list[str] | None = None,
    deny: list[str] | None = None,
    mcp: dict[str, Any] | None = None,
    extra: str = "",
) -> Path:
    lines = ["[permissions]"]
    lines.append(f"allow = {toml_value(allow if allow is not None else ['mcp__*'])}")
    if deny:
        lines.append(f"deny = {toml_value(deny)}")
    if mcp:
        lines.append("[mcp]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in mcp.items())
    for name, table in servers.items():
        lines.append(f"[mcp.servers.{name}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def scripted(
    tools_file: Path, tools: list[dict[str, Any]] | None = None, **table: Any
) -> dict[str, Any]:
    """A ``[mcp.servers.X]`` table running tests/mcp_servers/scripted.py over ``tools_file``."""
    if tools is not None:
        tools_file.write_text(json.dumps(tools))
    env = {"SCRIPTED_TOOLS": str(tools_file), **table.pop("env", {})}
    return {"command": PYTHON, "args": [str(HERE / "scripted.py")], "env": env, **table}


def tool(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    schema = extra.pop(
        "inputSchema", {"type": "object", "properties": {"message": {"type": "string"}}}
    )
    return {
        "name": name,
        "description": description or f"the {name} tool",
        "inputSchema": schema,
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


@contextmanager
def background(
    args: list[str], env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """A server process for the duration of a test, ended by its pid."""
    proc = subprocess.Popen(
        args,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
