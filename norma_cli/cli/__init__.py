"""The ``norma`` command group. Subcommands live one group per module and load on demand.

Only ``click`` is imported here: ``norma --help`` must not pay for the executor, the schema
validator, the shell parser or any plugin.
"""

from __future__ import annotations

import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import click

from norma_cli import __version__
from norma_cli.core.modes import MODES
from norma_cli.oneshot import App

# command name -> "module:attribute"
COMMANDS = {
    "run": "norma_cli.cli.run:run",
    "tools": "norma_cli.cli.tools:tools",
    "plugins": "norma_cli.cli.plugins:plugins",
    "config": "norma_cli.cli.config:config",
    "policy": "norma_cli.cli.policy:policy",
    "catalog": "norma_cli.cli.catalog:catalog",
    "skills": "norma_cli.cli.skills:skills",
    "trace": "norma_cli.cli.trace:trace",
    "approve": "norma_cli.cli.approve:approve",
    "mcp": "norma_cli.cli.mcp:mcp",
}


class LazyGroup(click.Group):
    _plugins_loaded = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is not None:
            module, attr = target.split(":")
            command: click.Command = getattr(import_module(module), attr)
            return command
        command_or_none = super().get_command(ctx, cmd_name)
        if command_or_none is None and not ctx.resilient_parsing and not self._plugins_loaded:
            self._plugins_loaded = True  # plugin commands load only when asked for
            from norma_cli.plugins import PluginHost

            host = PluginHost()
            host.load_entry_points()
            host.register_commands(self)
            command_or_none = super().get_command(ctx, cmd_name)
        return command_or_none


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Extra config file (after NORMA_CONFIG).",
)
@click.option("--agent", help="Agent key (role) to act as.")
@click.option("--mode", type=click.Choice(MODES), help="Permission mode for this invocation.")
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, path_type=Path),
    help="Working directory (default: the current one).",
)
@click.option("--allow", multiple=True, metavar="RULE", help="Add an allow rule (repeatable).")
@click.option("--ask", multiple=True, metavar="RULE", help="Add an ask rule (repeatable).")
@click.option("--deny", multiple=True, metavar="RULE", help="Add a deny rule (repeatable).")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and more detail on errors.")
@click.version_option(__version__, "--version", prog_name="norma")
@click.pass_context
def cli(ctx: click.Context, **options: Any) -> None:
    """norma — run AI-agent tool calls behind a policy pipeline.

    Every call passes lookup, schema validation, permission rules, hooks and output capping,
    and leaves a trace in the store. Exit codes of `norma run`: 0 success, 1 tool error,
    2 usage or configuration error, 3 denied by policy, 4 pending approval.
    """
    app = App(**options)
    ctx.obj = app
    ctx.call_on_close(app.close)


def main() -> None:
    from norma_cli.oneshot import guarded

    verbose = "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]

    def body() -> int:
        try:
            code = cli.main(prog_name="norma", standalone_mode=False)
        except click.exceptions.Abort:
            click.echo("norma: interrupted", err=True)
            return 130
        except click.UsageError as exc:  # one line, as every other error (click prints three)
            where = exc.ctx.command_path if exc.ctx else "norma"
            message = " ".join(exc.format_message().split())
            sys.stderr.write(f"norma: error: {message} (see '{where} --help')\n")
            return exc.exit_code
        except click.ClickException as exc:
            sys.stderr.write(f"norma: error: {' '.join(exc.format_message().split())}\n")
            return exc.exit_code
        except click.exceptions.Exit as exc:
            return exc.exit_code
        return code if isinstance(code, int) else 0

    sys.exit(guarded(body, verbose))
