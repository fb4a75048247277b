"""Which built-in tools exist, and the default set installed when config names none."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING

from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    from norma_cli.core.contract import Tool

# name -> "module:class"; modules are imported only when the tool is installed.
BUILTINS: dict[str, str] = {
    "Read": "norma_cli.tools.files:ReadTool",
    "Write": "norma_cli.tools.files:WriteTool",
    "Edit": "norma_cli.tools.files:EditTool",
    "MultiEdit": "norma_cli.tools.files:MultiEditTool",
    "LS": "norma_cli.tools.files:LSTool",
    "Glob": "norma_cli.tools.files:GlobTool",
    "Bash": "norma_cli.tools.bash:BashTool",
}
DEFAULT_SET = ("Read", "Write", "Edit", "MultiEdit", "LS", "Glob", "Bash")


def builtin_factories(
    names: list[str] | tuple[str, ...] | None = None, source: str = "[tools] builtin"
) -> dict[str, Callable[[], Tool]]:
    """Factories of the chosen built-ins; a tool's module is imported when it is first built."""
    factories: dict[str, Callable[[], Tool]] = {}
    for name in DEFAULT_SET if names is None else names:
        target = BUILTINS.get(name)
        if target is None:
            known = ", ".join(sorted(BUILTINS))
            raise ConfigError(f"{source}: unknown built-in tool {name!r} (known: {known})")
        factories[name] = partial(_build, target)
    return factories


def _build(target: str) -> Tool:
    module, cls = target.split(":")
    tool: Tool = getattr(import_module(module), cls)()
    return tool
