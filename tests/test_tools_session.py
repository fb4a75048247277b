"""Session tools through the real executor: TodoWrite, AskUser, plan mode, Memory; and every
tool of this family passing `norma tools lint` for the OpenAI and Anthropic profiles."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli import hookimpl
from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.runtime import Options, Runtime
from norma_cli.tools.session_tools import load_todos

SESSION_TOOLS = ["TodoWrite", "AskUser", "EnterPlanMode", "ExitPlanMode", "Memory"]
ALL_NEW = [
    *SESSION_TOOLS,
    "TaskOutput",
    "TaskStop",
    "TaskList",
    "Monitor",
    "ShellStart",
    "ShellSend",
    "ShellRead",
    "ShellList",
    "ShellClose",
]


def tools_config(tmp_path: Path, names: list[str], extra: str = "") -> Path:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(f"[tools]\nbuiltin = {json.dumps(names)}\n{extra}")
    return cfg


def build(tmp_path: Path, names: list[str] | None = None, **kw: Any) -> Runtime:
    cfg = tools_config(tmp_path, names or [*SESSION_TOOLS, "Read", "Write"])
    return Runtime.build(
        Options(cwd=tmp_path, config=cfg, with_store=False, interactive=False, **kw)
    )


def run(rt: Runtime, name: str, **tool_input: Any) -> ToolResult:
    return rt.executor.run(ToolCall("toolu_1", name, tool_input))


# ----------------------------------------------------------------------------- TodoWrite
def test_todo_write_returns_the_list(tmp_path: Path) -> None:
    rt = build(tmp_path)
    todos = [
        {"content": "Read the code", "status": "completed"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
        {"content": "Run the tests", "status": "pending"},
    ]
    result = run(rt, "TodoWrite", todos=todos)
    assert result.exit_code() == 0 and result.meta.stage == "tool"
    assert result.text() == (
        "Todo list updated (3 items: 1 completed, 1 in progress, 1 pending):\n"
        "[x] Read the code\n[~] Fixing the bug\n[ ] Run the tests"
    )
    assert load_todos(rt.session) == todos
    rt.close()


def test_todo_write_validation_names_the_json_pointer(tmp_path: Path) -> None:
    rt = build(tmp_path)
    bad = run(
        rt,
        "TodoWrite",
        todos=[{"content": "a", "status": "pending"}, {"content": "b", "status": "doing"}],
    )
    assert bad.exit_code() == 1 and bad.meta.stage == "schema" and "/todos/1/status" in bad.text()
    empty = run(rt, "TodoWrite", todos=[{"content": "", "status": "pending"}])
    assert empty.exit_code() == 1 and "/todos/0/content" in empty.text()
    extra = run(rt, "TodoWrite", todos=[{"content": "a", "status": "pending", "priority": "high"}])
    assert extra.exit_code() == 1 and "/todos/0" in extra.text()
    rt.close()


def test_named_session_keeps_its_todos(tmp_path: Path) -> None:
    rt = build(tmp_path, session_id="plan-7")
    assert (
        run(rt, "TodoWrite", todos=[{"content": "Ship it", "status": "pending"}]).exit_code() == 0
    )
    rt.close()
    again = build(tmp_path, session_id="plan-7")
    assert load_todos(again.session) == [{"content": "Ship it", "status": "pending"}]
    assert (again.session.dir / "todos.json").is_file()
    again.close()
    unnamed = build(tmp_path)
    assert load_todos(unnamed.session) == []
    unnamed.close()


# ----------------------------------------------------------------------------- AskUser
def test_ask_user_without_anyone_to_ask_is_a_clear_error(tmp_path: Path) -> None:
    rt = build(tmp_path)
    result = run(rt, "AskUser", question="Which database?", options=["sqlite", "postgres"])
    assert result.exit_code() == 1 and result.meta.decision == "allow"
    assert "nobody can answer: norma is not running interactively" in result.text()
    rt.close()


def test_ask_user_plugin_answer_and_failure(tmp_path: Path) -> None:
    class Broken:
        @hookimpl
        def ask_user(self, question: str, options: list[str], context: Any) -> Any:
            raise RuntimeError("chat service down")

    rt = build(tmp_path, plugins=(("broken", Broken()),))
    result = run(rt, "AskUser", question="Proceed?")
    assert (
        result.exit_code() == 1
        and "the ask_user plugin failed: RuntimeError: chat service down" in result.text()
    )
    rt.close()


# ----------------------------------------------------------------------------- plan mode
class Approver:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[tuple[str, dict[str, Any], str]] = []

    @hookimpl
    def resolve_ask(self, tool: Any, call: dict, decision: Any, context: Any) -> Any:
        self.asked.append((tool.name, call, decision.reason))
        return self.answer


def test_plan_mode_enter_and_exit_needs_approval(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A")
    refuse = Approver("deny")
    rt = build(tmp_path, allow=("Write",), plugins=(("approver", refuse),))
    assert run(rt, "Write", file_path="b.txt", content="1").exit_code() == 0
    entered = run(rt, "EnterPlanMode")
    assert entered.exit_code() == 0 and rt.session.mode == "plan"
    # the next calls run in plan mode: read-only allowed, mutating denied (even with an allow rule)
    assert run(rt, "Read", file_path="a.txt").exit_code() == 0
    denied = run(rt, "Write", file_path="b.txt", content="2")
    assert denied.exit_code() == 3 and denied.meta.stage == "mode"
    assert run(rt, "TodoWrite", todos=[]).exit_code() == 3
    # leaving asks; refused → still in plan mode
    refused = run(rt, "ExitPlanMode", plan="1. write b.txt")
    assert refused.exit_code() == 3 and rt.session.mode == "plan"
    assert refuse.asked == [
        ("ExitPlanMode", {"plan": "1. write b.txt"}, "leaving plan mode needs approval of the plan")
    ]
    rt.close()

    approve = Approver("allow")
    rt = build(tmp_path, allow=("Write",), plugins=(("approver", approve),))
    run(rt, "EnterPlanMode")
    left = run(rt, "ExitPlanMode", plan="1. write b.txt")
    assert left.exit_code() == 0 and rt.session.mode == "default"
    assert left.text() == "Plan approved. Permission mode is now default: carry out the plan."
    assert run(rt, "Write", file_path="b.txt", content="3").exit_code() == 0
    not_in_plan = run(rt, "ExitPlanMode", plan="again")
    assert not_in_plan.exit_code() == 1 and "not in plan mode" in not_in_plan.text()
    assert len(approve.asked) == 1  # outside plan mode nothing is asked
    rt.close()


def test_plan_mode_restores_the_previous_mode_and_applies_within_a_batch(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = tools_config(tmp_path, ["EnterPlanMode", "ExitPlanMode", "Write"])
    batch = "\n".join(
        json.dumps({"type": "tool_use", "id": f"t{i}", "name": n, "input": inp})
        for i, (n, inp) in enumerate(
            [
                ("Write", {"file_path": "one.txt", "content": "1"}),
                ("EnterPlanMode", {}),
                ("Write", {"file_path": "two.txt", "content": "2"}),
                ("ExitPlanMode", {"plan": "write two.txt"}),
            ]
        )
    )
    proc = norma("--config", str(cfg), "--mode", "acceptEdits", "run", "--calls", "-", stdin=batch)
    out = results(proc.stdout)
    assert [r["is_error"] for r in out] == [False, False, True, True]
    assert out[2]["norma"]["stage"] == "mode" and out[3]["norma"]["decision"] == "deny"
    assert (tmp_path / "one.txt").exists() and not (tmp_path / "two.txt").exists()
    assert proc.returncode == 3

    approve = Approver("allow")
    rt = build(tmp_path, mode="acceptEdits", plugins=(("approver", approve),))
    run(rt, "EnterPlanMode")
    run(rt, "ExitPlanMode", plan="p")
    assert rt.session.mode == "acceptEdits"
    rt.close()


# ----------------------------------------------------------------------------- Memory
def test_memory_add_view_replace_clear(tmp_path: Path) -> None:
    rt = build(tmp_path, allow=("Memory",))
    path = tmp_path / ".norma" / "memory.md"
    assert run(rt, "Memory", action="view").text() == f"project memory ({path}):\n\n(no notes yet)"
    assert not path.parent.exists()  # viewing creates nothing
    assert run(rt, "Memory", action="add", text="Tests: ./scripts/test").exit_code() == 0
    assert run(rt, "Memory", action="add", text="Style: ruff").exit_code() == 0
    assert path.read_text() == "- Tests: ./scripts/test\n- Style: ruff\n"
    assert (
        run(rt, "Memory", action="view").text().endswith("- Tests: ./scripts/test\n- Style: ruff")
    )
    assert run(rt, "Memory", action="replace", text="only this").exit_code() == 0
    assert path.read_text() == "only this\n"
    assert run(rt, "Memory", action="clear").exit_code() == 0 and path.read_text() == ""
    missing = run(rt, "Memory", action="add")
    assert missing.exit_code() == 1 and "/text: required" in missing.text()
    user = run(rt, "Memory", action="add", scope="user", text="prefers tabs")
    user_file = Path(os.environ["XDG_CONFIG_HOME"]) / "norma" / "memory.md"
    assert user.exit_code() == 0 and user_file.read_text() == "- prefers tabs\n"
    assert oct(user_file.stat().st_mode & 0o777) == "0o600"
    assert list(path.parent.iterdir()) == [path]  # no temporary files left behind
    rt.close()


def test_memory_writes_need_approval_but_view_does_not(tmp_path: Path) -> None:
    rt = build(tmp_path)
    assert run(rt, "Memory", action="view").exit_code() == 0
    assert run(rt, "Memory", action="add", text="x").exit_code() == 3
    rt.close()
    rt = build(tmp_path, mode="acceptEdits")
    assert run(rt, "Memory", action="add", text="inside the roots").exit_code() == 0
    outside = run(rt, "Memory", action="add", scope="user", text="outside")
    assert outside.exit_code() == 3 and "outside the working roots" in outside.meta.reason
    rt.close()


def test_memory_refuses_symlinks(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=abc")
    (tmp_path / ".norma").mkdir()
    (tmp_path / ".norma" / "memory.md").symlink_to(secret)
    rt = build(tmp_path, allow=("Memory",))
    view = run(rt, "Memory", action="view")
    assert view.exit_code() == 1 and "symlink" in view.text() and "TOKEN" not in view.text()
    assert run(rt, "Memory", action="add", text="x").exit_code() == 1
    assert secret.read_text() == "TOKEN=abc"
    rt.close()

    other = tmp_path / "elsewhere"
    other.mkdir()
    project = tmp_path / "p"
    project.mkdir()
    (project / ".norma").symlink_to(other, target_is_directory=True)
    rt = build(project, allow=("Memory",))
    linked = run(rt, "Memory", action="add", text="x")
    assert linked.exit_code() == 1 and "symlink or not a directory" in linked.text()
    assert list(other.iterdir()) == []
    rt.close()


# ----------------------------------------------------------------------------- metadata, lint
def test_session_tool_metadata() -> None:
    from norma_cli.tools import session_tools as s

    assert (s.TodoWriteTool.read_only, s.TodoWriteTool.requires_approval) == (False, False)
    assert (s.AskUserTool.read_only, s.AskUserTool.concurrency_safe) == (True, False)
    assert s.ExitPlanModeTool.requires_approval and s.MemoryTool.requires_approval
    assert not s.MemoryTool.read_only and s.MemoryTool.edits_files


def test_new_tools_pass_provider_lint(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tools_config(tmp_path, ALL_NEW)
    proc = norma(
        "--config",
        str(cfg),
        "tools",
        "lint",
        "--profile",
        "openai",
        "--profile",
        "anthropic",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    text = json.dumps(report)
    assert all(name in text for name in ("ShellSend", "Monitor", "TodoWrite"))  # they were linted
    if isinstance(report, dict) and "summary" in report:
        assert report["summary"].get("errors", 0) == 0


@pytest.mark.parametrize("name", ALL_NEW)
def test_new_tools_have_usable_descriptions(tmp_path: Path, name: str) -> None:
    rt = build(tmp_path, [name])
    tool = rt.registry.get(name)
    assert tool is not None and len(tool.description) >= 40 and tool.prompt
    schema = tool.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    for prop in schema["properties"].values():
        assert prop.get("description"), (name, prop)
    rt.close()
