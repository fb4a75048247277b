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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import Behavior, RuleRef
from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext, Tool

_RULE_RE = re.compile(r"^(?P<name>[A-Za-z0-9_*?\-]+)(?:\((?P<spec>.*)\))?$", re.S)
BEHAVIORS: tuple[Behavior, ...] = ("deny", "ask", "allow")


@dataclass
class Rule:
    text: str
    behavior: Behavior
    source: str
    name: str = ""
    specifier: str | None = None
    _name_re: re.Pattern[str] | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, text: str, behavior: Behavior, source: str) -> Rule:
        if not isinstance(text, str):
            raise ConfigError(f"{source}: a rule must be a string, got {type(text).__name__}")
        m = _RULE_RE.match(text.strip())
        if not m:
            raise ConfigError(f"{source}: cannot parse rule {text!r} (expected Name or Name(specifier))")
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


@dataclass
class RuleMatch:
    rule: Rule
    subcommands: list[dict[str, Any]] = field(default_factory=list)


class RuleSet:
    """All rules in force, by behavior, in the order their sources were loaded.

    ``find`` answers "does a rule of this behavior cover this call?"; the argument-aware part
    (Bash sub-commands, file paths, domains, parameters) is delegated to the specifier layer.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: dict[Behavior, list[Rule]] = {b: [] for b in BEHAVIORS}
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> None:
        self.rules[rule.behavior].append(rule)

    def extend(self, rules: Iterable[Rule]) -> None:
        for rule in rules:
            self.add(rule)

    def all(self) -> list[Rule]:
        return [r for b in BEHAVIORS for r in self.rules[b]]

    def find(
        self, behavior: Behavior, tool: Tool, tool_input: dict[str, Any], ctx: CallContext
    ) -> RuleMatch | None:
        candidates = [r for r in self.rules[behavior] if r.matches_name(tool.name)]
        if not candidates:
            return None
        from norma_cli.policy import specifiers

        return specifiers.find_match(behavior, candidates, tool, tool_input, ctx)
