"""The tool registry: name lookup for execution, separate from the list exposed to a model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from norma_cli.core.contract import TOOL_NAME_RE, Tool
from norma_cli.errors import NormaError


@dataclass(frozen=True)
class Replacement:
    """A duplicate registration: ``name`` was first from ``old_plugin``, now ``new_plugin``."""

    name: str
    old_plugin: str
    new_plugin: str


class ToolRegistry:
    """Holds tools by name. A duplicate name replaces the earlier tool and is recorded.

    Exposure is tracked apart from lookup: a hidden (deferred) tool is callable by name but
    absent from ``exposed()``; a locked tool is listed in neither until unlocked.
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._hidden: set[str] = set()
        self._lock = threading.Lock()
        self.replacements: list[Replacement] = []

    def register(
        self,
        tool_or_function: Tool | Callable[..., Any],
        name: str | None = None,
        *,
        plugin: str = "builtin",
        hidden: bool = False,
        **meta: Any,
    ) -> Tool:
        if isinstance(tool_or_function, Tool):
            tool = tool_or_function
            if name:
                tool.name = name
            for key, value in meta.items():
                setattr(tool, key, value)
        elif callable(tool_or_function):
            from norma_cli.core.functool import FunctionTool

            tool = FunctionTool(tool_or_function, name=name, **meta)
        else:
            raise NormaError(f"cannot register {tool_or_function!r} as a tool")
        if not TOOL_NAME_RE.match(tool.name or ""):
            raise NormaError(f"invalid tool name {tool.name!r} from plugin {plugin}")
        tool.plugin = plugin
        with self._lock:
            old = self._tools.get(tool.name)
            if old is not None:
                self.replacements.append(Replacement(tool.name, old.plugin, plugin))
            self._tools[tool.name] = tool
            if hidden:
                self._hidden.add(tool.name)
            else:
                self._hidden.discard(tool.name)
        return tool

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tools.pop(name, None)
            self._hidden.discard(name)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def all(self) -> list[Tool]:
        return [self._tools[n] for n in self.names()]

    def hide(self, names: Iterable[str]) -> None:
        with self._lock:
            self._hidden.update(n for n in names if n in self._tools)

    def is_hidden(self, name: str) -> bool:
        return name in self._hidden

    def exposed(self) -> list[Tool]:
        """Tools whose schemas a model sees (hidden ones are callable but not listed)."""
        return [t for t in self.all() if t.name not in self._hidden]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
