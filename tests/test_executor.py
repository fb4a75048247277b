"""The pipeline of SPEC §3 through the public Executor API, with real hooks and a real store."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.contract import CallContext, Decision, Tool, ToolCall, ToolOutput
from norma_cli.core.executor import Executor
from norma_cli.core.hooks import CallableHook, CommandHook, HookRunner
from norma_cli.core.output import OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.registry import ToolRegistry
from norma_cli.policy.rules import Rule, RuleSet
from norma_cli.store.sqlite import Store


class Recorder(Tool):
    """A mutating tool that records its calls; refuses input path '/etc/passwd' itself."""

    name = "Record"
    description = "records"
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "pattern": "^[a-z/._]+$"},
            "mode": {"enum": ["a", "b"]},
            "count": {"type": "integer", "minimum": 0, "default": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        if tool_input.get("path") == "/etc/passwd":
            return Decision.deny("tool", "Record never touches /etc/passwd")
        return None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.calls.append(tool_input)
        return ToolOutput.text(f"recorded {tool_input['path']} x{tool_input['count']}")


class Boom(Tool):
    name = "Boom"
    read_only = True
    input_schema = {"type": "object"}

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raise RuntimeError("kaboom")


class Big(Tool):
    name = "Big"
    read_only = True
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        return ToolOutput.text("x" * tool_input["n"])


def make(
    tmp_path: Path,
    *tools: Tool,
    rules: list[Rule] | None = None,
    mode: str = "default",
    hooks: HookRunner | None = None,
    resolve: Any = None,
    store: bool = True,
    max_chars: int = 30_000,
) -> Executor:
    registry = ToolRegistry()
    for tool in tools:
        registry.register(tool)
    ctx = CallContext("sess", tmp_path, (tmp_path.resolve(),), mode=mode)
    kwargs: dict[str, Any] = {}
    if resolve is not None:
        kwargs["resolve_ask"] = resolve
    return Executor(
        registry,
        PermissionEngine(RuleSet(rules or [])),
        hooks or HookRunner(),
        OutputCapper(max_chars, tmp_path / "spill"),
        ctx,
        store=Store(tmp_path / "norma.db") if store else None,
        **kwargs,
    )


def allow(text: str = "Record") -> Rule:
    return Rule.parse(text, "allow", "test")


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# ----------------------------------------------------------------------------- steps 1-3
def test_unknown_tool_is_one_error_result(tmp_path: Path) -> None:
    ex = make(tmp_path)
    result = ex.run(ToolCall("t1", "Nope", {}))
    assert result.is_error and result.tool_use_id == "t1"
    assert result.text() == "unknown tool: Nope"
    assert result.exit_code() == 1


@pytest.mark.parametrize(
    ("tool_input", "pointer", "word"),
    [
        ({}, "/", "required"),
        ({"path": 5}, "/path", "string"),
        ({"path": "/x", "mode": "c"}, "/mode", "one of"),
        ({"path": "/X!"}, "/path", "does not match"),
        ({"path": "/x", "extra": 1}, "/", "Additional properties"),
        ({"path": "/x", "count": -1}, "/count", "minimum"),
    ],
)
def test_schema_violation_names_pointer_and_skips_call(
    tmp_path: Path, tool_input: dict, pointer: str, word: str
) -> None:
    rec = Recorder()
    ex = make(tmp_path, rec, rules=[allow()])
    result = ex.run(ToolCall("t", "Record", tool_input))
    assert result.is_error and result.exit_code() == 1
    assert f"{pointer}: " in result.text() and word in result.text()
    assert rec.calls == []
    assert result.meta.stage == "schema"


def test_defaults_fill_missing_scalars(tmp_path: Path) -> None:
    rec = Recorder()
    ex = make(tmp_path, rec, rules=[allow()])
    assert ex.run(ToolCall("t", "Record", {"path": "/a"})).text() == "recorded /a x1"


def test_raw_input_tool_skips_validation(tmp_path: Path) -> None:
    class Raw(Recorder):
        name = "Raw"
        raw_input = True

        def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            return ToolOutput.text(repr(sorted(tool_input)))

    ex = make(tmp_path, Raw(), rules=[allow("Raw")])
    assert not ex.run(ToolCall("t", "Raw", {"anything": 1})).is_error


# ----------------------------------------------------------------------------- step 4
def test_deny_rule_wins_over_allow_and_bypass(tmp_path: Path) -> None:
    rec = Recorder()
    ex = make(
        tmp_path,
        rec,
        rules=[allow(), Rule.parse("Record", "deny", "cfg:3")],
        mode="bypassPermissions",
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3
    assert (result.meta.rule, result.meta.source, result.meta.stage) == ("Record", "cfg:3", "rule")
    assert rec.calls == []


def test_tool_hard_deny_beats_bypass(tmp_path: Path) -> None:
    ex = make(tmp_path, Recorder(), mode="bypassPermissions")
    assert ex.run(ToolCall("t", "Record", {"path": "/etc/passwd"})).exit_code() == 3


def test_plan_mode(tmp_path: Path) -> None:
    ex = make(tmp_path, Recorder(), Big(), rules=[allow()], mode="plan")
    assert ex.run(ToolCall("t", "Record", {"path": "/a"})).exit_code() == 3
    assert ex.run(ToolCall("t", "Big", {"n": 3})).exit_code() == 0


def test_ask_without_resolver_is_denied_and_resolver_can_allow(tmp_path: Path) -> None:
    ex = make(tmp_path, Recorder())
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "nobody to ask" in result.text()

    seen: list[Decision] = []

    def yes(tool: Tool, call: ToolCall, decision: Decision, ctx: CallContext) -> Decision:
        seen.append(decision)
        return Decision.allow("user", "ok")

    ex = make(
        tmp_path, Recorder(), rules=[Rule.parse("Record", "ask", "cfg:9"), allow()], resolve=yes
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 0
    assert seen[0].rule is not None and seen[0].rule.text == "Record"  # ask beats allow
    assert result.meta.rule == "Record"


@pytest.mark.parametrize(
    ("mode", "expected"), [("dontAsk", 3), ("auto", 3), ("default", 3), ("acceptEdits", 3)]
)
def test_modes_without_rules_never_run_mutating_tools(
    tmp_path: Path, mode: str, expected: int
) -> None:
    assert (
        make(tmp_path, Recorder(), mode=mode)
        .run(ToolCall("t", "Record", {"path": "/a"}))
        .exit_code()
        == expected
    )


def test_accept_edits_allows_file_edits_inside_roots_only(tmp_path: Path) -> None:
    class EditLike(Recorder):
        name = "EditLike"
        edits_files = True

        def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
            return [tool_input["path"]]

    ex = make(tmp_path, EditLike(), mode="acceptEdits")
    assert ex.run(ToolCall("t", "EditLike", {"path": "inside.txt"})).exit_code() == 0
    assert ex.run(ToolCall("t", "EditLike", {"path": "/tmp/outside.txt"})).exit_code() == 3


def test_auto_mode_honours_tool_own_allow(tmp_path: Path) -> None:
    class SelfAllow(Recorder):
        name = "SelfAllow"

        def check_permissions(
            self, tool_input: dict[str, Any], ctx: CallContext
        ) -> Decision | None:
            return Decision.allow("tool", "safe input")

    assert (
        make(tmp_path, SelfAllow(), mode="auto")
        .run(ToolCall("t", "SelfAllow", {"path": "/a"}))
        .exit_code()
        == 0
    )


def test_read_only_tool_allowed_by_default(tmp_path: Path) -> None:
    result = make(tmp_path, Big()).run(ToolCall("t", "Big", {"n": 2}))
    assert result.exit_code() == 0 and result.meta.stage == "read_only"


# ----------------------------------------------------------------------------- hooks
def hook_runner(*hooks: Any) -> HookRunner:
    runner = HookRunner()
    for h in hooks:
        runner.add(h)
    return runner


def test_command_hook_exit_2_blocks_with_stderr(tmp_path: Path) -> None:
    cmd = script(tmp_path, "h.sh", "cat > /dev/null; echo 'no way' >&2; exit 2\n")
    rec = Recorder()
    ex = make(
        tmp_path,
        rec,
        rules=[allow()],
        hooks=hook_runner(CommandHook("PreToolUse", cmd, source="cfg:7")),
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "no way" in result.text()
    assert result.meta.stage == "hook" and result.meta.source == "cfg:7"
    assert rec.calls == []


def test_command_hook_receives_protocol_json(tmp_path: Path) -> None:
    out = tmp_path / "event.json"
    cmd = script(tmp_path, "h.sh", f"cat > {out}\n")
    ex = make(
        tmp_path, Recorder(), rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd))
    )
    ex.run(ToolCall("toolu_9", "Record", {"path": "/a"}))
    import json

    event = json.loads(out.read_text())
    assert event["hook_event_name"] == "PreToolUse"
    assert event["tool_name"] == "Record" and event["tool_use_id"] == "toolu_9"
    assert event["tool_input"] == {"path": "/a", "count": 1}
    assert event["session_id"] == "sess" and event["cwd"] == str(tmp_path)


def test_hook_matcher_limits_tools(tmp_path: Path) -> None:
    cmd = script(tmp_path, "h.sh", "exit 2\n")
    ex = make(
        tmp_path,
        Recorder(),
        Big(),
        rules=[allow()],
        hooks=hook_runner(CommandHook("PreToolUse", cmd, matcher="Bash|Record")),
    )
    assert ex.run(ToolCall("t", "Record", {"path": "/a"})).exit_code() == 3
    assert ex.run(ToolCall("t", "Big", {"n": 1})).exit_code() == 0


def test_hook_timeout_blocks_by_default_and_kills_it(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    cmd = script(tmp_path, "h.sh", f"sleep 5; touch {marker}\n")
    ex = make(
        tmp_path,
        Recorder(),
        rules=[allow()],
        hooks=hook_runner(CommandHook("PreToolUse", cmd, timeout=0.3)),
    )
    start = time.monotonic()
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert time.monotonic() - start < 3
    assert result.exit_code() == 3 and "timed out" in result.text()
    time.sleep(0.2)
    assert not marker.exists()


def test_hook_timeout_ignored_with_on_error_ignore(tmp_path: Path) -> None:
    cmd = script(tmp_path, "h.sh", "sleep 5\n")
    rec = Recorder()
    ex = make(
        tmp_path,
        rec,
        rules=[allow()],
        hooks=hook_runner(CommandHook("PreToolUse", cmd, timeout=0.3, on_error="ignore")),
    )
    assert ex.run(ToolCall("t", "Record", {"path": "/a"})).exit_code() == 0
    assert len(rec.calls) == 1


def test_crashing_hook_blocks_and_garbage_answer_blocks(tmp_path: Path) -> None:
    crash = script(tmp_path, "c.sh", "exit 7\n")
    garbage = script(tmp_path, "g.sh", "echo '{not json'\n")
    for cmd in (crash, garbage):
        ex = make(
            tmp_path, Recorder(), rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd))
        )
        assert ex.run(ToolCall("t", "Record", {"path": "/a"})).exit_code() == 3


def test_permission_decision_deny_json(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "h.sh",
        """cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "policy says no"}}'\n""",
    )
    ex = make(
        tmp_path, Recorder(), rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd))
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "policy says no" in result.text()


def test_decision_block_json(tmp_path: Path) -> None:
    cmd = script(tmp_path, "h.sh", """echo '{"decision": "block", "reason": "blocked json"}'\n""")
    ex = make(
        tmp_path, Recorder(), rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd))
    )
    assert "blocked json" in ex.run(ToolCall("t", "Record", {"path": "/a"})).text()


def test_hook_ask_escalates_allow(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "h.sh",
        """echo '{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "check"}}'\n""",
    )
    ex = make(
        tmp_path, Recorder(), rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd))
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "nobody to ask" in result.text()


def test_updated_input_is_applied(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "h.sh",
        """echo '{"hookSpecificOutput": {"updatedInput": {"path": "/rewritten", "count": 2}}}'\n""",
    )
    rec = Recorder()
    ex = make(tmp_path, rec, rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd)))
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.text() == "recorded /rewritten x2"
    assert rec.calls == [{"path": "/rewritten", "count": 2}]


def test_updated_input_violating_schema_is_refused(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "h.sh",
        """echo '{"hookSpecificOutput": {"updatedInput": {"path": "/A!", "evil": true}}}'\n""",
    )
    rec = Recorder()
    ex = make(tmp_path, rec, rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd)))
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "rewritten input is invalid" in result.text()
    assert rec.calls == []


def test_updated_input_violating_deny_is_refused(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "h.sh",
        """echo '{"hookSpecificOutput": {"updatedInput": {"path": "/etc/passwd"}}}'\n""",
    )
    rec = Recorder()
    ex = make(tmp_path, rec, rules=[allow()], hooks=hook_runner(CommandHook("PreToolUse", cmd)))
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "rewritten input" in result.text()
    assert rec.calls == []


def test_updated_input_cannot_widen_to_ask(tmp_path: Path) -> None:
    """Allowed originally by the tool's own check; the rewrite needs an ask → not auto-allowed."""

    class Picky(Recorder):
        name = "Picky"

        def check_permissions(
            self, tool_input: dict[str, Any], ctx: CallContext
        ) -> Decision | None:
            return Decision.allow("tool", "fine") if tool_input["path"] == "/a" else None

    cmd = script(
        tmp_path, "h.sh", """echo '{"hookSpecificOutput": {"updatedInput": {"path": "/b"}}}'\n"""
    )
    rec = Picky()
    ex = make(tmp_path, rec, hooks=hook_runner(CommandHook("PreToolUse", cmd)))
    assert ex.run(ToolCall("t", "Picky", {"path": "/a"})).exit_code() == 3
    assert rec.calls == []


def test_first_block_stops_and_last_rewrite_wins(tmp_path: Path) -> None:
    seen: list[str] = []

    def rewrite(to: str) -> Any:
        def fn(event: dict[str, Any]) -> Any:
            seen.append(event["tool_input"]["path"])
            return {"hookSpecificOutput": {"updatedInput": {"path": to}}}

        return fn

    runner = hook_runner(
        CallableHook("PreToolUse", rewrite("/one"), "h1"),
        CallableHook("PreToolUse", rewrite("/two"), "h2"),
    )
    rec = Recorder()
    make(tmp_path, rec, rules=[allow()], hooks=runner).run(ToolCall("t", "Record", {"path": "/a"}))
    assert rec.calls[0]["path"] == "/two" and seen == ["/a", "/one"]

    def blocker(event: dict[str, Any]) -> Any:
        return {"decision": "block", "reason": "first"}

    def never(event: dict[str, Any]) -> Any:
        raise AssertionError("must not run after a block")

    runner = hook_runner(
        CallableHook("PreToolUse", blocker, "b"), CallableHook("PreToolUse", never, "n")
    )
    assert (
        "first"
        in make(tmp_path, Recorder(), rules=[allow()], hooks=runner)
        .run(ToolCall("t", "Record", {"path": "/a"}))
        .text()
    )


def test_in_process_hook_exception_is_isolated_and_recorded(tmp_path: Path) -> None:
    def bad(event: dict[str, Any]) -> Any:
        raise ValueError("plugin bug")

    ex = make(
        tmp_path,
        Recorder(),
        rules=[allow()],
        hooks=hook_runner(CallableHook("PreToolUse", bad, "plugin:bad")),
    )
    result = ex.run(ToolCall("t", "Record", {"path": "/a"}))
    assert result.exit_code() == 3 and "plugin bug" in result.text()
    ex2 = make(
        tmp_path,
        Recorder(),
        rules=[allow()],
        hooks=hook_runner(CallableHook("PreToolUse", bad, "plugin:bad", on_error="ignore")),
    )
    assert ex2.run(ToolCall("t2", "Record", {"path": "/a"})).exit_code() == 0
    rows = (
        sqlite3.connect(tmp_path / "norma.db")
        .execute("SELECT events FROM traces WHERE tool_use_id='t2'")
        .fetchall()
    )
    assert "plugin bug" in rows[0][0]


def test_hook_registration_is_thread_safe(tmp_path: Path) -> None:
    runner = HookRunner()

    def add_many() -> None:
        for _ in range(200):
            runner.add(CallableHook("PostToolUse", lambda e: None, "x"))

    threads = [threading.Thread(target=add_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runner.hooks("PostToolUse")) == 1600


def test_post_hooks_add_context_and_failure_hook_fires(tmp_path: Path) -> None:
    events: list[str] = []

    def post(event: dict[str, Any]) -> Any:
        events.append(event["hook_event_name"])
        return {"hookSpecificOutput": {"additionalContext": f"saw {event['tool_name']}"}}

    runner = hook_runner(
        CallableHook("PostToolUse", post, "p"), CallableHook("PostToolUseFailure", post, "f")
    )
    ex = make(tmp_path, Big(), Boom(), hooks=runner)
    ok = ex.run(ToolCall("t", "Big", {"n": 1}))
    assert ok.extra_messages[0]["content"] == "saw Big"
    failed = ex.run(ToolCall("t2", "Boom", {}))
    assert failed.is_error and "kaboom" in failed.text() and failed.exit_code() == 1
    assert events == ["PostToolUse", "PostToolUseFailure"]


# ----------------------------------------------------------------------------- step 7
def test_async_tool_and_its_timeout(tmp_path: Path) -> None:
    class Slow(Tool):
        name = "Slow"
        read_only = True
        timeout = 0.2
        input_schema = {"type": "object", "properties": {"s": {"type": "number"}}}

        async def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:  # type: ignore[override]
            await asyncio.sleep(tool_input["s"])
            return ToolOutput.text("done")

    ex = make(tmp_path, Slow())
    assert ex.run(ToolCall("t", "Slow", {"s": 0.01})).text() == "done"
    result = ex.run(ToolCall("t", "Slow", {"s": 5}))
    assert result.is_error and "timed out" in result.text()


# ----------------------------------------------------------------------------- step 8
def test_output_over_cap_spills_with_matching_digest(tmp_path: Path) -> None:
    ex = make(tmp_path, Big(), max_chars=1000)
    result = ex.run(ToolCall("t", "Big", {"n": 250_000}))
    spill = result.meta.spill
    assert spill is not None and spill.chars == 250_000
    data = Path(spill.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == spill.sha256 and len(data) == 250_000
    assert result.text().startswith("x" * 1000) and spill.path in result.text()
    assert len(result.text()) < 1400
    row = (
        sqlite3.connect(tmp_path / "norma.db").execute("SELECT spill_sha256 FROM traces").fetchone()
    )
    assert row[0] == spill.sha256


def test_output_under_cap_untouched_and_marker_text_not_trusted(tmp_path: Path) -> None:
    class Marker(Tool):
        name = "Marker"
        read_only = True
        input_schema = {"type": "object"}

        def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            return ToolOutput.text("[output capped: showing the first 10]" + "y" * 2000)

    ex = make(tmp_path, Big(), Marker(), max_chars=1000)
    assert ex.run(ToolCall("t", "Big", {"n": 1000})).meta.spill is None
    assert ex.run(ToolCall("t", "Marker", {})).meta.spill is not None  # capped despite the marker


# ----------------------------------------------------------------------------- batches
class Sleepy(Tool):
    name = "Sleepy"
    read_only = True
    concurrency_safe = True
    input_schema = {"type": "object", "properties": {"i": {"type": "integer"}}}

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.exclusive_violations = 0

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(0.002)
        with self.lock:
            self.active -= 1
        return ToolOutput.text(str(tool_input["i"]))


def test_batch_of_1000_mixed_calls_in_order_with_overlap(tmp_path: Path) -> None:
    sleepy = Sleepy()

    class Exclusive(Recorder):
        def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            if sleepy.active:
                sleepy.exclusive_violations += 1
            return super().call(tool_input, ctx)

    ex = make(tmp_path, sleepy, Exclusive(), rules=[allow()])
    calls = []
    for i in range(1000):
        if i % 50 == 49:
            calls.append(ToolCall(f"id{i}", "Record", {"path": "/x"}))
        elif i % 97 == 0:
            calls.append(ToolCall(f"id{i}", "Missing", {}))
        else:
            calls.append(ToolCall(f"id{i}", "Sleepy", {"i": i}))
    results = ex.run_batch(calls, max_concurrency=8)
    assert [r.tool_use_id for r in results] == [c.id for c in calls]
    for call, result in zip(calls, results, strict=True):
        if call.name == "Sleepy":
            assert result.text() == str(call.input["i"])
    assert sleepy.peak > 1  # concurrency-safe calls overlapped
    assert sleepy.exclusive_violations == 0  # the exclusive tool ran alone
    count = (
        sqlite3.connect(tmp_path / "norma.db").execute("SELECT count(*) FROM traces").fetchone()[0]
    )
    assert count == 1000


class Quick(Tool):
    name = "Quick"
    description = "returns at once and notes the thread it ran on"
    read_only = True
    concurrency_safe = True
    input_schema = {"type": "object", "properties": {"i": {"type": "integer"}}}

    def __init__(self) -> None:
        self.threads: list[str] = []

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.threads.append(threading.current_thread().name)
        return ToolOutput.text(str(tool_input["i"]))


def test_batch_runs_quick_calls_inline_and_waiting_calls_in_parallel(tmp_path: Path) -> None:
    quick, sleepy = Quick(), Sleepy()
    ex = make(tmp_path, quick, sleepy)
    calls = [ToolCall(f"id{i}", "Quick" if i % 2 else "Sleepy", {"i": i}) for i in range(4 * 64)]
    results = ex.run_batch(calls, max_concurrency=8)
    assert [r.tool_use_id for r in results] == [c.id for c in calls]
    assert [r.text() for r in results] == [str(i) for i in range(4 * 64)]
    # unknown at first, so the first chunk's quick calls went to the pool; then inline
    main = threading.current_thread().name
    assert quick.threads[:32].count(main) < 32 and set(quick.threads[32:]) == {main}
    assert sleepy.peak > 1  # calls that wait still overlap
    rows = sqlite3.connect(tmp_path / "norma.db").execute("SELECT count(*) FROM traces")
    assert rows.fetchone()[0] == 4 * 64


class FakeClock:
    """The executor's clock, advanced only by the tools below: timing without timing."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class Computes(Quick):
    name = "Computes"
    clock: FakeClock

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.clock.wall += 0.003  # 3 ms, all of it computing
        self.clock.cpu += 0.003
        return super().call(tool_input, ctx)


class Waits(Quick):
    name = "Waits"
    clock: FakeClock

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        self.clock.wall += 0.003  # 3 ms, all of it waiting
        return super().call(tool_input, ctx)


@pytest.mark.parametrize(("kind", "inline"), [(Computes, True), (Waits, False)])
def test_batch_runs_computing_calls_inline_and_waiting_ones_in_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type[Quick], inline: bool
) -> None:
    # Both take 3 ms, but a pool cannot speed up computing under the GIL: after the first
    # chunk (an unknown tool goes to the pool) computing calls run inline, waiting ones never.
    clock = FakeClock()
    monkeypatch.setattr("norma_cli.core.executor.time", clock)
    tool = kind()
    tool.clock = clock  # type: ignore[attr-defined]
    ex = make(tmp_path, tool)
    calls = [ToolCall(f"id{i}", tool.name, {"i": i}) for i in range(3 * 64)]
    results = ex.run_batch(calls, max_concurrency=2)
    assert [r.text() for r in results] == [str(i) for i in range(3 * 64)]
    main = threading.current_thread().name
    assert main not in tool.threads[:64]
    assert set(tool.threads[64:]) == ({main} if inline else set(tool.threads[64:]) - {main})


def test_every_call_leaves_one_trace_row(tmp_path: Path) -> None:
    ex = make(tmp_path, Recorder(), rules=[Rule.parse("Record", "deny", "cfg:1")])
    ex.run(ToolCall("a", "Record", {"path": "/a"}))
    ex.run(ToolCall("b", "Nope", {}))
    rows = (
        sqlite3.connect(tmp_path / "norma.db")
        .execute(
            "SELECT tool_use_id, session_id, tool, decision, stage, rule, rule_source, status, input_digest FROM traces ORDER BY created_at"
        )
        .fetchall()
    )
    assert rows[0][:8] == ("a", "sess", "Record", "deny", "rule", "Record", "cfg:1", "denied")
    assert len(rows[0][8]) == 64
    assert rows[1][:5] == ("b", "sess", "Nope", None, "lookup")


@pytest.mark.parametrize("mode", ["dontAsk", "auto"])
def test_never_asking_modes_deny_ask_rules(tmp_path: Path, mode: str) -> None:
    asked: list[Decision] = []

    def resolver(tool: Tool, call: ToolCall, decision: Decision, ctx: CallContext) -> Decision:
        asked.append(decision)
        return Decision.allow("user", "yes")

    ex = make(
        tmp_path, Big(), rules=[Rule.parse("Big", "ask", "cfg:2")], mode=mode, resolve=resolver
    )
    result = ex.run(ToolCall("t", "Big", {"n": 1}))
    assert result.exit_code() == 3 and result.meta.stage == "mode" and result.meta.rule == "Big"
    assert asked == []


def test_remote_ref_in_a_schema_is_never_fetched(tmp_path: Path) -> None:
    class Remote(Tool):
        name = "Remote"
        read_only = True
        input_schema = {
            "type": "object",
            "properties": {"x": {"$ref": "http://127.0.0.1:9/never.json"}},
        }

        def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
            return ToolOutput.text("ran")

    start = time.monotonic()
    result = make(tmp_path, Remote()).run(ToolCall("t", "Remote", {"x": 1}))
    assert result.is_error and "remote $ref" in result.text() and "ran" not in result.text()
    assert time.monotonic() - start < 2
