"""`norma mcp serve` (SPEC §11): any MCP client gets norma's policy, approvals and trace. Driven
by the `mcp` package's own client (stdio and streamable HTTP) and by the npm inspector CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from conftest import RunNorma
from mcp import Client, StdioServerParameters
from mcp_servers.support import node_tool, scripted, tool, write_config


def gateway_config(tmp_path: Path) -> Path:
    """Read allowed, Bash denied, and one MCP server's tool proxied through norma."""
    (tmp_path / "hello.txt").write_text("hello from a file\n")
    return write_config(
        tmp_path / "n.toml",
        {"up": scripted(tmp_path / "t.json", [tool("echo")])},
        allow=["Read", "mcp__up__echo"],
        deny=["Bash"],
    )


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def exercise(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    read = await client.call_tool("Read", {"file_path": "hello.txt"})
    bash = await client.call_tool("Bash", {"command": "echo should not run"})
    echo = await client.call_tool("mcp__up__echo", {"message": "through norma"})
    return {
        "names": {t.name for t in listed.tools},
        "tools": {t.name: t for t in listed.tools},
        "read": read,
        "bash": bash,
        "echo": echo,
    }


def check(seen: dict[str, Any]) -> None:
    assert {"Read", "Bash", "mcp__up__echo"} <= seen["names"]
    assert seen["tools"]["Read"].annotations.read_only_hint is True
    assert seen["tools"]["Read"].input_schema["properties"]["file_path"]["type"] == "string"
    read, bash, echo = seen["read"], seen["bash"], seen["echo"]
    assert not read.is_error and "hello from a file" in text_of(read)
    assert read.meta["norma"]["decision"] == "allow" and read.meta["norma"]["rule"] == "Read"
    assert bash.is_error and "denied by rule Bash" in text_of(bash)
    assert bash.meta["norma"]["decision"] == "deny"
    assert not echo.is_error and "through norma" in text_of(echo)


def traced(norma: RunNorma, config: Path) -> dict[str, str]:
    proc = norma("--config", str(config), "trace", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    return {e["tool"]: e["status"] for e in map(json.loads, proc.stdout.splitlines())}


def test_serve_stdio_to_the_python_client(norma: RunNorma, tmp_path: Path) -> None:
    config = gateway_config(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "norma_cli", "--config", str(config), "mcp", "serve"],
        env=dict(os.environ),
        cwd=str(tmp_path),
    )

    async def main() -> dict[str, Any]:
        async with Client(params, mode="legacy") as client:
            return await exercise(client)

    check(anyio.run(main))
    assert traced(norma, config) == {
        "Read": "completed",
        "Bash": "denied",
        "mcp__up__echo": "completed",
    }


def test_serve_streamable_http_to_the_python_client(norma: RunNorma, tmp_path: Path) -> None:
    config = gateway_config(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "norma_cli",
            "--config",
            str(config),
            "mcp",
            "serve",
            "--transport",
            "http",
            "--port",
            "0",
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = ""
        deadline = time.monotonic() + 30
        while not url and time.monotonic() < deadline:
            line = proc.stderr.readline() if proc.stderr else ""
            if not line and proc.poll() is not None:
                raise AssertionError(f"norma mcp serve exited with {proc.returncode}")
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async def main() -> dict[str, Any]:
            async with Client(url, mode="legacy") as client:
                return await exercise(client)

        check(anyio.run(main))
    finally:
        proc.terminate()
        proc.wait(10)
    assert traced(norma, config) == {
        "Read": "completed",
        "Bash": "denied",
        "mcp__up__echo": "completed",
    }


def test_serve_to_the_inspector_cli(norma: RunNorma, tmp_path: Path) -> None:
    inspector = node_tool("mcp-inspector-cli")
    config = gateway_config(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello from a file\n")
    # inspector-cli 1.0.3 finds its own package.json through the working directory's parent
    (tmp_path / "package.json").write_text("{}")
    # its own --config option would swallow norma's, so the config travels in NORMA_CONFIG
    env = [
        f"-e{k}={v}"
        for k, v in {
            "NORMA_HOME": os.environ["NORMA_HOME"],
            "NORMA_CONFIG": str(config),
            "NORMA_LOAD_PLUGINS": ",",
        }.items()
    ]

    def inspect(*method: str) -> dict[str, Any]:
        proc = subprocess.run(
            [
                str(inspector),
                "--cli",
                *env,
                sys.executable,
                "-m",
                "norma_cli",
                "mcp",
                "serve",
                *method,
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return dict(json.loads(proc.stdout))

    listed = inspect("--method", "tools/list")
    assert {"Read", "Bash", "mcp__up__echo"} <= {t["name"] for t in listed["tools"]}
    read = inspect(
        "--method", "tools/call", "--tool-name", "Read", "--tool-arg", "file_path=hello.txt"
    )
    assert read["isError"] is False and "hello from a file" in read["content"][0]["text"]
    bash = inspect("--method", "tools/call", "--tool-name", "Bash", "--tool-arg", "command=id")
    assert bash["isError"] is True and bash["content"][0]["text"] == "denied: denied by rule Bash"
    assert bash["_meta"]["norma"]["rule"] == "Bash"
    assert traced(norma, config) == {"Read": "completed", "Bash": "denied"}


def test_serve_help_imports_no_mcp(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "norma_cli", "mcp", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert "--transport" in proc.stdout
    imported = {
        m.group(1).split(".")[0] for m in re.finditer(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M)
    }
    assert not imported & {"mcp", "mcp_types", "anyio", "pydantic", "uvicorn"}


def test_serve_an_agents_tool_set(tmp_path: Path) -> None:
    config = gateway_config(tmp_path)
    with config.open("a") as f:
        f.write('[agents.reader]\ntools = ["Read"]\nmcp = []\n')
    args = ["-m", "norma_cli", "--config", str(config), "mcp", "serve", "--agent", "reader"]
    params = StdioServerParameters(
        command=sys.executable, args=args, env=dict(os.environ), cwd=str(tmp_path)
    )

    async def main() -> tuple[set[str], Any]:
        async with Client(params, mode="legacy") as client:
            listed = await client.list_tools()
            return {t.name for t in listed.tools}, await client.call_tool(
                "mcp__up__echo", {"message": "x"}
            )

    names, echo = anyio.run(main)
    assert names == {"Read"}
    # a server this agent does not see is never even started for it
    assert echo.is_error and text_of(echo) == "unknown tool: mcp__up__echo"
