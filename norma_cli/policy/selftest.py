"""Rules that test themselves: ``match`` / ``not_match`` examples checked when a policy loads.

An example asks "does this rule, on its own, cover this call?" — the same question the
permission engine asks of it, through the same matching code:

* for a ``Bash`` rule an example is a command line; a deny or ask rule covers it when any
  sub-command matches, an allow rule when it alone would allow every sub-command (so
  ``git log && rm x`` is *not* matched by ``Bash(git log:*)``);
* for a file tool (``Read``, ``Edit``, ...) a string is the path; for ``WebFetch`` the URL;
* otherwise an example is the tool's input object. A rule whose name is a wildcard
  (``mcp__git__*``) takes ``{"tool": "mcp__git__git_commit", "input": {...}}``.

``check_examples`` returns one message per failing example; the loader refuses the policy
when there is any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import Tool
from norma_cli.policy.specifiers import FILE_TOOLS, SHELL_TOOL, RuleGroup

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext
    from norma_cli.core.registry import ToolRegistry
    from norma_cli.policy.rules import Rule

_DIRECTORY_TOOLS = frozenset({"LS", "Glob", "Grep"})


class _ExampleTool(Tool):
    """Stands in for the real tool: only its name and the paths it touches matter here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        for key in ("file_path", "path", "notebook_path"):
            value = tool_input.get(key)
            if isinstance(value, str):
                return [value]
        return [str(ctx.cwd)] if self.name in _DIRECTORY_TOOLS else []


def check_examples(
    rule: Rule,
    match: list[Any],
    not_match: list[Any],
    ctx: CallContext,
    registry: ToolRegistry | None = None,
) -> list[str]:
    """Failure messages (empty when every example behaves as written).

    With a ``registry`` the real tool is used (its own ``file_paths``); otherwise, or for a
    tool not registered, a stand-in that reads ``file_path`` / ``path``.
    """
    failures = []
    cases = [(ex, True) for ex in match] + [(ex, False) for ex in not_match]
    for example, expected in cases:
        try:
            tool, tool_input = _example_call(rule, example, registry)
        except ValueError as e:
            failures.append(f"example {example!r}: {e}")
            continue
        group = RuleGroup(rule.behavior, tool.name, [rule], ask_when_not_literal=False)
        hit = group.find(tool, tool_input, ctx) is not None
        if hit != expected:
            verb = "should match but does not" if expected else "should not match but does"
            failures.append(f"example {example!r} {verb}")
    return failures


def _example_call(
    rule: Rule, example: Any, registry: ToolRegistry | None
) -> tuple[Tool, dict[str, Any]]:
    if any(c in rule.name for c in "*?"):
        if not (
            isinstance(example, dict)
            and isinstance(example.get("tool"), str)
            and isinstance(example.get("input"), dict)
        ):
            raise ValueError(
                'a rule with a wildcard name takes examples like {tool = "...", input = {...}}'
            )
        if not rule.matches_name(example["tool"]):
            raise ValueError(f"tool {example['tool']!r} does not match the rule's name")
        return _tool(example["tool"], registry), example["input"]
    tool = _tool(rule.name, registry)
    if isinstance(example, dict):
        return tool, example
    if not isinstance(example, str):
        raise ValueError("an example is a string or an input object")
    if rule.name == SHELL_TOOL:
        return tool, {"command": example}
    if rule.name in FILE_TOOLS:
        return tool, {"path" if rule.name in _DIRECTORY_TOOLS else "file_path": example}
    if rule.name == "WebFetch":
        return tool, {"url": example}
    raise ValueError(f"examples for {rule.name} are input objects")


def _tool(name: str, registry: ToolRegistry | None) -> Tool:
    real = registry.get(name) if registry is not None else None
    return real if real is not None else _ExampleTool(name)
