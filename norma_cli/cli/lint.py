"""``norma tools lint [PATH ...]``: lint tool definitions in files, or the registered tools.

Only ``click`` is imported at module level: this module is loaded whenever the ``tools`` group
is, and the linter pulls in the JSON Schema validator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from norma_cli.lint import LintReport

FORMATS = ("text", "json", "github", "sarif")
PROFILE_KEYS = ("openai", "anthropic", "gemini")  # norma_cli.lint.PROFILES, kept import-free


@click.command("lint")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text (file:line: severity rule tool: message), json, github (workflow commands) "
    "or sarif (SARIF 2.1.0).",
)
@click.option(
    "--profile",
    "profiles",
    type=click.Choice(PROFILE_KEYS),
    multiple=True,
    help="Also check what this provider refuses in a tool definition (repeatable).",
)
def lint(*, paths: tuple[str, ...], fmt: str, profiles: tuple[str, ...]) -> None:
    """Lint tool definitions.

    Each PATH is a JSON or TOML file (or a directory of them, or - for JSON on stdin) holding
    one tool (name, description, input_schema | inputSchema | parameters), a list of tools, an
    MCP {"tools": [...]} listing, or OpenAI {"type": "function", "function": {...}} entries.
    Without PATH, the registered tools are linted.

    Diagnostics go to stdout in the chosen format, a summary to stderr. Exit status: 0 clean
    (warnings allowed), 1 when any error was found, 2 when an input cannot be read or parsed.
    """
    from norma_cli.errors import NormaError
    from norma_cli.lint import render

    ctx = click.get_current_context()
    try:
        report = _lint(paths, profiles, ctx.obj)
    except NormaError as exc:
        click.echo(f"norma: error: {exc}", err=True)
        ctx.exit(exc.exit_code)
    out = render(report, fmt)
    if out:
        click.echo(out, nl=False)
    click.echo(f"norma tools lint: {report.summary()}", err=True)
    ctx.exit(1 if report.errors else 0)


def _lint(paths: tuple[str, ...], profiles: tuple[str, ...], ctx_obj: Any) -> LintReport:
    from norma_cli.errors import UsageError
    from norma_cli.lint import Linter, expand_paths, read_source

    linter = Linter(profiles)
    if not paths:
        return linter.lint_definitions(_registered_tools(ctx_obj))
    files = expand_paths(paths)
    if not files:
        raise UsageError(f"no .json or .toml files under {', '.join(paths)}")
    # Read everything first, so a broken file stops the run before any output.
    return linter.lint([read_source(f) for f in files])


def _registered_tools(ctx_obj: Any) -> list[dict[str, Any]]:
    from norma_cli.errors import NormaError, UsageError

    try:
        from norma_cli.runtime import load_registry_for_lint

        return load_registry_for_lint(ctx_obj)
    except NormaError:
        raise
    except Exception as exc:  # no runtime (the command was called outside `norma`), bad plugin
        raise UsageError(
            f"cannot load the registered tools ({type(exc).__name__}: {exc}); pass PATH to lint files"
        ) from None
