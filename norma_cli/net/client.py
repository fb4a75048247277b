"""The guarded HTTP client every outbound request of WebFetch and WebSearch goes through.

* The SSRF guard (``norma_cli.net.ssrf``) runs inside httpcore's network backend, i.e. when a
  TCP connection is opened: the host is resolved there, every address checked, and the socket
  connected to a checked address. TLS still uses the URL's host name for SNI and certificate
  checks, because httpcore passes it to ``start_tls`` separately.
* Redirects are never followed by httpx: ``request`` follows them itself, up to
  ``[web] max_redirects`` hops, and each hop is a new connection through the same guard.
* ``trust_env`` is off: ``HTTP_PROXY``/``HTTPS_PROXY``/``SSL_CERT_FILE`` are ignored. A proxy is
  used only when ``[web] proxy`` names one, and then every request goes through it; a proxy
  that is down or refuses is an error, never a reason to connect directly. Through a proxy the
  proxy does the connecting, so the guard checks the target before the request: an IP literal
  always, a host name by resolving it here (a name that does not resolve here is left to the
  proxy, which is the egress point the operator chose).
* ``[web] timeout`` bounds the whole request, redirects included, not each read: httpx's
  timeouts are per socket operation, so a peer that trickles the response head one byte at a
  time (or sends 103 Early Hints forever) would never trip them. The guarded backend wraps each
  connection in a stream that gives every read and write only the time left before the
  request's deadline, and times out when none is left.
* The body is read (and gzip/deflate decoded) incrementally and cut at the byte cap. A body
  that breaks off (connection closed early, a malformed chunk, the deadline) is a WebError
  naming the request, and the request is recorded with that error.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError, NormaError
from norma_cli.net.ssrf import BlockedAddress, Guard, HostPort

if TYPE_CHECKING:
    import ssl

    import httpx

DEFAULT_MAX_BYTES = 5_000_000
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_REDIRECTS = 5
USER_AGENT = "norma-webfetch/1 (+https://pypi.org/project/norma-cli/)"

Recorder = Callable[[dict[str, Any]], None]
RedirectPolicy = Callable[[str, str], bool]


class WebError(NormaError):
    """An outbound request that failed or was refused; the message is for the model."""


@record(frozen=True)
class WebSettings:
    """``[web]``: what the operator allows and how requests are made."""

    allow_hosts: tuple[HostPort, ...] = ()
    proxy: str | None = None
    ca_bundle: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    max_redirects: int = DEFAULT_MAX_REDIRECTS

    @classmethod
    def from_config(cls, config: Any) -> WebSettings:
        """Settings from the merged config (None: defaults). Raises ConfigError naming the key."""
        web = (getattr(config, "data", None) or {}).get("web") or {}
        allow: list[HostPort] = []
        for i, entry in enumerate(web.get("allow_hosts") or []):
            try:
                allow.append(HostPort.parse(entry))
            except ValueError as exc:
                raise ConfigError(
                    f"{config_source(config, f'web.allow_hosts[{i}]')}: {exc}"
                ) from None
        proxy = web.get("proxy") or None
        if proxy is not None:
            scheme = proxy.partition("://")[0].lower() if "://" in proxy else ""
            if scheme not in ("http", "https"):
                raise ConfigError(
                    f"{config_source(config, 'web.proxy')}: must be an http:// or https:// URL, "
                    f"got {proxy!r}"
                )
        ca_bundle = web.get("ca_bundle") or None
        if ca_bundle is not None:
            import os

            ca_bundle = os.path.expanduser(ca_bundle)
            if not os.path.isfile(ca_bundle):
                raise ConfigError(
                    f"{config_source(config, 'web.ca_bundle')}: no such file: {ca_bundle}"
                )
        return cls(
            allow_hosts=tuple(allow),
            proxy=proxy,
            ca_bundle=ca_bundle,
            max_bytes=int(web.get("max_bytes", DEFAULT_MAX_BYTES)),
            timeout=float(web.get("timeout", DEFAULT_TIMEOUT)),
            max_redirects=int(web.get("max_redirects", DEFAULT_MAX_REDIRECTS)),
        )


def config_source(config: Any, keypath: str) -> str:
    """``file:line: key`` of the layer that set ``keypath`` last, for error messages (the
    config validator's own format)."""
    section, _, rest = keypath.partition(".")
    key = rest.split("[", 1)[0]
    for layer in reversed(getattr(config, "layers", None) or []):
        if key in ((layer.effective or {}).get(section) or {}):
            return f"{layer.source_of(keypath)}: {keypath}"
    return keypath


@record
class Fetched:
    url: str  # the final URL (after followed redirects)
    status: int
    reason: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    truncated: bool
    redirects: list[str] = field(default_factory=list)  # URLs followed, in order
    redirect_to: str | None = None  # a redirect the policy declined to follow

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


class WebClient:
    """One configured client; ``request`` makes a single guarded request (with redirects)."""

    def __init__(self, settings: WebSettings, record: Recorder | None = None) -> None:
        self.settings = settings
        self.record = record
        exempt: tuple[HostPort, ...] = ()
        if settings.proxy:
            exempt = (_proxy_hostport(settings.proxy),)
        self.guard = Guard(settings.allow_hosts, exempt)

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        max_bytes: int | None = None,
        follow: RedirectPolicy | None = None,
    ) -> Fetched:
        """Make the request; ``follow(current, next)`` says whether to follow a redirect
        (None: redirects are returned, not followed). Raises WebError / BlockedAddress."""
        import httpx

        cap = (
            self.settings.max_bytes
            if max_bytes is None
            else min(max_bytes, self.settings.max_bytes)
        )
        deadline = time.monotonic() + self.settings.timeout
        redirects: list[str] = []
        with httpx.Client(
            transport=_transport(self.guard, self.settings, deadline),
            trust_env=False,
            follow_redirects=False,
            timeout=httpx.Timeout(self.settings.timeout),
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
        ) as client:
            current = _check_url(url)
            for _ in range(self.settings.max_redirects + 1):
                request = client.build_request(
                    method,
                    current,
                    headers=headers,
                    params=params if not redirects else None,
                    json=json_body,
                )
                started = time.monotonic()
                if self.settings.proxy:
                    try:
                        self._check_via_proxy(current)
                    except BlockedAddress as exc:
                        self._record(request, None, 0, started, str(exc))
                        raise
                response = self._send(client, request, started)
                try:
                    location = response.headers.get("location")
                    if response.is_redirect and location and follow is not None:
                        target = str(response.url.join(location))
                        self._record(request, response.status_code, 0, started, None)
                        if not follow(str(response.url), target):
                            return Fetched(
                                str(response.url),
                                response.status_code,
                                response.reason_phrase,
                                _headers(response),
                                b"",
                                False,
                                redirects,
                                redirect_to=target,
                            )
                        redirects.append(target)
                        current = _check_url(target)
                        if response.status_code in (301, 302, 303) and method != "HEAD":
                            method, json_body = "GET", None
                        continue
                    try:
                        body, truncated = _read_capped(response, cap, deadline)
                    except (httpx.HTTPError, WebError) as exc:
                        # The head arrived but the body did not: still one traffic row, and
                        # a one-line error naming the URL rather than httpx's exception.
                        message = str(exc) if isinstance(exc, WebError) else self._failure(exc)
                        self._record(request, response.status_code, 0, started, message)
                        raise WebError(f"{request.method} {request.url}: {message}") from None
                finally:
                    response.close()
                self._record(request, response.status_code, len(body), started, None)
                return Fetched(
                    str(response.url),
                    response.status_code,
                    response.reason_phrase,
                    _headers(response),
                    body,
                    truncated,
                    redirects,
                )
        raise WebError(f"too many redirects (more than {self.settings.max_redirects})")

    def _send(self, client: httpx.Client, request: httpx.Request, started: float) -> httpx.Response:
        import httpx

        try:
            return client.send(request, stream=True)
        except BlockedAddress as exc:
            self._record(request, None, 0, started, str(exc))
            raise
        except httpx.ProxyError as exc:
            message = f"the configured proxy {_redact(self.settings.proxy)} failed: {exc}"
        except httpx.HTTPError as exc:
            message = self._failure(exc)
            if self.settings.proxy and isinstance(exc, httpx.ConnectError):
                message = (
                    f"the configured proxy {_redact(self.settings.proxy)} is unreachable: {exc}"
                )
        self._record(request, None, 0, started, message)
        raise WebError(f"{request.method} {request.url}: {message}")

    def _failure(self, exc: httpx.HTTPError) -> str:
        """One line for an httpx error, for the model and the traffic row."""
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return f"timed out after {self.settings.timeout:g} s"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _check_via_proxy(self, url: httpx.URL) -> None:
        from norma_cli.net.ssrf import literal_ip

        port = url.port or (443 if url.scheme == "https" else 80)
        if self.guard.allowed(url.host, port):
            return
        if literal_ip(url.host) is not None:
            self.guard.check_host(url.host, port)
            return
        try:
            self.guard.check_host(url.host, port)
        except BlockedAddress as exc:
            if str(exc).startswith("cannot resolve"):
                return  # the proxy resolves it; see the module docstring
            raise

    def _record(
        self,
        request: httpx.Request,
        status: int | None,
        size: int,
        started: float,
        error: str | None,
    ) -> None:
        if self.record is None:
            return
        self.record(
            {
                "method": request.method,
                "url": str(request.url),
                "host": request.url.host,
                "status": status,
                "bytes": size,
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
                "error": error,
                "proxy": _redact(self.settings.proxy) if self.settings.proxy else None,
            }
        )


def _check_url(url: str | httpx.URL) -> httpx.URL:
    import httpx

    try:
        parsed = httpx.URL(url) if isinstance(url, str) else url
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise WebError(f"invalid URL {str(url)!r}: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise WebError(
            f"only http and https URLs can be fetched, not {parsed.scheme or 'a relative'!r} URL"
        )
    if not parsed.host:
        raise WebError(f"URL {str(url)!r} has no host")
    return parsed


def _headers(response: httpx.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in response.headers.items()}


def _redact(proxy: str | None) -> str:
    """The proxy URL without its password, for messages and records."""
    if not proxy or "@" not in proxy:
        return proxy or ""
    scheme, _, rest = proxy.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def _proxy_hostport(proxy: str) -> HostPort:
    import httpx

    url = httpx.URL(proxy)
    port = url.port or (443 if url.scheme == "https" else 80)
    host = url.host if ":" not in url.host else f"[{url.host}]"
    return HostPort.parse(f"{host}:{port}")


# ----------------------------------------------------------------------------- body
def _read_capped(response: httpx.Response, cap: int, deadline: float) -> tuple[bytes, bool]:
    decoder = _decoder(response.headers.get("content-encoding", ""))
    out = bytearray()
    for chunk in response.iter_raw():
        if time.monotonic() > deadline:
            raise WebError("timed out while reading the response")
        data = chunk
        while data and len(out) <= cap:
            if decoder is None:
                out += data
                break
            try:
                out += decoder.decompress(data, cap + 1 - len(out))
            except zlib.error as exc:
                raise WebError(f"the response body could not be decoded: {exc}") from None
            data = decoder.unconsumed_tail
        if len(out) > cap:
            return bytes(out[:cap]), True
    return bytes(out), False


class _Deflate:
    """``Content-Encoding: deflate`` is zlib-wrapped by the standard and raw by some servers."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj()
        self._started = False

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if not self._started:
            self._started = True
            try:
                return self._d.decompress(data, max_length)
            except zlib.error:
                self._d = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._d.decompress(data, max_length)

    @property
    def unconsumed_tail(self) -> bytes:
        return self._d.unconsumed_tail


def _decoder(encoding: str) -> Any:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if enc == "deflate":
        return _Deflate()
    raise WebError(f"unsupported Content-Encoding {encoding!r} (norma asks for gzip or deflate)")


# ----------------------------------------------------------------------------- transport
def _ssl_context(settings: WebSettings) -> ssl.SSLContext:
    import ssl

    if settings.ca_bundle:
        return ssl.create_default_context(cafile=settings.ca_bundle)
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()


def _transport(guard: Guard, settings: WebSettings, deadline: float) -> httpx.HTTPTransport:
    """An httpx transport whose httpcore pool dials through the guard, and whose connections
    never wait past ``deadline`` (a ``time.monotonic()`` value): the request's total time."""
    import httpcore
    import httpx

    from norma_cli.net.deadline import DeadlineStream

    def time_left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float:
        """The smaller of httpcore's per-operation timeout and the time left; ``expired`` when
        the deadline has passed (httpx maps it to its own timeout, which ``request`` reports)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise expired(f"the request took longer than {settings.timeout:g} s")
        return left if timeout is None else min(timeout, left)

    class GuardedBackend(httpcore.SyncBackend):
        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> httpcore.NetworkStream:
            last: Exception | None = None
            for address in guard.check_host(host, port):
                try:
                    stream = super().connect_tcp(
                        address,
                        port,
                        time_left(timeout, httpcore.ConnectTimeout),
                        local_address,
                        socket_options,
                    )
                except httpcore.ConnectError as exc:
                    last = exc
                else:
                    return DeadlineStream(stream, time_left)
            assert last is not None
            raise last

    class GuardedTransport(httpx.HTTPTransport):
        def __init__(self, pool: httpcore.ConnectionPool) -> None:
            # httpx.HTTPTransport sends everything through self._pool; this one is ours.
            self._pool = pool

    ssl_context = _ssl_context(settings)
    backend = GuardedBackend()
    pool: httpcore.ConnectionPool
    if settings.proxy:
        proxy = httpx.Proxy(url=settings.proxy)
        pool = httpcore.HTTPProxy(
            proxy_url=httpcore.URL(
                scheme=proxy.url.raw_scheme,
                host=proxy.url.raw_host,
                port=proxy.url.port,
                target=proxy.url.raw_path,
            ),
            proxy_auth=proxy.raw_auth,
            proxy_headers=proxy.headers.raw,
            ssl_context=ssl_context,
            network_backend=backend,
        )
    else:
        pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend)
    return GuardedTransport(pool)


__all__ = ["Fetched", "WebClient", "WebError", "WebSettings", "config_source"]
