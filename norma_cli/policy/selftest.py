"""Rules that test themselves: ``match`` / ``not_match`` examples checked at load time.

An example is Bash command text for a Bash rule, or an input object for any other tool. A
config whose own examples fail does not load, so a rule that silently matches nothing (or too
much) is caught when it is written, not when it is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from norma_cli.policy.rules import Rule, RuleSet

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext, Tool
    from norma_cli.core.registry import ToolRegistry


def _example_input(rule: Rule, example: Any) -> dict[str, Any]:
    if isinstance(example, dict):
        return example
    if isinstance(example, str) and rule.name == "Bash":
        return {"command": example}
    raise ValueError(f"example {example!r} must be an input object (a string only for Bash rules)")


def _tool_for(rule: Rule, registry: ToolRegistry) -> Tool:
    tool = registry.get(rule.name)
    if tool is None:
        matching = [t for t in registry.all() if rule.matches_name(t.name)]
        if not matching:
            raise ValueError(f"no registered tool matches {rule.name!r}, so its examples cannot be checked")
        tool = matching[0]
    return tool


def check_examples(
    rule: Rule, match: list[Any], not_match: list[Any], ctx: CallContext, registry: ToolRegistry
) -> list[str]:
    """Failure messages (empty when every example behaves as written)."""
    failures: list[str] = []
    rules = RuleSet([rule])
    try:
        tool = _tool_for(rule, registry)
    except ValueError as exc:
        return [str(exc)]
    for expected, examples in ((True, match), (False, not_match)):
        for example in examples:
            try:
                tool_input = _example_input(rule, example)
            except ValueError as exc:
                failures.append(str(exc))
                continue
            hit = rules.find(rule.behavior, tool, tool_input, ctx) is not None
            if hit != expected:
                verb = "should match but does not" if expected else "should not match but does"
                failures.append(f"example {example!r} {verb}")
    return failures
