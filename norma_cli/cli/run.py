"""``norma run``: one tool call (``NAME -i JSON``) or a JSONL batch (``--calls``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from norma_cli.core.contract import ToolCall, ToolResult


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
            batch = read_calls(calls)
            code = _run_batch(app, batch, max_concurrency, dry_run, text_only)
        else:
            if not name:
                raise UsageError("missing tool NAME (or --calls FILE)")
            from norma_cli.core.contract import ToolCall

            tool_input = parse_input(input_, args)
            call = ToolCall(id=f"toolu_norma_{_short_id()}", name=name, input=tool_input)
            code = _run_batch(app, [call], 1, dry_run, text_only)
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
        _trap_signals(rt.session)
        return run_prompt(rt, options, progress=Progress()).exit_code
    except NormaError:
        app.close("error")  # SessionEnd says why (a bad provider config is exit 2, not "exit")
        raise


class Interrupted(SystemExit):
    """SIGTERM/SIGHUP: leave through the normal close path, exiting 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


def _trap_signals(session: Any) -> None:
    """Turn SIGINT/SIGTERM/SIGHUP into exceptions, so the session closes and ends its tasks.

    Without this a SIGTERM would kill norma on the spot and orphan every background process.
    The first signal also cancels waits on worker threads (Monitor, TaskOutput block) so the
    batch unwinds promptly; later signals are ignored while the cleanup runs.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    trapped = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def ignore(signum: int, frame: Any) -> None:
        return None

    def handler(signum: int, frame: Any) -> None:
        session.cancelled.set()
        for sig in trapped:
            signal.signal(sig, ignore)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)

    for sig in trapped:
        signal.signal(sig, handler)


def _run_batch(
    app: Any, batch: list[ToolCall], max_concurrency: int, dry_run: bool, text_only: bool
) -> int:
    rt = app.runtime()
    _trap_signals(rt.session)
    rt.session.start()
    severity = {3: 3, 4: 2, 1: 1, 0: 0}
    worst = 0
    results = (
        (rt.executor.decide(c) for c in batch)
        if dry_run
        else rt.executor.iter_batch(batch, max_concurrency)
    )
    for result in results:
        _emit(result, text_only)
        code = result.exit_code()
        if code == 4 and result.meta.pending_id:
            click.echo(
                f"norma: pending approval {result.meta.pending_id}: norma approve {result.meta.pending_id}",
                err=True,
            )
        if severity[code] > severity[worst]:
            worst = code
    return worst


def _emit(result: ToolResult, text_only: bool) -> None:
    import json

    if text_only:
        text = result.text()
        click.echo(text, nl=not text.endswith("\n"))
    else:
        click.echo(json.dumps(result.to_wire(), ensure_ascii=False, default=str))


def _short_id() -> str:
    import uuid

    return uuid.uuid4().hex[:24]


def _read_arg_file(spec: str) -> str:
    from norma_cli.errors import UsageError

    path = Path(spec[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot read input file {path}: {reason}") from None


def parse_input(raw: str | None, args: tuple[str, ...]) -> dict[str, Any]:
    """``-i JSON`` / ``-i @FILE`` and ``--arg k=v`` → one input object."""
    import json

    from norma_cli.errors import UsageError

    tool_input: dict[str, Any] = {}
    if raw is not None:
        text = _read_arg_file(raw) if raw.startswith("@") else raw
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"input is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        if not isinstance(value, dict):
            raise UsageError(f"input must be a JSON object, got {type(value).__name__}")
        tool_input.update(value)
    for item in args:
        key, sep, value_text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--arg {item!r}: expected KEY=VALUE")
        try:
            tool_input[key] = json.loads(value_text)
        except json.JSONDecodeError:
            tool_input[key] = value_text
    return tool_input


def read_calls(spec: str) -> list[ToolCall]:
    """Parse a JSONL batch up front: a malformed line runs nothing and names the line."""
    import json

    from norma_cli.errors import UsageError

    if spec == "-":
        source, lines = "stdin", sys.stdin.read().splitlines()
    else:
        try:
            lines = Path(spec).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"cannot read calls file {spec}: {reason}") from None
        source = spec
    batch: list[ToolCall] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            block = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON: {exc.msg}") from None
        call = tool_use_from_block(block, where)
        if call.id in seen:
            raise UsageError(
                f"{where}: duplicate tool_use id {call.id!r} (results are paired by id)"
            )
        seen.add(call.id)
        batch.append(call)
    return batch


def tool_use_from_block(block: Any, where: str) -> ToolCall:
    """Accept an Anthropic ``tool_use`` block or an OpenAI tool call."""
    import json

    from norma_cli.core.contract import ToolCall
    from norma_cli.errors import UsageError

    if not isinstance(block, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(block).__name__}")
    if "function" in block:
        fn = block["function"]
        call_id, name = block.get("id"), fn.get("name") if isinstance(fn, dict) else None
        raw_args = fn.get("arguments", "{}") if isinstance(fn, dict) else None
        if isinstance(raw_args, str):
            try:
                args = json.loads(raw_args or "{}")
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"{where}: function.arguments is not valid JSON: {exc.msg}"
                ) from None
        else:
            args = raw_args
        dialect = "openai"
    else:
        if block.get("type", "tool_use") != "tool_use":
            raise UsageError(f"{where}: expected a tool_use block, got type {block.get('type')!r}")
        call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
        dialect = "anthropic"
    if not isinstance(call_id, str) or not call_id:
        raise UsageError(f"{where}: missing string 'id'")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: missing string tool name")
    return ToolCall(call_id, name, args, dialect)  # type: ignore[arg-type]
