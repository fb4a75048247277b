"""Hostile network peers on 127.0.0.1: WebFetch and WebSearch servers, MCP servers (stdio and
streamable HTTP) and `norma run -p` model endpoints that misbehave on purpose.

The product rule: a misbehaving peer gives ONE clear line (or an error result the model sees)
and a non-zero exit where the run fails — never a traceback or a `norma: internal error`,
never a hang past the configured timeout, never unbounded memory; the SSRF guard fails closed.
Each test names one case that broke the rule in the QA sweep ("Sweep finding:"), or a
representative case that holds and is not covered elsewhere ("Holds:"). Peers are raw sockets
so they can say what no well-behaved server library would; anything that could hang runs the
real CLI in a subprocess with a timeout, so a regression fails the test instead of stalling.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results
from fake_providers import FakeProvider, Reply, Status, Turn
from mcp_servers.support import PYTHON, scripted, tool, write_config

from norma_cli.core.contract import ToolCall
from norma_cli.runtime import Options, Runtime

NORMA = [sys.executable, "-m", "norma_cli"]
KEY_ENV = {"FAKE_KEY": "sk-hostile-0000"}


# ----------------------------------------------------------------------------- raw peers
Handler = Callable[[socket.socket, bytes, bytes, "Peer"], None]


class Peer:
    """A TCP server on 127.0.0.1: each connection's request head (and Content-Length body) is
    read, then ``handler(conn, head, body, peer)`` writes whatever bytes it likes. Handlers
    that stream forever check ``peer.stopped`` so the test's end stops them."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.stopped = threading.Event()
        self.heads: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    while len(body) < int(value):
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        body += chunk
            self.heads.append(head)
            self.handler(conn, head, body, self)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@contextmanager
def peer(handler: Handler) -> Iterator[Peer]:
    p = Peer(handler)
    try:
        yield p
    finally:
        p.close()


def response(status: bytes, body: bytes, ctype: bytes = b"text/plain", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + ctype
        + b"\r\n"
        + extra
        + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        + body
    )


def sends(*payloads: bytes) -> Handler:
    """Answer the n-th request with ``payloads[n]`` (the last one repeats)."""
    count = [0]

    def handle(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
        i = min(count[0], len(payloads) - 1)
        count[0] += 1
        conn.sendall(payloads[i])

    return handle


def dribble(prefix: bytes, every: float = 0.3) -> Handler:
    """Send ``prefix`` one byte at a time, then stall: a peer that is never quite silent."""

    def handle(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
        for byte in prefix:
            if p.stopped.wait(every):
                return
            conn.sendall(bytes([byte]))
        p.stopped.wait(60)

    return handle


def forever(start: bytes, chunk: bytes, every: float) -> Handler:
    """Send ``start``, then ``chunk`` every ``every`` seconds until the client goes away."""

    def handle(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
        conn.sendall(start)
        while not p.stopped.is_set():
            conn.sendall(chunk)
            if every:
                time.sleep(every)

    return handle


def timed_cli(
    args: list[str], cwd: Path, *, timeout: float, memory_limit: int | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The real CLI with the isolated env (and optionally an address-space limit); the wall time."""

    def limit() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    started = time.monotonic()
    proc = subprocess.run(
        [*NORMA, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **KEY_ENV},
        preexec_fn=limit,
    )
    return proc, time.monotonic() - started


def stderr_is_clean(stderr: str) -> None:
    """Every line norma's own: no traceback, no internal error, no stray library log line."""
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[:3000]
    for line in stderr.splitlines():
        assert line.startswith("norma:"), stderr[:3000]
        assert len(line) <= 2000, f"a {len(line)}-character stderr line: {line[:200]}…"


# ----------------------------------------------------------------------------- WebFetch
def web_config(tmp_path: Path, host: str, **web: Any) -> Path:
    lines = ["[tools]", 'builtin = ["WebFetch"]', "[web]", f'allow_hosts = ["{host}"]']
    lines += [f"{k} = {json.dumps(v)}" for k, v in web.items()]
    path = tmp_path / "web.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def fetch(tmp_path: Path, p: Peer, url: str | None = None, **web: Any) -> Any:
    """One WebFetch in process (for peers that cannot make it hang)."""
    rt = Runtime.build(
        Options(
            cwd=tmp_path,
            config=web_config(tmp_path, p.host, **web),
            allow=("WebFetch",),
            with_store=False,
            interactive=False,
        )
    )
    try:
        return rt.executor.run(ToolCall("t", "WebFetch", {"url": url or p.url()}))
    finally:
        rt.close()


def fetch_cli(
    tmp_path: Path, p: Peer, *, proc_timeout: float, **web: Any
) -> tuple[subprocess.CompletedProcess[str], float]:
    """One WebFetch through the CLI (with the store), for peers that could make it hang."""
    cfg = web_config(tmp_path, p.host, **web)
    args = [
        "--config",
        str(cfg),
        "--allow",
        "WebFetch",
        "run",
        "WebFetch",
        "--arg",
        f"url={p.url()}",
    ]
    return timed_cli(args, tmp_path, timeout=proc_timeout)


HEAD_DRIBBLE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Slow: " + b"a" * 200


def early_hints_forever(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
    while not p.stopped.wait(0.2):
        conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n")


@pytest.mark.parametrize(
    "handler",
    [dribble(HEAD_DRIBBLE), early_hints_forever],
    ids=["response-head-one-byte-at-a-time", "103-early-hints-forever"],
)
def test_webfetch_timeout_bounds_the_whole_request_not_each_read(
    tmp_path: Path, handler: Handler
) -> None:
    """Sweep finding: httpx's timeout is per read, so a head that trickles in never trips it
    ([web] timeout = 2 here; the fetch ran for minutes)."""
    with peer(handler) as p:
        try:
            proc, took = fetch_cli(tmp_path, p, proc_timeout=12, timeout=2)
        except subprocess.TimeoutExpired:
            pytest.fail("WebFetch with a 2 s [web] timeout was still waiting after 12 s")
        assert proc.returncode == 1, proc.stdout
        assert "timed out" in results(proc.stdout)[0]["content"][0]["text"]
        assert took < 8, f"a 2 s timeout took {took:.1f} s"


def test_webfetch_holds_a_body_that_trickles_is_cut_by_the_total_timeout(tmp_path: Path) -> None:
    """Holds: the body phase checks the deadline between reads."""
    start = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"
    with peer(forever(start, b"z", 0.3)) as p:
        started = time.monotonic()
        result = fetch(tmp_path, p, timeout=2)
        assert result.exit_code() == 1 and "timed out" in result.text()
        assert time.monotonic() - started < 6


CLOSED_MID_BODY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\npartial"
)
BAD_CHUNK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"ZZZ\r\nabc\r\n0\r\n\r\n"
)


@pytest.mark.parametrize(
    "reply", [CLOSED_MID_BODY, BAD_CHUNK], ids=["closed-mid-body", "bad-chunk"]
)
def test_webfetch_a_body_that_breaks_off_is_the_tools_error_and_is_recorded(
    tmp_path: Path, isolated_env: Path, reply: bytes
) -> None:
    """Sweep finding: httpx's error escapes WebFetch.call mid-body: the model gets the executor's
    'WebFetch failed: RemoteProtocolError: …' (no URL) and the request has no traffic row."""
    with peer(sends(reply)) as p:
        proc, _ = fetch_cli(tmp_path, p, proc_timeout=30)
    [result] = results(proc.stdout)
    assert proc.returncode == 1 and result["is_error"]
    assert result["content"][0]["text"].startswith(f"WebFetch {p.url()}: "), result["content"]
    db = sqlite3.connect(isolated_env / "data" / "norma.db")
    rows = db.execute("SELECT url, error FROM traffic WHERE tool = 'WebFetch'").fetchall()
    db.close()
    assert len(rows) == 1 and rows[0][1], rows


@pytest.mark.parametrize("charset", ["zlib", "base64", "rot13", "undefined", "idna"])
def test_webfetch_a_charset_that_is_not_a_text_codec_falls_back_to_utf8(
    tmp_path: Path, charset: str
) -> None:
    """Sweep finding: codecs.lookup accepts bytes-to-bytes and special codecs; bytes.decode then raises
    (LookupError/UnicodeError) and the whole page becomes 'WebFetch failed: LookupError: …'."""
    body = "café ok".encode()
    reply = response(b"200 OK", body, b"text/plain; charset=" + charset.encode())
    with peer(sends(reply)) as p:
        result = fetch(tmp_path, p)
    assert result.exit_code() == 0, result.text()
    assert "café ok" in result.text()


NESTED_LINKS = b"<a href=/x>" * 100_000 + b"t" + b"</a>" * 100_000
TEXT_THEN_BREAKS = b"<p>" + b"x" * 1_000_000 + b"</p>" + b"<br>" * 250_000


@pytest.mark.parametrize(
    "page", [NESTED_LINKS, TEXT_THEN_BREAKS], ids=["100k-nested-links", "1MB-text-then-250k-br"]
)
def test_webfetch_html_to_text_is_linear(tmp_path: Path, page: bytes) -> None:
    """Sweep finding: html_text._Text is quadratic here — every </a> re-joins and re-wraps the text of
    all the links inside it, and every block tag re-joins the last 4 pieces (a 1 MB text piece
    stays among them). A 1.1 MB page takes minutes; a 5 MB one (the default cap) hours."""
    with peer(sends(response(b"200 OK", page, b"text/html"))) as p:
        try:
            proc, took = fetch_cli(tmp_path, p, proc_timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("WebFetch of a 1-2 MB page was still converting HTML after 10 s")
    assert proc.returncode == 0, proc.stderr
    assert took < 10


def test_webfetch_holds_deeply_nested_html_is_not_recursed(tmp_path: Path) -> None:
    """Holds: the HTML→text pass is iterative; 100k nested <div> and <li> are fine."""
    page = b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000 + b"<li>" * 100_000
    with peer(sends(response(b"200 OK", page, b"text/html"))) as p:
        result = fetch(tmp_path, p)
    assert result.exit_code() == 0 and "deep" in result.text()


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(
    ("encoding", "payload"),
    [
        (b"deflate", zlib.compress(b"A" * 50_000_000, 9)),  # zlib-wrapped, as the RFC says
        (b"deflate", _raw_deflate(b"A" * 50_000_000)),  # raw, as some servers send it
        (b"gzip", gzip.compress(b"B" * 1_000_000) * 60),  # concatenated members
    ],
    ids=["deflate-bomb", "raw-deflate-bomb", "gzip-members"],
)
def test_webfetch_holds_the_cap_applies_to_decoded_bytes(
    tmp_path: Path, encoding: bytes, payload: bytes
) -> None:
    """Holds: tiny compressed, huge decoded — the byte cap counts decoded bytes."""
    reply = response(b"200 OK", payload, extra=b"Content-Encoding: " + encoding + b"\r\n")
    with peer(sends(reply)) as p:
        result = fetch(tmp_path, p, max_bytes=100_000)
    assert result.exit_code() == 0, result.text()
    assert "Size: 100,000 bytes (cut at the byte limit" in result.text()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 abc WHAT\r\nContent-Length: 2\r\n\r\nok",
        b"<html>HTTP/0.9 has no status line</html>",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/pl\x00ain\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(100_000)) + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"h" * 10_000_000 + b"\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\nhello1234",
        response(b"200 OK", b"x" * 10, extra=b"Content-Encoding: br\r\n"),
    ],
    ids=[
        "bad-status",
        "http-0.9",
        "nul-in-header",
        "100k-headers",
        "10MB-header",
        "two-content-lengths",
        "brotli-not-asked-for",
    ],
)
def test_webfetch_holds_malformed_responses_are_error_results(tmp_path: Path, reply: bytes) -> None:
    """Holds: each is an error result naming the URL, at once."""
    with peer(sends(reply)) as p:
        started = time.monotonic()
        result = fetch(tmp_path, p, timeout=5)
    assert result.exit_code() == 1
    assert result.text().startswith(f"WebFetch {p.url()}: ") and "\n" not in result.text()
    assert time.monotonic() - started < 4


@pytest.mark.parametrize(
    "location",
    [
        b"//169.254.169.254/latest/meta-data/",
        b"http://[::ffff:a9fe:a9fe]/",
        b"file:///etc/passwd",
        b"http://%31%32%37.0.0.1:VICTIM/",
        b"http://127.0.0.1.:VICTIM/",
    ],
    ids=[
        "scheme-relative-metadata",
        "mapped-metadata",
        "file",
        "percent-encoded-loopback",
        "trailing-dot-loopback",
    ],
)
def test_webfetch_holds_redirects_never_reach_a_private_address(
    tmp_path: Path, location: bytes
) -> None:
    """Holds: a 302 from an allowlisted peer to a private target is refused, never connected."""
    with peer(sends(response(b"200 OK", b"internal secret"))) as victim:
        target = location.replace(b"VICTIM", str(victim.port).encode())
        reply = b"HTTP/1.1 302 Found\r\nLocation: " + target + b"\r\nContent-Length: 0\r\n\r\n"
        with peer(sends(reply)) as p:
            result = fetch(tmp_path, p)
        assert result.exit_code() == 1 and "refused" in result.text(), result.text()
        assert victim.heads == []


# ----------------------------------------------------------------------------- WebSearch
def search_config(tmp_path: Path, backend: str, p: Peer, path: str = "") -> Path:
    lines = [
        "[tools]",
        'builtin = ["WebSearch"]',
        "[search]",
        f'backend = "{backend}"',
        'api_key_env = "FAKE_KEY"',
        f'base_url = "http://{p.host}{path}"',
        "[web]",
        f'allow_hosts = ["{p.host}"]',
        "timeout = 5",
    ]
    cfg = tmp_path / "search.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def search(tmp_path: Path, backend: str, p: Peer) -> Any:
    rt = Runtime.build(
        Options(
            cwd=tmp_path,
            config=search_config(tmp_path, backend, p),
            allow=("WebSearch",),
            with_store=False,
            interactive=False,
        )
    )
    try:
        return rt.executor.run(ToolCall("t", "WebSearch", {"query": "norma"}))
    finally:
        rt.close()


def json_reply(data: Any, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return response(status, json.dumps(data).encode(), b"application/json", extra)


@pytest.mark.parametrize(
    ("backend", "data"),
    [
        (
            "brave",
            {
                "web": {
                    "results": [{"title": None, "url": "https://a.example/", "description": "d"}]
                }
            },
        ),
        ("tavily", {"results": [{"title": "A", "url": "https://a.example/", "content": None}]}),
    ],
    ids=["brave-title-null", "tavily-content-null"],
)
def test_websearch_a_null_field_does_not_lose_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, data: Any
) -> None:
    """Sweep finding: brave()/tavily() pass None through to render(), whose .strip()/.split() raise
    outside the tool's try: 'WebSearch failed: AttributeError: NoneType …', results lost."""
    monkeypatch.setenv("FAKE_KEY", "k")
    with peer(sends(json_reply(data))) as p:
        result = search(tmp_path, backend, p)
    assert result.exit_code() == 0, result.text()
    assert "https://a.example/" in result.text()


def test_websearch_snippet_markup_is_stripped_in_linear_time(tmp_path: Path) -> None:
    """Sweep finding: search._strip_tags uses re.sub(r"<[^>]+>") — quadratic on '<' without '>': a
    1 MB description keeps the search busy for minutes ([web] timeout = 5)."""
    data = {
        "web": {
            "results": [{"title": "t", "url": "https://a.example/", "description": "<" * 1_000_000}]
        }
    }
    with peer(sends(json_reply(data))) as p:
        cfg = search_config(tmp_path, "brave", p, "/res/v1")
        try:
            proc, _ = timed_cli(
                [
                    "--config",
                    str(cfg),
                    "--allow",
                    "WebSearch",
                    "run",
                    "WebSearch",
                    "--arg",
                    "query=norma",
                ],
                tmp_path,
                timeout=10,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("WebSearch was still stripping tags from one snippet after 10 s")
    assert proc.returncode == 0, proc.stderr
    assert "https://a.example/" in results(proc.stdout)[0]["content"][0]["text"]


def test_websearch_holds_a_long_retry_after_is_an_error_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds: a backend's 429 with Retry-After: 99999 is an error result, nobody sleeps."""
    monkeypatch.setenv("FAKE_KEY", "k")
    reply = json_reply({"detail": "slow down"}, b"429 Too Many Requests", b"Retry-After: 99999\r\n")
    with peer(sends(reply)) as p:
        started = time.monotonic()
        result = search(tmp_path, "tavily", p)
    assert result.exit_code() == 1 and "HTTP 429" in result.text()
    assert time.monotonic() - started < 4


# ----------------------------------------------------------------------------- providers
def provider_config(tmp_path: Path, kind: str, p: Peer, **extra: Any) -> Path:
    base = f"http://{p.host}/v1" if kind == "openai" else f"http://{p.host}"
    table = {
        "kind": kind,
        "base_url": base,
        "model": "m",
        "api_key_env": "FAKE_KEY",
        "timeout": 2,
        "max_retries": 0,
        **extra,
    }
    cfg = tmp_path / "provider.toml"
    cfg.write_text(
        "[providers.fake]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
    )
    return cfg


def run_p(
    tmp_path: Path, cfg: Path, *, timeout: float = 30, memory_limit: int | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    return timed_cli(
        ["--config", str(cfg), "run", "-p", "hi"],
        tmp_path,
        timeout=timeout,
        memory_limit=memory_limit,
    )


def provider_failed(proc: subprocess.CompletedProcess[str]) -> None:
    """exit 1 and one line naming the provider (SPEC §16: provider error after retries)."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr[:2000])
    provider_handled(proc)


def provider_handled(proc: subprocess.CompletedProcess[str]) -> None:
    """Either the run goes on (a field norma can do without) or it is a provider error:
    exit 1 and one line naming the provider — never an internal error."""
    stderr_is_clean(proc.stderr)
    if proc.returncode != 0:
        lines = proc.stderr.splitlines()
        assert proc.returncode == 1, (proc.returncode, proc.stderr[:2000])
        assert len(lines) == 1 and "provider fake" in lines[0], proc.stderr[:2000]


SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize(
    ("kind", "handler"),
    [
        ("openai", forever(SSE, b": keep-alive\n\n", 0.3)),
        ("anthropic", forever(SSE, b'event: ping\ndata: {"type": "ping"}\n\n', 0.3)),
        (
            "openai",
            dribble(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX: " + b"a" * 200),
        ),
        ("openai", forever(b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n", b"z" * 1000, 0.05)),
    ],
    ids=[
        "openai-keepalives-forever",
        "anthropic-pings-forever",
        "head-one-byte-at-a-time",
        "error-body-never-ends",
    ],
)
def test_provider_timeout_bounds_the_whole_reply(
    tmp_path: Path, kind: str, handler: Handler
) -> None:
    """Sweep finding: the provider's timeout is httpx's per-read timeout; a peer that keeps the
    connection busy (keep-alives, a trickled head, an endless error body) holds the run
    forever ([providers] timeout = 2 here)."""
    with peer(handler) as p:
        try:
            proc, took = run_p(tmp_path, provider_config(tmp_path, kind, p), timeout=12)
        except subprocess.TimeoutExpired:
            pytest.fail("run -p with a 2 s provider timeout was still waiting after 12 s")
    provider_failed(proc)
    assert took < 8


def test_provider_a_reply_that_never_ends_is_cut_not_buffered(tmp_path: Path) -> None:
    """Sweep finding: the reply body has no size cap (response.read(), iter_lines, "\\n".join): a
    stream that never ends is buffered until MemoryError (here under a 1.5 GB address-space
    limit and a 60 s timeout), then two stderr lines and 'internal error'."""
    start = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"a": "'
    with peer(forever(start, b"z" * (1 << 20), 0)) as p:
        cfg = provider_config(tmp_path, "openai", p, stream=False, timeout=60)
        try:
            proc, _ = run_p(tmp_path, cfg, timeout=60, memory_limit=1_500_000_000)
        except subprocess.TimeoutExpired:
            pytest.fail("run -p was still reading an endless reply after 60 s")
    provider_failed(proc)
    assert "MemoryError" not in proc.stderr


def oa_body(message: Any = None, usage: Any = None, choices: Any = None) -> bytes:
    message = {"role": "assistant", "content": "hi"} if message is None else message
    data = {
        "choices": choices
        if choices is not None
        else [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 1, "completion_tokens": 1},
    }
    return response(b"200 OK", json.dumps(data).encode(), b"application/json")


def an_body(content: Any = None, usage: Any = None) -> bytes:
    data = {
        "type": "message",
        "role": "assistant",
        "stop_reason": "end_turn",
        "content": content if content is not None else [{"type": "text", "text": "hi"}],
        "usage": usage if usage is not None else {"input_tokens": 1, "output_tokens": 1},
    }
    return response(b"200 OK", json.dumps(data).encode(), b"application/json")


def sse(*events: str) -> bytes:
    return SSE + "".join(f"data: {e}\n\n" for e in events).encode()


MALFORMED = {
    "openai-usage-string": ("openai", False, oa_body(usage={"prompt_tokens": "abc"})),
    "openai-usage-list": ("openai", False, oa_body(usage={"prompt_tokens": [1]})),
    "openai-usage-infinity": (
        "openai",
        False,
        response(
            b"200 OK",
            b'{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": Infinity}}',
            b"application/json",
        ),
    ),
    "openai-message-string": ("openai", False, oa_body(message="hi")),
    "openai-tool-call-not-object": (
        "openai",
        False,
        oa_body(message={"content": "x", "tool_calls": ["bad"]}),
    ),
    "openai-json-nested-100k-deep": (
        "openai",
        False,
        response(b"200 OK", b"[" * 100_000 + b"]" * 100_000, b"application/json"),
    ),
    "openai-stream-choice-string": ("openai", True, sse('{"choices": ["x"]}')),
    "openai-stream-delta-string": ("openai", True, sse('{"choices": [{"delta": "x"}]}')),
    "openai-stream-tool-call-int": (
        "openai",
        True,
        sse('{"choices": [{"delta": {"tool_calls": [1]}}]}'),
    ),
    "anthropic-usage-string": ("anthropic", False, an_body(usage={"input_tokens": "x"})),
    "anthropic-content-not-objects": ("anthropic", False, an_body(content=["str", 5])),
    "anthropic-stream-index-string": (
        "anthropic",
        True,
        sse('{"type": "content_block_delta", "index": "abc", "delta": {}}'),
    ),
    "anthropic-stream-data-list": ("anthropic", True, SSE + b"event: message_start\ndata: [1]\n\n"),
    "anthropic-stream-text-int": (
        "anthropic",
        True,
        sse(
            '{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": 5}}',
            '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}',
            '{"type": "message_stop"}',
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_provider_a_malformed_reply_is_handled_or_a_one_line_provider_error(
    tmp_path: Path, case: str
) -> None:
    """Sweep finding: parse()/parse_stream() and _usage() index and int() the peer's JSON unchecked;
    the ValueError/TypeError/AttributeError/RecursionError/OverflowError escapes as
    'norma: X' + 'norma: internal error: X', never naming the provider."""
    kind, stream, reply = MALFORMED[case]
    with peer(sends(reply)) as p:
        proc, _ = run_p(tmp_path, provider_config(tmp_path, kind, p, stream=stream))
    provider_handled(proc)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_provider_negative_usage_cannot_defeat_the_token_budget(
    norma: RunNorma, tmp_path: Path, kind: str
) -> None:
    """Sweep finding: _usage() keeps negative counts, so a peer reporting -1,000,000 output tokens per
    turn keeps the budget from ever being reached (here: 6 turns instead of exit 5 at 2)."""
    read = ("c", "Read", {"file_path": "notes.txt"})
    (tmp_path / "notes.txt").write_text("hello\n")
    script: list[Turn] = [Reply(calls=[read], usage=(60, -1_000_000)) for _ in range(5)]
    script.append(Reply(text="end"))
    with FakeProvider(kind, script) as fake:
        cfg = tmp_path / "n.toml"
        cfg.write_text(fake.toml(api_key_env="FAKE_KEY", stream=False))
        proc = norma(
            "--config", str(cfg), "run", "-p", "hi", "--max-tokens-total", "100", env=KEY_ENV
        )
    assert proc.returncode == 5, (proc.returncode, proc.stderr, len(fake.requests))
    assert len(fake.requests) == 2


def test_provider_holds_a_retry_after_beyond_the_cap_gives_up_at_once(
    norma: RunNorma, tmp_path: Path
) -> None:
    """Holds: Retry-After: 99999 is an error (exit 1, one line) after one request, no sleep."""
    script: list[Turn] = [Status(429, {"Retry-After": "99999"}, {"error": {"message": "slow"}})]
    with FakeProvider("openai", script) as fake:
        cfg = tmp_path / "n.toml"
        cfg.write_text(fake.toml(api_key_env="FAKE_KEY"))
        started = time.monotonic()
        proc = norma("--config", str(cfg), "run", "-p", "hi", env=KEY_ENV)
    assert proc.returncode == 1 and len(fake.requests) == 1
    assert "retry after 99999s (more than 60s), giving up" in proc.stderr and "slow" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and time.monotonic() - started < 10


def test_provider_holds_unreadable_arguments_and_unknown_tools_reach_the_model(
    tmp_path: Path,
) -> None:
    """Holds: arguments that are not JSON, an unknown name and an empty name are error results
    the model sees; the loop goes on to the model's answer."""
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{not json"}},
        {"id": "c2", "type": "function", "function": {"name": "NoSuchTool", "arguments": "{}"}},
        {"id": "c3", "type": "function", "function": {"name": "", "arguments": "[1, 2]"}},
    ]
    bodies: list[bytes] = []

    def handle(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
        bodies.append(body)
        reply = (
            oa_body(message={"content": None, "tool_calls": calls})
            if len(bodies) == 1
            else oa_body()
        )
        conn.sendall(reply)

    with peer(handle) as p:
        proc, _ = run_p(tmp_path, provider_config(tmp_path, "openai", p, stream=False))
    assert proc.returncode == 0 and proc.stdout == "hi\n", proc.stderr
    tool_msgs = [m for m in json.loads(bodies[1])["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2", "c3"]
    assert all(m["content"].startswith("Error:") for m in tool_msgs), tool_msgs


def test_provider_holds_a_thousand_parallel_tool_calls_in_one_turn(
    norma: RunNorma, tmp_path: Path
) -> None:
    """Holds: 1,000 calls in one reply run as one batch and every one gets its result."""
    (tmp_path / "notes.txt").write_text("hello\n")
    calls = [(f"c{i}", "Read", {"file_path": "notes.txt"}) for i in range(1000)]
    with FakeProvider("openai", [Reply(calls=calls), Reply(text="read them all")]) as fake:
        cfg = tmp_path / "n.toml"
        cfg.write_text(fake.toml(api_key_env="FAKE_KEY"))
        proc = norma("--config", str(cfg), "run", "-p", "hi", env=KEY_ENV, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "read them all\n", proc.stderr
    got = fake.results(1)
    assert [r["id"] for r in got] == [f"c{i}" for i in range(1000)]
    assert all("hello" in r["text"] for r in got)


# ----------------------------------------------------------------------------- MCP
HOSTILE_STDIO = r"""
import json, os, sys
MODE = os.environ["MODE"]
out = sys.stdout.buffer

def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()

TOOLS = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in ("echo", "big")]
for line in sys.stdin.buffer:
    if not line.strip():
        continue
    req = json.loads(line)
    method, i = req.get("method"), req.get("id")
    if i is None:
        continue
    if method == "initialize":
        if MODE == "init_error_huge":
            send({"jsonrpc": "2.0", "id": i, "error": {"code": -1, "message": "nope " * 100000}})
            continue
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": req["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        if req["params"]["name"] == "big":
            text = "B" * int(os.environ.get("BIG", "0"))
        else:
            # chatty: junk lines, requests to the client, notifications, a stray answer
            out.write(b"not json\n\xff\xfe\n[1, 2]\n")
            for k in range(200):
                send({"jsonrpc": "2.0", "id": f"s{k}", "method": ("ping", "roots/list", "sampling/createMessage", "x/y")[k % 4], "params": {}})
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": k}})
            send({"jsonrpc": "2.0", "id": "nobody", "result": {}})
            text = "still here"
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no"}})
"""


def hostile_stdio(tmp_path: Path, mode: str, **table: Any) -> dict[str, Any]:
    script = tmp_path / "hostile_mcp.py"
    script.write_text(HOSTILE_STDIO)
    env = {"MODE": mode, **table.pop("env", {})}
    return {"command": PYTHON, "args": [str(script)], "env": env, **table}


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return "".join(
        json.dumps({"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": inp}) + "\n"
        for i, (n, inp) in enumerate(items)
    )


BAD_LISTINGS: dict[str, dict[str, Any]] = {
    "schema-type-5": {"name": "bad", "inputSchema": {"type": 5, "properties": []}},
    "schema-a-string": {"name": "bad", "inputSchema": "just a string"},
    "schema-without-type": {
        "name": "bad",
        "inputSchema": {"$ref": "#/$defs/a", "$defs": {"a": {}}},
    },
    "name-an-integer": {"name": 5, "inputSchema": {"type": "object"}},
}


@pytest.mark.parametrize("case", sorted(BAD_LISTINGS))
def test_mcp_a_malformed_tool_listing_fails_only_that_server(
    norma: RunNorma, tmp_path: Path, case: str
) -> None:
    """Sweep finding: the SDK's pydantic ValidationError from tools/list escapes open_and_list/ensure
    (they catch MCPError, ServerUnavailable, TimeoutError): the whole run dies with a
    multi-line 'internal error', no result printed, even for a built-in call in the batch."""
    listing = [BAD_LISTINGS[case], tool("echo")]
    cfg = write_config(
        tmp_path / "n.toml", {"s": scripted(tmp_path / "t.json", listing, timeout=5)}
    )
    (tmp_path / "a.txt").write_text("fine\n")
    batch = calls(("Read", {"file_path": "a.txt"}), ("mcp__s__echo", {"message": "x"}))
    proc = norma("--config", str(cfg), "run", "--calls", "-", stdin=batch, timeout=60)
    stderr_is_clean(proc.stderr)
    read, echo = results(proc.stdout)
    assert not read["is_error"] and echo["is_error"] and proc.returncode == 1
    assert "MCP server s" in proc.stderr


def test_mcp_run_p_survives_a_server_with_a_malformed_listing(
    norma: RunNorma, tmp_path: Path
) -> None:
    """Sweep finding: same escape: one MCP server with one bad tool definition ends `run -p` before the
    first model request ('norma: internal error: ValidationError …', 14 stderr lines)."""
    listing = [BAD_LISTINGS["schema-type-5"], tool("echo")]
    servers = {"s": scripted(tmp_path / "t.json", listing, timeout=5)}
    with FakeProvider("openai", [Reply(text="fine")]) as fake:
        cfg = write_config(tmp_path / "n.toml", servers, extra=fake.toml(api_key_env="FAKE_KEY"))
        proc = norma("--config", str(cfg), "run", "-p", "hi", env=KEY_ENV, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "fine\n", proc.stderr[:3000]
    stderr_is_clean(proc.stderr)


def http_mcp(initialize_reply: bytes) -> Handler:
    """A streamable-HTTP MCP endpoint that answers initialize with ``initialize_reply``."""

    def handle(conn: socket.socket, head: bytes, body: bytes, p: Peer) -> None:
        if not head.startswith(b"POST"):
            conn.sendall(response(b"405 Method Not Allowed", b""))
            return
        message = json.loads(body or b"{}")
        if message.get("id") is None:
            conn.sendall(response(b"202 Accepted", b""))
        elif message.get("method") == "initialize":
            conn.sendall(initialize_reply)
        else:
            conn.sendall(
                json_reply(
                    {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -1, "message": "no"}}
                )
            )

    return handle


@pytest.mark.parametrize(
    "reply",
    [
        response(b"200 OK", b"{not json", b"application/json"),
        response(b"200 OK", b"<html>log in first</html>", b"text/html"),
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/x\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=["invalid-json", "html-login-page", "redirect"],
)
def test_mcp_http_server_garbage_is_one_norma_line_never_a_traceback(
    norma: RunNorma, tmp_path: Path, reply: bytes
) -> None:
    """Sweep finding: the mcp SDK logs through the `logging` module with no handler configured, so
    Python's last-resort handler prints its messages — a full traceback for invalid JSON —
    to stderr; and the warning quotes the multi-line pydantic error whole."""
    with peer(http_mcp(reply)) as p:
        cfg = write_config(tmp_path / "n.toml", {"h": {"url": f"{p.url('/mcp')}", "timeout": 5}})
        proc = norma("--config", str(cfg), "run", "mcp__h__echo", "-i", "{}", timeout=60)
    assert proc.returncode == 1
    stderr_is_clean(proc.stderr)
    assert "MCP server h:" in proc.stderr


def test_mcp_a_servers_error_text_is_clipped_on_stderr(norma: RunNorma, tmp_path: Path) -> None:
    """Sweep finding: an initialize error's message is quoted whole: a 500 KB 'line' on stderr."""
    cfg = write_config(tmp_path / "n.toml", {"h": hostile_stdio(tmp_path, "init_error_huge")})
    proc = norma("--config", str(cfg), "run", "mcp__h__echo", "-i", "{}", timeout=60)
    assert proc.returncode == 1
    stderr_is_clean(proc.stderr)


def test_mcp_a_large_stdio_result_is_read_in_linear_time(tmp_path: Path) -> None:
    """Sweep finding: stdio.reader re-joins `buffer + chunk` for every 64 KB read of a line, so one
    big message costs O(n²): 60 MB takes ~30 s (200 MB never finishes within call_timeout)."""
    table = hostile_stdio(tmp_path, "big", env={"BIG": str(60_000_000)}, call_timeout=60)
    cfg = write_config(tmp_path / "n.toml", {"h": table})
    try:
        proc, _ = timed_cli(
            ["--config", str(cfg), "run", "mcp__h__big", "-i", "{}"], tmp_path, timeout=15
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a 60 MB MCP result was still being read after 15 s")
    assert proc.returncode == 0, proc.stderr
    assert results(proc.stdout)[0]["norma"]["spill"] is not None


def test_mcp_many_tools_are_admitted_in_linear_time(tmp_path: Path) -> None:
    """Sweep finding: McpHub._on_listing admits new tools with `n in added` on a list — O(n²): 60k
    tools take ~25 s after the listing arrived (100k: 63 s, past a 30 s `timeout`)."""
    listing = [tool(f"t{i}") for i in range(60_000)]
    cfg = write_config(
        tmp_path / "n.toml", {"s": scripted(tmp_path / "t.json", listing, timeout=20)}
    )
    try:
        proc, _ = timed_cli(
            ["--config", str(cfg), "run", "mcp__s__t7", "-i", '{"message": "x"}'],
            tmp_path,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("listing 60,000 MCP tools took more than 15 s")
    assert proc.returncode == 0, proc.stderr


def test_mcp_holds_a_chatty_server_still_answers(norma: RunNorma, tmp_path: Path) -> None:
    """Holds: junk lines, 800 server→client requests and notifications and an answer for an
    unknown id before the real answer: the call still gets it, stderr stays empty."""
    cfg = write_config(tmp_path / "n.toml", {"h": hostile_stdio(tmp_path, "chatty")})
    proc = norma("--config", str(cfg), "run", "mcp__h__echo", "-i", "{}", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "still here" in results(proc.stdout)[0]["content"][0]["text"]
    assert proc.stderr == ""
