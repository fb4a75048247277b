"""The executor against hostile extensions: tools, ask resolvers, permission plugins and hooks
that raise what they should not, run past their timeout, answer nonsense or flood the result.

Every case keeps the executor's contract: one paired result with its recorded trace; only
Ctrl-C and norma's own signal exception end the run; an answer that is not exactly "allow"
never runs the call. Real executor, real store, real hooks; the hostile parties are plain
tools and functions, as a plugin would register them.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.contract import CallContext, Decision, Tool, ToolCall, ToolOutput
from norma_cli.core.executor import HOOK_TEXT_MAX, Executor
from norma_cli.core.hooks import CallableHook, HookRunner
from norma_cli.core.output import OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.registry import ToolRegistry
from norma_cli.oneshot import Interrupted
from norma_cli.policy.rules import Rule, RuleSet
from norma_cli.store.sqlite import Store

BOUND = HOOK_TEXT_MAX + 200  # a capped text, with whatever marker says it was cut


class Raiser(Tool):
    """Raises the exception in its input's ``exc`` (evaluated), from a sync call."""

    name = "Raiser"
    read_only = True
    input_schema = {"type": "object", "properties": {"exc": {"type": "string"}}}

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raise eval(tool_input["exc"])


class Sleeper(Tool):
    """A sync tool with an executor-enforced timeout; records the thread it ran on."""

    name = "Sleeper"
    read_only = True
    timeout = 0.3
    input_schema = {"type": "object", "properties": {"s": {"type": "number"}}}

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.finished = threading.Event()

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.threads.append(threading.current_thread())
        time.sleep(tool_input["s"])
        self.finished.set()
        return ToolOutput.text("woke")


class Marker(Tool):
    """A mutating tool that records that it ran."""

    name = "Marker"
    input_schema = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.ran = 0
        self.threads: list[threading.Thread] = []

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.ran += 1
        self.threads.append(threading.current_thread())
        return ToolOutput.text("ran")


def make(
    tmp_path: Path,
    *tools: Tool,
    rules: list[Rule] | None = None,
    hooks: HookRunner | None = None,
    resolve: Any = None,
    opinion: Any = None,
) -> Executor:
    registry = ToolRegistry()
    for tool in tools:
        registry.register(tool)
    kwargs: dict[str, Any] = {} if resolve is None else {"resolve_ask": resolve}
    return Executor(
        registry,
        PermissionEngine(RuleSet(rules or []), opinion),
        hooks or HookRunner(),
        OutputCapper(30_000, tmp_path / "spill"),
        CallContext("sess", tmp_path, (tmp_path.resolve(),)),
        store=Store(tmp_path / "norma.db"),
        **kwargs,
    )


def trace(tmp_path: Path, tool_use_id: str) -> tuple[str, list[dict[str, Any]]]:
    """(status, events) of the recorded trace of one call, read back from the database."""
    db = sqlite3.connect(tmp_path / "norma.db")
    try:
        rows = db.execute(
            "SELECT status, events FROM traces WHERE tool_use_id = ?", (tool_use_id,)
        ).fetchall()
    finally:
        db.close()
    assert len(rows) == 1, rows  # exactly one record per call
    return rows[0][0], json.loads(rows[0][1])


def hooks(*items: CallableHook) -> HookRunner:
    runner = HookRunner()
    for item in items:
        runner.add(item)
    return runner


# ----------------------------------------------------------------- 1. BaseException from call


@pytest.mark.parametrize("exc", ["SystemExit(0)", "SystemExit(7)", "GeneratorExit()"])
def test_tool_raising_a_base_exception_is_a_failed_result(tmp_path: Path, exc: str) -> None:
    ex = make(tmp_path, Raiser())
    result = ex.run(ToolCall("t", "Raiser", {"exc": exc}))
    assert result.is_error and result.exit_code() == 1
    assert result.text().startswith(f"Raiser failed: {exc.split('(')[0]}")
    assert trace(tmp_path, "t")[0] == "failed"


@pytest.mark.parametrize("exc", ["KeyboardInterrupt()", "Interrupted(15)"])
def test_ctrl_c_and_signals_still_end_the_run_with_a_trace(tmp_path: Path, exc: str) -> None:
    ex = make(tmp_path, Raiser())
    expected = KeyboardInterrupt if exc.startswith("Keyboard") else Interrupted
    with pytest.raises(expected):
        ex.run(ToolCall("t", "Raiser", {"exc": exc}))
    status, events = trace(tmp_path, "t")
    assert status == "failed" and events[-1]["by"] == "signal"


def test_a_tool_error_whose_str_raises_is_still_a_result(tmp_path: Path) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    class Bad(Tool):
        name = "Bad"
        read_only = True

        def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            raise Unprintable

    result = make(tmp_path, Bad()).run(ToolCall("t", "Bad", {}))
    assert result.is_error and result.text() == "Bad failed: Unprintable: <unprintable>"


def test_a_tool_without_a_timeout_raising_timeout_error_is_its_failure(tmp_path: Path) -> None:
    """A socket timeout inside a self-bounded tool is the tool's error, not norma's deadline
    (it used to crash formatting `None` as seconds)."""
    result = make(tmp_path, Raiser()).run(ToolCall("t", "Raiser", {"exc": "TimeoutError('x')"}))
    assert result.is_error and result.text() == "Raiser failed: TimeoutError: x"
    assert not any(e["state"] == "timeout" for e in trace(tmp_path, "t")[1])


# ----------------------------------------------------------------- 2. sync timeouts


def test_sync_tool_timeout_is_enforced_with_a_timeout_event(tmp_path: Path) -> None:
    tool = Sleeper()
    ex = make(tmp_path, tool)
    started = time.monotonic()
    result = ex.run(ToolCall("t", "Sleeper", {"s": 5}))
    assert time.monotonic() - started < 4.5  # timeout 0.3 s; the tool sleeps 5
    assert result.is_error and result.text() == "Sleeper timed out after 0.3s"
    status, events = trace(tmp_path, "t")
    assert status == "failed"
    assert [e["seconds"] for e in events if e["state"] == "timeout"] == [0.3]
    assert tool.threads[0] is not threading.current_thread() and tool.threads[0].daemon


def test_sync_tool_with_a_timeout_that_finishes_in_time_gives_its_result(tmp_path: Path) -> None:
    result = make(tmp_path, Sleeper()).run(ToolCall("t", "Sleeper", {"s": 0.01}))
    assert not result.is_error and result.text() == "woke"


@pytest.mark.parametrize("exc", ["RuntimeError('boom')", "SystemExit(3)", "GeneratorExit()"])
def test_sync_tool_with_a_timeout_raising_is_a_failed_result(tmp_path: Path, exc: str) -> None:
    class BoundedRaiser(Raiser):
        name = "BoundedRaiser"
        timeout = 5.0

    result = make(tmp_path, BoundedRaiser()).run(ToolCall("t", "BoundedRaiser", {"exc": exc}))
    assert result.is_error and result.text().startswith("BoundedRaiser failed: ")


def test_tools_without_a_timeout_run_on_the_calling_thread(tmp_path: Path) -> None:
    """Built-ins (timeout None) bound themselves: no worker thread, no cost per call."""
    tool = Marker()
    make(tmp_path, tool, rules=[Rule.parse("Marker", "allow", "test")]).run(
        ToolCall("t", "Marker", {})
    )
    assert tool.threads == [threading.current_thread()]


def test_async_tool_with_a_timeout_still_runs_on_the_event_loop(tmp_path: Path) -> None:
    class Slow(Tool):
        name = "Slow"
        read_only = True
        timeout = 0.2

        async def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            await asyncio.sleep(tool_input.get("s", 0))
            return ToolOutput.text(threading.current_thread().name)

    ex = make(tmp_path, Slow())
    assert ex.run(ToolCall("a", "Slow", {})).text() == "norma-async"
    result = ex.run(ToolCall("b", "Slow", {"s": 5}))
    assert result.text() == "Slow timed out after 0.2s"


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, 0.0])
def test_a_tool_timeout_that_is_not_seconds_refuses_the_call(
    tmp_path: Path, timeout: float
) -> None:
    """The registry refuses such a timeout; a tool that changes it later is refused here."""
    tool = Marker()
    ex = make(tmp_path, tool, rules=[Rule.parse("Marker", "allow", "test")])
    tool.timeout = timeout
    result = ex.run(ToolCall("t", "Marker", {}))
    assert result.is_error and "not a number of seconds" in result.text() and tool.ran == 0


# ----------------------------------------------------------------- 3. fail closed on answers


@pytest.mark.parametrize(
    "answer",
    [
        lambda: Decision("sure", "plugin", "garbage"),  # type: ignore[arg-type]
        lambda: Decision("ALLOW", "plugin", "case matters"),  # type: ignore[arg-type]
        lambda: "allow",
        lambda: None,
    ],
    ids=["sure", "ALLOW", "a-string", "none"],
)
def test_an_ask_resolved_with_anything_but_allow_is_denied(tmp_path: Path, answer: Any) -> None:
    tool = Marker()
    result = make(tmp_path, tool, resolve=lambda *a: answer()).run(ToolCall("t", "Marker", {}))
    assert tool.ran == 0, "the asked call ran"
    assert result.exit_code() == 3 and "fail closed" in result.text()
    assert trace(tmp_path, "t")[0] == "denied"


@pytest.mark.parametrize("exc", [SystemExit(0), GeneratorExit(), RuntimeError("x")])
def test_an_ask_resolver_that_raises_is_a_deny(tmp_path: Path, exc: BaseException) -> None:
    def resolve(*args: Any) -> Decision:
        raise exc

    tool = Marker()
    result = make(tmp_path, tool, resolve=resolve).run(ToolCall("t", "Marker", {}))
    assert tool.ran == 0 and result.exit_code() == 3
    assert f"resolving the ask raised {type(exc).__name__}" in result.text()


def test_ctrl_c_in_an_ask_resolver_still_ends_the_run(tmp_path: Path) -> None:
    def resolve(*args: Any) -> Decision:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make(tmp_path, Marker(), resolve=resolve).run(ToolCall("t", "Marker", {}))
    assert trace(tmp_path, "t")[0] == "failed"


def test_an_exact_allow_from_the_resolver_runs_the_call(tmp_path: Path) -> None:
    tool = Marker()
    ex = make(tmp_path, tool, resolve=lambda *a: Decision.allow("plugin", "fine"))
    assert ex.run(ToolCall("t", "Marker", {})).exit_code() == 0 and tool.ran == 1


def test_a_permission_plugin_raising_system_exit_is_a_deny(tmp_path: Path) -> None:
    def opinion(*args: Any) -> Decision:
        raise SystemExit(0)

    tool = Marker()
    ex = make(tmp_path, tool, rules=[Rule.parse("Marker", "allow", "test")], opinion=opinion)
    result = ex.run(ToolCall("t", "Marker", {}))
    assert tool.ran == 0 and result.exit_code() == 3
    assert "permission check raised SystemExit" in result.text()


# ----------------------------------------------------------------- 4. hook text is bounded


def test_a_huge_pre_hook_block_reason_is_capped(tmp_path: Path) -> None:
    huge = "r" * 3_000_000
    tool = Marker()
    ex = make(
        tmp_path,
        tool,
        rules=[Rule.parse("Marker", "allow", "test")],
        hooks=hooks(
            CallableHook("PreToolUse", lambda e: {"decision": "block", "reason": huge}, "b")
        ),
    )
    result = ex.run(ToolCall("t", "Marker", {}))
    assert tool.ran == 0 and result.exit_code() == 3
    assert len(result.text()) < BOUND and len(result.meta.reason or "") < BOUND


def test_a_huge_pre_hook_ask_reason_is_capped(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "q" * 3_000_000}}  # fmt: skip
    asked: list[str] = []

    def resolve(tool: Tool, call: ToolCall, decision: Decision, ctx: CallContext) -> Decision:
        asked.append(decision.reason)
        return Decision.deny("plugin", "no")

    ex = make(
        tmp_path,
        Marker(),
        rules=[Rule.parse("Marker", "allow", "test")],
        hooks=hooks(CallableHook("PreToolUse", lambda e: answer, "a")),
        resolve=resolve,
    )
    result = ex.run(ToolCall("t", "Marker", {}))
    assert result.exit_code() == 3 and asked and len(asked[0]) < BOUND


@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse"])
def test_huge_hook_context_is_capped_per_message(tmp_path: Path, event: str) -> None:
    answer = {"hookSpecificOutput": {"additionalContext": "c" * 3_000_000}}
    ex = make(
        tmp_path,
        Marker(),
        rules=[Rule.parse("Marker", "allow", "test")],
        hooks=hooks(CallableHook(event, lambda e: answer, "ctx")),
    )
    result = ex.run(ToolCall("t", "Marker", {}))
    assert result.exit_code() == 0 and result.text() == "ran"
    [message] = result.extra_messages
    assert message["content"].startswith("c" * 1000) and len(message["content"]) < BOUND


def test_a_huge_resolver_deny_reason_is_capped(tmp_path: Path) -> None:
    ex = make(tmp_path, Marker(), resolve=lambda *a: Decision.deny("plugin", "n" * 3_000_000))
    result = ex.run(ToolCall("t", "Marker", {}))
    assert result.exit_code() == 3 and len(result.text()) < BOUND


def test_a_system_exit_anywhere_in_the_pipeline_is_an_internal_error_result(
    tmp_path: Path,
) -> None:
    """Not only from call(): whatever extension code raises SystemExit mid-pipeline (here the
    schema provider), the call still ends as one result with its trace, and norma goes on."""

    def schema_for(tool: Tool) -> dict[str, Any]:
        raise SystemExit(0)

    registry = ToolRegistry()
    registry.register(Marker())
    ex = Executor(
        registry,
        PermissionEngine(RuleSet([])),
        HookRunner(),
        OutputCapper(30_000, tmp_path / "spill"),
        CallContext("sess", tmp_path, (tmp_path.resolve(),)),
        store=Store(tmp_path / "norma.db"),
        schema_for=schema_for,
    )
    result = ex.run(ToolCall("t", "Marker", {}))
    assert result.is_error and result.text() == "internal error while running Marker: SystemExit: 0"
    assert trace(tmp_path, "t")[0] == "error"
