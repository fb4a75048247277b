"""``kind = "anthropic"``: the Anthropic Messages API, ``POST {base_url}/v1/messages``.

Streamed replies are a sequence of named events: ``message_start`` (input token usage),
``content_block_start`` / ``content_block_delta`` (``text_delta``, ``input_json_delta``) /
``content_block_stop`` per block, ``message_delta`` (stop reason, output usage) and
``message_stop``; ``error`` events carry an error object.
"""

from __future__ import annotations

import json
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

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens
RETRYABLE_ERRORS = ("overloaded_error", "api_error", "rate_limit_error")


class AnthropicProvider(HttpProvider):
    kind = "anthropic"

    def endpoint(self) -> str:
        base = (self.settings.base_url or DEFAULT_BASE_URL).rstrip("/")
        # base_url is the API root; one that already ends in /v1 is taken as meant
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def payload(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or self.settings.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": to_wire(request.messages),
        }
        if request.system:
            out["system"] = request.system
        if request.tools:
            out["tools"] = [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": wire_schema(t.input_schema),
                }
                for t in request.tools
            ]
        if stream:
            out["stream"] = True
        return out

    def extra_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def parse(self, body: Any) -> ModelReply:
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            raise ProviderError(f"provider {self.name}: unexpected reply: {str(body)[:300]}")
        blocks: list[Text | ToolUse] = []
        for block in body["content"]:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                blocks.append(Text(block["text"]))
            elif kind == "tool_use":
                blocks.append(
                    ToolUse(
                        str(block.get("id", "")), str(block.get("name", "")), block.get("input", {})
                    )
                )
        usage = _usage(body.get("usage"))
        return ModelReply(
            Message("assistant", list(blocks)), body.get("stop_reason") or "end_turn", usage
        )

    def parse_stream(self, lines: Iterator[str], on_delta: DeltaSink) -> ModelReply:
        slots: dict[int, dict[str, Any]] = {}
        usage = Usage()
        stop_reason = "end_turn"
        done = False
        for event in sse.events(lines):
            try:
                data = json.loads(event.data)
            except ValueError:
                raise StreamError(
                    f"unreadable event: {event.data[:200]}", retryable=False
                ) from None
            kind = data.get("type", event.event) if isinstance(data, dict) else event.event
            if kind == "message_start":
                usage = _usage((data.get("message") or {}).get("usage"))
            elif kind == "content_block_start":
                block = data.get("content_block") or {}
                slot: dict[str, Any] = {"type": block.get("type"), "text": block.get("text", "") or "",
                                        "id": block.get("id", ""), "name": block.get("name", ""), "json": ""}  # fmt: skip
                if block.get("type") == "tool_use" and block.get("input"):
                    slot["json"] = json.dumps(block["input"])
                slots[int(data.get("index", len(slots)))] = slot
            elif kind == "content_block_delta":
                slot = slots.setdefault(
                    int(data.get("index", 0)), {"type": "text", "text": "", "json": ""}
                )
                delta = data.get("delta") or {}
                if delta.get("type") == "text_delta":
                    slot["text"] += delta.get("text", "")
                    if on_delta is not None and delta.get("text"):
                        on_delta(delta["text"])
                elif delta.get("type") == "input_json_delta":
                    slot["json"] += delta.get("partial_json", "")
            elif kind == "message_delta":
                stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
                out = (data.get("usage") or {}).get("output_tokens")
                if out is not None:
                    usage.output_tokens = token_count(out)  # cumulative, not an increment
            elif kind == "message_stop":
                done = True
                break
            elif kind == "error":
                err = data.get("error") or {}
                raise StreamError(f"{err.get('type', 'error')}: {err.get('message', '')}",
                                  retryable=err.get("type") in RETRYABLE_ERRORS)  # fmt: skip
        if not done:
            raise StreamError("the stream ended before message_stop")
        blocks: list[Text | ToolUse] = []
        for index in sorted(slots):
            slot = slots[index]
            if slot["type"] == "text" and slot["text"]:
                blocks.append(Text(slot["text"]))
            elif slot["type"] == "tool_use":
                blocks.append(ToolUse(slot["id"], slot["name"], parse_arguments(slot["json"])))
        return ModelReply(Message("assistant", list(blocks)), stop_reason, usage)


def to_wire(messages: list[Message]) -> list[dict[str, Any]]:
    """norma messages → Messages API turns; consecutive turns of one role are merged (a resumed
    session may add a prompt right after a user turn, and the API wants them alternating)."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, Text):
                if block.text:
                    blocks.append({"type": "text", "text": block.text})
            elif isinstance(block, ToolUse):
                value = (
                    block.input
                    if isinstance(block.input, dict)
                    else {"unparsed_arguments": block.input}
                )
                blocks.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": value}
                )
            else:
                blocks.append(_result(block))
        if not blocks:
            continue
        if wire and wire[-1]["role"] == message.role:
            wire[-1]["content"].extend(blocks)
            # tool results must open a user turn, before any text
            wire[-1]["content"].sort(key=lambda b: b["type"] != "tool_result")
        else:
            wire.append({"role": message.role, "content": blocks})
    return wire


def _result(block: ToolResultBlock) -> dict[str, Any]:
    content: Any
    if any(b.get("type") == "image" for b in block.content):
        content = []
        for b in block.content:
            if b.get("type") == "image":
                content.append({"type": "image", "source": b.get("source")})
            elif b.get("type") == "json":
                content.append(
                    {"type": "text", "text": json.dumps(b.get("json"), ensure_ascii=False)}
                )
            else:
                content.append({"type": "text", "text": str(b.get("text", ""))})
    else:
        content = block.text()
    return {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": content,
        "is_error": block.is_error,
    }


def _usage(data: Any) -> Usage:
    if not isinstance(data, dict):
        return Usage()
    # Every figure through token_count: usage feeds the token budget, which must not fail open.
    cached = token_count(data.get("cache_creation_input_tokens")) + token_count(
        data.get("cache_read_input_tokens")
    )
    return Usage(
        token_count(data.get("input_tokens")) + cached, token_count(data.get("output_tokens"))
    )
