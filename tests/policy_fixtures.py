"""Shared pieces of the policy tests: stand-in tools, a realistic rule set, a real workspace.

The stand-in tools have the names and ``file_paths`` of the built-in tools, so the rule engine
is exercised exactly as it is for them, without depending on their implementation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Decision, Tool
from norma_cli.core.permission import PermissionEngine
from norma_cli.policy.rules import Rule, RuleSet


class Bash(Tool):
    name = "Bash"


class _PathTool(Tool):
    key = "file_path"
    default: str | None = None

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        value = tool_input.get(self.key, self.default)
        return [value] if isinstance(value, str) else []


class Read(_PathTool):
    name = "Read"
    read_only = True


class Write(_PathTool):
    name = "Write"
    edits_files = True


class Edit(_PathTool):
    name = "Edit"
    edits_files = True


class MultiEdit(_PathTool):
    name = "MultiEdit"
    edits_files = True


class LS(_PathTool):
    name = "LS"
    key = "path"
    read_only = True


class Glob(_PathTool):
    name = "Glob"
    key = "path"
    default = "."
    read_only = True


class Grep(_PathTool):
    name = "Grep"
    key = "path"
    default = "."
    read_only = True


class WebFetch(Tool):
    name = "WebFetch"


def named_tool(tool_name: str) -> Tool:
    tool = Tool()
    tool.name = tool_name
    return tool


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (Bash(), Read(), Write(), Edit(), MultiEdit(), LS(), Glob(), Grep(), WebFetch())
}

# One realistic policy for every corpus: what a project's norma.toml might hold.
POLICY: dict[str, list[str]] = {
    "allow": [
        "Bash(git log:*)",
        "Bash(git status)",
        "Bash(git diff:*)",
        "Bash(npm test)",
        "Bash(npm run build:*)",
        "Bash(ls:*)",
        "Bash(cat:*)",
        "Bash(echo:*)",
        "Bash(grep:*)",
        "Bash(head:*)",
        "Bash(wc:*)",
        "Bash(sort:*)",
        "Bash(bash:*)",
        "Bash(find:*)",
        "Bash(make:*)",
        "Bash(pytest:*)",
        "Bash(cd:*)",
        "Bash(true)",
        "Bash(sudo apt-get update)",
        "Edit(./build/**)",
        "Write(./logs/**)",
        "Read(./docs/**)",
        "Edit(./src/**)",
        "WebFetch(domain:example.com)",
        "WebFetch(domain:*.docs.rs)",
        "WebFetch(domain:bücher.de)",
        "mcp__git__git_status",
        "mcp__git__git_commit(repo_path:/srv/**)",
    ],
    "ask": [
        "Bash(git push:*)",
        "Bash(npm publish:*)",
        "Edit(./package.json)",
    ],
    "deny": [
        "Bash(rm:*)",
        "Bash(git push --force:*)",
        "Bash(curl:*)",
        "Bash(shutdown)",
        "Bash(dd:*)",
        "Edit(//etc/**)",
        "Read(./secrets/**)",
        "Read(~/.ssh/**)",
        "Read(*.env)",
        "WebFetch(domain:evil.net)",
        "WebFetch(domain:*.evil.org)",
        "WebFetch(domain:127.0.0.1)",
        "mcp__db__query(sql:*DROP*)",
        "mcp__git__*(repo_path:/etc/**)",
    ],
}


def ruleset(policy: dict[str, list[str]] = POLICY) -> RuleSet:
    rules = RuleSet()
    for behavior, texts in policy.items():
        for i, text in enumerate(texts):
            rules.add(Rule.parse(text, behavior, f"norma.toml:{behavior}[{i}]"))  # type: ignore[arg-type]
    return rules


@dataclass
class Workspace:
    root: Path
    home: Path
    outside: Path
    engine: PermissionEngine
    ctx: CallContext

    def evaluate(self, tool: Tool, tool_input: dict[str, Any]) -> Decision:
        return self.engine.evaluate(tool, tool_input, self.ctx)

    def fill(self, value: Any) -> Any:
        """``{root}``, ``{home}``, ``{outside}`` placeholders in corpus strings."""
        if isinstance(value, str):
            return value.format(root=self.root, home=self.home, outside=self.outside)
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value


def make_workspace(
    tmp: Path, policy: dict[str, list[str]] = POLICY, mode: str = "default"
) -> Workspace:
    """A project with secrets, a symlink into them, a symlink to /etc and out of the tree."""
    root, home, outside = tmp / "proj", tmp / "home", tmp / "outside"
    for d in ("secrets", "src", "docs", "build", "logs"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    outside.mkdir(exist_ok=True)
    (root / "secrets" / "k").write_text("key")
    (root / "src" / "a.py").write_text("print(1)")
    (root / "docs" / "a.md").write_text("# a")
    (root / "package.json").write_text("{}")
    (home / ".ssh" / "id_rsa").write_text("private")
    (outside / "x").write_text("x")
    for link, target in (
        ("link", root / "secrets"),
        ("etclink", Path("/etc")),
        ("src/outlink", outside),
        ("docs/seclink", root / "secrets"),
    ):
        if not (root / link).is_symlink():
            os.symlink(target, root / link)
    ctx = CallContext("policy-tests", root, (root,), mode=mode)
    return Workspace(root, home, outside, PermissionEngine(ruleset(policy)), ctx)
