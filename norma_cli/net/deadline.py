"""A network stream under httpcore whose every wait is cut to what is left of one deadline.

httpx's timeout applies to each read alone: a peer that sends a keep-alive every few seconds,
or trickles a response head one byte at a time, never trips it, and a check between body
chunks does not help while one read blocks. So the deadline goes where the waiting happens:
each read, write and TLS handshake of the connection. Used by WebFetch's guarded transport
(net/client.py) and by model providers (agent/providers/base.py); each says how much time is
left. Imported only when a request is made (it imports httpcore).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import httpcore

# (httpcore's own timeout for one operation, the exception to raise when no time is left)
# -> the timeout that operation may wait
TimeLeft = Callable[[float | None, type[httpcore.TimeoutException]], float | None]


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and handshake shares one deadline."""

    def __init__(self, inner: httpcore.NetworkStream, time_left: TimeLeft) -> None:
        self.inner = inner
        self.time_left = time_left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self.time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # One timeout for the whole buffer: httpcore's sync stream sends it in one go.
        self.inner.write(buffer, self.time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The TLS stream (to the target, or tunnelled through a proxy) keeps the deadline.
        left = self.time_left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(
            self.inner.start_tls(ssl_context, server_hostname, left), self.time_left
        )

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)
