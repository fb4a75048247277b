"""The LLM judge against a fake provider on 127.0.0.1, in both wire formats (OpenAI chat
completions and Anthropic Messages): verdicts, failures and on_failure, and the records it
leaves (traffic, LLM exchanges with the API key redacted)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.policy.judge import SYSTEM_PROMPT, parse_verdict
from norma_cli.runtime import Options, Runtime
from norma_cli.store import records
from norma_cli.store.trace_query import TraceStore

API_KEY = "sk-test-0123456789abcdef"


@dataclass
class FakeProvider:
    """What the next replies look like (``mode``) and what the server was sent."""

    mode: str = "allow"
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0


def _reply(provider: FakeProvider, path: str) -> tuple[int, bytes]:
    mode = provider.mode
    if mode == "500":
        return 500, b'{"error": {"message": "upstream exploded"}}'
    if mode == "hang":
        provider.release.wait(30)
        return 200, b"{}"
    if mode == "malformed":
        text = "I think this is probably fine, go ahead."
    elif mode == "fenced":
        text = '```json\n{"decision": "deny", "reason": "fenced"}\n```'
    else:
        text = json.dumps({"decision": mode, "reason": f"the model says {mode}"})
    if path.endswith("/chat/completions"):
        body = {"id": "c1", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}  # fmt: skip
    else:
        body = {"id": "m1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn"}  # fmt: skip
    return 200, json.dumps(body).encode()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    state = FakeProvider()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            state.requests.append({"path": self.path, "headers": dict(self.headers),
                                   "body": json.loads(self.rfile.read(length))})  # fmt: skip
            status, body = _reply(state, self.path)
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


def build(
    tmp_path: Path, provider: FakeProvider, wire: str, on_failure: str = "allow", timeout: float = 5
) -> Runtime:
    base = f"http://127.0.0.1:{provider.port}" + ("/v1" if wire == "openai" else "")
    cfg = tmp_path / "norma.toml"
    cfg.write_text(f"""
[intercept]
tools = ["Write"]
[[intercept.rules]]
rule = "Write(./ok/**)"
decision = "allow"
[intercept.judge]
enabled = true
provider = "{wire}"
base_url = "{base}"
model = "judge-model-1"
api_key_env = "NORMA_TEST_JUDGE_KEY"
timeout_s = {timeout}
on_failure = "{on_failure}"
""")
    return Runtime.build(
        Options(cwd=tmp_path, config=cfg, allow=("Write",), interactive=False, no_wait=True)
    )


def write(rt: Runtime, name: str, call_id: str = "t1") -> ToolResult:
    return rt.executor.run(ToolCall(call_id, "Write", {"file_path": name, "content": "data"}))


def judge_event(rt: Runtime, result: ToolResult) -> dict[str, Any]:
    assert rt.store is not None and result.meta.trace_id
    [entry] = TraceStore(rt.store).find(result.meta.trace_id)
    states = [e["state"] for e in entry.events]
    assert "judge" in states
    return entry.events[states.index("judge") + 1]


WIRES = ["openai", "anthropic"]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMA_TEST_JUDGE_KEY", API_KEY)


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("verdict", "code"), [("allow", 0), ("deny", 3), ("ask", 4)])
def test_verdicts(
    tmp_path: Path, provider: FakeProvider, wire: str, verdict: str, code: int
) -> None:
    provider.mode = verdict
    rt = build(tmp_path, provider, wire)
    result = write(rt, "out.txt")
    assert result.exit_code() == code, result.text()
    assert (tmp_path / "out.txt").exists() == (verdict == "allow")
    event = judge_event(rt, result)
    assert event["state"] == {"allow": "executing", "deny": "denied", "ask": "pending"}[verdict]
    assert event["by"] == f"judge:{wire}:judge-model-1" and event["verdict"] == verdict
    if verdict == "deny":
        assert result.meta.stage == "judge" and "the model says deny" in result.meta.reason
    if verdict == "ask":
        assert result.meta.pending_id

    # the request spoke the provider's wire format, with the fixed system prompt and the call
    [sent] = provider.requests
    if wire == "openai":
        assert sent["path"] == "/v1/chat/completions"
        assert sent["headers"]["authorization"] == f"Bearer {API_KEY}"
        system, user = sent["body"]["messages"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT}
    else:
        assert sent["path"] == "/v1/messages"
        assert sent["headers"]["x-api-key"] == API_KEY and sent["headers"]["anthropic-version"]
        assert sent["body"]["system"] == SYSTEM_PROMPT and sent["body"]["max_tokens"] > 0
        [user] = sent["body"]["messages"]
    assert sent["body"]["model"] == "judge-model-1"
    shown = json.loads(user["content"].split("\n\n", 1)[1])
    assert shown["tool"] == "Write" and shown["input"]["file_path"] == "out.txt"
    assert shown["context"]["tool_use_id"] == "t1"


@pytest.mark.parametrize("wire", WIRES)
def test_judge_only_on_a_rule_miss(tmp_path: Path, provider: FakeProvider, wire: str) -> None:
    (tmp_path / "ok").mkdir()
    rt = build(tmp_path, provider, wire)
    assert write(rt, "ok/a.txt").exit_code() == 0
    assert provider.requests == []


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("on_failure", ["allow", "deny"])
@pytest.mark.parametrize("mode", ["malformed", "500", "hang"])
def test_failures_follow_on_failure(
    tmp_path: Path, provider: FakeProvider, wire: str, on_failure: str, mode: str
) -> None:
    provider.mode = mode
    rt = build(tmp_path, provider, wire, on_failure=on_failure, timeout=0.5)
    result = write(rt, "out.txt")
    assert result.exit_code() == (0 if on_failure == "allow" else 3)
    event = judge_event(rt, result)
    assert event["on_failure"] == on_failure
    assert {"malformed": "not a JSON verdict", "500": "HTTP 500", "hang": "timed out"}[
        mode
    ] in event["failure"]
    assert event["ms"] < 5000  # the hang was cut at the timeout


@pytest.mark.parametrize("wire", WIRES)
def test_exchange_is_recorded_with_the_key_redacted(
    tmp_path: Path, provider: FakeProvider, wire: str
) -> None:
    provider.mode = "deny"
    rt = build(tmp_path, provider, wire)
    write(rt, "out.txt")
    assert rt.store is not None
    [traffic] = records.read(rt.store, "traffic")
    assert traffic["method"] == "POST" and traffic["status"] == 200 and traffic["tool"] == "judge"
    assert traffic["url"].startswith(f"http://127.0.0.1:{provider.port}/")
    assert traffic["request_bytes"] > 100 and traffic["response_bytes"] > 20
    assert len(traffic["request_sha256"]) == 64 and len(traffic["response_sha256"]) == 64
    [llm] = records.read(rt.store, "llm")
    assert llm["purpose"] == "judge" and llm["model"] == "judge-model-1" and llm["status"] == 200
    assert "the model says deny" in llm["response"] and "Write" in llm["request"]
    dump = json.dumps(rt.store.query("SELECT * FROM llm_records")[0][:]) + json.dumps(
        rt.store.query("SELECT * FROM traffic")[0][:]
    )
    assert API_KEY not in dump


def test_key_leaked_into_a_reply_is_redacted(tmp_path: Path, provider: FakeProvider) -> None:
    provider.mode = "malformed"
    rt = build(tmp_path, provider, "openai")
    assert rt.store is not None
    rt.store.record_llm(purpose="judge", provider="openai", model="m", url="https://u:p@x.test/v1?api_key=abc&q=1",
                        request={"echo": API_KEY}, response=f"your key is {API_KEY}", status=200,
                        error=f"bad {API_KEY}", secrets=(API_KEY,))  # fmt: skip
    [row] = records.read(rt.store, "llm")
    assert API_KEY not in json.dumps(row) and "[REDACTED]" in row["response"]
    assert row["url"] == "https://[REDACTED]@x.test/v1?api_key=%5BREDACTED%5D&q=1"


def test_missing_key_is_a_failure_not_a_crash(
    tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NORMA_TEST_JUDGE_KEY")
    rt = build(tmp_path, provider, "openai", on_failure="deny")
    assert any("NORMA_TEST_JUDGE_KEY" in w for w in rt.warnings)
    result = write(rt, "out.txt")
    assert result.exit_code() == 3 and "NORMA_TEST_JUDGE_KEY" in judge_event(rt, result)["failure"]
    assert provider.requests == []


@pytest.mark.parametrize(
    ("text", "decision"),
    [('{"decision": "allow", "reason": "ok"}', "allow"), ('```json\n{"decision":"DENY"}\n```', "deny"),
     ('Verdict: {"decision": "ask", "reason": "unsure"} — done', "ask")],
)  # fmt: skip
def test_parse_verdict_tolerates_wrapping(text: str, decision: str) -> None:
    assert parse_verdict(text).decision == decision


def test_bad_judge_config_is_a_config_error(norma: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[intercept]\ntools = ["Write"]\n[intercept.judge]\nenabled = true\nprovider = "openai"\n'
    )
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "c.toml"}')
    assert proc.returncode == 2 and "model is required" in proc.stderr
    cfg.write_text(
        '[intercept]\ntools = ["Write"]\n[intercept.judge]\nenabled = true\nprovider = "plugin:nope"\n'
    )
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "c.toml"}')
    assert proc.returncode == 2 and "no plugin judge named 'nope'" in proc.stderr
    cfg.write_text('[intercept.judge]\non_failure = "maybe"\n')
    assert norma("--config", str(cfg), "config", "validate").returncode == 2
