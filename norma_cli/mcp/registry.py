"""MCP tools in norma's registry: registered from the pin table, connected lazily, gated by
their pins.

A run with ``[mcp.servers]`` configured reads the pin table once (the last listing of every
server, with its pin state) and registers those tools without starting anything. A server is
connected only when one of its tools is about to be called (the assembly's gate asks), when a
name of its ``mcp__SERVER__`` prefix is looked up that no listing had yet, or when a command
needs every tool (``tools list`` for servers never listed, ``catalog sync``, ``mcp serve``).
Every connect lists the tools and compares them with the pins before anything is called, so a
definition changed between two syncs is refused at once (SPEC §11); so is one changed during a
session (``notifications/tools/list_changed``).

MCP tools are fail-closed (mutating, exclusive, approval-required) unless the operator trusts
the server's annotations (``trust_annotations``): then ``readOnlyHint`` makes a tool read-only.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core import aioloop
from norma_cli.core.contract import TOOL_NAME_RE, CallContext, Tool, ToolOutput
from norma_cli.errors import StoreError
from norma_cli.mcp import ServerUnavailable
from norma_cli.mcp.config import ServerSpec, server_specs
from norma_cli.mcp.pin import Pin, PinBook, canonical_definition

if TYPE_CHECKING:
    from norma_cli.catalog.assembly import Assembly
    from norma_cli.catalog.resolve import Candidate
    from norma_cli.core.registry import ToolRegistry
    from norma_cli.mcp.client import ServerConnection
    from norma_cli.runtime import Runtime

RETRY_AFTER_S = 10.0  # a server that failed is not restarted for every call of a batch
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def registered_name(server: str, tool: str) -> str | None:
    """``mcp__SERVER__TOOL`` with characters outside the tool-name alphabet as ``_``; a name
    over 64 characters keeps its start and ends in a digest of the original (still unique)."""
    name = f"mcp__{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) > 64:
        name = f"{name[:55]}_{hashlib.sha256(tool.encode()).hexdigest()[:8]}"
    return name if TOOL_NAME_RE.match(name) else None


class McpTool(Tool):
    """One tool of one MCP server. Its definition is the one last listed (live or cached)."""

    def __init__(
        self, hub: McpHub, spec: ServerSpec, remote: str, name: str, definition: dict[str, Any]
    ) -> None:
        self.hub = hub
        self.server = spec.name
        self.remote = remote
        self.name = name
        self.update(definition, spec.trust_annotations)

    def update(self, definition: dict[str, Any], trust: bool) -> None:
        self.wire = definition
        self.description = definition.get("description") or definition.get("title") or ""
        schema = definition.get("inputSchema")
        self.input_schema = (
            schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        )
        hints = definition.get("annotations") or {}
        read_only = trust and hints.get("readOnlyHint") is True
        self.read_only = read_only
        self.concurrency_safe = read_only
        self.requires_approval = not read_only
        self.destructive = not read_only and not (trust and hints.get("destructiveHint") is False)

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        return self.hub.call(self, tool_input)


class McpHub:
    """The configured servers of one runtime, their connections and their tools' pin states."""

    def __init__(
        self,
        specs: dict[str, ServerSpec],
        pins: PinBook,
        registry: ToolRegistry,
        *,
        cwd: Path,
        log_dir: Path,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.specs = specs
        self.pins = pins
        self.registry = registry
        self.cwd = cwd
        self.log_dir = log_dir
        self.notify = notify or _stderr
        self.tools: dict[str, McpTool] = {}
        self.states: dict[str, Pin] = {}  # by registered name
        self.listed: set[str] = set()  # servers with a listing (cached or live)
        self.connections: dict[str, ServerConnection] = {}
        self.failures: dict[str, tuple[float, str]] = {}
        self.broken: str | None = None  # the pin table cannot be read: nothing is callable
        self.asm: Assembly | None = None
        self.reachable: set[str] = set(specs)
        self._server_locks = {name: threading.Lock() for name in specs}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ registration
    def load_cached(self) -> None:
        """Register the tools of every server's last recorded listing (no connection)."""
        try:
            pins, baselined = self.pins.load(self.specs)
        except StoreError as exc:
            self.broken = f"MCP pins cannot be read ({exc}); MCP tools are refused"
            self.notify(self.broken)
            return
        for server in baselined:
            self.listed.add(server)
            for pin in pins[server].values():
                if pin.state != "vanished":
                    self._put(pin)

    def _put(self, pin: Pin) -> bool:
        """Register or refresh the tool of ``pin``; True when it is new to this run."""
        spec = self.specs[pin.server]
        tool = self.tools.get(pin.name)
        self.states[pin.name] = pin
        if tool is not None and tool.server == pin.server:
            tool.remote = pin.tool
            tool.update(pin.live, spec.trust_annotations)
            return False
        tool = McpTool(self, spec, pin.tool, pin.name, pin.live)
        self.registry.register(tool, plugin=f"mcp:{spec.name}")
        self.tools[pin.name] = tool
        return True

    def candidates(self) -> dict[str, Candidate]:
        """Catalog candidates (SPEC §8 step 2): the MCP tools known to this run."""
        from norma_cli.catalog.resolve import Candidate

        return {
            name: Candidate(name, "mcp", tool.plugin, base=False, server=tool.server)
            for name, tool in self.tools.items()
        }

    def bind(self, asm: Assembly) -> None:
        """Tools listed later are admitted into ``asm``; only servers its agent reaches (directly
        or through a visible skill's ``mcps``) are ever connected."""
        self.asm = asm
        agent = asm.agent
        via_skills = {srv for s in asm.visible_skills.values() for srv in s.gated_servers}
        self.reachable = {
            s for s in self.specs if agent is None or agent.sees_server(s) or s in via_skills
        }

    def resolve(self, name: str) -> bool:
        """Registry resolver: a ``mcp__SERVER__`` name nobody has listed yet connects SERVER."""
        spec = self._server_of(name)
        if spec is None or spec.name not in self.reachable:
            return False
        try:
            self.ensure(spec.name)
        except ServerUnavailable:
            return False
        return name in self.tools

    def _server_of(self, name: str) -> ServerSpec | None:
        found = [s for s in self.specs.values() if name.startswith(s.prefix)]
        return max(found, key=lambda s: len(s.name)) if found else None

    # ------------------------------------------------------------------ connections
    def ensure(self, server: str) -> ServerConnection:
        """The live connection of ``server``; connecting lists its tools and checks their pins."""
        from norma_cli.mcp.client import ServerConnection

        spec = self.specs[server]
        with self._server_locks[server]:
            conn = self.connections.get(server)
            if conn is not None and conn.alive:
                return conn
            failed = self.failures.get(server)
            if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
                raise ServerUnavailable(failed[1])
            conn = ServerConnection(
                spec,
                cwd=self.cwd,
                log_path=self.log_dir / f"{server}.log",
                on_tools_changed=self._tools_changed,
            )
            try:
                tools = aioloop.run(conn.open_and_list(), spec.timeout + 10)
                self._on_listing(server, tools)
            except (ServerUnavailable, TimeoutError, StoreError) as exc:
                message = (
                    str(exc) or f"MCP server {server}: no answer within {spec.timeout:g}s (timeout)"
                )
                self.failures[server] = (time.monotonic(), message)
                self.notify(f"{message}; its tools are unavailable")
                _quietly(lambda: aioloop.run(conn.close(), 15))
                raise ServerUnavailable(message) from None
            self.failures.pop(server, None)
            self.connections[server] = conn
            return conn

    def load(
        self, servers: Iterable[str] | None = None, *, refresh: bool = False
    ) -> dict[str, str]:
        """Connect the servers never listed (with ``refresh``: every one), in parallel; returns
        the errors by server. For commands that need every tool: tools list, sync, serve."""
        wanted = self.reachable if servers is None else set(servers) & self.reachable
        targets = sorted(s for s in wanted if refresh or s not in self.listed)
        errors: dict[str, str] = {}

        def one(server: str) -> None:
            try:
                conn = self.connections.get(server)
                if refresh and conn is not None and conn.alive:
                    self._on_listing(
                        server, aioloop.run(conn.list_tools(), self.specs[server].timeout)
                    )
                else:
                    self.ensure(server)
            except (ServerUnavailable, TimeoutError) as exc:
                errors[server] = str(exc) or f"MCP server {server}: no answer"

        if len(targets) == 1:
            one(targets[0])
        elif targets:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(
                max_workers=min(8, len(targets)), thread_name_prefix="norma-mcp"
            ) as pool:
                list(pool.map(one, targets))
        return errors

    def _on_listing(self, server: str, tools: list[dict[str, Any]]) -> None:
        """A live listing: name the tools, record the pins, (re)register, admit new names."""
        live: dict[str, tuple[str, str]] = {}
        taken: dict[str, str] = {}
        for t in sorted(tools, key=lambda t: str(t.get("name"))):
            remote = t.get("name")
            name = registered_name(server, remote) if isinstance(remote, str) and remote else None
            if name is None or not isinstance(remote, str):
                self.notify(f"MCP server {server}: tool {remote!r} has no valid name; skipped")
                continue
            if name in taken:
                self.notify(
                    f"MCP server {server}: tools {taken[name]!r} and {remote!r} are both named {name}; {remote!r} skipped"
                )
                continue
            taken[name] = remote
            live[remote] = (name, canonical_definition(t))
        pins = self.pins.record(server, live)
        with self._lock:
            self.listed.add(server)
            added: list[str] = []
            retired: list[str] = []
            for pin in sorted(pins.values(), key=lambda p: p.state != "vanished"):
                if pin.state == "vanished":
                    known = self.states.get(pin.name)
                    if known is not None and (known.server, known.tool) == (pin.server, pin.tool):
                        self.states[pin.name] = pin  # the gate says "no longer offered"
                        if self.tools.pop(pin.name, None) is not None:
                            self.registry.unregister(pin.name)
                            retired.append(pin.name)
                elif self._put(pin):
                    added.append(pin.name)
            if self.asm is not None:
                if retired:
                    self.asm.retire(retired)  # catalog sync marks their rows stale
                if added:  # a set: membership in the list was quadratic (60k tools: ~25 s)
                    fresh = set(added)
                    self.asm.admit({n: c for n, c in self.candidates().items() if n in fresh})

    def _tools_changed(self, conn: ServerConnection, tools: list[dict[str, Any]]) -> None:
        # notifications/tools/list_changed, on the event loop's thread
        if self.connections.get(conn.spec.name) is not conn:
            return
        try:
            self._on_listing(conn.spec.name, tools)
        except Exception as exc:  # a failed re-check must not kill the event loop's thread
            self.notify(
                f"MCP server {conn.spec.name}: cannot re-check its changed tool list: {exc}"
            )

    # ------------------------------------------------------------------ gate and call
    def refusal(self, name: str, *, connect: bool) -> str | None:
        """Why ``name`` may not be called (None: callable). With ``connect``, the server is
        connected first, so the answer reflects its live definition, not the cached one."""
        pin = self.states.get(name)
        if pin is None:
            return None  # not an MCP tool of this run
        if self.broken:
            return self.broken
        if connect and pin.server in self.reachable:
            try:
                conn = self.ensure(pin.server)
            except ServerUnavailable:
                return None  # not a policy matter: the call reports the server's error
            if conn.relisting:  # notifications/tools/list_changed: its verdict first
                _quietly(lambda: aioloop.run(conn.settle(), conn.spec.timeout + 5))
            pin = self.states[name]
        return pin.refusal()

    def call(self, tool: McpTool, tool_input: dict[str, Any]) -> ToolOutput:
        spec = self.specs[tool.server]
        try:
            conn = self.ensure(tool.server)
        except ServerUnavailable as exc:
            return ToolOutput.error(str(exc))
        # a notifications/tools/list_changed may have quarantined it since the gate
        refusal = self.refusal(tool.name, connect=False)
        if refusal:
            return ToolOutput.error(refusal)
        try:
            output: ToolOutput = aioloop.run(
                conn.call(tool.remote, tool_input), spec.call_timeout + 10
            )
        except TimeoutError:
            return ToolOutput.error(
                f"MCP server {spec.name}: no answer within {spec.call_timeout:g}s (call_timeout)"
            )
        return output

    def describe(self, name: str) -> dict[str, Any] | None:
        """``server`` and ``pin`` of an MCP tool, for ``tools list``."""
        tool = self.tools.get(name)
        if tool is None:
            return None
        pin = self.states.get(name)
        return {"server": tool.server, "pin": pin.state if pin is not None else "unpinned"}

    def collect(self, *, record: bool) -> dict[str, Any]:
        """``catalog sync``: connect every server this run reaches, list it, meet the pins
        (recorded unless ``record`` is false: a dry run compares only)."""
        self.pins.recording = record
        try:
            errors = self.load(refresh=True)
        finally:
            self.pins.recording = True
        return {
            "servers": {s: errors.get(s, "ok") for s in sorted(self.reachable)},
            "quarantined": {p.name: p.refusal() for p in self.quarantined()},
            "unpinned": sorted(n for n, p in self.states.items() if p.state == "unpinned"),
        }

    def mirror(self, execute: Callable[..., Any]) -> None:
        from norma_cli.mcp.pin import mirror_statuses

        mirror_statuses(execute, self.states.values())

    def quarantined(self) -> list[Pin]:
        return sorted((p for p in self.states.values() if p.quarantined), key=lambda p: p.name)

    def close(self) -> None:
        conns = [c for c in self.connections.values() if not c.closed]
        self.connections.clear()
        if conns:

            async def close_all() -> None:
                import asyncio

                await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

            _quietly(lambda: aioloop.run(close_all(), 20))
        self.pins.close()


def attach(rt: Runtime) -> McpHub | None:
    """The MCP hub of a runtime (None when no server is configured): the last listings
    registered from the pin table, and a resolver for names not listed yet."""
    specs = server_specs(rt.config)  # the assembly decides which ones this agent reaches
    if not specs:
        return None
    if rt.store is not None:
        pins = PinBook(rt.store)
    else:
        from norma_cli.store.sqlite import sqlite_path

        url = rt.config.get("store", "url") or f"sqlite:///{rt.session.data_dir / 'norma.db'}"
        pins = PinBook(path=sqlite_path(url))
    hub = McpHub(
        specs, pins, rt.registry, cwd=rt.session.cwd, log_dir=rt.session.data_dir / "logs" / "mcp"
    )
    hub.load_cached()
    rt.registry.add_resolver(hub.resolve)
    return hub


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # closing down or waiting on a best-effort step: nobody to tell
        pass


def _stderr(text: str) -> None:
    sys.stderr.write(f"norma: warning: {text}\n")
    sys.stderr.flush()
