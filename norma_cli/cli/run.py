"""``norma run``: one tool call (``NAME -i JSON``) or a JSONL batch (``--calls``)."""

from __future__ import annotations

import sys
from typing import Any

import click

from norma_cli.oneshot import (
    Interrupted,
    parse_input,
    read_calls,
    run_batch,
    run_one,
    tool_use_from_block,
    trap_signals,
)

__all__ = ["parse_input", "read_calls", "run", "tool_use_from_block"]


@click.command("run")
@click.argument("name", required=False)
@click.option(
    "-i",
    "--input",
    "input_",
    metavar="JSON|@FILE",
    help="Tool input as a JSON object, or @FILE to read it.",
)
@click.option(
    "--arg",
    "args",
    multiple=True,
    metavar="KEY=VALUE",
    help="One input field (VALUE parsed as JSON when it is valid JSON).",
)
@click.option(
    "--calls",
    metavar="FILE|-",
    help="JSONL of tool_use blocks (Anthropic or OpenAI shape); '-' reads stdin.",
)
@click.option(
    "--max-concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Parallel concurrency-safe calls in a batch.",
)
@click.option(
    "--dry-run", is_flag=True, help="Decide (lookup, schema, permission) without running the tool."
)
@click.option(
    "--text", "text_only", is_flag=True, help="Print only the text content of the result."
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="Do not wait for an approval: exit 4 with the pending id (norma.pending_id).",
)
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    help="Name the session: its background tasks outlive this invocation, and a later run with the same ID can read or stop them.",
)
@click.option(
    "-p",
    "--prompt",
    metavar="PROMPT",
    help="Run an agent session: a model works on PROMPT through the tools, every call through the pipeline ('-' reads stdin).",
)
@click.option(
    "--provider",
    metavar="NAME",
    help="With -p: the [providers.NAME] to use (default: [agent] provider, else the only one).",
)
@click.option("--model", metavar="MODEL", help="With -p: the model (overrides the provider's).")
@click.option(
    "--agent", "agent_key", metavar="KEY", help="Agent key to act as (same as the global --agent)."
)
@click.option("--system", metavar="TEXT", help="With -p: the system prompt.")
@click.option(
    "--max-turns",
    type=click.IntRange(1),
    help="With -p: at most N model requests (exit 5 when reached).",
)
@click.option(
    "--max-tokens-total",
    type=click.IntRange(1),
    help="With -p: token budget of the run (exit 5 when reached).",
)
@click.option(
    "--resume",
    "resume_id",
    metavar="ID",
    help="With -p: continue session ID (its transcript must exist).",
)
@click.option(
    "--output",
    type=click.Choice(["text", "json", "stream-json"]),
    help="With -p: the answer as text (default), one JSON result, or JSON events per line.",
)
@click.pass_obj
def run(
    app: Any,
    *,
    name: str | None,
    input_: str | None,
    args: tuple[str, ...],
    calls: str | None,
    max_concurrency: int,
    dry_run: bool,
    text_only: bool,
    session_id: str | None,
    no_wait: bool,
    prompt: str | None,
    provider: str | None,
    model: str | None,
    agent_key: str | None,
    system: str | None,
    max_turns: int | None,
    max_tokens_total: int | None,
    resume_id: str | None,
    output: str | None,
) -> None:
    """Run one tool call, or a batch of them, through the policy pipeline.

    Prints one JSON tool_result per call (in the dialect of the input). Exit codes: 0 success,
    1 the tool returned an error, 2 usage or configuration error, 3 denied by policy, 4 pending
    approval (--no-wait). With --calls: 0 when every call succeeded, else the most severe code
    among them (3 > 4 > 1).

    The run is a session that closes when norma exits — normally, on SIGINT, SIGTERM or SIGHUP —
    and its background tasks end with it, unless --session names a session that outlives it.

    With -p PROMPT a model works on the prompt (SPEC §16): exit 0 the model finished, 1 provider
    error after retries, 2 usage or configuration, 3 the prompt was blocked by a hook or a Stop
    hook stopped the run, 5 --max-turns or the token budget reached.
    """
    from norma_cli.errors import UsageError

    if resume_id is not None:
        if session_id is not None:
            raise UsageError("--resume ID continues a session: do not also give --session")
        if prompt is None:
            raise UsageError("--resume needs -p PROMPT")
        session_id = resume_id
    if session_id is not None:
        app.options["session_id"] = session_id
    if agent_key is not None:
        app.options["agent"] = agent_key
    app.options["no_wait"] = no_wait
    agent_flags = {"--provider": provider, "--model": model, "--system": system, "--max-turns": max_turns,
                   "--max-tokens-total": max_tokens_total, "--output": output}  # fmt: skip
    close_reason = "exit"
    try:
        if prompt is not None:
            if name or input_ or args or calls is not None or dry_run or text_only:
                raise UsageError(
                    "-p cannot be combined with NAME, -i, --arg, --calls, --dry-run or --text"
                )
            from norma_cli.agent.loop import PromptOptions

            code = _run_prompt(app, PromptOptions(
                prompt=sys.stdin.read() if prompt == "-" else prompt, provider=provider, model=model,
                system=system, max_turns=max_turns, max_tokens_total=max_tokens_total,
                output=output or "text", resume=resume_id is not None, max_concurrency=max_concurrency,
            ))  # fmt: skip
            close_reason = "error" if code == 1 else "exit"
        elif given := [flag for flag, value in agent_flags.items() if value is not None]:
            raise UsageError(f"{', '.join(given)} only apply to an agent session (-p PROMPT)")
        elif calls is not None:
            if name or input_ or args:
                raise UsageError("--calls cannot be combined with NAME, -i or --arg")
            code = run_batch(app, read_calls(calls), max_concurrency, dry_run, text_only)
        else:
            code = run_one(app, name, input_, args, dry_run, text_only)
    except (KeyboardInterrupt, Interrupted) as exc:
        if isinstance(exc, Interrupted):
            click.echo(f"norma: terminated by {exc.signal_name}", err=True)
        app.close("interrupt")
        raise
    app.close(close_reason)
    sys.exit(code)


def _run_prompt(app: Any, options: Any) -> int:
    """``-p``: the agent loop (norma_cli/agent/loop.py) on this run's runtime."""
    from norma_cli.agent.loop import run_prompt
    from norma_cli.agent.progress import Progress
    from norma_cli.errors import NormaError

    try:
        rt = app.runtime()
        trap_signals(rt.session)
        return run_prompt(rt, options, progress=Progress()).exit_code
    except NormaError:
        app.close("error")  # SessionEnd says why (a bad provider config is exit 2, not "exit")
        raise
