"""Permission rule syntax: ``*``, ``Name``, ``mcp__server__*`` and ``Name(specifier)``.

A rule names a tool (a glob over tool names) and optionally a specifier that looks at the
call's arguments. This module parses rules and matches the *name* part; argument-aware
matching of specifiers lives in ``norma_cli.policy.specifiers`` and is reached through
``Rule.matches``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import Behavior, RuleRef
from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext, Tool
    from norma_cli.policy.specifiers import RuleGroup

_RULE_RE = re.compile(r"^(?P<name>[A-Za-z0-9_*?\-]+)(?:\((?P<spec>.*)\))?$", re.S)
BEHAVIORS: tuple[Behavior, ...] = ("deny", "ask", "allow")


@record
class Rule:
    text: str
    behavior: Behavior
    source: str
    name: str = ""
    specifier: str | None = None
    _name_re: re.Pattern[str] | None = field(default=None, repr=False)
    # The parsed specifier (``specifiers.Spec``), filled in by ``specifiers.check_syntax``.
    compiled: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str, behavior: Behavior, source: str) -> Rule:
        if not isinstance(text, str):
            raise ConfigError(f"{source}: a rule must be a string, got {type(text).__name__}")
        m = _RULE_RE.match(text.strip())
        if not m:
            raise ConfigError(
                f"{source}: cannot parse rule {text!r} (expected Name or Name(specifier))"
            )
        spec = m.group("spec")
        if spec is not None and not spec.strip():
            spec = None
        rule = cls(text.strip(), behavior, source, m.group("name"), spec)
        if any(c in rule.name for c in "*?"):
            rule._name_re = re.compile(fnmatch.translate(rule.name))
        if spec is not None:
            from norma_cli.policy import specifiers

            specifiers.check_syntax(rule)
        return rule

    @property
    def ref(self) -> RuleRef:
        return RuleRef(self.text, self.source)

    def matches_name(self, tool_name: str) -> bool:
        if self._name_re is not None:
            return self._name_re.match(tool_name) is not None
        return self.name == tool_name


@record
class RuleMatch:
    """A rule that covers a call, with per-sub-command verdicts for shell lines.

    ``stage`` is ``rule`` for a configured rule; a synthetic match (the shell parser asking
    about a line it cannot read) says ``shell`` and explains itself in ``reason``.
    """

    rule: Rule
    subcommands: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    stage: str = "rule"


class RuleSet:
    """All rules in force, by behavior, in the order their sources were loaded.

    ``find`` answers "does a rule of this behavior cover this call?"; the argument-aware part
    (Bash sub-commands, file paths, domains, parameters) is delegated to the specifier layer.
    A rule reaches a tool by name, or as a family rule: Read rules govern Grep, Glob and LS;
    Edit rules govern Write and MultiEdit; Edit, Write and Read rules govern shell
    redirections. Rules are grouped per (behavior, tool name) once and the groups reused; add
    rules with ``add``/``extend`` so the groups are rebuilt.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: dict[Behavior, list[Rule]] = {b: [] for b in BEHAVIORS}
        self._groups: dict[tuple[Behavior, str], tuple[tuple[int, ...], RuleGroup]] = {}
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> None:
        self.rules[rule.behavior].append(rule)
        self._groups.clear()

    def extend(self, rules: Iterable[Rule]) -> None:
        for rule in rules:
            self.add(rule)

    def all(self) -> list[Rule]:
        return [r for b in BEHAVIORS for r in self.rules[b]]

    def find(
        self, behavior: Behavior, tool: Tool, tool_input: dict[str, Any], ctx: CallContext
    ) -> RuleMatch | None:
        if not self.rules[behavior]:
            return None  # nothing to match (and the specifier layer need not even load)
        match = self.group(behavior, tool.name).find(tool, tool_input, ctx)
        shell_text = getattr(tool, "shell_text", None)
        if match is None and shell_text is not None and behavior != "allow":
            # Text a tool types into a shell (ShellSend) is read like a Bash command: Bash deny
            # and ask rules apply to it. Bash allow rules do not: whatever runs in that
            # terminal right now need not be a shell.
            shell_input = {"command": shell_text(tool_input, ctx)}
            match = self.group(behavior, "Bash", via=tool.name).find(tool, shell_input, ctx)
        return match

    def group(self, behavior: Behavior, tool_name: str, via: str | None = None) -> RuleGroup:
        from norma_cli.policy import specifiers

        # Rule lists edited in place (not through ``add``) still invalidate the group.
        signature = tuple(len(self.rules[b]) for b in BEHAVIORS)
        key = (behavior, tool_name if via is None else f"{tool_name}<{via}")
        cached = self._groups.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        candidates = [r for r in self.rules[behavior] if specifiers.governs(r, tool_name)]
        # An unconditional allow (``Bash``, ``*``) means the user accepts lines we cannot read.
        names = (tool_name,) if via is None else (tool_name, via)
        unconditional = any(
            r.specifier is None and any(r.matches_name(n) for n in names)
            for r in self.rules["allow"]
        )
        group = specifiers.RuleGroup(
            behavior,
            tool_name,
            candidates,
            ask_when_not_literal=behavior == "ask" and not unconditional,
        )
        self._groups[key] = (signature, group)
        return group
