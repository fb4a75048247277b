"""The tool registry: name lookup for execution, separate from the list exposed to a model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from norma_cli.core.contract import TOOL_NAME_RE, Tool
from norma_cli.core.record import record
from norma_cli.errors import ConfigError

# Metadata a registration may set, and the flags among them that must be real booleans: a
# truthy string such as ``read_only="no"`` would otherwise open the read-only fast path.
FLAGS = (
    "read_only",
    "concurrency_safe",
    "requires_approval",
    "raw_input",
    "destructive",
    "edits_files",
    "deferred",
)
METADATA = frozenset({"description", "prompt", "input_schema", "timeout", *FLAGS})


class InvalidTool(ConfigError, TypeError):
    """A tool definition norma cannot use (exit 2). Also a ``TypeError``: it is one, and
    callers of ``register`` have long caught that for a bad function signature."""


def metadata_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the tool metadata ``key`` (None: it can)."""
    if key not in METADATA:
        return f"unknown tool metadata {key!r}"
    if key in FLAGS and not isinstance(value, bool):
        return f"{key} must be true or false, got {type(value).__name__} {_shown(value)}"
    # A dict that is not a valid schema is refused at call time (the executor fails closed);
    # anything else has no keys to compile and crashed every consumer of the definition.
    if key == "input_schema" and not isinstance(value, dict):
        return f"input_schema must be a JSON Schema object (a dict), got {type(value).__name__}"
    if key == "timeout" and value is not None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not 0 < value < float("inf"):
            return f"timeout must be a positive number of seconds or None, got {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a plugin's object whose repr raises still gets a one-line error
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:80] + "…"


@record(frozen=True)
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
        # name -> (factory, plugin): built on first lookup, so a one-shot run imports only
        # the module of the tool it calls.
        self._lazy: dict[str, tuple[Callable[[], Tool], str]] = {}
        self._hidden: set[str] = set()
        self._lock = threading.Lock()
        self.replacements: list[Replacement] = []
        # Last resorts for a name nobody registered: MCP servers whose listing has not been
        # seen yet register their tools when one of their names is looked up.
        self._resolvers: list[Callable[[str], bool]] = []

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
                if key not in METADATA:
                    raise InvalidTool(
                        f"plugin {plugin!r}: tool {tool.name!r}: unknown tool metadata {key!r}"
                    )
                setattr(tool, key, value)
        elif callable(tool_or_function):
            from norma_cli.core.functool import FunctionTool

            try:
                tool = FunctionTool(tool_or_function, name=name, **meta)
            except (TypeError, ValueError, NameError) as exc:  # NameError: an unresolvable hint
                shown = name or getattr(tool_or_function, "__name__", repr(tool_or_function))
                raise InvalidTool(f"plugin {plugin!r}: tool {shown!r}: {exc}") from None
        else:
            raise InvalidTool(f"plugin {plugin!r}: cannot register {tool_or_function!r} as a tool")
        if not isinstance(tool.name, str) or not TOOL_NAME_RE.match(tool.name):
            raise InvalidTool(f"invalid tool name {tool.name!r} from plugin {plugin!r}")
        # Class attributes count too: a Tool subclass may set them without any **meta.
        for key in sorted(METADATA):
            problem = metadata_problem(key, getattr(tool, key, None))
            if problem is not None:
                raise InvalidTool(f"plugin {plugin!r}: tool {tool.name!r}: {problem}")
        tool.plugin = plugin
        with self._lock:
            old = self._tools.get(tool.name)
            lazy = self._lazy.pop(tool.name, None)
            if old is not None or lazy is not None:
                old_plugin = old.plugin if old is not None else lazy[1]  # type: ignore[index]
                self.replacements.append(Replacement(tool.name, old_plugin, plugin))
            self._tools[tool.name] = tool
            if hidden:
                self._hidden.add(tool.name)
            else:
                self._hidden.discard(tool.name)
        return tool

    def register_lazy(
        self, name: str, factory: Callable[[], Tool], *, plugin: str = "builtin"
    ) -> None:
        """Register a tool built on first use (same replacement rules as ``register``)."""
        with self._lock:
            old = self._tools.pop(name, None)
            if old is not None:
                self.replacements.append(Replacement(name, old.plugin, plugin))
            self._lazy[name] = (factory, plugin)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tools.pop(name, None)
            self._lazy.pop(name, None)
            self._hidden.discard(name)

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is None and name in self._lazy:
            with self._lock:
                entry = self._lazy.pop(name, None)
                if entry is not None:
                    factory, plugin = entry
                    built = factory()
                    built.name, built.plugin = name, plugin
                    self._tools[name] = built
                tool = self._tools.get(name)
        if tool is None and self._resolvers:
            for resolver in self._resolvers:
                if resolver(name):
                    return self._tools.get(name)
        return tool

    def add_resolver(self, resolver: Callable[[str], bool]) -> None:
        """``resolver(name)`` may register ``name`` on a failed lookup and return True."""
        self._resolvers.append(resolver)

    def names(self) -> list[str]:
        return sorted({*self._tools, *self._lazy})

    def all(self) -> list[Tool]:
        return [t for t in (self.get(n) for n in self.names()) if t is not None]

    def hide(self, names: Iterable[str]) -> None:
        with self._lock:
            self._hidden.update(n for n in names if n in self._tools or n in self._lazy)

    def is_hidden(self, name: str) -> bool:
        return name in self._hidden

    def exposed(self) -> list[Tool]:
        """Tools whose schemas a model sees (hidden ones are callable but not listed)."""
        return [t for t in self.all() if t.name not in self._hidden]

    def __contains__(self, name: object) -> bool:
        return name in self._tools or name in self._lazy

    def __len__(self) -> int:
        return len(self.names())
