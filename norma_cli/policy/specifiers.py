"""Argument-aware matching of rule specifiers.

First cut: a rule without a specifier matches by name. A rule *with* a specifier fails
closed until the argument-aware engine understands it: deny and ask rules are taken to match
(so a rule nobody can evaluate never lets a call through), allow rules are taken not to match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from norma_cli.core.contract import Behavior, CallContext, Tool
    from norma_cli.policy.rules import Rule, RuleMatch


def check_syntax(rule: Rule) -> None:
    """Raise ConfigError when the specifier of ``rule`` cannot be parsed."""


def find_match(
    behavior: Behavior, candidates: list[Rule], tool: Tool, tool_input: dict[str, Any], ctx: CallContext
) -> RuleMatch | None:
    from norma_cli.policy.rules import RuleMatch

    for rule in candidates:
        if rule.specifier is None or behavior != "allow":
            return RuleMatch(rule)
    return None
