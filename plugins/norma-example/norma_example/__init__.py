"""Example norma plugin: one tool, one permission rule, one PreToolUse hook."""

from __future__ import annotations

import json
import re
from typing import Any

from norma_cli import hookimpl

BLOCK_MARKER = "NORMA_EXAMPLE_BLOCK"


def slugify(text: str, separator: str = "-") -> str:
    """Turn text into a lowercase URL slug.

    Args:
        text: the text to slugify
        separator: what joins the words
    """
    words = re.findall(r"[a-z0-9]+", text.lower())
    return separator.join(words)


@hookimpl
def register_tools(register: Any) -> None:
    register(slugify, read_only=True, concurrency_safe=True, requires_approval=False)


@hookimpl
def register_permission_rules(register: Any) -> None:
    register("Bash(shutdown:*)", "deny")


@hookimpl
def pre_tool_use(event: dict[str, Any]) -> dict[str, Any] | None:
    if BLOCK_MARKER in json.dumps(event.get("tool_input")):
        return {"decision": "block", "reason": f"norma-example: input carries {BLOCK_MARKER}"}
    return None


@hookimpl
def register_commands(cli: Any) -> None:
    import click

    @cli.command("example-hello")
    @click.argument("name", default="world")
    def example_hello(name: str) -> None:
        """Say hello (a command contributed by the norma-example plugin)."""
        click.echo(f"hello, {slugify(name)}")
