"""``norma policy replay``: today's policy decision for every tool call in a recorded transcript.

Formats, detected from the content:

* norma's own JSONL transcript (``message`` records), its ``--output stream-json`` events, or a
  ``--calls`` JSONL batch (tool_use blocks / OpenAI tool calls, one per line);
* an Anthropic ``messages`` list (``tool_use`` content blocks), bare or as ``{"messages": [...]}``;
* an OpenAI ``messages`` list (assistant ``tool_calls``), bare or as ``{"messages": [...]}``.

Each call is decided by the executor's ``decide`` — lookup and the agent's gate, schema,
permission rules, plugin opinions, the tool's own check, intercept rules — with nothing run
and nothing recorded. PreToolUse hooks are programs and are not run. A ``Skill`` call that is
allowed unlocks what it gates for the calls after it, as it did in the session;
``ExecuteExtraTool`` is judged by its inner call, under the inner tool's name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import record
from norma_cli.errors import UsageError

if TYPE_CHECKING:
    from norma_cli.runtime import Runtime

FORMATS = ("norma", "anthropic", "openai")


@record
class RecordedCall:
    tool_use_id: str
    name: str
    input: Any


@record
class Replayed:
    tool_use_id: str
    tool: str
    decision: str  # allow | deny | ask | error (unknown tool, invalid input: nothing decided)
    stage: str
    rule: str | None
    source: str | None
    reason: str
    via: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"tool_use_id": self.tool_use_id, "tool": self.tool, "decision": self.decision,
               "stage": self.stage, "rule": self.rule, "source": self.source, "reason": self.reason}  # fmt: skip
        if self.via:
            out["via"] = self.via
        return out


# ----------------------------------------------------------------------------- reading
def load_calls(path: Path) -> tuple[str, list[RecordedCall]]:
    from norma_cli.userfiles import read_text

    text = read_text(str(path), "transcript")  # never forever: /dev/zero is refused
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return "norma", _dedupe(_from_jsonl(text, path), path)
    if isinstance(data, dict) and data.get("type") in ("start", "message", "tool_use"):
        return "norma", _dedupe(_from_jsonl(text, path), path)  # a one-line JSONL file
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list):
        raise UsageError(
            f'{path}: expected a messages list, {{"messages": [...]}}, or a JSONL transcript'
        )
    if any(isinstance(m, dict) and ("tool_calls" in m or "function_call" in m or m.get("role") in ("tool", "function"))
           for m in messages):  # fmt: skip
        return "openai", _dedupe(_from_openai(messages, path), path)
    return "anthropic", _dedupe(_from_anthropic(messages, path), path)


def _from_jsonl(text: str, path: Path) -> list[RecordedCall]:
    calls: list[RecordedCall] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
            raise UsageError(
                f"{path}:{number}: not valid JSON (a transcript has one JSON object per line)"
            ) from None
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind == "message":  # norma transcript record, or a stream-json message event
            message = record.get("message") if isinstance(record.get("message"), dict) else record
            calls.extend(_anthropic_blocks(message, f"{path}:{number}"))
        elif kind == "tool_use":  # a stream-json event, or an Anthropic --calls line
            calls.extend(_anthropic_blocks({"content": [record]}, f"{path}:{number}"))
        elif "function" in record:  # an OpenAI --calls line
            calls.extend(_from_openai([{"role": "assistant", "tool_calls": [record]}], path))
    return calls


def _anthropic_blocks(message: Any, where: str) -> list[RecordedCall]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or message.get("role", "assistant") != "assistant":
        return []
    calls = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise UsageError(f"{where}: tool_use block without a string id and name")
            calls.append(RecordedCall(block["id"], block["name"], block.get("input", {})))
    return calls


def _from_anthropic(messages: list[Any], path: Path) -> list[RecordedCall]:
    calls: list[RecordedCall] = []
    for i, message in enumerate(messages):
        calls.extend(_anthropic_blocks(message, f"{path}: messages[{i}]"))
    return calls


def _from_openai(messages: list[Any], path: Path) -> list[RecordedCall]:
    from norma_cli.agent.providers.base import parse_arguments

    calls: list[RecordedCall] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for j, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise UsageError(f"{path}: messages[{i}].tool_calls[{j}]: no function name")
            raw = fn.get("arguments", "{}")
            args = parse_arguments(raw) if isinstance(raw, str) else raw
            calls.append(
                RecordedCall(
                    str(call.get("id") or f"messages[{i}].tool_calls[{j}]"), fn["name"], args
                )
            )
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
            raw = legacy.get("arguments", "{}")
            calls.append(RecordedCall(f"messages[{i}].function_call", legacy["name"],
                                      parse_arguments(raw) if isinstance(raw, str) else raw))  # fmt: skip
    return calls


def _dedupe(calls: list[RecordedCall], path: Path) -> list[RecordedCall]:
    """stream-json repeats each call (message event and tool_use event): keep the first. Only
    an exact repeat is dropped; two different calls under one id are refused (exit 2), since
    dropping either would let a gate pass a call it never judged."""
    seen: dict[str, tuple[str, str]] = {}
    out: list[RecordedCall] = []
    for call in calls:
        key = (call.name, json.dumps(call.input, sort_keys=True))
        first = seen.get(call.tool_use_id)
        if first is None:
            seen[call.tool_use_id] = key
            out.append(call)
        elif first != key:
            raise UsageError(
                f"{path}: tool_use id {call.tool_use_id!r} names two different calls:"
                f" {_brief(*first)} and {_brief(*key)}; give each call its own id"
            )
    return out


def _brief(name: str, input_json: str, limit: int = 80) -> str:
    text = f"{name} {input_json}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- deciding
def replay(rt: Runtime, calls: list[RecordedCall]) -> list[Replayed]:
    from norma_cli.agent.subagent import install_task_tool
    from norma_cli.core.contract import ToolCall

    install_task_tool(rt, 0)  # Task exists in agent sessions, so a recorded Task call is judged
    asm = rt.assembly
    rows: list[Replayed] = []
    for call in calls:
        row = _decide(rt, ToolCall(call.tool_use_id, call.name, call.input))
        if (
            row.tool == "ExecuteExtraTool"
            and row.decision == "allow"
            and isinstance(call.input, dict)
        ):
            inner = call.input.get("input") or {}
            row = _decide(
                rt, ToolCall(f"{call.tool_use_id}.inner", str(call.input.get("name", "")), inner)
            )
            row.tool_use_id, row.via = call.tool_use_id, "ExecuteExtraTool"
        if row.tool == "Skill" and row.decision == "allow" and isinstance(call.input, dict):
            skill = asm.visible_skills.get(str(call.input.get("name", "")))
            if skill is not None:
                asm.unlock(skill)  # in memory: a replay runtime has no writable store
        rows.append(row)
    return rows


def _decide(rt: Runtime, call: Any) -> Replayed:
    result = rt.executor.decide(call)
    m = result.meta
    reason = m.reason or (result.text() if m.decision is None else "")
    return Replayed(call.id, call.name, m.decision or "error", m.stage, m.rule, m.source, reason)


# ----------------------------------------------------------------------------- expectations
def load_expected(path: Path) -> dict[str, str]:
    """``{"tool_use_id": "allow", ...}``, or the ``--json`` list of an earlier replay."""
    from norma_cli.userfiles import read_text

    text = read_text(str(path), "expectations file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: not valid JSON: nested too deeply") from None
    if isinstance(data, dict):
        if all(isinstance(v, str) for v in data.values()):
            return dict(data)
        raise UsageError(f"{path}: expected a mapping of tool_use_id to decision")
    if isinstance(data, list):
        out: dict[str, str] = {}
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("tool_use_id"), str) \
                    or not isinstance(item.get("decision"), str):  # fmt: skip
                raise UsageError(f"{path}: item {i} needs a string tool_use_id and decision")
            out[item["tool_use_id"]] = item["decision"]
        return out
    raise UsageError(
        f"{path}: expected a mapping of tool_use_id to decision, or a replay --json list"
    )


def differences(rows: list[Replayed], expected: dict[str, str]) -> list[dict[str, Any]]:
    by_id = {r.tool_use_id: r for r in rows}
    diffs: list[dict[str, Any]] = []
    for tool_use_id, want in expected.items():
        row = by_id.get(tool_use_id)
        if row is None:
            diffs.append({"tool_use_id": tool_use_id, "tool": None, "expected": want, "actual": None,
                          "reason": "no such call in the transcript"})  # fmt: skip
        elif row.decision != want:
            diffs.append({"tool_use_id": tool_use_id, "tool": row.tool, "expected": want, "actual": row.decision,
                          "rule": row.rule, "source": row.source, "reason": row.reason})  # fmt: skip
    return diffs
