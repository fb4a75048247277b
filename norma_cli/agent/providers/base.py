"""What every provider shares: settings, request and reply types, and the HTTP exchange with
retries (429 and 5xx, honouring ``Retry-After``) and a request timeout.

Each attempt has ONE deadline, ``timeout`` seconds for the whole reply (connect, head, body): the
transport's connections read and write against the time left, so a peer that trickles bytes or
sends keep-alives forever cannot hold a run. A reply is read as bytes under a size cap, and a
reply the parser cannot make sense of is a one-line ProviderError, never a traceback.

A provider turns a ``ModelRequest`` (system prompt, messages, tool specs) into a ``ModelReply``
(assistant message, stop reason, token usage). The two HTTP kinds (``openai.py``,
``anthropic.py``) subclass ``HttpProvider`` and only translate the wire format; a plugin kind
may implement ``complete`` any way it likes.

The API key is read from the environment variable ``api_key_env`` names, sent only in an auth
header, and redacted (``secrets``) from every error text and record norma writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from norma_cli.agent.messages import Message
from norma_cli.core.record import field, record
from norma_cli.errors import NormaError

if TYPE_CHECKING:
    import httpx

    from norma_cli.store.sqlite import Store

DEFAULT_TIMEOUT = 300.0
DEFAULT_MAX_RETRIES = 4
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
# A server asking us to come back later than this is treated as a refusal, not a pause: a CI
# job must not sit for an hour on a rate limit.
MAX_RETRY_AFTER_S = 60.0
MAX_ERROR_BODY = 1000  # characters of an error body quoted in the one-line message
# A whole reply is cut (a ProviderError) past this many bytes: a model's reply is kilobytes, and
# a peer that never stops sending must not be buffered until memory runs out.
MAX_REPLY_BYTES = 64 << 20
# An error body is only quoted, clipped: reading more than this of it is pointless.
MAX_ERROR_BODY_BYTES = 1 << 20
# What a parser raises on JSON of the wrong shape (a string where an object belongs, an index
# that is not a number, nesting too deep, Infinity where an int belongs). Caught around parsing
# as a whole, so a new wire field needs no try of its own to keep a peer's reply from becoming
# an internal error.
MALFORMED = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError,
             OverflowError)  # fmt: skip

# Called with each piece of streamed text (progress display); may be None.
DeltaSink = Callable[[str], None] | None


class ProviderError(NormaError):
    """The model endpoint failed (after retries): the run ends with exit 1."""

    exit_code = 1


@record
class ProviderSettings:
    """One ``[providers.NAME]`` table, with ``--model`` applied."""

    name: str
    kind: str
    model: str
    base_url: str = ""
    api_key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    max_tokens: int | None = None
    stream: bool = True
    max_retries: int = DEFAULT_MAX_RETRIES

    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""


@record
class ToolSpec:
    """A tool as a model is shown it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@record
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int | None = None


@record
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens

    def to_json(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total,
        }


@record
class ModelReply:
    message: Message  # role assistant: text and tool_use blocks
    stop_reason: str = "end_turn"  # end_turn | tool_use | max_tokens | ... (as the wire said)
    usage: Usage = field(default_factory=Usage)


class Provider:
    """The interface the loop calls. ``complete`` raises ProviderError when it has no reply."""

    name: str = ""
    model: str = ""

    def complete(self, request: ModelRequest, on_delta: DeltaSink = None) -> ModelReply:
        raise NotImplementedError


class RetryableError(Exception):
    """An attempt that may be repeated: 429, 5xx, a dropped connection, a timeout."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class HttpProvider(Provider):
    """An endpoint reached over httpx (imported on first use)."""

    kind = ""

    def __init__(self, settings: ProviderSettings, *, store: Store | None = None,
                 session_id: str | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.name = settings.name
        self.model = settings.model
        self.store = store
        self.session_id = session_id
        self._key = settings.api_key()
        self._client: httpx.Client | None = None

    # ------------------------------------------------------------------ subclass seams
    def endpoint(self) -> str:
        raise NotImplementedError

    def auth_headers(self, key: str) -> dict[str, str]:
        raise NotImplementedError

    def extra_headers(self) -> dict[str, str]:
        """Headers the wire format needs (a version header); ``[providers] headers`` win."""
        return {}

    def payload(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, body: Any) -> ModelReply:
        raise NotImplementedError

    def parse_stream(self, lines: Iterator[str], on_delta: DeltaSink) -> ModelReply:
        raise NotImplementedError

    # ------------------------------------------------------------------ the exchange
    @property
    def secrets(self) -> tuple[str, ...]:
        return (self._key,) if self._key else ()

    def redact(self, text: str) -> str:
        from norma_cli.store.records import redact

        return redact(text, self.secrets)

    def complete(self, request: ModelRequest, on_delta: DeltaSink = None) -> ModelReply:
        stream = self.settings.stream
        payload = self.payload(request, stream)
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        headers = {
            "content-type": "application/json",
            **self.extra_headers(),
            **self.settings.headers,
        }
        headers.update(self.auth_headers(self._key) if self._key else {})
        headers["accept"] = "text/event-stream" if stream else "application/json"
        attempts = self.settings.max_retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                reply = self._attempt(body, headers, stream, on_delta)
            except RetryableError as exc:
                last = self.redact(str(exc))
                if attempt == attempts:
                    break
                wait = self._wait(attempt, exc.retry_after)
                if wait is None:
                    self._record_llm(request, payload, None, last)
                    raise ProviderError(
                        f"provider {self.name}: {last}; the server asks to retry after "
                        f"{exc.retry_after:g}s (more than {MAX_RETRY_AFTER_S:g}s), giving up"
                    ) from None
                time.sleep(wait)
                continue
            except ProviderError as exc:  # not worth repeating (4xx, an unreadable reply)
                self._record_llm(request, payload, None, str(exc))
                raise
            self._record_llm(request, payload, reply, None)
            return reply
        self._record_llm(request, payload, None, last)
        plural = "s" if attempts != 1 else ""
        raise ProviderError(
            f"provider {self.name}: {last} (gave up after {attempts} attempt{plural})"
        )

    @staticmethod
    def _wait(attempt: int, retry_after: float | None) -> float | None:
        if retry_after is not None:
            return None if retry_after > MAX_RETRY_AFTER_S else max(0.0, retry_after)
        backoff = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
        return backoff * (0.75 + random.random() / 2)  # jitter: clients do not retry in step

    def _http(self) -> httpx.Client:
        if self._client is None:
            import httpx

            timeout = httpx.Timeout(self.settings.timeout, connect=min(self.settings.timeout, 30.0))
            self._client = httpx.Client(timeout=timeout, transport=_deadline_transport())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _attempt(
        self, body: bytes, headers: dict[str, str], stream: bool, on_delta: DeltaSink
    ) -> ModelReply:
        import httpx

        url = self.endpoint()
        started = time.perf_counter()
        status: int | None = None
        meter = _Meter()
        # A context variable, not an attribute: subagents may share this provider from threads.
        deadline = _DEADLINE.set(time.monotonic() + self.settings.timeout)
        failure: RetryableError | ProviderError
        try:
            with self._http().stream("POST", url, content=body, headers=headers) as response:
                status = response.status_code
                if status != 200:
                    raise self._refusal(status, response, meter)
                reply = self._read_reply(response, meter, stream, on_delta)
        except httpx.TimeoutException:
            if status is None:
                error = f"no reply from {url} within {self.settings.timeout:g}s"
            else:  # the head came, the body did not finish (an SSE stream of keep-alives)
                error = f"the reply from {url} (HTTP {status}) did not end within {self.settings.timeout:g}s"
            failure = RetryableError(error)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__} talking to {url}: {exc}"
            failure = RetryableError(error)
        except StreamError as exc:
            error = f"stream from {url} failed: {exc}"
            failure = (
                RetryableError(error)
                if exc.retryable
                else ProviderError(f"provider {self.name}: {self.redact(error)}")
            )
        except ReplyTooLarge:
            # Not retried: the same request would most likely get the same endless reply.
            error = (
                f"the reply from {url} is over {MAX_REPLY_BYTES >> 20} MiB; norma cut it off there"
            )
            failure = ProviderError(f"provider {self.name}: {error}")
        except (RetryableError, ProviderError) as exc:  # an error status, an unreadable reply
            error, failure = str(exc), exc
        else:
            self._record_traffic(body, status, meter.count, meter.sha256.hexdigest(), started, None)
            return reply
        finally:
            _DEADLINE.reset(deadline)
        digest = meter.sha256.hexdigest() if meter.count else None
        self._record_traffic(body, status, meter.count, digest, started, error)
        raise failure from None

    def _refusal(
        self, status: int, response: httpx.Response, meter: _Meter
    ) -> RetryableError | ProviderError:
        """What an error status means: 429 and 5xx may be retried, the rest may not."""
        raw = b"".join(meter.chunks(response.iter_bytes(), MAX_ERROR_BODY_BYTES, cut=True))
        message = self._http_error(status, raw)
        if status == 429 or status >= 500:
            return RetryableError(message, retry_after_seconds(response.headers.get("retry-after")))
        return ProviderError(f"provider {self.name}: {message}")

    def _read_reply(
        self, response: httpx.Response, meter: _Meter, stream: bool, on_delta: DeltaSink
    ) -> ModelReply:
        from norma_cli.agent.providers import sse

        url = self.endpoint()
        chunks = meter.chunks(response.iter_bytes(), MAX_REPLY_BYTES)
        try:
            if stream and "text/event-stream" in response.headers.get("content-type", ""):
                return self.parse_stream(sse.lines(chunks), on_delta)
            # A server that ignores stream=true answers with one JSON body.
            raw = b"".join(chunks)
            try:
                data = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                text = raw[: 4 * MAX_ERROR_BODY].decode("utf-8", "replace")
                what = "JSON nested too deep" if isinstance(exc, RecursionError) else "not JSON"
                raise ProviderError(
                    f"provider {self.name}: reply from {url} is {what}: "
                    f"{self.redact(_clip(text, 300))}"
                ) from None
            return self.parse(data)
        except MALFORMED as exc:
            detail = _clip(f"{type(exc).__name__}: {exc}", 200)
            raise ProviderError(
                f"provider {self.name}: reply from {url} is not what a {self.kind} endpoint "
                f"sends ({self.redact(detail)})"
            ) from None

    def _http_error(self, status: int, raw: bytes) -> str:
        text = raw.decode("utf-8", "replace")
        detail = text
        try:
            data = json.loads(text)
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict) and err.get("message"):
                detail = str(err["message"])
            elif isinstance(err, str):
                detail = err
        except (ValueError, RecursionError):
            pass
        return self.redact(f"HTTP {status} from {self.endpoint()}: {_clip(detail)}")

    # ------------------------------------------------------------------ records (SPEC §10)
    def _record_traffic(self, body: bytes, status: int | None, received: int, response_sha256: str | None,
                        started: float, error: str | None) -> None:  # fmt: skip
        if self.store is None:
            return
        self.store.record_traffic(
            method="POST", url=self.endpoint(), status=status, request_bytes=len(body),
            response_bytes=received, request_sha256=hashlib.sha256(body).hexdigest(),
            response_sha256=response_sha256, duration_ms=(time.perf_counter() - started) * 1000,
            error=self.redact(error) if error else None, tool="agent", session_id=self.session_id,
        )  # fmt: skip

    def _record_llm(self, request: ModelRequest, payload: dict[str, Any], reply: ModelReply | None,
                    error: str | None) -> None:  # fmt: skip
        if self.store is None:
            return
        # The messages themselves are in the transcript and the messages table; repeating the
        # whole conversation in every record would grow the store with the square of its length.
        summary = {
            "model": self.model,
            "stream": self.settings.stream,
            "messages": len(request.messages),
            "tools": [t.name for t in request.tools],
            "max_tokens": payload.get("max_tokens"),
        }
        response = None
        if reply is not None:
            response = json.dumps(
                {"message": reply.message.to_json(), "stop_reason": reply.stop_reason,
                 "usage": reply.usage.to_json()}, ensure_ascii=False)  # fmt: skip
        self.store.record_llm(
            purpose="agent", provider=f"{self.name} ({self.kind})", model=self.model, url=self.endpoint(),
            request=summary, response=response, status=200 if reply is not None else None, error=error,
            secrets=self.secrets, session_id=self.session_id,
        )  # fmt: skip


class StreamError(Exception):
    """A stream that broke off or carried an error event."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ReplyTooLarge(Exception):
    """A reply body went past its byte cap."""


class _Meter:
    """Size and sha256 of a response body as it is read (for the traffic record), under a cap."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.count = 0

    def chunks(self, chunks: Iterable[bytes], cap: int, *, cut: bool = False) -> Iterator[bytes]:
        """The body's chunks; past ``cap`` bytes ReplyTooLarge, or with ``cut`` a quiet end
        (an error body is only quoted, so its first megabyte says all it will)."""
        import httpx

        for chunk in chunks:
            # Also checked here, not only in the transport: a connection through an environment
            # proxy is httpx's own and knows no deadline, but each of its reads is still bounded.
            _time_left(None, httpx.ReadTimeout)
            if self.count + len(chunk) > cap:
                if cut:
                    chunk = chunk[: cap - self.count]
                else:
                    raise ReplyTooLarge(cap)
            self.sha256.update(chunk)
            self.count += len(chunk)
            yield chunk
            if cut and self.count >= cap:
                return


def token_count(value: Any) -> int:
    """A token count from a reply's usage: a finite, non-negative number, else 0.

    Usage feeds ``--max-tokens-total``, which must never fail open: a negative count would take
    tokens off the run's total (a peer reporting -1,000,000 per turn would never reach the
    budget), and a string, a list, a bool or Infinity is not a count at all."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(0, int(value))


# ------------------------------------------------------------------ one deadline per attempt
# The end of the current attempt (time.monotonic()), set by ``HttpProvider._attempt`` for the
# thread or task making the request; None outside an attempt.
_DEADLINE: ContextVar[float | None] = ContextVar("norma_provider_deadline", default=None)


def _time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The timeout one network operation may wait: httpx's own per-operation ``timeout``, cut
    to what is left of the attempt; ``expired`` is raised once nothing is left."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the attempt's time is up")
    return left if timeout is None else min(timeout, left)


def _deadline_transport() -> httpx.HTTPTransport:
    """httpx's transport (the same pool settings, TLS verification and environment CA files),
    whose connections read, write and handshake against the attempt's deadline (see
    net/deadline.py for why the deadline sits in the network stream)."""
    import httpcore
    import httpx

    from norma_cli.net.deadline import DeadlineStream

    class DeadlineBackend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None,
                        socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:  # fmt: skip
            left = _time_left(timeout, httpcore.ConnectTimeout)
            stream = super().connect_tcp(host, port, left, local_address, socket_options)
            return DeadlineStream(stream, _time_left)

    class DeadlineTransport(httpx.HTTPTransport):
        def __init__(self) -> None:
            # httpx.HTTPTransport sends everything through self._pool; this one is built as
            # httpx builds its default (same limits), with our backend under it.
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
            self._pool = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(),
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                network_backend=DeadlineBackend(),
            )

    return DeadlineTransport()


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After``: delay seconds, or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def parse_arguments(text: str) -> Any:
    """A tool call's JSON arguments; the raw text when they are not JSON (the executor then
    refuses the call with a clear error the model can act on)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        return text


def wire_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as providers take it (no ``$schema`` dialect marker)."""
    return {k: v for k, v in schema.items() if k != "$schema"} if "$schema" in schema else schema


def _clip(text: str, limit: int = MAX_ERROR_BODY) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
