"""Which built-in tools exist, and the default set installed when config names none."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING, Any

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
    "Grep": "norma_cli.tools.grep:GrepTool",
    "WebFetch": "norma_cli.tools.web:WebFetchTool",
    "WebSearch": "norma_cli.tools.search:WebSearchTool",
    "Bash": "norma_cli.tools.bash:BashTool",
    "TaskOutput": "norma_cli.tools.tasks:TaskOutputTool",
    "TaskStop": "norma_cli.tools.tasks:TaskStopTool",
    "TaskList": "norma_cli.tools.tasks:TaskListTool",
    "Monitor": "norma_cli.tools.tasks:MonitorTool",
    "ShellStart": "norma_cli.tools.pty_shell:ShellStartTool",
    "ShellSend": "norma_cli.tools.pty_shell:ShellSendTool",
    "ShellRead": "norma_cli.tools.pty_shell:ShellReadTool",
    "ShellList": "norma_cli.tools.pty_shell:ShellListTool",
    "ShellClose": "norma_cli.tools.pty_shell:ShellCloseTool",
    "TodoWrite": "norma_cli.tools.session_tools:TodoWriteTool",
    "AskUser": "norma_cli.tools.session_tools:AskUserTool",
    "EnterPlanMode": "norma_cli.tools.session_tools:EnterPlanModeTool",
    "ExitPlanMode": "norma_cli.tools.session_tools:ExitPlanModeTool",
    "Memory": "norma_cli.tools.session_tools:MemoryTool",
}
# The background task tools join the default set unless `[tools] background = false`.
TASK_TOOLS = ("TaskOutput", "TaskStop", "TaskList", "Monitor")
DEFAULT_SET = ("Read", "Write", "Edit", "MultiEdit", "LS", "Glob", "Grep", "Bash", *TASK_TOOLS)


def builtin_factories(
    names: list[str] | tuple[str, ...] | None = None,
    source: str = "[tools] builtin",
    *,
    background: bool = True,
) -> dict[str, Callable[[], Tool]]:
    """Factories of the chosen built-ins; a tool's module is imported when it is first built."""
    factories: dict[str, Callable[[], Tool]] = {}
    if names is None:
        names = DEFAULT_SET if background else tuple(n for n in DEFAULT_SET if n not in TASK_TOOLS)
    for name in names:
        target = BUILTINS.get(name)
        if target is None:
            known = ", ".join(sorted(BUILTINS))
            raise ConfigError(f"{source}: unknown built-in tool {name!r} (known: {known})")
        factories[name] = partial(_build, target)
    return factories


# Built-ins with settings of their own, checked when the runtime is built: a bad [web] or
# [search] section is a startup error (exit 2), never a tool that fails on its first call.
VALIDATED = ("WebFetch", "WebSearch")


def validate_builtins(names: Iterable[str], config: Any, plugins: Any) -> None:
    """Run ``Tool.validate(config, plugins)`` of each enabled built-in that has settings."""
    for name in names:
        if name in VALIDATED:
            module, cls = BUILTINS[name].split(":")
            getattr(import_module(module), cls).validate(config, plugins)


def _build(target: str) -> Tool:
    module, cls = target.split(":")
    tool: Tool = getattr(import_module(module), cls)()
    return tool
