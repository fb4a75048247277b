"""Tool contract and registry (SPEC §2)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from norma_cli.core.contract import CallContext, Tool, ToolCall
from norma_cli.core.executor import Executor
from norma_cli.core.hooks import HookRunner
from norma_cli.core.output import OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.registry import ToolRegistry
from norma_cli.errors import NormaError
from norma_cli.policy.rules import RuleSet


def test_unset_metadata_fails_closed() -> None:
    class Bare(Tool):
        name = "Bare"

    meta = Bare().metadata()
    assert meta["read_only"] is False
    assert meta["concurrency_safe"] is False
    assert meta["requires_approval"] is True


def test_function_becomes_tool_with_schema_from_signature() -> None:
    def search(
        query: str, limit: int = 10, kind: Literal["a", "b"] = "a", tags: list[str] | None = None
    ) -> str:
        """Search things.

        Args:
            query: what to look for
            limit: how many results
        """
        return query

    tool = ToolRegistry().register(search, read_only=True)
    assert tool.name == "search" and tool.description == "Search things."
    schema = tool.input_schema
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string", "description": "what to look for"}
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "description": "how many results",
        "default": 10,
    }
    assert schema["properties"]["kind"] == {"enum": ["a", "b"], "default": "a"}
    assert schema["properties"]["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "default": None,
    }
    assert schema["additionalProperties"] is False
    assert tool.read_only is True and tool.concurrency_safe is False  # unset stays closed


def test_unsupported_signature_is_refused() -> None:
    def bad(*args: str) -> str:
        return ""

    with pytest.raises(TypeError):
        ToolRegistry().register(bad)


def test_duplicate_name_replaces_and_records_plugin() -> None:
    reg = ToolRegistry()

    def one() -> str:
        return "one"

    def two() -> str:
        return "two"

    reg.register(one, name="same", plugin="first")
    reg.register(two, name="same", plugin="second")
    assert len(reg) == 1 and reg.get("same").plugin == "second"  # type: ignore[union-attr]
    assert [(r.name, r.old_plugin, r.new_plugin) for r in reg.replacements] == [
        ("same", "first", "second")
    ]


def test_invalid_names_rejected() -> None:
    def f() -> str:
        return ""

    for name in ("has space", "x" * 65, "dot.name", "slash/name"):
        with pytest.raises(NormaError):
            ToolRegistry().register(f, name=name)


def test_hidden_tool_callable_but_not_exposed(tmp_path: Path) -> None:
    reg = ToolRegistry()

    def shown() -> str:
        return "s"

    def secret() -> str:
        return "hidden but callable"

    reg.register(shown, read_only=True)
    reg.register(secret, read_only=True, hidden=True)
    assert [t.name for t in reg.exposed()] == ["shown"]
    assert "secret" in reg
    ctx = CallContext("s", tmp_path, (tmp_path,))
    ex = Executor(reg, PermissionEngine(RuleSet()), HookRunner(), OutputCapper(), ctx)
    assert ex.run(ToolCall("t", "secret", {})).text() == "hidden but callable"


def test_sync_and_async_functions(tmp_path: Path) -> None:
    reg = ToolRegistry()

    def add(a: int, b: int) -> dict:
        return {"sum": a + b}

    async def aadd(a: int, b: int) -> str:
        return str(a + b)

    reg.register(add, read_only=True)
    reg.register(aadd, read_only=True)
    ctx = CallContext("s", tmp_path, (tmp_path,))
    ex = Executor(reg, PermissionEngine(RuleSet()), HookRunner(), OutputCapper(), ctx)
    sync = ex.run(ToolCall("t", "add", {"a": 1, "b": 2}))
    assert sync.content[0].type == "json" and sync.content[0].data == {"sum": 3}
    assert ex.run(ToolCall("t", "aadd", {"a": 2, "b": 2})).text() == "4"


def test_function_tool_receives_context(tmp_path: Path) -> None:
    def where(ctx: CallContext) -> str:
        return ctx.session_id

    reg = ToolRegistry()
    tool = reg.register(where, read_only=True)
    assert tool.input_schema["properties"] == {}
    ex = Executor(
        reg,
        PermissionEngine(RuleSet()),
        HookRunner(),
        OutputCapper(),
        CallContext("sid-1", tmp_path, (tmp_path,)),
    )
    assert ex.run(ToolCall("t", "where", {})).text() == "sid-1"
