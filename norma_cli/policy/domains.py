"""Domain rules for URL-taking tools: ``WebFetch(domain:example.com)``.

Pattern forms: ``example.com`` (that host only), ``*.example.com`` (any subdomain, not the
apex), ``*`` (any host). Hosts and patterns are compared after normalisation: lower case,
trailing dots dropped, percent-decoding, IDNA (``bücher.de`` = ``xn--bcher-kva.de``, fullwidth
letters folded) and IPv4/IPv6 literals in canonical form (``0x7f.1`` = ``127.0.0.1``).

URL parsers disagree on odd URLs — ``http://evil.net\\@example.com`` is ``evil.net`` to a
browser and ``example.com`` to httpx and urllib — so ``url_hosts`` returns every host some
client could connect to. Deny and ask rules match when *any* reading matches; an allow rule
matches only a URL with a single, unambiguous http(s) host. Userinfo (``example.com@evil.net``),
paths and queries (``evil.net/?example.com``) and suffix tricks (``example.com.evil.net``)
never count as the host.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote

from norma_cli.core.record import record

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)
_HOST_CHARS = re.compile(r"^[a-z0-9.\-_]+$")
_STRIP = "".join(chr(c) for c in range(0x21))  # C0 controls and space, as WHATWG strips them


@record(frozen=True)
class DomainPattern:
    text: str
    host: str  # normalised; "" means any host
    subdomains: bool  # ``*.host``: strict subdomains only

    @classmethod
    def parse(cls, text: str) -> DomainPattern:
        """Raise ValueError with a user-facing message for an invalid pattern."""
        pat = text.strip()
        if pat == "*":
            return cls(pat, "", False)
        subdomains = pat.startswith("*.")
        host = normalise_host(pat[2:] if subdomains else pat)
        if host is None or "*" in pat[2 if subdomains else 0 :]:
            raise ValueError(f"domain pattern {text!r}: expected example.com or *.example.com")
        return cls(pat, host, subdomains)

    def matches(self, host: str) -> bool:
        if not self.host:
            return True
        if self.subdomains:
            return host.endswith("." + self.host)
        return host == self.host


def url_hosts(url: str) -> tuple[tuple[str, ...], bool]:
    """Every host a client might connect to for ``url``, and whether the URL is unambiguous."""
    s = url.strip(_STRIP)
    clear = s == url.strip() and not any(c in s for c in "\t\r\n\\") and s.isprintable()
    s = s.replace("\t", "").replace("\n", "").replace("\r", "")
    m = _SCHEME_RE.match(s)
    authorities: list[str] = []
    if m and m.group(1).lower() in ("http", "https"):
        rest = m.group(2)
        clear = clear and rest.startswith("//")
        authorities.append(_authority(rest.lstrip("/\\"), "/\\?#"))  # WHATWG
        if rest.startswith("//"):
            authorities.append(_authority(rest[2:], "/?#"))  # RFC 3986 (urllib, httpx)
    else:
        clear = False
        if m:
            rest = m.group(2)
            if rest.startswith(("//", "\\\\")):
                authorities.append(_authority(rest.lstrip("/\\"), "/\\?#"))
        authorities.append(_authority(s.lstrip("/\\"), "/\\?#"))  # scheme-less: host first
    hosts: list[str] = []
    for authority in authorities:
        for candidate in _hosts_of_authority(authority):
            host = normalise_host(candidate)
            if host is None:
                clear = False
            else:
                hosts.append(host)
    unique = tuple(dict.fromkeys(hosts))
    return unique, clear and len(unique) == 1


def _authority(rest: str, stops: str) -> str:
    end = len(rest)
    for c in stops:
        i = rest.find(c)
        if i != -1:
            end = min(end, i)
    return rest[:end]


def _hosts_of_authority(authority: str) -> list[str]:
    """Host spellings of ``[userinfo@]host[:port]``: userinfo ends at the last ``@``."""
    out = []
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        end = hostport.find("]")
        out.append(hostport[: end + 1] if end != -1 else hostport)
    else:
        out.append(hostport.partition(":")[0])
        out.append(hostport.rpartition(":")[0] or hostport)
    return out


def normalise_host(raw: str) -> str | None:
    """Canonical spelling of a host, or None when it cannot be a host at all."""
    host = unquote(raw).strip().lower()
    if host.startswith("[") and host.endswith("]"):
        try:
            return "[" + ipaddress.IPv6Address(host[1:-1]).compressed + "]"
        except ValueError:
            return None
    host = host.rstrip(".")
    if not host:
        return None
    ipv4 = _ipv4(host)
    if ipv4 is not None:
        return ipv4
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            return None
    if not _HOST_CHARS.match(host) or ".." in host:
        return None
    return host


def _ipv4(host: str) -> str | None:
    """WHATWG IPv4 parsing: ``127.1``, ``0x7f.0.0.1``, ``2130706433`` are all 127.0.0.1."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    nums = []
    for p in parts:
        try:
            if p.lower().startswith("0x"):
                nums.append(int(p[2:] or "0", 16))
            elif len(p) > 1 and p.startswith("0"):
                nums.append(int(p, 8))
            else:
                if not p.isdigit():
                    return None
                nums.append(int(p))
        except ValueError:
            return None
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        return None
    value = nums[-1]
    for i, n in enumerate(nums[:-1]):
        value += n << (8 * (3 - i))
    return str(ipaddress.IPv4Address(value))
