"""``[mcp]`` and ``[mcp.servers.NAME]`` as typed server specs.

A stdio server's child process gets an environment built from nothing: the variables named in
``env_passthrough`` (copied from norma's environment when set) plus the ``env`` table. Nothing
else leaks — not even ``PATH`` or ``HOME``; list them when a server needs them (a script whose
``#!/usr/bin/env node`` line looks ``node`` up does). ``command`` itself is resolved against
norma's own ``PATH`` before spawning, so an absolute path reaches the child either way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    from norma_cli.config import Config

DEFAULT_TIMEOUT_S = 30.0  # spawn/connect + initialize + the paginated tool listing
DEFAULT_CALL_TIMEOUT_S = 60.0
# "__" separates server and tool in mcp__SERVER__TOOL, so a server name may not contain it.
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
TRANSPORTS = ("stdio", "streamable-http", "sse")


@record(frozen=True)
class ServerSpec:
    name: str
    transport: str  # stdio | streamable-http | sse
    source: str  # file:line of the table, for messages
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    header_env: dict[str, str] = field(default_factory=dict)  # header -> environment variable
    timeout: float = DEFAULT_TIMEOUT_S
    call_timeout: float = DEFAULT_CALL_TIMEOUT_S
    trust_annotations: bool = False

    @property
    def prefix(self) -> str:
        return f"mcp__{self.name}__"

    def child_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The stdio child's whole environment: the allowlisted variables, then ``env``."""
        environ = os.environ if environ is None else environ  # type: ignore[assignment]
        assert environ is not None
        out = {k: environ[k] for k in self.env_passthrough if k in environ}
        out.update(self.env)
        return out

    def resolved_command(self, base: Path) -> str:
        """``command`` as an absolute path: a bare name through norma's PATH, a relative path
        against the server's ``cwd`` (or norma's working directory)."""
        if os.sep in self.command or (os.altsep and os.altsep in self.command):
            path = Path(self.command).expanduser()
            if not path.is_absolute():
                path = (Path(self.cwd).expanduser() if self.cwd else base) / path
            if not os.access(path, os.X_OK) or path.is_dir():
                raise ConfigError(
                    f"{self.source}: mcp.servers.{self.name}.command: not an executable file: {path}"
                )
            return str(path)
        import shutil

        found = shutil.which(self.command)
        if found is None:
            raise ConfigError(
                f"{self.source}: mcp.servers.{self.name}.command: {self.command!r} not found on PATH"
            )
        return found

    def http_headers(self) -> dict[str, str]:
        """``headers`` plus the ``header_env`` values read from norma's environment now."""
        out = dict(self.headers)
        for header, var in self.header_env.items():
            value = os.environ.get(var)
            if value is None:
                raise ConfigError(
                    f"{self.source}: mcp.servers.{self.name}.header_env.{header}: "
                    f"environment variable {var} is not set"
                )
            out[header] = value
        return out


def server_specs(config: Config) -> dict[str, ServerSpec]:
    """Every configured server (only trusted layers contribute: an untrusted project config's
    ``[mcp]`` is dropped by the config loader)."""
    section = config.data.get("mcp") or {}
    servers = section.get("servers") or {}
    out: dict[str, ServerSpec] = {}
    for name, table in servers.items():
        out[name] = _spec(name, table, section, _source(config, name))
    return out


def _source(config: Config, name: str) -> str:
    for layer in reversed(config.layers):
        if name in ((layer.effective.get("mcp") or {}).get("servers") or {}):
            return layer.source_of(f"mcp.servers.{name}")
    return "config"


def _spec(name: str, t: dict[str, Any], section: dict[str, Any], source: str) -> ServerSpec:
    where = f"{source}: mcp.servers.{name}"
    if not SERVER_NAME_RE.match(name):
        raise ConfigError(
            f"{where}: invalid server name (letters, digits, '-' and single '_'; no '__')"
        )
    has_command, has_url = "command" in t, "url" in t
    if has_command == has_url:
        raise ConfigError(f"{where}: set exactly one of `command` (stdio) or `url` (HTTP)")
    transport = t.get("transport") or ("stdio" if has_command else "streamable-http")
    if transport not in TRANSPORTS:
        raise ConfigError(f"{where}.transport: expected one of {', '.join(TRANSPORTS)}")
    if has_command and transport != "stdio":
        raise ConfigError(f"{where}.transport: a `command` server speaks stdio")
    if has_url and transport == "stdio":
        raise ConfigError(f"{where}.transport: a `url` server speaks streamable-http or sse")
    stdio_only: list[str] = [
        k for k in ("args", "env", "env_passthrough", "cwd") if k in t and has_url
    ]
    http_only: list[str] = [k for k in ("headers", "header_env") if k in t and has_command]
    if stdio_only or http_only:
        raise ConfigError(
            f"{where}: {', '.join(stdio_only + http_only)} do not apply to this transport"
        )
    if has_url and not str(t["url"]).startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL")
    return ServerSpec(
        name=name,
        transport=transport,
        source=source,
        command=t.get("command", ""),
        args=tuple(t.get("args", ())),
        env={str(k): str(v) for k, v in (t.get("env") or {}).items()},
        env_passthrough=tuple(t.get("env_passthrough", ())),
        cwd=t.get("cwd"),
        url=t.get("url", ""),
        headers={str(k): str(v) for k, v in (t.get("headers") or {}).items()},
        header_env={str(k): str(v) for k, v in (t.get("header_env") or {}).items()},
        timeout=float(t.get("timeout", section.get("timeout", DEFAULT_TIMEOUT_S))),
        call_timeout=float(
            t.get("call_timeout", section.get("call_timeout", DEFAULT_CALL_TIMEOUT_S))
        ),
        trust_annotations=bool(t.get("trust_annotations", section.get("trust_annotations", False))),
    )
