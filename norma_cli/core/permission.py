"""Permission evaluation: the staged decision of SPEC §4.

Stages, in order (first verdict wins):

1. a deny rule matches, the tool's own check says deny, or a plugin vetoes → deny
2. ``bypassPermissions`` → allow; ``plan`` + mutating → deny; ``plan`` + read-only → allow
3. an ask rule matches, or the tool / a plugin says ask → ask (ask beats allow)
4. an allow rule; ``acceptEdits`` + a file-edit tool inside the roots; a read-only tool (file
   tools only when every path is inside the roots); the tool's / a plugin's allow → allow
5. ``dontAsk`` / ``auto`` → deny; otherwise ask

Resolving an *ask* (plugin ``resolve_ask``, TTY prompt, approval queue) is the executor's job;
this engine only explains which stage reached which verdict.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Decision, Tool
from norma_cli.errors import NormaError
from norma_cli.policy.rules import RuleSet

PluginOpinion = Callable[[Tool, dict[str, Any], CallContext], Decision | None]


class BadPath(NormaError):
    """A path no file system could hold (a NUL byte): refused, never resolved."""


def resolve_path(raw: str, ctx: CallContext) -> Path:
    """Absolute, normalised, symlink-resolved spelling of a path from a tool input.

    Memoised per call (``ctx.resolved``): the rules and the tool judge and open the same path.
    """
    hit = ctx.resolved.get(raw)
    if hit is None:
        if "\x00" in raw:
            raise BadPath(f"path {raw!r} contains a NUL byte")
        joined = os.path.join(str(ctx.cwd), os.path.expanduser(raw))
        hit = ctx.resolved[raw] = Path(os.path.realpath(joined))
    return hit


class PermissionEngine:
    def __init__(self, rules: RuleSet, plugin_opinion: PluginOpinion | None = None) -> None:
        self.rules = rules
        self.plugin_opinion = plugin_opinion

    def evaluate(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> Decision:
        own = tool.check_permissions(tool_input, ctx)
        plugin = self.plugin_opinion(tool, tool_input, ctx) if self.plugin_opinion else None

        # 1. deny
        m = self.rules.find("deny", tool, tool_input, ctx)
        if m is not None:
            return Decision.deny(
                m.stage,
                m.reason or f"denied by rule {m.rule.text}",
                rule=m.rule.ref,
                subcommands=m.subcommands,
            )
        if own is not None and own.behavior == "deny":
            return Decision.deny("tool", own.reason or f"{tool.name} refused this input")
        if plugin is not None and plugin.behavior == "deny":
            return plugin

        # 2. modes that decide outright
        mode = ctx.mode
        if mode == "bypassPermissions":
            return Decision.allow("mode", "bypassPermissions", updated_input=_rewrite(own, plugin))
        if mode == "plan":
            if tool.read_only:
                # A read-only tool that asks is still asked (ExitPlanMode: leaving plan mode
                # needs approval); honouring the ask can only narrow what plan mode allows.
                if own is not None and own.behavior == "ask":
                    return Decision.ask("tool", own.reason or f"{tool.name} asks for approval")
                return Decision.allow("mode", "plan mode allows read-only tools")
            return Decision.deny("mode", f"plan mode: {tool.name} is not read-only")

        # 3. ask beats allow
        m = self.rules.find("ask", tool, tool_input, ctx)
        if m is not None:
            return Decision.ask(
                m.stage,
                m.reason or f"rule {m.rule.text} asks for approval",
                rule=m.rule.ref,
                subcommands=m.subcommands,
            )
        if own is not None and own.behavior == "ask":
            return Decision.ask("tool", own.reason or f"{tool.name} asks for approval")
        if plugin is not None and plugin.behavior == "ask":
            return plugin

        # 4. allow
        m = self.rules.find("allow", tool, tool_input, ctx)
        if m is not None:
            return Decision.allow(
                m.stage,
                m.reason or f"allowed by rule {m.rule.text}",
                rule=m.rule.ref,
                subcommands=m.subcommands,
                updated_input=_rewrite(own, plugin),
            )
        paths_inside = self._paths_inside(tool, tool_input, ctx)
        if mode == "acceptEdits" and tool.edits_files and paths_inside:
            return Decision.allow("mode", "acceptEdits: file edit inside the working roots")
        if tool.read_only and paths_inside:
            return Decision.allow("read_only", f"{tool.name} is read-only")
        if own is not None and own.behavior == "allow":
            return Decision.allow(
                "tool",
                own.reason or f"{tool.name} allowed this input",
                updated_input=own.updated_input,
            )
        if plugin is not None and plugin.behavior == "allow":
            return plugin

        # 5. nobody allowed it
        if mode in ("dontAsk", "auto"):
            return Decision.deny("mode", f"{mode} mode: no rule allows {tool.name}")
        outside = "" if paths_inside else " (path outside the working roots)"
        return Decision.ask("default", f"no rule allows {tool.name}{outside}")

    def _paths_inside(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> bool:
        for raw in tool.file_paths(tool_input, ctx):
            if not ctx.inside_roots(resolve_path(raw, ctx)):
                return False
        return True


def _rewrite(own: Decision | None, plugin: Decision | None) -> dict[str, Any] | None:
    for d in (plugin, own):
        if d is not None and d.behavior == "allow" and d.updated_input is not None:
            return d.updated_input
    return None
