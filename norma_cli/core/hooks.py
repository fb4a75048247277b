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
import time
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
# A command hook's stdout is read into memory up to this many bytes; more is not an answer
# anyone meant (`yes`, a runaway loop) and fails the hook (on_error) instead of exhausting
# memory. Its stderr keeps the first MAX_OUTPUT_BYTES (it may be an exit-2 block reason) and the
# rest is drained and dropped, so a chatty hook is not killed for its logging.
MAX_OUTPUT_BYTES = 1 << 20
# The text one hook contributes (block reason, additionalContext, plain-text context) is cut to
# this many characters with a visible marker: it reaches the result and the model as is.
MAX_TEXT_CHARS = 10_000
# After a hook exits (or is killed) its pipes are waited on this long for EOF at most: a process
# it left behind in another session can hold them open for as long as it likes.
EOF_GRACE = 0.5
# How often a hook that has not closed its pipes is checked for having exited.
_POLL_INTERVAL = 0.05


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
    """Read a hook's JSON answer (or a plugin's returned dict) into a HookOutcome.

    Raises ValueError for an answer norma cannot use; a plugin's answer can also raise anything
    its objects' ``__str__`` raise, so callers treat every Exception as an unreadable answer.
    """
    out = HookOutcome(hook, source)
    if data is None:
        return out
    if not isinstance(data, dict):
        raise ValueError(f"hook answer must be a JSON object, got {type(data).__name__}")
    out.raw = data
    if data.get("continue") is False:
        out.stop = True
        out.blocked = True
        out.reason = _text(data.get("stopReason") or data.get("reason") or "hook stopped the run")
    decision = data.get("decision")
    if decision == "block":
        out.blocked = True
        out.reason = _text(data.get("reason") or "blocked by hook")
    elif decision == "approve":
        out.permission_decision = "allow"
    elif decision not in (None, "", "undefined"):
        raise ValueError(f"unknown decision {_short(decision)}")
    specific = data.get("hookSpecificOutput")
    if specific is not None:
        if not isinstance(specific, dict):
            raise ValueError("hookSpecificOutput must be an object")
        pd = specific.get("permissionDecision")
        if pd is not None:
            if pd not in ("allow", "deny", "ask"):
                raise ValueError(f"unknown permissionDecision {_short(pd)}")
            out.permission_decision = pd
            out.reason = _text(specific.get("permissionDecisionReason") or out.reason)
            if pd == "deny":
                out.blocked = True
                out.reason = out.reason or "denied by hook"
        ui = specific.get("updatedInput")
        if ui is not None:
            out.updated_input = _json_object(ui)
        ctx = specific.get("additionalContext")
        if ctx:
            out.additional_context = _text(ctx)
    return out


def _json_object(value: Any) -> dict[str, Any]:
    """A rewritten input as plain JSON: a plugin may hand back sets, tuples, NaN or objects the
    rest of norma (digests, schema checks, the result line) cannot encode."""
    if not isinstance(value, dict):
        raise ValueError("updatedInput must be an object")
    from norma_cli.core.digest import canonical_json

    try:
        plain = json.loads(canonical_json(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"updatedInput is not JSON: {_describe(exc)}") from None
    if not isinstance(plain, dict):  # pragma: no cover - a dict always encodes to an object
        raise ValueError("updatedInput must be an object")
    return plain


def _text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    return cap_text(value if isinstance(value, str) else str(value), limit)


def cap_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, marker included, saying how much there
    was; capping a capped text changes nothing (the executor caps what hooks gave again)."""
    if len(text) <= limit:
        return text
    marker = f"… [truncated: {len(text)} characters in all]"
    return text[: max(0, limit - len(marker))] + marker


def _short(value: Any) -> str:
    return cap_text(repr(value), 100)


def _describe(exc: BaseException) -> str:
    """``Type: message`` for any exception, even one whose ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    name = type(exc).__name__
    return cap_text(f"{name}: {message}" if message else name, 500)


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
        message = cap_text(message, 500)
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
                bufsize=0,
                cwd=self.cwd or payload.get("cwd"),
                start_new_session=True,
                env={**os.environ, "NORMA_HOOK_EVENT": self.event},
            )
        except (OSError, ValueError) as exc:
            return self.failed(f"cannot start: {exc}")
        ended = _exchange(proc, data, self.timeout)
        if ended.state == "timeout":
            return self.failed(f"timed out after {self.timeout:g}s")
        if ended.state == "overflow":
            return self.failed(f"wrote more than {MAX_OUTPUT_BYTES} bytes to stdout")
        err_text = ended.stderr.decode("utf-8", "replace").strip()
        if ended.returncode == 2:  # an explicit block stands even if its pipes were left open
            reason = cap_text(err_text) if err_text else "blocked by hook (exit 2)"
            return HookOutcome(self.name, self.source, blocked=True, reason=reason)
        if ended.state == "held":
            # Without EOF the answer may be cut anywhere (half a JSON block): not an answer.
            return self.failed(
                "exited leaving its stdout/stderr open (a background process holds them); "
                "the answer may be incomplete"
            )
        if ended.returncode != 0:
            first = cap_text(err_text.splitlines()[0], 200) if err_text else ""
            return self.failed(f"exit {ended.returncode}" + (f": {first}" if first else ""))
        # utf-8-sig drops a BOM (PowerShell, some editors): a BOM must not demote a JSON block
        # to plain-text context, which would let the call run.
        text = ended.stdout.decode("utf-8-sig", "replace").strip().lstrip("\ufeff").lstrip()
        if not text:
            return HookOutcome(self.name, self.source)
        if not text.startswith("{"):
            # Plain text on stdout is context for the model (as agent hooks already do).
            return HookOutcome(self.name, self.source, additional_context=cap_text(text))
        try:
            return parse_answer(self.name, self.source, json.loads(text))
        except Exception as exc:  # RecursionError from a deep answer, anything unreadable
            return self.failed(f"unreadable answer: {_describe(exc)}")


@record
class _Ended:
    """How a hook process ended: ``done`` (EOF on its output, exited), ``timeout`` (killed),
    ``overflow`` (too much stdout, killed) or ``held`` (exited, output never closed)."""

    state: str
    returncode: int | None
    stdout: bytes
    stderr: bytes


def _exchange(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> _Ended:
    """Feed ``data`` to the hook and read its output, never past ``timeout`` (+ EOF_GRACE).

    One thread, one selector, raw fds: ``communicate`` would hold unbounded output in memory
    and wait for EOF even after the hook exited, for as long as a process it left running in
    another session keeps the pipe open.
    """
    import selectors
    import subprocess

    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    cutoff = deadline  # when we stop waiting for the pipes
    out, err = bytearray(), bytearray()
    state = "done"
    exited = False
    with selectors.DefaultSelector() as sel:
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            _close(proc.stdin)
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        sent = 0
        while True:
            if not exited and proc.poll() is not None:
                exited = True
                cutoff = min(cutoff, time.monotonic() + EOF_GRACE)
            waiting = {key.fileobj for key in sel.get_map().values()}
            # Done once both outputs are at EOF, unless it still runs and wants the rest of
            # stdin (a process it left behind holding stdin must not hold us, though).
            if waiting <= {proc.stdin} and (exited or not waiting):
                break
            remaining = cutoff - time.monotonic()
            if remaining <= 0:
                state = "held" if exited else "timeout"
                break
            for key, _ in sel.select(remaining if exited else min(remaining, _POLL_INTERVAL)):
                if key.fileobj is proc.stdin:
                    try:
                        sent += os.write(key.fd, data[sent : sent + 65536])
                    except BlockingIOError:
                        continue
                    except OSError:  # it exited or closed stdin without reading it all
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(proc.stdin)
                        _close(proc.stdin)
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    _close(key.fileobj)
                    continue
                buf: bytearray = key.data
                room = MAX_OUTPUT_BYTES - len(buf)
                buf += chunk[:room]
                if len(chunk) > room and buf is out:
                    state = "overflow"
                    break
            if state == "overflow":
                break
        for key in list(sel.get_map().values()):
            sel.unregister(key.fileobj)
            _close(key.fileobj)
    if state == "done" and not exited:  # EOF on both pipes; it may still be running
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            state = "timeout"
    if state in ("timeout", "overflow"):
        _kill_group(proc)
    return _Ended(state, proc.returncode, bytes(out), bytes(err))


def _close(pipe: Any) -> None:
    try:
        pipe.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the hook and everything in its process group, and reap it without waiting for its
    pipes (a process that left the group may still hold them)."""
    import signal
    import subprocess

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(EOF_GRACE)
    except subprocess.TimeoutExpired:  # SIGKILL cannot be ignored; only a stuck kernel call
        pass


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
            return self.failed(f"raised {_describe(box['error'])}")
        try:
            return parse_answer(self.name, self.source, box.get("value"))
        except Exception as exc:  # a reason whose __str__ raises, a set in updatedInput, ...
            return self.failed(f"unreadable answer: {_describe(exc)}")


def run_hook(hook: Hook, payload: dict[str, Any]) -> HookOutcome:
    """``hook.run``, with any exception it lets through taken as the hook failing (on_error):
    a hook must never turn into an internal error, nor into allow."""
    try:
        return hook.run(payload)
    except Exception as exc:
        return hook.failed(f"raised {_describe(exc)}")


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
            outcome = run_hook(hook, payload)
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
            outcome = run_hook(
                hook, {**payload, "tool_input": result.updated_input or payload["tool_input"]}
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
