"""``kind = "openai"``: any OpenAI-compatible chat completions endpoint (OpenAI, Ollama, vLLM,
llama.cpp server, LM Studio ...): ``POST {base_url}/chat/completions``.

Tool calls arrive as ``message.tool_calls`` (or, streamed, as ``delta.tool_calls`` fragments
keyed by ``index``: the id and name in the first fragment, the JSON arguments spread over the
rest); results go back as one ``role: tool`` message per call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from norma_cli.agent.messages import Message, Text, ToolResultBlock, ToolUse
from norma_cli.agent.providers import sse
from norma_cli.agent.providers.base import (
    DeltaSink,
    HttpProvider,
    ModelReply,
    ModelRequest,
    ProviderError,
    StreamError,
    Usage,
    parse_arguments,
    token_count,
    wire_schema,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAIProvider(HttpProvider):
    kind = "openai"

    def endpoint(self) -> str:
        return f"{(self.settings.base_url or DEFAULT_BASE_URL).rstrip('/')}/chat/completions"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def payload(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            messages.extend(to_wire(message))
        out: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.tools:
            out["tools"] = [
                {"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": wire_schema(t.input_schema)}}
                for t in request.tools
            ]  # fmt: skip
        max_tokens = request.max_tokens or self.settings.max_tokens
        if max_tokens:
            out["max_tokens"] = max_tokens
        if stream:
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
        return out

    def parse(self, body: Any) -> ModelReply:
        try:
            choice = body["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError(f"provider {self.name}: unexpected reply: {_short(body)}") from None
        blocks: list[Text | ToolUse] = []
        text = _content_text(message.get("content"))
        if text:
            blocks.append(Text(text))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            blocks.append(ToolUse(call.get("id") or _call_id(), str(fn.get("name", "")),
                                  parse_arguments(fn.get("arguments") or "")))  # fmt: skip
        finish = choice.get("finish_reason") or "stop"
        return ModelReply(
            Message("assistant", list(blocks)),
            STOP_REASONS.get(finish, finish),
            _usage(body.get("usage")),
        )

    def parse_stream(self, lines: Iterator[str], on_delta: DeltaSink) -> ModelReply:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage = Usage()
        done = False
        for event in sse.events(lines):
            if event.data.strip() == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(event.data)
            except ValueError:
                raise StreamError(
                    f"unreadable chunk: {event.data[:200]}", retryable=False
                ) from None
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                err = chunk["error"]
                raise StreamError(
                    str(err.get("message", err) if isinstance(err, dict) else err), retryable=False
                )
            if chunk.get("usage"):
                usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                piece = _content_text(delta.get("content"))
                if piece:
                    text.append(piece)
                    if on_delta is not None:
                        on_delta(piece)
                for fragment in delta.get("tool_calls") or []:
                    _merge_call(calls, fragment)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        if not done and finish is None:
            raise StreamError("the stream ended before the reply was complete")
        blocks: list[Text | ToolUse] = [Text("".join(text))] if text else []
        for index in sorted(calls):
            slot = calls[index]
            blocks.append(
                ToolUse(slot["id"] or _call_id(), slot["name"], parse_arguments(slot["arguments"]))
            )
        finish = finish or "stop"
        return ModelReply(
            Message("assistant", list(blocks)), STOP_REASONS.get(finish, finish), usage
        )


def _merge_call(calls: dict[int, dict[str, str]], fragment: dict[str, Any]) -> None:
    index = fragment.get("index")
    if not isinstance(index, int):
        index = len(calls)
    slot = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
    if fragment.get("id"):
        slot["id"] = str(fragment["id"])
    fn = fragment.get("function") or {}
    name = fn.get("name")
    if name and name != slot["name"]:  # some servers repeat the whole name in every fragment
        slot["name"] += str(name)
    if fn.get("arguments"):
        slot["arguments"] += str(fn["arguments"])


def to_wire(message: Message) -> list[dict[str, Any]]:
    """One norma message → the chat messages it becomes (tool results first: each must follow
    the assistant message that called it)."""
    if message.role == "assistant":
        text = message.text()
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        uses = message.tool_uses()
        if uses:
            out["tool_calls"] = [
                {
                    "id": u.id,
                    "type": "function",
                    "function": {"name": u.name, "arguments": u.arguments_text()},
                }
                for u in uses
            ]
        elif text == "":
            out["content"] = ""
        return [out]
    wire: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            content = block.text()
            if block.is_error and not content.lower().startswith(("error", "denied")):
                content = f"Error: {content}"
            wire.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif isinstance(block, Text):
            texts.append(block.text)
    if texts:
        wire.append({"role": "user", "content": "\n\n".join(texts)})
    return wire


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as some servers send
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _usage(data: Any) -> Usage:
    if not isinstance(data, dict):
        return Usage()
    # Through token_count: usage feeds the token budget, which must not fail open.
    return Usage(token_count(data.get("prompt_tokens")), token_count(data.get("completion_tokens")))


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"  # servers that give no id (older llama.cpp)


def _short(body: Any) -> str:
    text = json.dumps(body, ensure_ascii=False, default=str) if not isinstance(body, str) else body
    return text if len(text) <= 300 else text[:300] + "…"
