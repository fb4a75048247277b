"""The SSRF guard: which addresses an outbound request may connect to (SPEC §6, WebFetch).

The check happens at *connect time*, on the addresses actually dialled: the host is resolved
once, every resolved address must be public, and the connection goes to one of those checked
addresses (so a DNS answer that changes between check and connect cannot slip in a private
one). Refused:

* IPv4: 0.0.0.0/8, 10/8, 100.64/10 (CGNAT), 127/8, 169.254/16 (link-local, cloud metadata),
  172.16/12, 192.0.0.0/24, 192.0.2.0/24, 192.88.99.0/24, 192.168/16, 198.18/15,
  198.51.100/24, 203.0.113/24, 224/4 (multicast), 240/4 (reserved, broadcast);
* IPv6: ::, ::1, fe80::/10, fec0::/10, fc00::/7 (unique-local, fd00:ec2::254 metadata),
  ff00::/8, 2001:db8::/32, 100::/64, 2001::/32 (Teredo), 64:ff9b:1::/48, and anything else
  ``ipaddress`` does not call global;
* IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped
  (``::ffff:127.0.0.1``), IPv4-compatible (``::127.0.0.1``), NAT64 (``64:ff9b::/96``) and
  6to4 (``2002::/16``).

Numeric host spellings (``2130706433``, ``0x7f.1``, ``127.1``, ``017700000001``) are read the
way a resolver reads them (``norma_cli.policy.domains.normalise_host``) before the check.

``[web] allow_hosts`` lists hosts an operator trusts (``"127.0.0.1:8080"``, ``"intranet"``):
a request to such a host (and port, when the entry has one) skips the address check.
"""

from __future__ import annotations

import ipaddress
import socket

from norma_cli.core.record import record
from norma_cli.errors import NormaError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_BLOCKS: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network' address"),
    ("10.0.0.0/8", "private address"),
    ("100.64.0.0/10", "carrier-grade NAT address"),
    ("127.0.0.0/8", "loopback address"),
    ("169.254.0.0/16", "link-local address (cloud metadata lives here)"),
    ("172.16.0.0/12", "private address"),
    ("192.0.0.0/24", "IETF protocol address"),
    ("192.0.2.0/24", "documentation address"),
    ("192.88.99.0/24", "6to4 relay address"),
    ("192.168.0.0/16", "private address"),
    ("198.18.0.0/15", "benchmarking address"),
    ("198.51.100.0/24", "documentation address"),
    ("203.0.113.0/24", "documentation address"),
    ("224.0.0.0/4", "multicast address"),
    ("240.0.0.0/4", "reserved address"),
)
_V6_BLOCKS: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified address"),
    ("::1/128", "loopback address"),
    ("64:ff9b:1::/48", "local-use NAT64 address"),
    ("100::/64", "discard address"),
    ("2001::/32", "Teredo tunnel address"),
    ("2001:db8::/32", "documentation address"),
    ("fc00::/7", "unique-local address"),
    ("fe80::/10", "link-local address"),
    ("fec0::/10", "site-local address"),
    ("ff00::/8", "multicast address"),
)
_V4 = tuple((ipaddress.IPv4Network(n), why) for n, why in _V4_BLOCKS)
_V6 = tuple((ipaddress.IPv6Network(n), why) for n, why in _V6_BLOCKS)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_V4_COMPAT = ipaddress.IPv6Network("::/96")


class BlockedAddress(NormaError):
    """A request the SSRF guard refused; the message names the host and why."""


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be connected to, or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded, how = _embedded_v4(ip)
        if embedded is not None:
            inner = blocked_reason(embedded)
            if inner:
                return f"{how} form of {embedded}, a {inner}"
            # Deprecated and never routed: nothing legitimate is reached this way.
            return "deprecated IPv4-compatible address" if how == "IPv4-compatible" else None
        for net, why in _V6:
            if ip in net:
                return why
        return None if ip.is_global else "non-public address"
    for net4, why in _V4:
        if ip in net4:
            return why
    return None if ip.is_global else "non-public address"


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address | None, str]:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour, "6to4"
    if ip in _V4_COMPAT and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "IPv4-compatible"
    return None, ""


def literal_ip(host: str) -> IPAddress | None:
    """The address a numeric host spelling stands for (``127.1``, ``[::1]``), else None."""
    from norma_cli.policy.domains import normalise_host

    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    canonical = normalise_host(host)
    if canonical is None:
        return None
    try:
        return ipaddress.ip_address(canonical.strip("[]"))
    except ValueError:
        return None


@record(frozen=True)
class HostPort:
    """One ``[web] allow_hosts`` entry: a host (canonical spelling) and an optional port."""

    host: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> HostPort:
        """Raise ValueError with a user-facing message for an entry that is not host[:port]."""
        from norma_cli.policy.domains import normalise_host

        raw = text.strip()
        if not raw or any(c in raw for c in "/@ \t"):
            raise ValueError(f'{text!r}: expected host or host:port, e.g. "127.0.0.1:8080"')
        port: int | None = None
        host = raw
        if raw.startswith("["):
            end = raw.find("]")
            if end < 0:
                raise ValueError(f"{text!r}: unclosed '[' in an IPv6 address")
            host, rest = raw[: end + 1], raw[end + 1 :]
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"{text!r}: expected host or host:port")
                port = _port(rest[1:], text)
        elif raw.count(":") == 1:
            host, _, p = raw.partition(":")
            port = _port(p, text)
        elif ":" in raw:
            host = f"[{raw}]"  # a bare IPv6 address
        canonical = normalise_host(host)
        if canonical is None:
            raise ValueError(f'{text!r}: expected host or host:port, e.g. "127.0.0.1:8080"')
        return cls(canonical, port)

    def matches(self, host: str, port: int) -> bool:
        return host == self.host and (self.port is None or self.port == port)

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: port must be a number from 1 to 65535")
    return int(text)


class Guard:
    """Decides, at connect time, which addresses a connection to ``host:port`` may use."""

    def __init__(self, allow: tuple[HostPort, ...] = (), exempt: tuple[HostPort, ...] = ()) -> None:
        self.allow = allow
        self.exempt = exempt  # the configured proxy: trusted, never the target of a fetch

    def canonical(self, host: str) -> str:
        from norma_cli.policy.domains import normalise_host

        h = host if not (":" in host and not host.startswith("[")) else f"[{host}]"
        return normalise_host(h) or host.lower()

    def allowed(self, host: str, port: int) -> bool:
        """Is ``host:port`` on the operator's allowlist (or the proxy)?"""
        canonical = self.canonical(host)
        return any(e.matches(canonical, port) for e in (*self.allow, *self.exempt))

    def check_host(self, host: str, port: int) -> list[str]:
        """Addresses to connect to for ``host:port``, every one of them checked.

        Raises BlockedAddress when the host is not allowlisted and any address it resolves to
        is not public (one private answer among public ones is enough to refuse: the client
        cannot know which one a retry would use).
        """
        if self.allowed(host, port):
            return _resolve(host, port)
        ip = literal_ip(host)
        if ip is not None:
            reason = blocked_reason(ip)
            if reason:
                raise BlockedAddress(
                    f"refused to connect to {host} ({ip}): {reason}{_hint(host, port)}"
                )
            return [str(ip)]
        addresses = _resolve(host, port)
        for address in addresses:
            reason = blocked_reason(ipaddress.ip_address(address.split("%", 1)[0]))
            if reason:
                raise BlockedAddress(
                    f"refused to connect to {host}: it resolves to {address}, a {reason}"
                    f"{_hint(host, port)}"
                )
        return addresses


def _hint(host: str, port: int) -> str:
    return f' (an operator may allow it with [web] allow_hosts = ["{host}:{port}"])'


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise BlockedAddress(f"cannot resolve {host}: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise BlockedAddress(f"cannot resolve {host}: no addresses")
    return list(dict.fromkeys(addresses))


__all__ = ["BlockedAddress", "Guard", "HostPort", "blocked_reason", "literal_ip"]
