"""Agents (roles): ``[agents.NAME]`` with base tools, visible MCP servers and skills, a mode
and extra rules. ``--agent NAME`` picks one; an unknown name is a usage error (exit 2).

Unset keys mean "no restriction": an agent without ``tools`` gets every code-defined tool,
without ``skills`` every skill. Rules accumulate across config layers, each with its
``file:line``, like ``[permissions]``; an untrusted project config contributes no agents.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from norma_cli.config import Config
    from norma_cli.policy.rules import Rule

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@record(frozen=True)
class AgentSpec:
    name: str
    tools: tuple[str, ...] | None = None
    mcp: tuple[str, ...] | None = None
    skills: tuple[str, ...] | None = None
    mode: str | None = None
    rules: list[Rule] = field(default_factory=list)
    source: str = ""

    def has_base(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def sees_server(self, server: str) -> bool:
        return self.mcp is None or server in self.mcp

    def sees_skill(self, skill: str) -> bool:
        return self.skills is None or skill in self.skills

    def effective_mode(self, config: Config) -> str:
        """The agent's mode (``--mode`` aside); an untrusted project's stricter mode still wins:
        it may only tighten, and an agent must not undo that."""
        from norma_cli.config import MODE_STRICTNESS

        mode = self.mode or "default"
        for layer in config.layers:
            if layer.kind == "project" and not layer.trusted:
                strict = (layer.effective.get("permissions") or {}).get("mode")
                if strict and MODE_STRICTNESS[strict] > MODE_STRICTNESS[mode]:
                    mode = strict
        return mode


def agent_names(config: Config) -> list[str]:
    return sorted((config.data.get("agents") or {}).keys())


def agent_spec(config: Config, name: str | None) -> AgentSpec | None:
    """The agent ``name`` from the merged config, or None when no agent was asked for."""
    if name is None:
        return None
    table = (config.data.get("agents") or {}).get(name)
    if table is None:
        known = ", ".join(agent_names(config)) or "none configured"
        raise UsageError(
            f"unknown agent {name!r} (agents: {known}; define [agents.{name}] in config)"
        )
    from norma_cli.policy.rules import Rule

    rules: list[Rule] = []
    source = ""
    for layer in config.layers:
        entry = (layer.effective.get("agents") or {}).get(name)
        if entry is None:
            continue
        source = source or layer.source_of(f"agents.{name}")
        for behavior in ("deny", "ask", "allow"):
            for i, text in enumerate(entry.get(behavior, [])):
                where = layer.source_of(f"agents.{name}.{behavior}[{i}]", text)
                rules.append(Rule.parse(text, behavior, where))
    servers = tuple(table["mcp"]) if "mcp" in table else None
    configured = (config.data.get("mcp") or {}).get("servers")
    for server in servers or ():
        if not SERVER_NAME_RE.match(server):
            raise ConfigError(f"{source}: agents.{name}.mcp: invalid MCP server name {server!r}")
        # MCP servers are not wired yet: names are checked against [mcp.servers] once it exists.
        if isinstance(configured, dict) and server not in configured:
            raise ConfigError(
                f"{source}: agents.{name}.mcp: no MCP server {server!r} in [mcp.servers]"
            )
    return AgentSpec(
        name=name,
        tools=tuple(table["tools"]) if "tools" in table else None,
        mcp=servers,
        skills=tuple(table["skills"]) if "skills" in table else None,
        mode=table.get("mode"),
        rules=rules,
        source=source,
    )
