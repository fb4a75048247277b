"""The guarded web client and the HTML-to-text conversion against hostile input, through their
public surface (``WebClient.request``, ``decode``, ``html_to_text``) with real sockets on
127.0.0.1. The end-to-end WebFetch cases live in test_hostile_network.py; these pin the pieces
those depend on: one deadline for a whole request (redirects included), a broken body that is a
recorded WebError, charsets that are not text codecs, and how ``<a>`` and line breaks render.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from norma_cli.net.client import WebClient, WebError, WebSettings
from norma_cli.net.html_text import decode, html_to_text
from norma_cli.net.ssrf import BlockedAddress, HostPort

Handler = Callable[[socket.socket, bytes], None]


@contextmanager
def server(handler: Handler) -> Iterator[tuple[int, list[bytes], threading.Event]]:
    """A raw TCP server on 127.0.0.1: reads each request head, then ``handler(conn, head)``.
    Yields the port, the heads seen and the stop event handlers wait on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    heads: list[bytes] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                heads.append(data)
                handler(conn, data)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(sock.getsockname()[1]), heads, stop
    finally:
        stop.set()
        sock.close()


def client(port: int | None, rows: list[dict[str, Any]], timeout: float = 30.0) -> WebClient:
    allow = (HostPort.parse(f"127.0.0.1:{port}"),) if port is not None else ()
    return WebClient(WebSettings(allow_hosts=allow, timeout=timeout), record=rows.append)


# ----------------------------------------------------------------------------- deadline
def test_one_deadline_covers_every_redirect_hop() -> None:
    """Each hop trickles its head in well under the 2 s timeout per read, and takes ~1.2 s;
    five hops would take ~6 s if each hop (or each read) had its own timeout."""
    stop_flag: list[threading.Event] = []

    def slow_redirect(conn: socket.socket, head: bytes) -> None:
        hop = int(head.split(b" ", 2)[1].strip(b"/") or b"0")
        reply = f"HTTP/1.1 302 Found\r\nLocation: /{hop + 1}\r\nContent-Length: 0\r\n\r\n"
        for half in (reply[:10], reply[10:]):
            if stop_flag[0].wait(0.6):
                return
            conn.sendall(half.encode())

    with server(slow_redirect) as (port, heads, stop):
        stop_flag.append(stop)
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        with pytest.raises(WebError, match="timed out after 2 s"):
            client(port, rows, timeout=2).request(
                "GET", f"http://127.0.0.1:{port}/0", follow=lambda a, b: True
            )
        took = time.monotonic() - started
    assert took < 4.8, f"a 2 s timeout over redirects took {took:.1f} s"  # was about 6 s
    assert 1 <= len(heads) <= 3  # it did follow redirects, and stopped when time was up
    assert rows[-1]["error"] == "timed out after 2 s"


def test_the_guard_still_refuses_before_connecting() -> None:
    """Wrapping connections for the deadline must not bypass the SSRF check: without an
    allow_hosts entry, 127.0.0.1 is refused and nothing reaches the server."""
    with server(lambda conn, head: conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")) as (port, heads, _):
        rows: list[dict[str, Any]] = []
        with pytest.raises(BlockedAddress, match="loopback"):
            client(None, rows).request("GET", f"http://127.0.0.1:{port}/")
    assert heads == []
    assert rows and rows[0]["status"] is None and "loopback" in rows[0]["error"]


# ----------------------------------------------------------------------------- broken bodies
@pytest.mark.parametrize(
    "reply, error",
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial",
            "RemoteProtocolError",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n",
            "RemoteProtocolError",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!",
            "could not be decoded",
        ),
    ],
    ids=["closed-mid-body", "bad-chunk", "bad-gzip"],
)
def test_a_body_that_breaks_off_is_a_recorded_web_error(reply: bytes, error: str) -> None:
    with server(lambda conn, head: conn.sendall(reply)) as (port, _, _):
        rows: list[dict[str, Any]] = []
        url = f"http://127.0.0.1:{port}/page"
        with pytest.raises(WebError) as caught:
            client(port, rows).request("GET", url)
    message = str(caught.value)
    assert message.startswith(f"GET {url}: ") and error in message
    assert "\n" not in message
    [row] = rows
    assert row["status"] == 200 and row["bytes"] == 0 and error in row["error"]


def test_a_body_that_trickles_past_the_deadline_times_out() -> None:
    def trickle(conn: socket.socket, head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            if stop.wait(0.2):
                return
            conn.sendall(b"z")

    with server(trickle) as (port, _, stop):
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        with pytest.raises(WebError, match="timed out"):
            client(port, rows, timeout=1).request("GET", f"http://127.0.0.1:{port}/")
        assert time.monotonic() - started < 4
    assert rows[-1]["status"] == 200 and "timed out" in rows[-1]["error"]


# ----------------------------------------------------------------------------- charsets
@pytest.mark.parametrize(
    "charset", ["zlib", "base64", "rot13", "hex", "undefined", "idna", "no-such-charset"]
)
def test_a_declared_charset_that_cannot_decode_text_falls_back_to_utf8(charset: str) -> None:
    assert decode("café".encode(), f"text/plain; charset={charset}", html=False) == (
        "café",
        "utf-8",
    )


def test_a_meta_charset_that_is_not_a_text_codec_falls_back_to_utf8() -> None:
    body = '<meta charset="base64"><p>café</p>'.encode()
    assert decode(body, "text/html", html=True) == (body.decode(), "utf-8")


def test_a_real_declared_charset_is_still_used() -> None:
    assert decode("café".encode("latin-1"), "text/plain; charset=ISO-8859-1", html=False) == (
        "café",
        "iso8859-1",
    )


# ----------------------------------------------------------------------------- html to text
def test_a_new_link_closes_the_open_one() -> None:
    page = '<p><a href="/x">one <a href="/y">two</a> after</p>'
    assert html_to_text(page, "http://h/") == "[one](http://h/x)[two](http://h/y) after"


def test_nested_links_and_stray_end_tags_render_once() -> None:
    page = "<a href=/a>" * 50 + "t" + "</a>" * 50 + " tail"
    assert html_to_text(page, "http://h/") == "[t](http://h/a) tail"


@pytest.mark.parametrize(
    "page, text",
    [
        ("<p>a</p><br><br><br><p>b</p>", "a\n\nb"),
        ("a<br>b<br><br>c", "a\nb\nc"),
        ("<pre>x\n\n</pre><br><p>y</p>", "x\n\ny"),
        ("<h1>T</h1><ul><li>one</li><li>two</li></ul>", "# T\n\n- one\n- two"),
    ],
)
def test_line_breaks_do_not_stack(page: str, text: str) -> None:
    assert html_to_text(page) == text
