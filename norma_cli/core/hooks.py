"""Hooks (SPEC §5): in-process pluggy implementations and external command hooks.

Both kinds see the same event object (the JSON a command hook reads on stdin) and answer in the
same protocol: exit 2 / ``{"decision": "block"}`` blocks, ``hookSpecificOutput`` carries
``permissionDecision``, ``updatedInput`` and ``additionalContext``, ``{"continue": false}``
stops hard. Every hook has a timeout; a crash, a timeout or an unreadable answer follows the
hook's ``on_error`` (``block`` by default for PreToolUse and UserPromptSubmit, fail-closed).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from norma_cli.core.record import field, record

if TYPE_CHECKING:
    import subprocess

EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "SubagentStart",
)
# pluggy hook name for each event
EVENT_HOOKS = {
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "PostToolUseFailure": "post_tool_use_failure",
    "UserPromptSubmit": "user_prompt_submit",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "Stop": "stop",
    "SubagentStart": "subagent_start",
}
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
DEFAULT_TIMEOUT = 60.0
OnError = Literal["block", "ignore"]


def default_on_error(event: str) -> OnError:
    return "block" if event in ("PreToolUse", "UserPromptSubmit") else "ignore"


@record
class HookOutcome:
    """What one hook said. ``error`` is set when it crashed, timed out or answered garbage."""

    hook: str
    source: str = ""
    blocked: bool = False
    reason: str = ""
    permission_decision: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: str = ""
    stop: bool = False  # continue: false — a hard stop
    error: str | None = None
    raw: dict[str, Any] | None = None

    def to_event(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.hook, "source": self.source}
        for key in (
            "blocked",
            "reason",
            "permission_decision",
            "additional_context",
            "stop",
            "error",
        ):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.updated_input is not None:
            out["updated_input"] = True
        return out


def parse_answer(hook: str, source: str, data: Any) -> HookOutcome:
    """Read a hook's JSON answer (or a plugin's returned dict) into a HookOutcome."""
    out = HookOutcome(hook, source)
    if data is None:
        return out
    if not isinstance(data, dict):
        raise ValueError(f"hook answer must be a JSON object, got {type(data).__name__}")
    out.raw = data
    if data.get("continue") is False:
        out.stop = True
        out.blocked = True
        out.reason = str(data.get("stopReason") or data.get("reason") or "hook stopped the run")
    decision = data.get("decision")
    if decision == "block":
        out.blocked = True
        out.reason = str(data.get("reason") or "blocked by hook")
    elif decision == "approve":
        out.permission_decision = "allow"
    elif decision not in (None, "", "undefined"):
        raise ValueError(f"unknown decision {decision!r}")
    specific = data.get("hookSpecificOutput")
    if specific is not None:
        if not isinstance(specific, dict):
            raise ValueError("hookSpecificOutput must be an object")
        pd = specific.get("permissionDecision")
        if pd is not None:
            if pd not in ("allow", "deny", "ask"):
                raise ValueError(f"unknown permissionDecision {pd!r}")
            out.permission_decision = pd
            out.reason = str(specific.get("permissionDecisionReason") or out.reason)
            if pd == "deny":
                out.blocked = True
                out.reason = out.reason or "denied by hook"
        ui = specific.get("updatedInput")
        if ui is not None:
            if not isinstance(ui, dict):
                raise ValueError("updatedInput must be an object")
            out.updated_input = ui
        ctx = specific.get("additionalContext")
        if ctx:
            out.additional_context = str(ctx)
    return out


class Hook:
    """One registered hook for one event."""

    event: str
    name: str
    matcher: re.Pattern[str] | None
    timeout: float
    on_error: OnError
    source: str = ""

    def applies_to(self, tool_name: str | None) -> bool:
        if self.matcher is None or tool_name is None:
            return True
        return self.matcher.fullmatch(tool_name) is not None

    def run(self, payload: dict[str, Any]) -> HookOutcome:
        raise NotImplementedError

    def failed(self, message: str) -> HookOutcome:
        """The outcome of a crash/timeout/garbage, following ``on_error``."""
        out = HookOutcome(self.name, self.source, error=message)
        if self.on_error == "block":
            out.blocked = True
            out.reason = f"hook {self.name} failed ({message}); on_error=block"
        return out


def compile_matcher(matcher: str | None) -> re.Pattern[str] | None:
    if matcher in (None, "", "*"):
        return None
    return re.compile(matcher)


class CommandHook(Hook):
    """An external command speaking the JSON stdin/stdout protocol."""

    def __init__(
        self,
        event: str,
        command: str,
        *,
        matcher: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        on_error: OnError | None = None,
        source: str = "",
        cwd: str | None = None,
    ) -> None:
        self.event = event
        self.command = command
        self.matcher = compile_matcher(matcher)
        self.timeout = timeout
        self.on_error = on_error or default_on_error(event)
        self.source = source
        self.name = f"command:{command}"
        self.cwd = cwd

    def run(self, payload: dict[str, Any]) -> HookOutcome:
        import subprocess  # only when a command hook exists: a one-shot run need not pay for it

        data = json.dumps(payload).encode()
        try:
            proc = subprocess.Popen(
                self.command,
                shell=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd or payload.get("cwd"),
                start_new_session=True,
                env={**os.environ, "NORMA_HOOK_EVENT": self.event},
            )
        except OSError as exc:
            return self.failed(f"cannot start: {exc}")
        try:
            stdout, stderr = proc.communicate(data, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return self.failed(f"timed out after {self.timeout:g}s")
        err_text = stderr.decode("utf-8", "replace").strip()
        if proc.returncode == 2:
            return HookOutcome(
                self.name, self.source, blocked=True, reason=err_text or "blocked by hook (exit 2)"
            )
        if proc.returncode != 0:
            first = err_text.splitlines()[0] if err_text else ""
            return self.failed(f"exit {proc.returncode}" + (f": {first}" if first else ""))
        text = stdout.decode("utf-8", "replace").strip()
        if not text:
            return HookOutcome(self.name, self.source)
        if not text.startswith("{"):
            # Plain text on stdout is context for the model (as agent hooks already do).
            return HookOutcome(self.name, self.source, additional_context=text)
        try:
            return parse_answer(self.name, self.source, json.loads(text))
        except ValueError as exc:
            return self.failed(f"unreadable answer: {exc}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()


class CallableHook(Hook):
    """An in-process hook (a pluggy implementation or a registered function).

    It runs on a daemon thread so a hang cannot outlive its timeout, and an exception is
    caught and recorded instead of crashing the executor.
    """

    def __init__(
        self,
        event: str,
        fn: Callable[[dict[str, Any]], Any],
        name: str,
        *,
        matcher: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        on_error: OnError | None = None,
    ) -> None:
        self.event = event
        self.fn = fn
        self.name = name
        self.source = name
        self.matcher = compile_matcher(matcher)
        self.timeout = timeout
        self.on_error = on_error or default_on_error(event)

    def run(self, payload: dict[str, Any]) -> HookOutcome:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = self.fn(payload)
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"hook-{self.name}", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            return self.failed(f"timed out after {self.timeout:g}s")
        if "error" in box:
            exc = box["error"]
            return self.failed(f"raised {type(exc).__name__}: {exc}")
        try:
            return parse_answer(self.name, self.source, box.get("value"))
        except ValueError as exc:
            return self.failed(f"unreadable answer: {exc}")


@record
class PreToolOutcome:
    blocked: bool = False
    reason: str = ""
    hook: str | None = None
    source: str = ""
    ask: bool = False
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = field(default_factory=list)
    outcomes: list[HookOutcome] = field(default_factory=list)


class HookRunner:
    """Runs the hooks of an event in registration order. Registration is thread-safe."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[Hook]] = {e: [] for e in EVENTS}
        self._lock = threading.Lock()

    def add(self, hook: Hook) -> None:
        if hook.event not in self._hooks:
            raise ValueError(f"unknown hook event {hook.event!r}")
        with self._lock:
            self._hooks[hook.event] = [*self._hooks[hook.event], hook]  # copy-on-write

    def hooks(self, event: str) -> list[Hook]:
        return self._hooks[event]

    def has(self, event: str) -> bool:
        return bool(self._hooks[event])

    def run(
        self,
        event: str,
        payload: dict[str, Any],
        tool_name: str | None = None,
        stop_on_block: bool = False,
    ) -> list[HookOutcome]:
        outcomes: list[HookOutcome] = []
        for hook in self._hooks[event]:
            if not hook.applies_to(tool_name):
                continue
            outcome = hook.run(payload)
            outcomes.append(outcome)
            if stop_on_block and outcome.blocked:
                break
        return outcomes

    def pre_tool_use(self, payload: dict[str, Any], tool_name: str) -> PreToolOutcome:
        """First block stops; the last non-empty rewrite wins; an ``ask`` escalates."""
        result = PreToolOutcome()
        for hook in self._hooks["PreToolUse"]:
            if not hook.applies_to(tool_name):
                continue
            outcome = hook.run(
                {**payload, "tool_input": result.updated_input or payload["tool_input"]}
            )
            result.outcomes.append(outcome)
            if outcome.blocked:
                result.blocked = True
                result.reason = outcome.reason
                result.hook, result.source = outcome.hook, outcome.source
                return result
            if outcome.permission_decision == "ask":
                result.ask = True
                result.reason = outcome.reason or f"hook {outcome.hook} asks for approval"
                result.hook, result.source = outcome.hook, outcome.source
            if outcome.updated_input:
                result.updated_input = outcome.updated_input
            if outcome.additional_context:
                result.additional_context.append(outcome.additional_context)
        return result
