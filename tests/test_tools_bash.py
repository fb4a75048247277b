"""The foreground Bash tool with real subprocesses: output, exit codes, timeouts, spill."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from norma_cli.core.contract import CallContext, ToolCall, ToolOutput
from norma_cli.core.executor import Executor
from norma_cli.core.hooks import HookRunner
from norma_cli.core.output import CAPPED, DEFAULT_MAX_CHARS, SPILL, OutputCapper, SpillInfo
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.registry import ToolRegistry
from norma_cli.policy.rules import RuleSet
from norma_cli.tools.bash import MAX_TIMEOUT_MS, BashTool
from norma_cli.tools.procs import group_members


def ctx_for(tmp_path: Path, session: Any = None, mode: str = "default") -> CallContext:
    return CallContext(
        session_id="t", cwd=tmp_path, roots=(tmp_path.resolve(),), mode=mode, session=session
    )


def bash(tmp_path: Path, session: Any = None, **tool_input: Any) -> ToolOutput:
    out = BashTool().call(tool_input, ctx_for(tmp_path, session))
    assert isinstance(out, ToolOutput)
    return out


def test_contract_and_metadata() -> None:
    from jsonschema import Draft202012Validator

    tool = BashTool()
    Draft202012Validator.check_schema(tool.input_schema)
    schema = tool.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["command"]
    assert set(schema["properties"]) == {
        "command",
        "timeout",
        "description",
        "run_in_background",
        "background_on_timeout",
    }
    assert schema["properties"]["timeout"]["maximum"] == MAX_TIMEOUT_MS == 600_000
    assert (tool.read_only, tool.concurrency_safe, tool.destructive, tool.raw_input) == (
        False,
        False,
        True,
        False,
    )
    assert "NOT a sandbox" in tool.description


def test_runs_in_cwd_with_interleaved_output(tmp_path: Path) -> None:
    out = bash(tmp_path, command="pwd; echo out; echo err >&2; echo out2")
    assert not out.is_error
    assert out.joined_text() == f"{tmp_path}\nout\nerr\nout2"
    assert out.metadata["exit_code"] == 0 and out.metadata["duration"] >= 0


def test_nonzero_exit_is_an_error_with_the_code(tmp_path: Path) -> None:
    out = bash(tmp_path, command="echo failing; exit 3")
    assert out.is_error
    assert out.joined_text() == "failing\n\nexit code 3"
    assert out.metadata["exit_code"] == 3


def test_stdin_is_dev_null_and_empty_output_is_explicit(tmp_path: Path) -> None:
    out = bash(tmp_path, command="cat")  # would hang forever on an inherited stdin
    assert not out.is_error and out.joined_text() == "(no output)"


def test_undecodable_bytes_do_not_break_the_result(tmp_path: Path) -> None:
    out = bash(tmp_path, command=r"printf 'ok \377\376 done\n'")
    assert not out.is_error and out.joined_text() == "ok \ufffd\ufffd done"


def test_background_is_refused_clearly(tmp_path: Path) -> None:
    out = bash(tmp_path, command="echo hi", run_in_background=True)
    assert out.is_error and "background tasks are not enabled" in out.joined_text()


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    started = time.monotonic()
    out = bash(tmp_path, command="echo before; sleep 30 & sleep 30; wait", timeout=500)
    elapsed = time.monotonic() - started
    assert out.is_error and out.metadata["timed_out"] is True
    assert "timed out after 0.5s" in out.joined_text()
    assert out.joined_text().startswith("before\n")  # the output so far
    assert elapsed < 10
    assert group_members(out.metadata["pgid"]) == []  # both sleeps are gone


def test_processes_left_running_are_ended_when_the_command_returns(tmp_path: Path) -> None:
    started = time.monotonic()
    out = bash(tmp_path, command="sleep 30 & echo started")
    assert time.monotonic() - started < 10
    assert not out.is_error
    assert out.joined_text().startswith("started")
    assert "left running were ended" in out.joined_text()
    assert group_members(out.metadata["pgid"]) == []


def test_missing_cwd_is_a_clear_error(tmp_path: Path) -> None:
    ctx = CallContext(session_id="t", cwd=tmp_path / "gone", roots=(tmp_path,))
    out = BashTool().call({"command": "true"}, ctx)
    assert isinstance(out, ToolOutput) and out.is_error and "cannot start" in out.joined_text()


def test_five_megabytes_stream_to_a_spill_file(tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    session = SimpleNamespace(capper=OutputCapper(spill_dir=spill_dir))
    line = b"0123456789abcdef\n"
    count = 5 * 1024 * 1024 // len(line) + 1
    expected = line * count
    out = bash(tmp_path, session, command=f"yes 0123456789abcdef | head -n {count}")
    assert not out.is_error
    assert out.metadata[CAPPED] is True
    spill = out.metadata[SPILL]
    assert isinstance(spill, SpillInfo)
    assert spill.bytes == len(expected) > 5 * 1024 * 1024
    assert spill.sha256 == hashlib.sha256(expected).hexdigest()
    data = Path(spill.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == spill.sha256
    text = out.joined_text()
    assert text.startswith(expected[:DEFAULT_MAX_CHARS].decode())
    assert len(text) < DEFAULT_MAX_CHARS + 500
    assert spill.path in text


def test_small_output_through_a_capper_is_not_spilled(tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    out = bash(
        tmp_path, SimpleNamespace(capper=OutputCapper(spill_dir=spill_dir)), command="echo small"
    )
    assert out.joined_text() == "small"
    assert CAPPED not in out.metadata and SPILL not in out.metadata
    assert list(spill_dir.iterdir()) == []


# ----------------------------------------------------------------------------- through the executor
def make_executor(
    tmp_path: Path, mode: str, session: Any = None, capper: OutputCapper | None = None
) -> Executor:
    registry = ToolRegistry()
    registry.register(BashTool())
    return Executor(
        registry,
        PermissionEngine(RuleSet()),
        HookRunner(),
        capper or OutputCapper(),
        ctx_for(tmp_path, session, mode),
    )


def test_executor_needs_permission_for_bash(tmp_path: Path) -> None:
    call = ToolCall("1", "Bash", {"command": "touch made"})
    denied = make_executor(tmp_path, "default").run(call)
    assert denied.is_error and denied.meta.decision == "deny"
    assert not (tmp_path / "made").exists()
    ran = make_executor(tmp_path, "bypassPermissions").run(call)
    assert not ran.is_error and (tmp_path / "made").exists()


def test_executor_rejects_a_timeout_over_the_maximum(tmp_path: Path) -> None:
    result = make_executor(tmp_path, "bypassPermissions").run(
        ToolCall("1", "Bash", {"command": "true", "timeout": MAX_TIMEOUT_MS + 1})
    )
    assert result.is_error and result.meta.stage == "schema"


def test_executor_records_the_streamed_spill(tmp_path: Path) -> None:
    capper = OutputCapper(spill_dir=tmp_path / "spill")
    ex = make_executor(tmp_path, "bypassPermissions", SimpleNamespace(capper=capper), capper)
    result = ex.run(ToolCall("1", "Bash", {"command": "seq 1 20000; exit 4"}))
    assert result.is_error and result.text().endswith("exit code 4")
    spill = result.meta.spill
    assert spill is not None
    expected = "".join(f"{i}\n" for i in range(1, 20001)).encode()
    assert spill.sha256 == hashlib.sha256(expected).hexdigest()
    assert result.to_wire()["norma"]["spill"]["sha256"] == spill.sha256


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="group_members reads /proc")
def test_group_members_sees_a_live_group(tmp_path: Path) -> None:
    import os
    import subprocess

    proc = subprocess.Popen(["sleep", "5"], start_new_session=True)
    try:
        assert group_members(proc.pid) == [proc.pid]
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert group_members(proc.pid) == []
