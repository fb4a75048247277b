"""WebSearch backends against loopback servers that speak each API's wire format, and the
start-up errors of a misconfigured backend."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import ToolCall
from norma_cli.errors import ConfigError
from norma_cli.runtime import Options, Runtime
from norma_cli.tools.search import WebSearchTool

KEY = "sk-test-123"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Api:
    port: int
    seen: list[Seen] = field(default_factory=list)
    status: int = 200
    reply: Any = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def api() -> Iterator[Api]:
    state: dict[str, Api] = {}

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            srv = state["api"]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            srv.seen.append(
                Seen(
                    self.command,
                    parts.path,
                    parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
            )
            body = srv.reply(srv.seen[-1]) if callable(srv.reply) else srv.reply
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(srv.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["api"] = Api(httpd.server_address[1])
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield state["api"]
    finally:
        httpd.shutdown()
        httpd.server_close()


def config(tmp_path: Path, search: dict[str, str], allow: tuple[str, ...] = ()) -> Path:
    lines = ["[tools]", 'builtin = ["WebSearch"]', "[search]"]
    lines += [f'{k} = "{v}"' for k, v in search.items()]
    lines += ["[web]", "allow_hosts = [" + ", ".join(f'"{a}"' for a in allow) + "]"]
    path = tmp_path / "search.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def search(tmp_path: Path, cfg: Path, query: str = "norma policy", **extra: Any) -> Any:
    rt = Runtime.build(
        Options(cwd=tmp_path, config=cfg, allow=("WebSearch",), with_store=False, interactive=False)
    )
    try:
        return rt.executor.run(ToolCall("t", "WebSearch", {"query": query, **extra}))
    finally:
        rt.close()


# ----------------------------------------------------------------------------- wire formats
def test_brave(tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_BRAVE", KEY)
    api.reply = {
        "type": "search",
        "web": {
            "results": [
                {
                    "title": "Norma docs",
                    "url": "https://norma.example/docs",
                    "description": "The <strong>policy</strong> pipeline &amp; more",
                },
                {"title": "Second", "url": "https://norma.example/2", "description": ""},
            ]
        },
    }
    cfg = config(
        tmp_path,
        {"backend": "brave", "api_key_env": "MY_BRAVE", "base_url": f"http://{api.host}/res/v1"},
        (api.host,),
    )
    result = search(tmp_path, cfg, max_results=5)
    assert result.exit_code() == 0, result.text()
    (req,) = api.seen
    assert (req.method, req.path) == ("GET", "/res/v1/web/search")
    assert req.query == {"q": ["norma policy"], "count": ["5"]}
    assert (
        req.headers["x-subscription-token"] == KEY and req.headers["accept"] == "application/json"
    )
    text = result.text()
    assert text.startswith('2 results for "norma policy" (backend: brave)')
    assert "1. Norma docs\n   https://norma.example/docs\n   The policy pipeline & more" in text
    assert "2. Second" in text


def test_tavily(tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    api.reply = {
        "query": "q",
        "results": [
            {"title": "T", "url": "https://t.example/", "content": "tavily says", "score": 0.9}
        ],
    }
    cfg = config(tmp_path, {"backend": "tavily", "base_url": f"http://{api.host}"}, (api.host,))
    result = search(tmp_path, cfg, query="what is norma")
    assert result.exit_code() == 0, result.text()
    (req,) = api.seen
    assert (req.method, req.path) == ("POST", "/search")
    assert req.body == {"query": "what is norma", "max_results": 8}
    assert (
        req.headers["authorization"] == f"Bearer {KEY}"
        and req.headers["content-type"] == "application/json"
    )
    assert "1. T\n   https://t.example/\n   tavily says" in result.text()


def test_deepseek_is_a_chat_completion_and_says_so(
    tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    content = json.dumps(
        {"results": [{"title": "DS", "url": "https://ds.example/", "snippet": "known page"}]}
    )
    api.reply = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    cfg = config(tmp_path, {"backend": "deepseek", "base_url": f"http://{api.host}"}, (api.host,))
    result = search(tmp_path, cfg, query="norma", max_results=3)
    assert result.exit_code() == 0, result.text()
    (req,) = api.seen
    assert (req.method, req.path) == ("POST", "/chat/completions")
    assert req.body["model"] == "deepseek-chat" and req.body["response_format"] == {
        "type": "json_object"
    }
    assert req.body["messages"][-1] == {"role": "user", "content": "norma"}
    assert "at most 3 results" in req.body["messages"][0]["content"]
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert (
        "not a live search index" in result.text()
        and "1. DS\n   https://ds.example/" in result.text()
    )


def test_backend_errors_are_error_results(
    tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", KEY)
    cfg = config(
        tmp_path, {"backend": "brave", "base_url": f"http://{api.host}/res/v1"}, (api.host,)
    )
    api.status, api.reply = 429, {"error": "rate limited"}
    limited = search(tmp_path, cfg)
    assert (
        limited.exit_code() == 1
        and "HTTP 429" in limited.text()
        and "rate limited" in limited.text()
    )
    api.status, api.reply = 200, b"<html>not json</html>"
    garbage = search(tmp_path, cfg)
    assert garbage.exit_code() == 1 and "not JSON" in garbage.text()


def test_a_private_base_url_needs_the_allowlist(
    tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", KEY)
    cfg = config(tmp_path, {"backend": "brave", "base_url": f"http://{api.host}/res/v1"})
    result = search(tmp_path, cfg)
    assert result.exit_code() == 1 and "refused" in result.text() and "allow_hosts" in result.text()
    assert api.seen == []


# ----------------------------------------------------------------------------- start-up errors
def test_missing_key_is_a_startup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, norma: RunNorma
) -> None:
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    cfg = config(tmp_path, {"backend": "brave"})
    with pytest.raises(ConfigError, match=r"\$BRAVE_API_KEY"):
        Runtime.build(Options(cwd=tmp_path, config=cfg, with_store=False))
    proc = norma(
        "--config", str(cfg), "run", "Read", "--arg", "file_path=x", env={"BRAVE_API_KEY": ""}
    )
    assert (
        proc.returncode == 2 and "BRAVE_API_KEY" in proc.stderr and "Traceback" not in proc.stderr
    )
    named = config(tmp_path, {"backend": "tavily", "api_key_env": "OTHER_KEY"})
    monkeypatch.setenv(
        "TAVILY_API_KEY", KEY
    )  # the default name does not count once another is named
    with pytest.raises(ConfigError, match=r"\$OTHER_KEY"):
        Runtime.build(Options(cwd=tmp_path, config=named, with_store=False))


def test_unknown_backend_is_a_startup_error(tmp_path: Path, norma: RunNorma) -> None:
    cfg = config(tmp_path, {"backend": "altavista"})
    proc = norma("--config", str(cfg), "tools", "list")
    assert proc.returncode == 2
    assert "unknown search backend 'altavista'" in proc.stderr and "brave" in proc.stderr
    assert "search.toml:4" in proc.stderr  # names the file and line


def test_no_error_when_websearch_is_not_enabled(tmp_path: Path) -> None:
    cfg = tmp_path / "off.toml"
    cfg.write_text('[search]\nbackend = "altavista"\n')
    Runtime.build(Options(cwd=tmp_path, config=cfg, with_store=False)).close()


def test_bad_base_url_is_a_startup_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", KEY)
    cfg = config(tmp_path, {"backend": "brave", "base_url": "ftp://x"})
    with pytest.raises(ConfigError, match=r"search\.base_url"):
        Runtime.build(Options(cwd=tmp_path, config=cfg, with_store=False))


@pytest.mark.skipif(importlib.util.find_spec("ddgs") is not None, reason="ddgs is installed here")
def test_ddgs_missing_names_the_package(tmp_path: Path, norma: RunNorma) -> None:
    cfg = tmp_path / "ddgs.toml"
    cfg.write_text('[tools]\nbuiltin = ["WebSearch"]\n')  # ddgs is the default backend
    proc = norma("--config", str(cfg), "run", "WebSearch", "--arg", "query=x")
    assert proc.returncode == 2 and "pip install ddgs" in proc.stderr


# ----------------------------------------------------------------------------- ddgs adapter
FAKE_DDGS = """
class DDGS:
    def __init__(self, proxy=None, timeout=5):
        self.proxy, self.timeout = proxy, timeout

    def text(self, query, max_results=10):
        if query == "fail":
            raise RuntimeError("No results found (network is unreachable)")
        return [{"title": f"{query} {i}", "href": f"https://d.example/{i}", "body": f"proxy={self.proxy}"}
                for i in range(max_results + 5)]
"""


def test_ddgs_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ddgs package talks to search engines over the network, which tests cannot reach: a
    stand-in module with its interface (DDGS(proxy, timeout).text(query, max_results))."""
    pkg = tmp_path / "fake-ddgs"
    (pkg / "ddgs").mkdir(parents=True)
    (pkg / "ddgs" / "__init__.py").write_text(FAKE_DDGS)
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.delitem(sys.modules, "ddgs", raising=False)
    cfg = tmp_path / "d.toml"
    cfg.write_text('[tools]\nbuiltin = ["WebSearch"]\n[web]\nproxy = "http://127.0.0.1:3128"\n')
    ok = search(tmp_path, cfg, query="hello", max_results=2)
    assert ok.exit_code() == 0, ok.text()
    assert ok.text().startswith('2 results for "hello" (backend: ddgs)')
    assert "1. hello 0\n   https://d.example/0\n   proxy=http://127.0.0.1:3128" in ok.text()
    failed = search(tmp_path, cfg, query="fail")
    assert failed.exit_code() == 1 and "network is unreachable" in failed.text()


def test_cli_one_shot_against_a_backend(norma: RunNorma, tmp_path: Path, api: Api) -> None:
    api.reply = {
        "web": {"results": [{"title": "CLI", "url": "https://cli.example/", "description": "d"}]}
    }
    cfg = config(
        tmp_path, {"backend": "brave", "base_url": f"http://{api.host}/res/v1"}, (api.host,)
    )
    proc = norma(
        "--config",
        str(cfg),
        "--allow",
        "WebSearch",
        "run",
        "WebSearch",
        "--arg",
        "query=cli",
        env={"BRAVE_API_KEY": KEY},
    )
    assert proc.returncode == 0, proc.stderr
    assert "1. CLI" in results(proc.stdout)[0]["content"][0]["text"]
    denied = norma(
        "--config", str(cfg), "run", "WebSearch", "--arg", "query=cli", env={"BRAVE_API_KEY": KEY}
    )
    assert denied.returncode == 3  # not read-only: needs a rule or an approval


def test_metadata_and_schema() -> None:
    from norma_cli.lint import Linter

    tool = WebSearchTool()
    assert not tool.read_only and tool.concurrency_safe and tool.requires_approval
    report = Linter(("openai", "anthropic")).lint_definitions([tool.definition()])
    assert not report.errors, report.errors
