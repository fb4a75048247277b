"""Provider reads under hostile peers, in-process: one deadline per attempt (enforced in the
transport's network streams), byte caps on replies and error bodies, SSE line splitting from raw
bytes, and usage figures that cannot defeat the token budget. The CLI-level cases (exit codes,
one stderr line) are in test_hostile_network.py; these pin the pieces underneath."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from norma_cli.agent.messages import Message, Text
from norma_cli.agent.providers.anthropic import AnthropicProvider
from norma_cli.agent.providers.base import (
    MAX_ERROR_BODY,
    ModelRequest,
    ProviderError,
    ProviderSettings,
    token_count,
)
from norma_cli.agent.providers.openai import OpenAIProvider
from norma_cli.agent.providers.sse import lines

Handler = Callable[[socket.socket, threading.Event], None]


@contextmanager
def server(*handlers: Handler) -> Iterator[str]:
    """A raw HTTP peer on 127.0.0.1: the n-th connection's request is read (head and
    Content-Length body), then ``handlers[n]`` (the last repeats) writes what it likes."""
    stop = threading.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    count = [0]

    def serve(conn: socket.socket, handler: Handler) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")), 0,
                )  # fmt: skip
                while len(body) < length:
                    body += conn.recv(65536)
                handler(conn, stop)
            except OSError:
                pass  # the client hung up: what these peers are for

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            handler = handlers[min(count[0], len(handlers) - 1)]
            count[0] += 1
            threading.Thread(target=serve, args=(conn, handler), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        sock.close()


def head(status: str, ctype: str, length: int | None = None) -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{size}\r\n".encode()


def answer(text: str = "hi", usage: object = None) -> Handler:
    body = json.dumps({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 3, "completion_tokens": 2},
    }).encode()  # fmt: skip

    def handle(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head("200 OK", "application/json", len(body)) + body)

    return handle


def keepalives(conn: socket.socket, stop: threading.Event) -> None:
    """An SSE stream that is never silent and does not end (for 10 s: without the deadline a
    test fails on its timing instead of hanging)."""
    conn.sendall(head("200 OK", "text/event-stream"))
    ends = time.monotonic() + 10
    while not stop.wait(0.1) and time.monotonic() < ends:
        conn.sendall(b": keep-alive\n\n")


def provider(url: str, cls: type[OpenAIProvider] | type[AnthropicProvider] = OpenAIProvider, *,
             timeout: float = 1.0, max_retries: int = 0,
             stream: bool = True) -> OpenAIProvider | AnthropicProvider:  # fmt: skip
    openai = cls is OpenAIProvider
    settings = ProviderSettings(
        name="p", kind="openai" if openai else "anthropic", model="m",
        base_url=f"{url}/v1" if openai else url, timeout=timeout, max_retries=max_retries,
        stream=stream,
    )  # fmt: skip
    return cls(settings)


REQUEST = ModelRequest(system="", messages=[Message("user", [Text("hi")])], tools=[])


def test_one_deadline_bounds_a_stream_that_is_never_silent() -> None:
    """Each keep-alive comes well within the per-read timeout; the attempt's deadline ends it."""
    with server(keepalives) as url:
        p = provider(url)
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            p.complete(REQUEST)
        took = time.monotonic() - started
        p.close()
    assert took < 8, took  # timeout 1 s; keep-alives would go on for ever
    assert "(HTTP 200) did not end within 1s" in str(caught.value)


def test_the_deadline_is_per_attempt_and_ends_with_it() -> None:
    """A timed-out attempt leaves no deadline behind: the same client (its pool, its streams)
    then answers normally, twice over one kept-alive connection as well as a new one."""
    with server(keepalives, answer("first"), answer("second")) as url:
        p = provider(url, max_retries=1)
        started = time.monotonic()
        reply = p.complete(REQUEST)  # attempt 1 times out after 1 s, attempt 2 answers
        assert reply.message.text() == "first" and time.monotonic() - started < 8
        time.sleep(1.2)  # past the first attempt's deadline: a leaked one would fail now
        assert p.complete(REQUEST).message.text() == "second"
        p.close()


def test_a_trickled_reply_head_is_bounded_too() -> None:
    def trickle(conn: socket.socket, stop: threading.Event) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            if stop.wait(0.2):
                return
            conn.sendall(bytes([byte]))

    with server(trickle) as url:
        p = provider(url)
        started = time.monotonic()
        with pytest.raises(ProviderError, match=r"no reply from .* within 1s"):
            p.complete(REQUEST)
        assert time.monotonic() - started < 8  # the trickled head takes 20 s
        p.close()


def test_a_reply_past_the_cap_is_cut_not_buffered() -> None:
    """A JSON body that never ends stops at the cap (64 MiB): one line, and no retry of it."""

    def endless(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head("200 OK", "application/json") + b'{"a": "')
        while not stop.is_set():
            conn.sendall(b"z" * (1 << 20))

    with server(endless) as url:
        p = provider(url, stream=False, timeout=60, max_retries=3)
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            p.complete(REQUEST)
        p.close()
    message = str(caught.value)
    assert "is over 64 MiB; norma cut it off there" in message and "\n" not in message
    assert time.monotonic() - started < 30  # not retried (a retry would read it all again)


def test_an_error_body_is_read_up_to_its_cap_and_quoted_clipped() -> None:
    """A 400 with a 20 MiB body: the message quotes a clipped piece of it, on one line."""
    size = 20 << 20

    def huge_error(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head("400 Bad Request", "text/plain", size))
        sent = 0
        while sent < size and not stop.is_set():
            conn.sendall(b"no\n" * 21845)
            sent += 65535

    with server(huge_error) as url:
        p = provider(url, timeout=30)
        with pytest.raises(ProviderError) as caught:
            p.complete(REQUEST)
        p.close()
    message = str(caught.value)
    assert message.startswith("provider p: HTTP 400 from ") and "no no no" in message
    assert "\n" not in message and len(message) < MAX_ERROR_BODY + 200


@pytest.mark.parametrize("cls", [OpenAIProvider, AnthropicProvider], ids=["openai", "anthropic"])
def test_a_reply_of_the_wrong_shape_is_a_provider_error_naming_the_endpoint(
    cls: type[OpenAIProvider] | type[AnthropicProvider],
) -> None:
    body = b'{"choices": [{"message": "hi"}], "content": [5]}'

    def wrong(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head("200 OK", "application/json", len(body)) + body)

    with server(wrong) as url:
        p = provider(url, cls, stream=False)
        with pytest.raises(ProviderError) as caught:
            p.complete(REQUEST)
        p.close()
    message = str(caught.value)
    assert message.startswith(f"provider p: reply from {p.endpoint()} is not what a {p.kind} ")
    assert "AttributeError" in message and "\n" not in message


def test_usage_figures_are_finite_non_negative_counts() -> None:
    assert [token_count(v) for v in (7, 7.9, 0, 1e3)] == [7, 7, 0, 1000]
    bad: tuple[object, ...] = (
        -1_000_000,
        -0.5,
        float("inf"),
        float("-inf"),
        float("nan"),
        "12",
        [1],
        None,
        True,
        {},
    )
    assert [token_count(v) for v in bad] == [0] * len(bad)
    with server(answer(usage={"prompt_tokens": -1_000_000, "completion_tokens": 5})) as url:
        p = provider(url, stream=False)
        usage = p.complete(REQUEST).usage
        p.close()
    assert (usage.input_tokens, usage.output_tokens) == (0, 5)


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\r", b"\nb\rc\n", b"d"], ["a", "b", "c", "d"]),  # CRLF split across chunks, bare CR
        ([b"a", b"b", b"c\n\n", b"x\r"], ["abc", "", "x"]),  # one line in pieces, CR at the end
        ([b"\xe2\x80", b"\xa8x\f\n"], ["\u2028x\f"]),  # U+2028 (split) and FF are not line ends
        ([b"ok\n\xe2"], ["ok", "\ufffd"]),  # a sequence cut off by the end
        ([], []),
    ],
)
def test_sse_lines_split_at_the_standard_line_ends_only(
    chunks: list[bytes], expected: list[str]
) -> None:
    assert list(lines(chunks)) == expected
