"""norma as an MCP client (SPEC §11), against real servers nobody here wrote — mcp-server-time
and mcp-server-git from PyPI, server-everything (stdio, streamable HTTP, SSE) and
server-filesystem from npm — plus two small servers of our own for what they cannot show
(paginated listings, misbehaviour, the child's environment)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RunNorma, results
from mcp_servers.support import (
    HERE,
    PYTHON,
    background,
    free_port,
    node_tool,
    scripted,
    tool,
    wait_port,
    write_config,
)


def calls_jsonl(*calls: tuple[str, dict]) -> str:
    return "".join(
        json.dumps({"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": inp}) + "\n"
        for i, (n, inp) in enumerate(calls)
    )


def texts(result: dict) -> str:
    return "".join(b.get("text", "") for b in result["content"] if b["type"] == "text")


def mcp_rows(norma: RunNorma, config: Path, *extra: str) -> dict[str, dict]:
    proc = norma("--config", str(config), "tools", "list", "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return {r["name"]: r for r in json.loads(proc.stdout) if r["name"].startswith("mcp__")}


# ----------------------------------------------------------------------------- PyPI servers
def test_time_server_lists_and_calls(norma: RunNorma, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "n.toml",
        {
            "time": {
                "command": PYTHON,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            },
        },
    )
    proc = norma(
        "--config",
        str(config),
        "run",
        "mcp__time__get_current_time",
        "-i",
        '{"timezone": "Asia/Tokyo"}',
    )
    assert proc.returncode == 0, proc.stderr
    [res] = results(proc.stdout)
    structured = [b["json"] for b in res["content"] if b["type"] == "json"]
    assert (
        structured and structured[0]["timezone"] == "Asia/Tokyo"
    )  # structuredContent carried through
    assert res["norma"]["rule"] == "mcp__*"
    # the first connect recorded the baseline: the next listing comes from the store, pinned
    rows = mcp_rows(norma, config)
    assert set(rows) == {"mcp__time__get_current_time", "mcp__time__convert_time"}
    assert {r["server"] for r in rows.values()} == {"time"} and {
        r["pin"] for r in rows.values()
    } == {"pinned"}
    # untrusted annotations: fail-closed metadata
    assert all(
        not r["read_only"] and r["requires_approval"] and not r["concurrency_safe"]
        for r in rows.values()
    )


def test_git_server_reads_a_repository(norma: RunNorma, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "hello.txt").write_text("hi\n")
    config = write_config(
        tmp_path / "n.toml",
        {
            # GitPython runs `git`: this server needs PATH, so the operator lists it
            "git": {
                "command": PYTHON,
                "args": ["-m", "mcp_server_git", "--repository", str(repo)],
                "env_passthrough": ["PATH"],
            },
        },
    )
    proc = norma(
        "--config",
        str(config),
        "run",
        "mcp__git__git_status",
        "-i",
        json.dumps({"repo_path": str(repo)}),
    )
    assert proc.returncode == 0, proc.stderr
    assert "hello.txt" in texts(results(proc.stdout)[0])


# ----------------------------------------------------------------------------- npm servers
def test_everything_stdio_content_types_timeout_and_clean_environment(
    norma: RunNorma, tmp_path: Path
) -> None:
    everything = node_tool("mcp-server-everything")
    config = write_config(
        tmp_path / "n.toml",
        {
            "everything": {
                "command": str(everything),
                "env_passthrough": ["PATH"],
                "env": {"FROM_TABLE": "yes"},
                "call_timeout": 2,
            },
        },
    )
    batch = calls_jsonl(
        ("mcp__everything__echo", {"message": "hello there"}),
        ("mcp__everything__get-tiny-image", {}),
        ("mcp__everything__get-structured-content", {"location": "New York"}),
        ("mcp__everything__get-env", {}),
        ("mcp__everything__trigger-long-running-operation", {"duration": 30, "steps": 3}),
    )
    started = time.monotonic()
    proc = norma(
        "--config",
        str(config),
        "run",
        "--calls",
        "-",
        stdin=batch,
        env={"NORMA_TEST_SECRET": "do-not-leak"},
    )
    assert time.monotonic() - started < 25  # the 30 s operation was cut at call_timeout
    echo, image, structured, env, slow = results(proc.stdout)
    assert "hello there" in texts(echo) and not echo["is_error"]
    [img] = [b for b in image["content"] if b["type"] == "image"]
    assert img["source"]["media_type"] == "image/png" and len(img["source"]["data"]) > 50
    assert any(b["type"] == "json" and "temperature" in b["json"] for b in structured["content"])
    seen = json.loads(texts(env))
    assert set(seen) == {"PATH", "FROM_TABLE"} and "do-not-leak" not in texts(env)
    assert slow["is_error"] and "no answer within 2s (call_timeout)" in texts(slow)
    assert proc.returncode == 1  # one call failed; none was denied


def test_everything_over_streamable_http_and_sse(norma: RunNorma, tmp_path: Path) -> None:
    everything = node_tool("mcp-server-everything")
    http_port, sse_port = free_port(), free_port()
    with (
        background([str(everything), "streamableHttp"], {"PORT": str(http_port)}) as h,
        background([str(everything), "sse"], {"PORT": str(sse_port)}) as s,
    ):
        wait_port(http_port, h)
        wait_port(sse_port, s)
        config = write_config(
            tmp_path / "n.toml",
            {
                "web": {
                    "url": f"http://127.0.0.1:{http_port}/mcp",
                    "headers": {"X-Trace": "norma-test"},
                    "header_env": {"Authorization": "NORMA_TEST_TOKEN"},
                },
                "events": {"url": f"http://127.0.0.1:{sse_port}/sse", "transport": "sse"},
            },
        )
        batch = calls_jsonl(
            ("mcp__web__echo", {"message": "over http"}),
            ("mcp__events__echo", {"message": "over sse"}),
        )
        proc = norma(
            "--config",
            str(config),
            "run",
            "--calls",
            "-",
            stdin=batch,
            env={"NORMA_TEST_TOKEN": "Bearer t0ken"},
        )
        assert proc.returncode == 0, proc.stderr
        web, events = results(proc.stdout)
        assert "over http" in texts(web) and "over sse" in texts(events)
        # a header taken from an environment variable that is not set: a clear error for that server only
        proc = norma("--config", str(config), "run", "mcp__web__echo", "-i", '{"message": "x"}')
        assert proc.returncode == 1
        assert "environment variable NORMA_TEST_TOKEN is not set" in proc.stdout + proc.stderr


def test_filesystem_server_error_result(norma: RunNorma, tmp_path: Path) -> None:
    fs = node_tool("mcp-server-filesystem")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "note.txt").write_text("inside\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    config = write_config(
        tmp_path / "n.toml",
        {
            "fs": {"command": str(fs), "args": [str(allowed)], "env_passthrough": ["PATH"]},
        },
    )
    batch = calls_jsonl(
        ("mcp__fs__read_text_file", {"path": str(allowed / "note.txt")}),
        ("mcp__fs__read_text_file", {"path": str(tmp_path / "secret.txt")}),
    )
    proc = norma("--config", str(config), "run", "--calls", "-", stdin=batch)
    inside, outside = results(proc.stdout)
    assert not inside["is_error"] and "inside" in texts(inside)
    assert outside["is_error"] and "Access denied" in texts(outside)  # the server's isError
    assert proc.returncode == 1


# ----------------------------------------------------------------------------- our own servers
def test_paginated_listing_is_followed(norma: RunNorma, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "n.toml",
        {
            "paged": {
                "command": PYTHON,
                "args": [str(HERE / "paged.py")],
            },  # the SDK's low-level Server
            "raw": scripted(
                tmp_path / "t.json", [tool(f"t{i}") for i in range(5)], env={"SCRIPTED_PAGE": "2"}
            ),
        },
    )
    rows = mcp_rows(norma, config)
    assert {n for n in rows if n.startswith("mcp__paged__")} == {
        f"mcp__paged__tool_{i}" for i in range(8)
    }
    assert {n for n in rows if n.startswith("mcp__raw__")} == {f"mcp__raw__t{i}" for i in range(5)}
    proc = norma("--config", str(config), "run", "mcp__paged__tool_7", "-i", '{"x": 7}', "--text")
    assert proc.returncode == 0 and "tool_7 got {'x': 7}" in proc.stdout


def test_error_results_protocol_errors_timeouts_and_a_crash(
    norma: RunNorma, tmp_path: Path
) -> None:
    mark = tmp_path / "starts.txt"
    tools = [tool("fail"), tool("protocol_error"), tool("sleep"), tool("echo"), tool("crash")]
    config = write_config(
        tmp_path / "n.toml",
        {
            "s": scripted(
                tmp_path / "t.json", tools, call_timeout=1, env={"SCRIPTED_MARK": str(mark)}
            )
        },
    )
    batch = calls_jsonl(
        ("mcp__s__fail", {}),
        ("mcp__s__protocol_error", {}),
        ("mcp__s__sleep", {"seconds": 5}),
        ("mcp__s__echo", {"message": "still alive"}),
        ("mcp__s__crash", {}),
        ("mcp__s__echo", {"message": "started again"}),
    )
    proc = norma("--config", str(config), "run", "--calls", "-", stdin=batch)
    fail, protocol, sleep, echo, crash, again = results(proc.stdout)
    assert fail["is_error"] and "this tool always fails" in texts(fail)
    assert protocol["is_error"] and "error -32000" in texts(protocol)
    assert sleep["is_error"] and "no answer within 1s (call_timeout)" in texts(sleep)
    assert not echo["is_error"] and "still alive" in texts(echo)  # the session outlived the timeout
    assert crash["is_error"] and "MCP server s: the server closed the connection" in texts(crash)
    assert not again["is_error"] and "started again" in texts(again)  # a dead server is restarted
    assert len(mark.read_text().splitlines()) == 2
    assert proc.returncode == 1


def test_dead_and_hanging_servers_are_errors_not_hangs(norma: RunNorma, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "n.toml",
        {
            "dead": {"command": "false"},
            "hang": {"command": "sleep", "args": ["60"], "timeout": 1},
            "missing": {"command": "no-such-mcp-server-anywhere"},
        },
    )
    started = time.monotonic()
    proc = norma("--config", str(config), "run", "mcp__hang__anything", "-i", "{}")
    assert time.monotonic() - started < 15
    assert proc.returncode == 1 and "unknown tool: mcp__hang__anything" in proc.stdout
    assert (
        "MCP server hang: no answer within 1s (timeout); its tools are unavailable" in proc.stderr
    )
    proc = norma("--config", str(config), "run", "mcp__dead__anything", "-i", "{}")
    assert (
        proc.returncode == 1
        and "MCP server dead:" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    proc = norma("--config", str(config), "run", "mcp__missing__x", "-i", "{}")
    assert proc.returncode == 1 and "'no-such-mcp-server-anywhere' not found on PATH" in proc.stderr
    # the other tools are unaffected, and nothing was started for them
    (tmp_path / "a.txt").write_text("fine")
    proc = norma("--config", str(config), "run", "Read", "-i", '{"file_path": "a.txt"}')
    assert proc.returncode == 0 and proc.stderr == ""


def test_one_shot_builtin_run_imports_no_mcp_and_starts_no_server(
    norma: RunNorma, tmp_path: Path
) -> None:
    mark = tmp_path / "starts.txt"
    config = write_config(
        tmp_path / "n.toml",
        {
            "s": scripted(tmp_path / "t.json", [tool("echo")], env={"SCRIPTED_MARK": str(mark)}),
        },
    )
    (tmp_path / "a.txt").write_text("x")
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "norma_cli",
            "--config",
            str(config),
            "run",
            "Read",
            "-i",
            '{"file_path": "a.txt"}',
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr
    imported = {
        m.group(1).split(".")[0] for m in re.finditer(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M)
    }
    assert not imported & {"mcp", "mcp_types", "anyio", "pydantic"}, sorted(
        imported & {"mcp", "mcp_types"}
    )
    assert not mark.exists()
    # never listed: one start lists and calls; listed since: one start again (no list + call on two)
    for _ in range(2):
        assert (
            norma(
                "--config", str(config), "run", "mcp__s__echo", "-i", '{"message": "m"}'
            ).returncode
            == 0
        )
    assert len(mark.read_text().splitlines()) == 2


def test_stdio_child_sees_only_the_allowlisted_environment(norma: RunNorma, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "n.toml",
        {
            "s": scripted(
                tmp_path / "t.json",
                [tool("env")],
                env_passthrough=["NORMA_TEST_VISIBLE", "NOT_SET_ANYWHERE"],
                env={"FROM_TABLE": "1"},
            ),
        },
    )
    proc = norma(
        "--config",
        str(config),
        "run",
        "mcp__s__env",
        "-i",
        "{}",
        "--text",
        env={"NORMA_TEST_SECRET": "s3cret-value", "NORMA_TEST_VISIBLE": "shown"},
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    seen.pop("LC_CTYPE", None)  # Python itself sets it in a C locale (PEP 538)
    assert seen == {
        "NORMA_TEST_VISIBLE": "shown",
        "FROM_TABLE": "1",
        "SCRIPTED_TOOLS": str(tmp_path / "t.json"),
    }
    assert "s3cret-value" not in proc.stdout


def test_annotations_are_trusted_only_when_the_operator_says_so(
    norma: RunNorma, tmp_path: Path
) -> None:
    tools = [
        tool("look", annotations={"readOnlyHint": True}),
        tool("change", annotations={"destructiveHint": False}),
    ]
    for trusted in (False, True):
        config = write_config(
            tmp_path / f"n{trusted}.toml",
            {"s": scripted(tmp_path / "t.json", tools)},
            allow=[],
            mcp={"trust_annotations": trusted},
        )
        rows = mcp_rows(norma, config)
        assert (
            rows["mcp__s__look"]["read_only"] is trusted
            and rows["mcp__s__look"]["concurrency_safe"] is trusted
        )
        assert (
            rows["mcp__s__change"]["read_only"] is False
            and rows["mcp__s__change"]["requires_approval"]
        )
        # with no allow rule, only a trusted read-only tool runs (the default mode allows read-only tools)
        proc = norma("--config", str(config), "run", "mcp__s__look", "-i", "{}")
        assert proc.returncode == (0 if trusted else 3), proc.stdout


def test_names_are_sanitised_and_collisions_reported(norma: RunNorma, tmp_path: Path) -> None:
    from norma_cli.mcp.registry import registered_name

    long = "x" * 80
    config = write_config(
        tmp_path / "n.toml",
        {
            "s": scripted(
                tmp_path / "t.json", [tool("a.b"), tool("a_b"), tool(long), tool("ok-name")]
            ),
        },
    )
    proc = norma("--config", str(config), "tools", "list", "--json")
    names = {r["name"] for r in json.loads(proc.stdout)}
    assert {"mcp__s__a_b", "mcp__s__ok-name", registered_name("s", long)} <= names
    assert len(registered_name("s", long) or "") == 64 and registered_name(
        "s", long
    ) != registered_name("s", "x" * 81)
    assert "tools 'a.b' and 'a_b' are both named mcp__s__a_b; 'a_b' skipped" in proc.stderr
    proc = norma("--config", str(config), "run", "mcp__s__a_b", "-i", "{}", "--text")
    assert proc.returncode == 0 and proc.stdout.strip() == "{}"


def test_untrusted_project_config_adds_no_servers(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / ".norma").mkdir()
    write_config(
        tmp_path / ".norma" / "config.toml", {"s": scripted(tmp_path / "t.json", [tool("echo")])}
    )
    proc = norma("tools", "list", "--json")
    assert proc.returncode == 0
    assert not [r for r in json.loads(proc.stdout) if r["name"].startswith("mcp__")]
    assert "untrusted project config; ignored" in proc.stderr and "[mcp]" in proc.stderr


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'command = "x"\nurl = "http://127.0.0.1:1/mcp"',
            "set exactly one of `command` (stdio) or `url`",
        ),
        ('url = "http://127.0.0.1:1/mcp"\nenv = { A = "b" }', "env do not apply to this transport"),
        ('command = "x"\ntransport = "sse"', "a `command` server speaks stdio"),
        ('command = "x"\ncall_timeout = 0', "must be at least 0.1"),
        ('command = "x"\nenv_allow = ["PATH"]', "unknown key 'env_allow'"),
    ],
)
def test_bad_server_tables_are_config_errors(
    norma: RunNorma, tmp_path: Path, table: str, message: str
) -> None:
    (tmp_path / "n.toml").write_text(f"[mcp.servers.s]\n{table}\n")
    proc = norma("--config", "n.toml", "tools", "list")
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1


def test_server_name_with_double_underscore_is_rejected(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "n.toml").write_text('[mcp.servers.a__b]\ncommand = "x"\n')
    proc = norma("config", "validate", "n.toml")
    assert proc.returncode == 2 and "invalid name 'a__b'" in proc.stderr
