"""Loopback model servers speaking the real wire formats, answering from a per-test script.

``FakeProvider("openai", [...])`` serves ``POST /v1/chat/completions``;
``FakeProvider("anthropic", [...])`` serves ``POST /v1/messages``. Each request takes the next
turn of the script:

* ``Reply(text=..., calls=[(id, name, input), ...])`` — an answer; streamed as SSE (OpenAI
  chunk deltas with ``tool_calls`` fragments by index, their argument fragments interleaved;
  Anthropic ``message_start`` … ``message_stop``) when the request asked for ``stream``,
  else one JSON body;
* ``Status(code, headers, body)`` — an HTTP error (429 with ``Retry-After``, 500 ...);
* ``Broken()`` — a stream that starts and then drops the connection;
* a callable ``(request_body) -> Reply | Status`` for answers that depend on the request.

Every request is recorded (path, headers, JSON body, arrival time) for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str = ""
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    usage: tuple[int, int] = (11, 7)


@dataclass
class Status:
    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass
class Broken:
    """Send the start of a stream, then close the connection."""


Turn = Reply | Status | Broken | Callable[[dict[str, Any]], Any]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeProvider:
    def __init__(self, kind: str, script: list[Turn], model: str = "fake-model") -> None:
        assert kind in ("openai", "anthropic")
        self.kind = kind
        self.script = list(script)
        self.model = model
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def base_url(self) -> str:
        port = self._server.server_address[1]
        return (
            f"http://127.0.0.1:{port}/v1" if self.kind == "openai" else f"http://127.0.0.1:{port}"
        )

    def toml(self, name: str = "fake", **extra: Any) -> str:
        """A ``[providers.NAME]`` table pointing at this server."""
        lines = [f"[providers.{name}]", f'kind = "{self.kind}"', f'base_url = "{self.base_url}"',
                 f'model = "{self.model}"']  # fmt: skip
        for key, value in extra.items():
            lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ views for assertions
    def tool_names(self, i: int) -> list[str]:
        body = self.requests[i].body
        if self.kind == "openai":
            return [t["function"]["name"] for t in body.get("tools", [])]
        return [t["name"] for t in body.get("tools", [])]

    def results(self, i: int) -> list[dict[str, Any]]:
        """Tool results in request ``i``, as {id, text, is_error}."""
        out = []
        for m in self.requests[i].body["messages"]:
            if self.kind == "openai" and m.get("role") == "tool":
                out.append(
                    {
                        "id": m["tool_call_id"],
                        "text": m["content"],
                        "is_error": m["content"].startswith(("Error", "denied")),
                    }
                )
            elif self.kind == "anthropic" and isinstance(m.get("content"), list):
                for b in m["content"]:
                    if b.get("type") == "tool_result":
                        text = (
                            b["content"]
                            if isinstance(b["content"], str)
                            else "".join(x.get("text", "") for x in b["content"])
                        )
                        out.append(
                            {
                                "id": b["tool_use_id"],
                                "text": text,
                                "is_error": b.get("is_error", False),
                            }
                        )
        return out

    def user_texts(self, i: int) -> list[str]:
        """Every piece of user text in request ``i``."""
        out = []
        for m in self.requests[i].body["messages"]:
            if m.get("role") != "user":
                continue
            if isinstance(m.get("content"), str):
                out.append(m["content"])
            else:
                out.extend(b["text"] for b in m["content"] if b.get("type") == "text")
        return out

    # ------------------------------------------------------------------ serving
    def _next(self, body: dict[str, Any]) -> Any:
        with self._lock:
            if not self.script:
                return Status(
                    400, body={"error": {"message": "fake provider: no scripted reply left"}}
                )
            turn = self.script.pop(0)
        return (
            turn(body) if callable(turn) and not isinstance(turn, (Reply, Status, Broken)) else turn
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(
                    Seen(
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.monotonic(),
                    )
                )
                want = "/v1/chat/completions" if fake.kind == "openai" else "/v1/messages"
                if self.path != want:
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                turn = fake._next(body)
                if isinstance(turn, Status):
                    return self._json(
                        turn.code,
                        turn.body
                        if turn.body is not None
                        else {"error": {"message": f"status {turn.code}"}},
                        turn.headers,
                    )
                if isinstance(turn, Broken):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "par')
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                assert isinstance(turn, Reply), turn
                if body.get("stream"):
                    events = (
                        fake._openai_stream(turn)
                        if fake.kind == "openai"
                        else fake._anthropic_stream(turn)
                    )
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for chunk in events:
                        self.wfile.write(chunk.encode())
                        self.wfile.flush()
                    self.close_connection = True
                    return None
                data = (
                    fake._openai_json(turn) if fake.kind == "openai" else fake._anthropic_json(turn)
                )
                return self._json(200, data)

            def _json(self, code: int, data: Any, headers: dict[str, str] | None = None) -> None:
                raw = (json.dumps(data) if not isinstance(data, str) else data).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        return Handler

    # ------------------------------------------------------------------ OpenAI wire
    def _openai_json(self, r: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": r.text or None}
        if r.calls:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                     for i, n, a in r.calls]  # fmt: skip
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if r.calls else "stop"}],
                "usage": {"prompt_tokens": r.usage[0], "completion_tokens": r.usage[1], "total_tokens": sum(r.usage)}}  # fmt: skip

    def _openai_stream(self, r: Reply) -> list[str]:
        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            data = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": self.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip
            return f"data: {json.dumps(data)}\n\n"

        out = [chunk({"role": "assistant", "content": ""})]
        if r.text:
            out += [chunk({"content": p}) for p in _pieces(r.text)]
        for index, (call_id, name, _) in enumerate(r.calls):
            out.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                              "function": {"name": name, "arguments": ""}}]}))  # fmt: skip
        # argument fragments of parallel calls interleaved: only the index ties them together
        pieces = [_pieces(json.dumps(a), 5) for _, _, a in r.calls]
        for step in range(max((len(p) for p in pieces), default=0)):
            for index, parts in enumerate(pieces):
                if step < len(parts):
                    out.append(
                        chunk(
                            {
                                "tool_calls": [
                                    {"index": index, "function": {"arguments": parts[step]}}
                                ]
                            }
                        )
                    )
        out.append(chunk({}, "tool_calls" if r.calls else "stop"))
        usage = {
            "prompt_tokens": r.usage[0],
            "completion_tokens": r.usage[1],
            "total_tokens": sum(r.usage),
        }
        out.append(
            f"data: {json.dumps({'id': 'chatcmpl-fake', 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n"
        )
        out.append(": keep-alive comment\n\n")
        out.append("data: [DONE]\n\n")
        return out

    # ------------------------------------------------------------------ Anthropic wire
    def _anthropic_json(self, r: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": r.text}] if r.text else []
        content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in r.calls]
        return {"id": "msg_fake", "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": "tool_use" if r.calls else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": r.usage[0], "output_tokens": r.usage[1]}}  # fmt: skip

    def _anthropic_stream(self, r: Reply) -> list[str]:
        def ev(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

        out = [ev("message_start", {"message": {"id": "msg_fake", "type": "message", "role": "assistant", "content": [],
                                                "model": self.model, "stop_reason": None,
                                                "usage": {"input_tokens": r.usage[0], "output_tokens": 1}}}),
               ev("ping", {})]  # fmt: skip
        index = 0
        if r.text:
            out.append(
                ev(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            out += [ev("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
                    for p in _pieces(r.text)]  # fmt: skip
            out.append(ev("content_block_stop", {"index": index}))
            index += 1
        for call_id, name, args in r.calls:
            out.append(ev("content_block_start", {"index": index, "content_block": {"type": "tool_use", "id": call_id,
                                                                                    "name": name, "input": {}}}))  # fmt: skip
            out += [ev("content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": p}})
                    for p in _pieces(json.dumps(args), 5)]  # fmt: skip
            out.append(ev("content_block_stop", {"index": index}))
            index += 1
        out.append(ev("message_delta", {"delta": {"stop_reason": "tool_use" if r.calls else "end_turn",
                                                  "stop_sequence": None}, "usage": {"output_tokens": r.usage[1]}}))  # fmt: skip
        out.append(ev("message_stop", {}))
        return out
