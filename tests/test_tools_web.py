"""WebFetch against real HTTP servers on 127.0.0.1: the SSRF guard (direct and through
redirects), the allowlist, proxies that work and proxies that are down, caps, decoding.

Only loopback addresses are ever connected to. Address classes that live elsewhere (private
ranges, link-local, NAT64, ...) are checked at the guard level, which decides before any
connection is attempted.
"""

from __future__ import annotations

import gzip
import ipaddress
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import RunNorma, results

from norma_cli.config import load
from norma_cli.core.contract import CallContext, ToolCall
from norma_cli.errors import ConfigError
from norma_cli.net.ssrf import BlockedAddress, Guard, HostPort, blocked_reason
from norma_cli.runtime import Options, Runtime
from norma_cli.store.sqlite import Store
from norma_cli.tools.web import WebFetchTool

PAGE = """<!doctype html><html><head><title>Test page</title>
<style>body { color: red }</style><script>alert("no")</script></head>
<body><h1>Heading one</h1><p>First   paragraph with a <a href="/docs/x">relative link</a>.</p>
<ul><li>item a</li><li>item b</li></ul><noscript>hidden</noscript>
<h2>Second</h2><pre>  keep
    spacing</pre></body></html>"""


@dataclass
class Server:
    port: int
    hits: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


Route = Callable[[BaseHTTPRequestHandler, Server], None]


def serve(routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    state: dict[str, Server] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            srv = state["s"]
            srv.hits.append(self.path)
            srv.headers.append({k.lower(): v for k, v in self.headers.items()})
            route = routes.get(urlsplit(self.path).path) or routes.get("*")
            if route is None:
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"not here")
                return
            route(self, srv)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    state["s"] = Server(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["s"]
    finally:
        httpd.shutdown()
        httpd.server_close()


def reply(
    body: bytes, ctype: str = "text/html; charset=utf-8", status: int = 200, **headers: str
) -> Route:
    def route(h: BaseHTTPRequestHandler, srv: Server) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            h.send_header(k.replace("_", "-"), v)
        h.end_headers()
        h.wfile.write(body)

    return route


def redirect(h: BaseHTTPRequestHandler, srv: Server) -> None:
    target = parse_qs(urlsplit(h.path).query)["to"][0]
    h.send_response(302)
    h.send_header("Location", target)
    h.send_header("Content-Length", "0")
    h.end_headers()


def loop(h: BaseHTTPRequestHandler, srv: Server) -> None:
    h.send_response(301)
    h.send_header("Location", "/loop")
    h.send_header("Content-Length", "0")
    h.end_headers()


@pytest.fixture
def site() -> Iterator[Server]:
    big = b"<p>" + b"x" * 100_000 + b"</p>"
    bomb = gzip.compress(b"\0" * 20_000_000)
    yield from serve(
        {
            "/": reply(PAGE.encode()),
            "/json": reply(b'{"a": 1}', "application/json"),
            "/big": reply(big),
            "/gzip": reply(gzip.compress(PAGE.encode()), Content_Encoding="gzip"),
            "/bomb": reply(bomb, "text/plain", Content_Encoding="gzip"),
            "/latin1": reply("caf\u00e9".encode("latin-1"), "text/plain; charset=iso-8859-1"),
            "/meta": reply(
                '<html><head><meta charset="windows-1251"></head><body>\u043f\u0440\u0438\u0432\u0435\u0442</body></html>'.encode(
                    "cp1251"
                ),
                "text/html",
            ),
            "/nocharset": reply(b"ok \xff\xfe bytes", "text/plain"),
            "/png": reply(b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png"),
            "/missing": reply(b"<h1>Not found</h1>", status=404),
            "/redirect": redirect,
            "/loop": loop,
            "/final": reply(b"<p>landed</p>"),
        }
    )


@pytest.fixture
def victim() -> Iterator[Server]:
    """A loopback server nothing may reach: it is never allowlisted."""
    yield from serve({"*": reply(b"<p>internal secret</p>")})


def config(tmp_path: Path, *allow: str, **web: Any) -> Path:
    lines = [
        "[tools]",
        'builtin = ["WebFetch"]',
        "[web]",
        f"allow_hosts = {list(allow)!r}".replace("'", '"'),
    ]
    for k, v in web.items():
        lines.append(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}")
    path = tmp_path / "web.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def fetch(tmp_path: Path, url: str, *allow: str, tool_input: dict | None = None, **web: Any) -> Any:
    rt = Runtime.build(
        Options(
            cwd=tmp_path,
            config=config(tmp_path, *allow, **web),
            allow=("WebFetch",),
            with_store=False,
            interactive=False,
        )
    )
    try:
        return rt.executor.run(ToolCall("t", "WebFetch", {"url": url, **(tool_input or {})}))
    finally:
        rt.close()


def hp(srv: Server) -> str:
    return f"127.0.0.1:{srv.port}"


# ----------------------------------------------------------------------------- fetching
def test_html_becomes_readable_text(tmp_path: Path, site: Server) -> None:
    result = fetch(tmp_path, site.url("/"), hp(site))
    text = result.text()
    assert result.exit_code() == 0, text
    assert "Status: 200 OK" in text and "# Heading one" in text and "## Second" in text
    assert f"[relative link]({site.url('/docs/x')})" in text
    assert "- item a" in text and "First paragraph with" in text
    assert "alert" not in text and "color: red" not in text and "hidden" not in text
    assert "  keep\n    spacing" in text
    assert site.headers[0].get("user-agent", "").startswith("norma-webfetch")


def test_text_types_charsets_and_binary(tmp_path: Path, site: Server) -> None:
    assert '{"a": 1}' in fetch(tmp_path, site.url("/json"), hp(site)).text()
    assert "café" in fetch(tmp_path, site.url("/latin1"), hp(site)).text()
    assert "привет" in fetch(tmp_path, site.url("/meta"), hp(site)).text()
    assert "ok \ufffd\ufffd bytes" in fetch(tmp_path, site.url("/nocharset"), hp(site)).text()
    png = fetch(tmp_path, site.url("/png"), hp(site))
    assert png.exit_code() == 0 and "image/png not shown" in png.text()


def test_gzip_is_decoded_and_a_bomb_is_capped(tmp_path: Path, site: Server) -> None:
    assert "# Heading one" in fetch(tmp_path, site.url("/gzip"), hp(site)).text()
    bomb = fetch(tmp_path, site.url("/bomb"), hp(site), max_bytes=50_000)
    assert bomb.exit_code() == 0 and "Size: 50,000 bytes (cut at the byte limit" in bomb.text()


def test_byte_cap_config_and_input(tmp_path: Path, site: Server) -> None:
    capped = fetch(tmp_path, site.url("/big"), hp(site), max_bytes=1000)
    assert "Size: 1,000 bytes (cut" in capped.text()
    lower = fetch(
        tmp_path, site.url("/big"), hp(site), tool_input={"max_bytes": 10}, max_bytes=1000
    )
    assert "Size: 10 bytes (cut" in lower.text()
    higher = fetch(
        tmp_path, site.url("/big"), hp(site), tool_input={"max_bytes": 10**9}, max_bytes=1000
    )
    assert "Size: 1,000 bytes (cut" in higher.text()  # the input may only lower the cap


def test_error_status_is_an_error_result(tmp_path: Path, site: Server) -> None:
    result = fetch(tmp_path, site.url("/missing"), hp(site))
    assert (
        result.exit_code() == 1 and "Status: 404" in result.text() and "Not found" in result.text()
    )


def test_same_host_redirects_are_followed_and_loops_stop(tmp_path: Path, site: Server) -> None:
    result = fetch(tmp_path, site.url(f"/redirect?to={site.url('/final')}"), hp(site))
    assert (
        result.exit_code() == 0 and "landed" in result.text() and "Redirected from" in result.text()
    )
    looped = fetch(tmp_path, site.url("/loop"), hp(site), max_redirects=3)
    assert looped.exit_code() == 1 and "too many redirects (more than 3)" in looped.text()
    assert site.hits.count("/loop") == 4


def test_cross_host_redirect_goes_back_to_the_model(tmp_path: Path, site: Server) -> None:
    public = "http://93.184.216.34/page"  # checked as an address, never connected to
    result = fetch(tmp_path, site.url(f"/redirect?to={public}"), hp(site))
    assert result.exit_code() == 0
    assert f"redirects to another host: {public}" in result.text()


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1/", "javascript:alert(1)"]
)
def test_only_http_and_https(tmp_path: Path, url: str) -> None:
    result = fetch(tmp_path, url)
    assert result.exit_code() == 1


def test_ambiguous_urls_are_refused(tmp_path: Path, site: Server, victim: Server) -> None:
    for url in (
        f"http://127.0.0.1:{site.port}\\@127.0.0.1:{victim.port}/",
        f"http://127.0.0.1:{victim.port}\t/",
    ):
        result = fetch(tmp_path, url, hp(site))
        assert result.exit_code() == 1
    assert victim.hits == []


# ----------------------------------------------------------------------------- the SSRF guard
LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "localhost",
    "2130706433",
    "0x7f.1",
    "127.1",
    "017700000001",
    "0x7f000001",
    "0177.0.0.1",
    "127.000.000.001",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
]


def refused(text: str) -> bool:
    # httpx itself rejects some spellings (dotted quads with leading zeros) as invalid URLs.
    return "refused" in text or "invalid url" in text.lower()


def test_every_loopback_spelling_is_refused(tmp_path: Path, victim: Server) -> None:
    for host in LOOPBACK_SPELLINGS:
        result = fetch(tmp_path, f"http://{host}:{victim.port}/")
        assert result.exit_code() == 1 and refused(result.text()), (host, result.text())
    assert victim.hits == []


def test_every_spelling_is_refused_through_a_302_from_an_allowed_server(
    tmp_path: Path, site: Server, victim: Server
) -> None:
    for host in LOOPBACK_SPELLINGS:
        target = f"http://{host}:{victim.port}/latest/meta-data/"
        result = fetch(tmp_path, site.url(f"/redirect?to={target}"), hp(site))
        assert result.exit_code() == 1 and refused(result.text()), (host, result.text())
    assert victim.hits == []
    assert len(site.hits) == len(LOOPBACK_SPELLINGS)  # the allowed server was reached each time


def test_the_allowlist_admits_exactly_its_host_and_port(
    tmp_path: Path, site: Server, victim: Server
) -> None:
    assert fetch(tmp_path, site.url("/"), hp(site)).exit_code() == 0
    assert fetch(tmp_path, victim.url("/"), hp(site)).exit_code() == 1  # same host, other port
    assert fetch(tmp_path, site.url("/", host="localhost"), hp(site)).exit_code() == 1  # other name
    assert victim.hits == []


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("0.0.0.0", "'this network'"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("127.0.0.53", "loopback"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.2.1", "documentation"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique-local"),
        ("fd00:ec2::254", "unique-local"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "NAT64 form of 10.0.0.1"),
        ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"),
        ("2002:c0a8:101::1", "6to4 form of 192.168.1.1"),
        ("2002:7f00:1::", "6to4 form of 127.0.0.1"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("::8.8.8.8", "deprecated IPv4-compatible"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ("2001:db8::1", "documentation"),
        ("64:ff9b:1::1", "local-use NAT64"),
    ],
)
def test_blocked_address_classes(address: str, why: str) -> None:
    reason = blocked_reason(ipaddress.ip_address(address))
    assert reason is not None and why in reason
    with pytest.raises(BlockedAddress, match="refused"):
        Guard().check_host(address, 80)  # a literal: decided without resolving or connecting


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None
    assert Guard().check_host(address, 443) == [str(ipaddress.ip_address(address))]


@pytest.mark.parametrize(
    "spelling", ["0xa.1", "10.1", "167772161", "012.0.0.1", "0xA9.0xFE.0xA9.0xFE", "2852039166"]
)
def test_numeric_spellings_of_other_ranges(spelling: str) -> None:
    with pytest.raises(BlockedAddress, match="refused"):
        Guard().check_host(spelling, 80)


def test_allow_hosts_entries() -> None:
    assert HostPort.parse("127.0.0.1:8080") == HostPort("127.0.0.1", 8080)
    assert HostPort.parse("Intranet.Example.") == HostPort("intranet.example", None)
    assert HostPort.parse("[::1]:80") == HostPort("[::1]", 80)
    assert HostPort.parse("2130706433:80") == HostPort("127.0.0.1", 80)
    for bad in ("http://x", "a:b", "x:0", "x:70000", "a@b", "[::1"):
        with pytest.raises(ValueError):
            HostPort.parse(bad)
    guard = Guard((HostPort.parse("127.0.0.1:8080"),))
    assert guard.allowed("127.0.0.1", 8080) and guard.allowed("0x7f.1", 8080)
    assert not guard.allowed("127.0.0.1", 8081) and not guard.allowed("localhost", 8080)


# ----------------------------------------------------------------------------- proxies
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_proxy_that_is_down_is_an_error_not_a_direct_connection(
    tmp_path: Path, site: Server
) -> None:
    dead = free_port()
    result = fetch(tmp_path, site.url("/"), hp(site), proxy=f"http://127.0.0.1:{dead}")
    assert result.exit_code() == 1 and "proxy" in result.text()
    assert site.hits == []


@pytest.fixture
def proxy() -> Iterator[Server]:
    """A forward proxy (absolute-form GET) on loopback."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def forward(h: BaseHTTPRequestHandler, srv: Server) -> None:
        with opener.open(h.path) as upstream:
            body = upstream.read()
            reply(body, upstream.headers.get("Content-Type", "text/plain"))(h, srv)

    yield from serve({"*": forward})


def test_a_configured_proxy_carries_the_request(
    tmp_path: Path, site: Server, proxy: Server
) -> None:
    result = fetch(tmp_path, site.url("/json"), hp(site), proxy=f"http://127.0.0.1:{proxy.port}")
    assert result.exit_code() == 0 and '{"a": 1}' in result.text()
    assert proxy.hits == [site.url("/json")] and site.hits == ["/json"]


def test_a_proxy_does_not_carry_requests_the_guard_refuses(
    tmp_path: Path, proxy: Server, victim: Server
) -> None:
    result = fetch(tmp_path, victim.url("/"), proxy=f"http://127.0.0.1:{proxy.port}")
    assert result.exit_code() == 1 and "refused" in result.text()
    assert proxy.hits == [] and victim.hits == []


def test_environment_proxies_are_ignored(
    tmp_path: Path, site: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = free_port()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    monkeypatch.setenv("NO_PROXY", "")
    assert fetch(tmp_path, site.url("/json"), hp(site)).exit_code() == 0


# ----------------------------------------------------------------------------- config, records, lint
@pytest.mark.parametrize(
    ("web", "message"),
    [
        ({"proxy": "socks5://127.0.0.1:1080"}, "web.proxy"),
        ({"ca_bundle": "/no/such/ca.pem"}, "no such file"),
    ],
)
def test_bad_web_settings_are_startup_errors(tmp_path: Path, web: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Runtime.build(Options(cwd=tmp_path, config=config(tmp_path, **web), with_store=False))
    with pytest.raises(ConfigError, match="allow_hosts"):
        Runtime.build(Options(cwd=tmp_path, config=config(tmp_path, "http://x/"), with_store=False))


def test_bad_web_settings_exit_2_from_the_cli(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(tmp_path, "not a host:x")
    proc = norma("--config", str(cfg), "run", "WebFetch", "--arg", "url=http://127.0.0.1/")
    assert proc.returncode == 2 and "allow_hosts" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_one_shot_needs_a_rule_and_honours_domain_rules(
    norma: RunNorma, tmp_path: Path, site: Server
) -> None:
    cfg = config(tmp_path, hp(site))
    url = site.url("/json")
    asked = norma("--config", str(cfg), "run", "WebFetch", "--arg", f"url={url}")
    assert asked.returncode == 3  # not read-only: no rule, nobody to ask → denied
    allowed = norma(
        "--config",
        str(cfg),
        "--allow",
        "WebFetch(domain:127.0.0.1)",
        "run",
        "WebFetch",
        "--arg",
        f"url={url}",
    )
    assert allowed.returncode == 0, allowed.stderr
    assert '{"a": 1}' in results(allowed.stdout)[0]["content"][0]["text"]
    other = norma(
        "--config",
        str(cfg),
        "--allow",
        "WebFetch(domain:example.com)",
        "run",
        "WebFetch",
        "--arg",
        f"url={url}",
    )
    assert other.returncode == 3


def test_each_request_is_recorded_as_traffic(tmp_path: Path, site: Server) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'n.db'}")
    cfg = load(tmp_path, config(tmp_path, hp(site)))
    session = SimpleNamespace(config=cfg, store=store)
    ctx = CallContext(
        session_id="sess", cwd=tmp_path, roots=(tmp_path,), tool_use_id="tu1", session=session
    )
    out = WebFetchTool().call({"url": site.url(f"/redirect?to={site.url('/json')}")}, ctx)
    assert not out.is_error
    refused = WebFetchTool().call({"url": f"http://127.0.0.1:{free_port()}/"}, ctx)
    assert refused.is_error
    rows = store.query(
        "SELECT method, url, status, response_bytes, error, tool, session_id, tool_use_id FROM traffic ORDER BY created_at"
    )
    store.close()
    assert [(r["status"], r["tool"], r["session_id"], r["tool_use_id"]) for r in rows] == [
        (302, "WebFetch", "sess", "tu1"),
        (200, "WebFetch", "sess", "tu1"),
        (None, "WebFetch", "sess", "tu1"),
    ]
    assert rows[1]["response_bytes"] == 8 and "refused" in rows[2]["error"]


def test_metadata_and_schema() -> None:
    from norma_cli.lint import Linter

    tool = WebFetchTool()
    assert not tool.read_only and tool.concurrency_safe and tool.requires_approval
    report = Linter(("openai", "anthropic")).lint_definitions([tool.definition()])
    assert not report.errors, report.errors


# ----------------------------------------------------------------------------- TLS
@pytest.fixture
def tls_site(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """An HTTPS server on loopback with a self-signed certificate for 127.0.0.1."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    for srv in serve({"/": reply(b"<p>over tls</p>")}, tls=ctx):
        yield srv, cert


def test_tls_is_verified_with_the_configured_ca_bundle(
    tmp_path: Path, tls_site: tuple[Server, Path]
) -> None:
    srv, cert = tls_site
    url = f"https://127.0.0.1:{srv.port}/"
    untrusted = fetch(tmp_path, url, hp(srv))
    assert untrusted.exit_code() == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.text()
    trusted = fetch(tmp_path, url, hp(srv), ca_bundle=str(cert))
    assert trusted.exit_code() == 0 and "over tls" in trusted.text()


def test_a_one_shot_fetch_is_recorded_in_the_store(
    norma: RunNorma, tmp_path: Path, site: Server, isolated_env: Path
) -> None:
    import sqlite3

    cfg = config(tmp_path, hp(site))
    proc = norma(
        "--config",
        str(cfg),
        "--allow",
        "WebFetch",
        "run",
        "WebFetch",
        "--arg",
        f"url={site.url('/json')}",
    )
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(isolated_env / "data" / "norma.db")
    rows = db.execute("SELECT method, url, status, response_bytes, tool FROM traffic").fetchall()
    db.close()
    assert rows == [("GET", site.url("/json"), 200, 8, "WebFetch")]
