"""Hostile hooks and a hostile judge, driven through the public classes with real subprocesses
and a real socket on 127.0.0.1: whatever a hook answers (too deep, too much, a BOM, a pipe
left open, objects that cannot be printed or encoded), it either says something norma can use
or follows its ``on_error``; it never raises, never hangs past its timeout, never allows by
accident. The judge's deadline holds while a read is blocked."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.hooks import (
    EVENTS,
    MAX_TEXT_CHARS,
    CallableHook,
    CommandHook,
    HookRunner,
    default_on_error,
)
from norma_cli.policy.judge import HttpJudge, JudgeFailure, JudgeRequest

NESTED = '{"a":' * 10_000 + "1" + "}" * 10_000


def script(tmp_path: Path, body: str, name: str = "hook.sh") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def payload(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "cwd": str(tmp_path), "tool_name": "Read",
            "tool_input": {"file_path": "a.txt"}, **extra}  # fmt: skip


# ---------------------------------------------------------------- unreadable answers


@pytest.mark.parametrize("event", EVENTS)
def test_too_deep_answer_follows_on_error_for_every_event(tmp_path: Path, event: str) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(NESTED)
    hook = CommandHook(event, script(tmp_path, f"cat >/dev/null; cat {deep}\n"), timeout=10)
    out = hook.run(payload(tmp_path))
    assert out.error is not None and "RecursionError" in out.error
    assert out.blocked == (default_on_error(event) == "block")


def test_too_deep_answer_with_on_error_ignore_does_not_block(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(NESTED)
    hook = CommandHook("PreToolUse", script(tmp_path, f"cat >/dev/null; cat {deep}\n"),
                       on_error="ignore")  # fmt: skip
    out = HookRunner()
    out.add(hook)
    pre = out.pre_tool_use(payload(tmp_path), "Read")
    assert not pre.blocked and pre.outcomes[0].error


@pytest.mark.parametrize(
    "prefix",
    [b"\xef\xbb\xbf", b"\xef\xbb\xbf\n  ", b"\n\t \xef\xbb\xbf"],
    ids=["bom", "bom-ws", "ws-bom"],
)
@pytest.mark.parametrize(
    "answer",
    [
        '{"decision": "block", "reason": "bom"}',
        '{"hookSpecificOutput": {"permissionDecision": "deny"}}',
    ],
)
def test_bom_and_whitespace_before_a_json_block_still_block(
    tmp_path: Path, prefix: bytes, answer: str
) -> None:
    path = tmp_path / "answer.json"
    path.write_bytes(prefix + answer.encode())
    hook = CommandHook("PreToolUse", script(tmp_path, f"cat >/dev/null; cat {path}\n"))
    out = hook.run(payload(tmp_path))
    assert out.blocked and out.error is None and not out.additional_context


# ---------------------------------------------------------------- pipes, time and size


@pytest.fixture
def daemon_pid(tmp_path: Path) -> Iterator[Path]:
    pidfile = tmp_path / "daemon.pid"
    yield pidfile
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@pytest.mark.parametrize("answer", ["{}", '{"decision": "approve"}'])
def test_detached_grandchild_holding_stdout_fails_soon_after_the_hook_exits(
    tmp_path: Path, daemon_pid: Path, answer: str
) -> None:
    """The hook itself is done at once; its daemon keeps stdout open for 30 s. The answer
    cannot be known complete without EOF, so it is a failure, decided within the grace."""
    body = f"cat >/dev/null; setsid sleep 30 & echo $! > {daemon_pid}; echo '{answer}'\n"
    hook = CommandHook("PreToolUse", script(tmp_path, body), timeout=10)
    started = time.monotonic()
    out = hook.run(payload(tmp_path))
    assert time.monotonic() - started < 10  # not the daemon's 30 s
    assert out.blocked and out.error and "open" in out.error
    assert out.permission_decision is None


def test_detached_grandchild_and_a_hanging_hook_stop_at_the_timeout(
    tmp_path: Path, daemon_pid: Path
) -> None:
    body = f"cat >/dev/null; setsid sleep 30 & echo $! > {daemon_pid}; sleep 30\n"
    hook = CommandHook("SessionEnd", script(tmp_path, body), timeout=1)
    started = time.monotonic()
    out = hook.run(payload(tmp_path))
    assert time.monotonic() - started < 10  # timeout 1 s; the hook and daemon sleep 30
    assert not out.blocked and out.error and "timed out" in out.error


def test_exit_2_with_a_grandchild_holding_stderr_still_blocks(
    tmp_path: Path, daemon_pid: Path
) -> None:
    body = f"cat >/dev/null; setsid sleep 30 & echo $! > {daemon_pid}; echo nope >&2; exit 2\n"
    out = CommandHook("PostToolUse", script(tmp_path, body), timeout=5).run(payload(tmp_path))
    assert out.blocked and out.reason == "nope" and out.error is None


def test_hook_that_closes_its_output_and_keeps_running_times_out(tmp_path: Path) -> None:
    body = "cat >/dev/null; exec >&- 2>&-; sleep 30\n"
    started = time.monotonic()
    out = CommandHook("PreToolUse", script(tmp_path, body), timeout=1).run(payload(tmp_path))
    assert time.monotonic() - started < 10  # timeout 1 s; the hook sleeps 30
    assert out.blocked and out.error and "timed out" in out.error


def test_endless_stdout_is_cut_at_the_cap_not_at_the_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    out = CommandHook("PreToolUse", "cat >/dev/null; yes", timeout=30).run(payload(tmp_path))
    assert time.monotonic() - started < 5
    assert out.blocked and out.error and "more than" in out.error


def test_stdout_flood_with_on_error_ignore_adds_nothing(tmp_path: Path) -> None:
    body = "cat >/dev/null; head -c 3000000 /dev/zero | tr '\\0' x\n"
    out = CommandHook("PostToolUse", body, timeout=30).run(payload(tmp_path))
    assert not out.blocked and out.error and not out.additional_context


def test_stderr_flood_block_reason_is_capped_with_a_marker(tmp_path: Path) -> None:
    body = "cat >/dev/null; head -c 5000000 /dev/zero | tr '\\0' r >&2; exit 2\n"
    out = CommandHook("PreToolUse", body, timeout=30).run(payload(tmp_path))
    assert out.blocked and out.error is None
    assert out.reason.startswith("r" * 100) and "truncated" in out.reason
    assert len(out.reason) < MAX_TEXT_CHARS + 100


def test_plain_text_context_is_capped_with_a_marker(tmp_path: Path) -> None:
    body = "cat >/dev/null; head -c 500000 /dev/zero | tr '\\0' c\n"
    out = CommandHook("PostToolUse", body).run(payload(tmp_path))
    assert out.error is None and "truncated: 500000 characters" in out.additional_context
    assert len(out.additional_context) < MAX_TEXT_CHARS + 100


def test_json_reason_and_context_are_capped(tmp_path: Path) -> None:
    answer = {"decision": "block", "reason": "r" * 200_000,
              "hookSpecificOutput": {"additionalContext": "c" * 200_000}}  # fmt: skip
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(answer))
    out = CommandHook("PreToolUse", f"cat >/dev/null; cat {path}").run(payload(tmp_path))
    assert out.blocked and len(out.reason) < MAX_TEXT_CHARS + 100
    assert len(out.additional_context) < MAX_TEXT_CHARS + 100 and "truncated" in out.reason


def test_large_payload_reaches_the_hook_whole(tmp_path: Path) -> None:
    """stdin is written without blocking, interleaved with reading the output."""
    big = payload(tmp_path, tool_input={"content": "z" * 600_000})
    out = CommandHook("PreToolUse", "wc -c >&2; exit 2", timeout=10).run(big)
    assert out.blocked and int(out.reason) == len(json.dumps(big).encode())


@pytest.mark.parametrize("event", ["PreToolUse", "SessionStart"])
def test_hook_that_never_reads_stdin_answers(tmp_path: Path, event: str) -> None:
    big = payload(tmp_path, tool_input={"content": "z" * 600_000})
    out = CommandHook(event, 'echo \'{"decision": "block", "reason": "r"}\'').run(big)
    assert out.blocked and out.reason == "r" and out.error is None


def test_hook_that_never_reads_stdin_and_hangs_times_out(tmp_path: Path) -> None:
    big = payload(tmp_path, tool_input={"content": "z" * 600_000})
    started = time.monotonic()
    out = CommandHook("PreToolUse", "exec sleep 30", timeout=1).run(big)
    assert time.monotonic() - started < 10 and out.blocked and "timed out" in str(out.error)


def test_grandchild_holding_only_stdin_does_not_hold_the_answer(
    tmp_path: Path, daemon_pid: Path
) -> None:
    big = payload(tmp_path, tool_input={"content": "z" * 600_000})
    body = f"""setsid sleep 30 >/dev/null 2>&1 & echo $! > {daemon_pid}
    echo '{{"decision": "block", "reason": "r"}}'
    """
    started = time.monotonic()
    out = CommandHook("PreToolUse", script(tmp_path, body), timeout=10).run(big)
    assert time.monotonic() - started < 6  # well before the 10 s timeout
    assert out.blocked and out.reason == "r" and out.error is None


def test_hook_that_closes_its_output_before_reading_stdin_gets_it_all(tmp_path: Path) -> None:
    big = payload(tmp_path, tool_input={"content": "z" * 600_000})
    seen = tmp_path / "seen"
    out = CommandHook("SessionStart", f"exec >&- 2>&-; wc -c > {seen}", timeout=10).run(big)
    assert out.error is None
    assert int(seen.read_text()) == len(json.dumps(big).encode())


def test_ordinary_answer_still_allows_and_rewrites(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"permissionDecision": "allow",
              "updatedInput": {"file_path": "b.txt"}, "additionalContext": "note"}}  # fmt: skip
    out = CommandHook("PreToolUse", f"cat >/dev/null; echo '{json.dumps(answer)}'").run(
        payload(tmp_path)
    )
    assert out.error is None and not out.blocked
    assert out.permission_decision == "allow" and out.updated_input == {"file_path": "b.txt"}
    assert out.additional_context == "note"


# ---------------------------------------------------------------- in-process hooks


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str either")


def raise_(exc: BaseException) -> Any:
    raise exc


@pytest.mark.parametrize(
    "answer",
    [
        lambda: {"hookSpecificOutput": {"updatedInput": {"file_path": "a.txt", "x": {1, 2}}}},
        lambda: {"hookSpecificOutput": {"updatedInput": {"n": math.nan}}},
        lambda: {"hookSpecificOutput": {"updatedInput": {1: "x", "a": "y"}}},
        lambda: {"decision": "block", "reason": Unprintable()},
        lambda: {
            "hookSpecificOutput": {
                "permissionDecision": "deny",
                "permissionDecisionReason": Unprintable(),
            }
        },
        lambda: {"hookSpecificOutput": {"additionalContext": Unprintable()}},
        lambda: {"decision": Unprintable()},
        lambda: raise_(SystemExit(0)),
        lambda: raise_(UnprintableError()),
        lambda: raise_(RecursionError()),
    ],
    ids=[
        "set",
        "nan",
        "mixed-keys",
        "reason",
        "pd-reason",
        "context",
        "decision",
        "exit",
        "unprintable-exc",
        "recursion",
    ],
)
def test_plugin_answer_norma_cannot_use_follows_on_error(answer: Any, tmp_path: Path) -> None:
    runner = HookRunner()
    runner.add(CallableHook("PreToolUse", lambda event: answer(), "plugin:hostile", timeout=5))
    pre = runner.pre_tool_use(payload(tmp_path), "Read")
    assert pre.blocked and pre.outcomes[0].error and pre.updated_input is None
    ignoring = CallableHook("PostToolUse", lambda event: answer(), "plugin:hostile", timeout=5)
    out = ignoring.run(payload(tmp_path))
    assert not out.blocked and out.error


def test_plugin_rewrite_is_plain_json(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"updatedInput": {"file_path": "b.txt", "tags": ("a", "b")}}}
    out = CallableHook("PreToolUse", lambda event: answer, "plugin:ok").run(payload(tmp_path))
    assert out.error is None and out.updated_input == {"file_path": "b.txt", "tags": ["a", "b"]}


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("command", ["", "   ", "\\t\\n"])
def test_blank_hook_command_is_a_config_error(norma: Any, tmp_path: Path, command: str) -> None:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(f'[[hooks.SessionStart]]\ncommand = "{command}"\n')
    proc = norma("config", "validate", str(cfg))
    assert proc.returncode == 2 and "must not be empty" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- the judge's deadline


@pytest.fixture
def dribbler() -> Iterator[int]:
    """A server on 127.0.0.1 that trickles a verdict a byte at a time, well inside any per-read
    timeout: its headers (path /headers) or its body (/body) a byte per 0.4 s, or its body a
    byte per 5 ms (/quick)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            path = conn.recv(65536).split(b" ", 2)[1].decode()
            content = json.dumps({"decision": "allow", "reason": "ok"})
            body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
            head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            fast, slow, rest = (
                (b"", head, body) if path.startswith("/headers/") else (head, body, b"")
            )
            try:
                conn.sendall(fast)
                for byte in slow:
                    if stop.wait(0.005 if path.startswith("/quick/") else 0.4):
                        return
                    conn.sendall(bytes([byte]))
                conn.sendall(rest)
            except OSError:  # the client shut the exchange down
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_http_judge_deadline_holds_while_a_read_is_blocked(dribbler: int, where: str) -> None:
    judge = HttpJudge("openai", "m", f"http://127.0.0.1:{dribbler}/{where}", None, 1.0)
    request = JudgeRequest("Bash", {"command": "ls"}, {})
    started = time.monotonic()
    with pytest.raises(JudgeFailure, match="timed out after 1s"):
        judge(request)
    assert time.monotonic() - started < 5  # the dribbled reply would take about 40 s
    # the abandoned exchange is shut down, not left reading until the server finishes
    for _ in range(40):
        if not any(t.name == "norma-judge-http" for t in threading.enumerate()):
            break
        time.sleep(0.05)
    assert not any(t.name == "norma-judge-http" for t in threading.enumerate())


def test_http_judge_within_its_deadline_still_answers(dribbler: int) -> None:
    judge = HttpJudge("openai", "m", f"http://127.0.0.1:{dribbler}/quick", None, 5.0)
    verdict = judge(JudgeRequest("Bash", {"command": "ls"}, {}))
    assert verdict.decision == "allow"
