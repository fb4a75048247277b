"""The guard of SPEC §9 through the public runtime: every transition of its state machine, read
back from the recorded trace (state, deciding party), with a real store and real approvals."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from norma_cli import hookimpl
from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.runtime import Options, Runtime
from norma_cli.store.approvals import Approvals
from norma_cli.store.sqlite import Store
from norma_cli.store.trace_query import TraceStore


class EchoPlugin:
    """Echo (mutating, so permission needs an allow rule) and a judge that answers from a table."""

    def __init__(self) -> None:
        self.judged: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    @hookimpl
    def register_tools(self, register: Any) -> None:
        def echo(text: str) -> str:
            """Echo text back."""
            if text == "boom":
                raise RuntimeError("boom")
            return text

        register(echo, name="Echo")
        register(echo, name="Other")

    @hookimpl
    def register_judges(self, register: Any) -> None:
        def table(tool_name: str, tool_input: dict[str, Any], context: dict[str, Any]) -> Any:
            self.judged.append((tool_name, tool_input, context))
            word = tool_input["text"].split()[0]
            if word == "garbage":
                return "not a verdict"
            if word == "slow":
                time.sleep(2)
            if word == "crash":
                raise ValueError("judge bug")
            return {"decision": word, "reason": f"the judge says {word}"}

        register("table", table)


def build(tmp_path: Path, config: str, *, no_wait: bool = False, allow: tuple[str, ...] = ("Echo", "Other"),
          ask: tuple[str, ...] = ()) -> tuple[Runtime, EchoPlugin]:  # fmt: skip
    cfg = tmp_path / "norma.toml"
    cfg.write_text(config)
    plugin = EchoPlugin()
    rt = Runtime.build(Options(cwd=tmp_path, config=cfg, allow=allow, ask=ask, interactive=False,
                               no_wait=no_wait, plugins=(("echo", plugin),)))  # fmt: skip
    return rt, plugin


def events(rt: Runtime, result: ToolResult) -> list[dict[str, Any]]:
    assert rt.store is not None and result.meta.trace_id
    [entry] = TraceStore(rt.store).find(result.meta.trace_id)
    return entry.events


def path(rt: Runtime, result: ToolResult) -> list[tuple[str, str]]:
    """(state, by) of the guard's part of the trace: from target_check to the end."""
    evs = [(e["state"], e.get("by", "")) for e in events(rt, result)]
    start = next(i for i, (state, _) in enumerate(evs) if state == "target_check")
    return evs[start:]


def pending_id(rt: Runtime, result: ToolResult) -> str:
    return str(next(e for e in events(rt, result) if e["state"] == "pending")["pending_id"])


def run(rt: Runtime, text: str, tool: str = "Echo", call_id: str = "t") -> ToolResult:
    return rt.executor.run(ToolCall(call_id, tool, {"text": text}))


RULES = """
[intercept]
tools = ["Echo"]
[[intercept.rules]]
rule = "Echo(text:deploy*)"
decision = "ask"
reason = "deploys need a human"
[[intercept.rules]]
rule = "Echo(text:rm*)"
decision = "deny"
reason = "no removing"
[[intercept.rules]]
rule = "Echo(text:hello*)"
decision = "allow"
[[intercept.rules]]
rule = "Echo(text:*)"
decision = "deny"
reason = "shadowed by earlier rules for the texts above"
"""


# ----------------------------------------------------------------------------- target_check
def test_not_a_target_passes_straight_through(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    result = run(rt, "rm everything", tool="Other")
    assert result.exit_code() == 0 and result.text() == "rm everything"
    assert path(rt, result) == [
        ("target_check", "guard"),
        ("executing", "guard"),
        ("completed", "Other"),
    ]
    assert events(rt, result)[-3]["target"] is False


def test_target_globs(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, '[intercept]\ntools = ["Ech?", "mcp__*"]\ndefault = "deny"\n')
    assert run(rt, "x").exit_code() == 3
    assert run(rt, "x", tool="Other").exit_code() == 0


# ----------------------------------------------------------------------------- evaluate
def test_allow_rule_executes_and_names_the_rule(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    result = run(rt, "hello world")
    assert result.exit_code() == 0
    assert path(rt, result) == [
        ("target_check", "guard"),
        ("evaluate", "guard"),
        ("executing", "rule"),
        ("completed", "Echo"),
    ]
    executing = events(rt, result)[-2]
    assert (
        executing["rule"] == "Echo(text:hello*)"
        and executing["source"] == f"{tmp_path / 'norma.toml'}:13"
    )


def test_deny_rule_first_match_wins(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    result = run(rt, "rm -rf /")
    assert result.exit_code() == 3 and "no removing" in result.text()
    assert path(rt, result) == [
        ("target_check", "guard"),
        ("evaluate", "guard"),
        ("denied", "rule"),
    ]
    assert (result.meta.stage, result.meta.rule) == ("intercept", "Echo(text:rm*)")
    # the catch-all deny at the end only sees what no earlier rule took
    assert run(rt, "anything else").meta.rule == "Echo(text:*)"


def test_default_allow_then_default_deny_and_ask(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, '[intercept]\ntools = ["Echo"]\n')
    result = run(rt, "x")
    assert result.exit_code() == 0
    assert path(rt, result) == [
        ("target_check", "guard"),
        ("evaluate", "guard"),
        ("executing", "default"),
        ("completed", "Echo"),
    ]
    rt, _ = build(tmp_path, '[intercept]\ntools = ["Echo"]\ndefault = "deny"\n')
    result = run(rt, "x")
    assert result.exit_code() == 3 and path(rt, result)[-1] == ("denied", "default")
    rt, _ = build(tmp_path, '[intercept]\ntools = ["Echo"]\ndefault = "ask"\n', no_wait=True)
    result = run(rt, "x")
    assert result.exit_code() == 4 and path(rt, result)[-1] == ("pending", "default")


def test_guard_never_loosens_permission(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES + '\n[permissions]\ndeny = ["Echo(text:hello*)"]\n')
    result = run(rt, "hello")
    assert result.exit_code() == 3 and result.meta.stage == "rule"
    assert "target_check" not in [e["state"] for e in events(rt, result)]


# ----------------------------------------------------------------------------- pending
def test_ask_rule_no_wait_is_pending_with_an_id(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES, no_wait=True)
    result = run(rt, "deploy prod")
    assert result.exit_code() == 4 and result.meta.pending_id
    assert path(rt, result) == [
        ("target_check", "guard"),
        ("evaluate", "guard"),
        ("pending", "rule"),
    ]
    assert events(rt, result)[-1]["pending_id"] == result.meta.pending_id
    assert result.meta.reason == "deploys need a human"


def decide_when_pending(
    db: Path, *, approve: bool, reason: str | None = None, delay: float = 0.0
) -> threading.Thread:
    """Another store connection (as `norma approve` in another process would be) decides the
    first pending request as soon as it appears."""

    def work() -> None:
        other = Approvals(Store(db))
        for _ in range(400):
            pending = other.queue()
            if pending:
                time.sleep(delay)
                other.decide(pending[0].id, approve=approve, decider="alice", reason=reason)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_pending_then_approved_executes(tmp_path: Path, isolated_env: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    helper = decide_when_pending(
        isolated_env / "data" / "norma.db", approve=True, reason="looks fine"
    )
    result = run(rt, "deploy prod")
    helper.join()
    assert result.exit_code() == 0 and result.text() == "deploy prod"
    assert path(rt, result) == [("target_check", "guard"), ("evaluate", "guard"), ("pending", "rule"),
                                ("executing", "user:alice"), ("completed", "Echo")]  # fmt: skip
    assert "looks fine" in events(rt, result)[-2]["reason"]


def test_pending_then_rejected_is_denied(tmp_path: Path, isolated_env: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    helper = decide_when_pending(
        isolated_env / "data" / "norma.db", approve=False, reason="not today"
    )
    result = run(rt, "deploy prod")
    helper.join()
    assert result.exit_code() == 3 and "not today" in result.meta.reason
    assert path(rt, result)[-2:] == [("pending", "rule"), ("denied", "user:alice")]
    assert result.meta.stage == "user" and result.meta.rule == "Echo(text:deploy*)"


@pytest.mark.parametrize(
    ("on_timeout", "code", "last"), [("deny", 3, "denied"), ("allow", 0, "completed")]
)
def test_pending_then_expired(tmp_path: Path, on_timeout: str, code: int, last: str) -> None:
    rt, _ = build(
        tmp_path, RULES + f'[intercept.ask]\ntimeout_s = 0.3\non_timeout = "{on_timeout}"\n'
    )
    started = time.monotonic()
    result = run(rt, "deploy prod")
    assert time.monotonic() - started < 5
    assert result.exit_code() == code
    states = path(rt, result)
    assert states[2] == ("pending", "rule") and states[3][1] == "expiry" and states[-1][0] == last
    if code == 3:
        assert "expired" in result.meta.reason and result.meta.stage == "expiry"
    assert rt.store is not None
    assert Approvals(rt.store).get(pending_id(rt, result)).status == "expired"


def test_pending_then_cancelled_when_the_run_is_stopped(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES)

    def stop_soon() -> None:
        time.sleep(0.3)
        rt.session.cancelled.set()  # what the SIGTERM handler of `norma run` sets

    threading.Thread(target=stop_soon, daemon=True).start()
    result = run(rt, "deploy prod")
    assert result.exit_code() == 3 and "cancelled" in result.meta.reason
    assert path(rt, result)[-1] == ("denied", "requester")
    assert rt.store is not None
    assert Approvals(rt.store).get(pending_id(rt, result)).status == "cancelled"


# ----------------------------------------------------------------------------- judge
JUDGE = '[intercept]\ntools = ["Echo"]\n[[intercept.rules]]\nrule = "Echo(text:rm*)"\ndecision = "deny"\n' \
        '[intercept.judge]\nenabled = true\nprovider = "plugin:table"\ntimeout_s = 0.5\n'  # fmt: skip


def test_judge_is_asked_only_on_a_rule_miss(tmp_path: Path) -> None:
    rt, plugin = build(tmp_path, JUDGE)
    assert run(rt, "rm x").exit_code() == 3
    assert plugin.judged == []
    result = run(rt, "allow this", call_id="j1")
    assert result.exit_code() == 0
    assert path(rt, result) == [("target_check", "guard"), ("evaluate", "guard"), ("judge", "guard"),
                                ("executing", "judge:plugin:table"), ("completed", "Echo")]  # fmt: skip
    [(name, tool_input, context)] = plugin.judged
    assert name == "Echo" and tool_input == {"text": "allow this"}
    assert context["tool_use_id"] == "j1" and context["permission"]["decision"] == "allow"


def test_judge_deny_and_ask_verdicts(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, JUDGE, no_wait=True)
    denied = run(rt, "deny it")
    assert (
        denied.exit_code() == 3
        and denied.meta.stage == "judge"
        and "the judge says deny" in denied.meta.reason
    )
    assert path(rt, denied)[-2:] == [("judge", "guard"), ("denied", "judge:plugin:table")]
    pending = run(rt, "ask someone")
    assert pending.exit_code() == 4 and pending.meta.pending_id
    assert path(rt, pending)[-2:] == [("judge", "guard"), ("pending", "judge:plugin:table")]


@pytest.mark.parametrize("on_failure", ["allow", "deny", "ask"])
@pytest.mark.parametrize("text", ["garbage", "slow", "crash"])
def test_judge_failure_follows_on_failure(tmp_path: Path, on_failure: str, text: str) -> None:
    rt, _ = build(tmp_path, JUDGE + f'on_failure = "{on_failure}"\n', no_wait=True)
    result = run(rt, text)
    assert result.exit_code() == {"allow": 0, "deny": 3, "ask": 4}[on_failure]
    judged = next(
        e
        for e in events(rt, result)
        if e["state"] in ("executing", "denied", "pending") and "judge" in e
    )
    assert judged["on_failure"] == on_failure and judged["failure"]
    assert {"garbage": "verdict", "slow": "timed out", "crash": "judge bug"}[text] in judged[
        "failure"
    ]


# ----------------------------------------------------------------------------- executing
def test_executing_then_failed(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, '[intercept]\ntools = ["Echo"]\n')
    result = run(rt, "boom")
    assert result.exit_code() == 1
    assert path(rt, result)[-2:] == [("executing", "default"), ("failed", "Echo")]


# ----------------------------------------------------------------------------- with permission asks
def test_permission_ask_and_guard_ask_share_one_approval(tmp_path: Path) -> None:
    """A call that permission asks about *and* the guard holds needs one approval, not two."""
    rt, _ = build(tmp_path, RULES, no_wait=True, allow=(), ask=("Echo",))
    first = run(rt, "deploy prod", call_id="a")
    assert first.exit_code() == 4 and first.meta.pending_id and first.meta.rule == "Echo"
    assert rt.store is not None
    Approvals(rt.store).decide(first.meta.pending_id or "", approve=True, decider="bob")
    again = run(rt, "deploy prod", call_id="b")
    assert again.exit_code() == 0, again.text()
    states = [(e["state"], e.get("by")) for e in events(rt, again)]
    assert ("resolved", "user") in states and ("executing", "user:bob") in states
    assert run(rt, "deploy prod", call_id="c").exit_code() == 4  # used up


def test_permission_ask_without_queue_opt_in_is_denied(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, "", allow=())
    result = run(rt, "x")
    assert result.exit_code() == 3 and "no approver available" in result.meta.reason
    assert rt.store is not None and Approvals(rt.store).queue() == []


def test_permission_ask_queued_when_timeout_configured(tmp_path: Path, isolated_env: Path) -> None:
    rt, _ = build(tmp_path, "[intercept.ask]\ntimeout_s = 30\n", allow=())
    decide_when_pending(isolated_env / "data" / "norma.db", approve=True)
    result = run(rt, "x")
    assert result.exit_code() == 0
    resolved = next(e for e in events(rt, result) if e["state"] == "resolved")
    assert resolved["by"] == "user" and resolved["pending_id"] and "alice" in resolved["reason"]


def test_dry_run_previews_the_guard_rules(tmp_path: Path) -> None:
    rt, _ = build(tmp_path, RULES)
    assert rt.executor.decide(ToolCall("d", "Echo", {"text": "deploy"})).exit_code() == 4
    assert rt.executor.decide(ToolCall("d", "Echo", {"text": "rm"})).exit_code() == 3
    assert rt.executor.decide(ToolCall("d", "Echo", {"text": "hello"})).exit_code() == 0
    assert rt.store is not None and Approvals(rt.store).queue() == []
