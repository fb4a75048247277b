"""The conversation as norma keeps it: provider-neutral messages of typed blocks.

The JSON form (``to_json``) is the Anthropic shape — ``{"role", "content": [blocks]}`` with
``text``, ``tool_use`` and ``tool_result`` blocks — plus the ``norma`` metadata on each tool
result. Transcripts store it, and each provider module translates it to its own wire format.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from norma_cli.core.record import field, record

Role = Literal["user", "assistant"]


@record
class Text:
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@record
class ToolUse:
    """A tool call the model made. ``input`` is what the model sent: normally an object, the
    raw text when its arguments were not valid JSON (the executor then refuses the call)."""

    id: str
    name: str
    input: Any

    def to_json(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}

    def arguments_text(self) -> str:
        return (
            self.input
            if isinstance(self.input, str)
            else json.dumps(self.input, ensure_ascii=False)
        )


@record
class ToolResultBlock:
    """The paired result of one ToolUse; ``content`` holds norma content blocks (text, json,
    image), ``norma`` the decision metadata of the call (absent for synthetic results)."""

    tool_use_id: str
    content: list[dict[str, Any]]
    is_error: bool = False
    norma: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "is_error": self.is_error,
            "content": self.content,
        }
        if self.norma is not None:
            out["norma"] = self.norma
        return out

    def text(self) -> str:
        """The content as one string, for wire formats that only take text."""
        parts: list[str] = []
        for block in self.content:
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind == "json":
                parts.append(json.dumps(block.get("json"), ensure_ascii=False))
            elif kind == "image":
                media = (block.get("source") or {}).get("media_type", "image")
                parts.append(f"[{media} omitted]")
        return "\n".join(parts) if len(parts) > 1 else (parts[0] if parts else "")

    @classmethod
    def error(cls, tool_use_id: str, text: str) -> ToolResultBlock:
        return cls(tool_use_id, [{"type": "text", "text": text}], is_error=True)


Block = Text | ToolUse | ToolResultBlock


@record
class Message:
    role: Role
    content: list[Block] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "content": [b.to_json() for b in self.content]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        role = data.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(f"message role must be user or assistant, got {role!r}")
        raw = data.get("content")
        if isinstance(raw, str):
            return cls(role, [Text(raw)])
        if not isinstance(raw, list):
            raise ValueError("message content must be a string or a list of blocks")
        return cls(role, [block_from_json(b) for b in raw])

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", [Text(text)])

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, Text))

    def tool_uses(self) -> list[ToolUse]:
        return [b for b in self.content if isinstance(b, ToolUse)]

    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


def block_from_json(data: Any) -> Block:
    if not isinstance(data, dict):
        raise ValueError(f"content block must be an object, got {type(data).__name__}")
    kind = data.get("type")
    if kind == "text":
        return Text(str(data.get("text", "")))
    if kind == "tool_use":
        return ToolUse(str(data["id"]), str(data["name"]), data.get("input", {}))
    if kind == "tool_result":
        content = data.get("content", [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        return ToolResultBlock(
            str(data["tool_use_id"]), list(content), bool(data.get("is_error")), data.get("norma")
        )
    raise ValueError(f"unknown content block type {kind!r}")


def unpaired(messages: list[Message]) -> list[ToolUse]:
    """Tool calls of the last assistant message that no later message answers (a run killed
    between the call and its result): a provider refuses a conversation left like that."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            answered = {r.tool_use_id for m in messages[i + 1 :] for r in m.tool_results()}
            return [u for u in messages[i].tool_uses() if u.id not in answered]
    return []
