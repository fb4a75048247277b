"""The ``norma`` entry point, and the one-shot run that shell scripts call most.

``norma run NAME -i JSON`` is the hot path of every script and CI job, and SPEC §15 budgets it
against a bare Python script. Importing click costs more than the whole call, so ``main``
first tries ``fast_argv``: a strict reader of exactly the simple form (global options,
``run``, one NAME, ``-i``/``--arg``/``--text``/``--dry-run``/``--no-wait``/``--session``).
Anything else — help, other commands, batches, ``-p``, an option it does not know, a value it
would have to check — goes to the click CLI unchanged. Both paths run the same functions below,
so a call behaves the same whichever path read it (a test holds them to that).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.modes import MODES
from norma_cli.core.record import field, record
from norma_cli.errors import Interrupted

if TYPE_CHECKING:
    from norma_cli.core.contract import ToolCall, ToolResult
    from norma_cli.runtime import Runtime


_ASCII_JSON = False  # stdout cannot take UTF-8: results are printed as ASCII-only JSON


class App:
    """Global options, and the runtime built from them on first use."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.verbose: bool = options.pop("verbose", False)
        self._runtime: Runtime | None = None

    def runtime(self, *, with_store: bool = True, interactive: bool | None = None) -> Runtime:
        if self._runtime is None:
            from norma_cli.runtime import Options, Runtime

            opts = Options(
                cwd=self.options.get("cwd"),
                config=self.options.get("config"),
                agent=self.options.get("agent"),
                mode=self.options.get("mode"),
                allow=self.options.get("allow") or (),
                ask=self.options.get("ask") or (),
                deny=self.options.get("deny") or (),
                session_id=self.options.get("session_id"),
                no_wait=bool(self.options.get("no_wait")),
                interactive=interactive,
                with_store=with_store,
            )
            self._runtime = Runtime.build(opts)
            for warning in self._runtime.warnings:
                sys.stderr.write(f"norma: warning: {warning}\n")
        return self._runtime

    def close(self, reason: str = "exit") -> None:
        if self._runtime is not None:
            rt, self._runtime = self._runtime, None
            rt.close(reason)


# ----------------------------------------------------------------------------- one call
def run_one(
    app: App,
    name: str | None,
    input_: str | None,
    args: tuple[str, ...],
    dry_run: bool,
    text_only: bool,
) -> int:
    """``norma run NAME``: one call with an invented id; the exit code of its result."""
    from norma_cli.core.contract import ToolCall
    from norma_cli.errors import UsageError

    if not name:
        raise UsageError("missing tool NAME (or --calls FILE)")
    tool_input = parse_input(input_, args)
    call = ToolCall(id=f"toolu_norma_{os.urandom(12).hex()}", name=name, input=tool_input)
    return run_batch(app, [call], 1, dry_run, text_only)


def run_batch(
    app: App, batch: list[ToolCall], max_concurrency: int, dry_run: bool, text_only: bool
) -> int:
    rt = app.runtime()
    trap_signals(rt.session)
    rt.session.start()
    severity = {3: 3, 4: 2, 1: 1, 0: 0}
    worst = 0
    chunks = (
        ([rt.executor.decide(c)] for c in batch)
        if dry_run
        else rt.executor.iter_batch_chunks(batch, max_concurrency)
    )
    for chunk in chunks:  # a chunk's results are recorded together; print them, then flush
        for result in chunk:
            emit(result, text_only)
            code = result.exit_code()
            if code == 4 and result.meta.pending_id:
                pid = result.meta.pending_id
                sys.stderr.write(f"norma: pending approval {pid}: norma approve {pid}\n")
            if severity[code] > severity[worst]:
                worst = code
        sys.stdout.flush()
    return worst


def emit(result: ToolResult, text_only: bool) -> None:
    import json

    if text_only:
        text = result.text()
        line = text if text.endswith("\n") else text + "\n"
    else:
        line = json.dumps(result.to_wire(), ensure_ascii=_ASCII_JSON, default=str) + "\n"
    try:
        sys.stdout.write(line)  # encoded whole before any byte is written
    except UnicodeEncodeError:  # a lone surrogate from a tool: print it replaced, not a crash
        from norma_cli.core.output import printable

        sys.stdout.write(printable(line))


def finish(app: App, body: Any) -> int:
    """Run ``body()`` → exit code, closing the session whatever ends it (SessionEnd fires)."""
    try:
        code = int(body())
    except (KeyboardInterrupt, Interrupted) as exc:
        if isinstance(exc, Interrupted):
            sys.stderr.write(f"norma: terminated by {exc.signal_name}\n")
        app.close("interrupt")
        raise
    except BaseException:  # stdout gone, a store error, a bug: the session still ends
        app.close("error")
        raise
    app.close("exit")
    return code


def trap_signals(session: Any) -> None:
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


# ----------------------------------------------------------------------------- input
def _read_arg_file(spec: str) -> str:
    from norma_cli.userfiles import read_text

    return read_text(spec[1:], "input file")


class BadJSON(ValueError):
    """Text that is not strict JSON (syntax, nesting too deep, NaN/Infinity, overflow)."""


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadJSON(f"number {text} is too large")
    return value


def load_json(text: str) -> Any:
    """``json.loads``, strictly: JSON has no NaN or Infinity, and depth is bounded."""
    import json

    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise BadJSON(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadJSON("nested too deeply") from None
    except BadJSON:
        raise
    except ValueError as exc:  # an integer past Python's digit limit for int()
        raise BadJSON(f"a number is too long ({exc})") from None


def parse_input(raw: str | None, args: tuple[str, ...]) -> dict[str, Any]:
    """``-i JSON`` / ``-i @FILE`` and ``--arg k=v`` → one input object."""
    from norma_cli.errors import UsageError

    tool_input: dict[str, Any] = {}
    if raw is not None:
        text = _read_arg_file(raw) if raw.startswith("@") else raw
        try:
            value = load_json(text)
        except BadJSON as exc:
            raise UsageError(f"input is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise UsageError(f"input must be a JSON object, got {type(value).__name__}")
        tool_input.update(value)
    for item in args:
        key, sep, value_text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--arg {item!r}: expected KEY=VALUE")
        try:
            tool_input[key] = load_json(value_text)
        except BadJSON:
            tool_input[key] = value_text
    return tool_input


def read_calls(spec: str) -> list[ToolCall]:
    """Parse a JSONL batch up front: a malformed line runs nothing and names the line."""
    from norma_cli.errors import UsageError
    from norma_cli.userfiles import read_text

    lines = read_text(spec, "calls file").splitlines()
    source = "stdin" if spec == "-" else spec
    batch: list[ToolCall] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            block = load_json(line)
        except BadJSON as exc:
            raise UsageError(f"{where}: not valid JSON: {exc}") from None
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
                args = load_json(raw_args or "{}")
            except BadJSON as exc:
                raise UsageError(f"{where}: function.arguments is not valid JSON: {exc}") from None
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


# ----------------------------------------------------------------------------- entry
@record
class FastRun:
    """``norma [globals] run NAME [-i JSON] [--arg K=V]... [flags]`` as read by ``fast_argv``."""

    globals: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    input: str | None = None
    args: list[str] = field(default_factory=list)
    text: bool = False
    dry_run: bool = False
    no_wait: bool = False
    session: str | None = None


_GLOBAL_VALUE = {"--config": "config", "--agent": "agent", "--mode": "mode", "--cwd": "cwd"}
_GLOBAL_MULTI = {"--allow": "allow", "--ask": "ask", "--deny": "deny"}
_RUN_FLAGS = {"--text": "text", "--dry-run": "dry_run", "--no-wait": "no_wait"}


def fast_argv(argv: list[str]) -> FastRun | None:
    """The simple one-call form, or None for anything the click CLI should read."""
    run = FastRun(globals={"allow": [], "ask": [], "deny": []})
    words = list(argv)
    i = 0

    def value(opt: str) -> str | None:
        nonlocal i
        word = words[i]
        if word.startswith(opt + "="):
            i += 1
            return word[len(opt) + 1 :]
        if i + 1 >= len(words):
            return None
        i += 2
        return words[i - 1]

    while i < len(words) and words[i] != "run":  # global options
        word, key = words[i], words[i].split("=", 1)[0]
        if key in _GLOBAL_VALUE:
            v = value(key)
            if v is None or v == "" or (key == "--mode" and v not in MODES):
                return None
            run.globals[_GLOBAL_VALUE[key]] = Path(v) if key in ("--config", "--cwd") else v
        elif key in _GLOBAL_MULTI:
            v = value(key)
            if v is None:
                return None
            run.globals[_GLOBAL_MULTI[key]].append(v)
        elif word in ("-v", "--verbose"):
            run.globals["verbose"] = True
            i += 1
        else:
            return None
    if i >= len(words):
        return None
    i += 1  # "run"
    while i < len(words):
        word, key = words[i], words[i].split("=", 1)[0]
        if word in _RUN_FLAGS:
            setattr(run, _RUN_FLAGS[word], True)
            i += 1
        elif key in ("-i", "--input") and run.input is None:
            run.input = value(key)
            if run.input is None:
                return None
        elif key in ("--arg", "--session"):
            v = value(key)
            if v is None or (key == "--session" and run.session is not None):
                return None
            if key == "--arg":
                run.args.append(v)
            else:
                run.session = v
        elif not word.startswith("-") and not run.name:
            run.name = word
            i += 1
        else:
            return None
    if not run.name:
        return None
    for key in ("allow", "ask", "deny"):
        run.globals[key] = tuple(run.globals[key])
    return run


def guarded(body: Any, verbose: bool) -> int:
    """Run ``body()`` → exit code; every failure becomes one line and an exit code."""
    from norma_cli.errors import NormaError

    try:
        code = int(body())
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at interpreter exit
        return code
    except NormaError as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"norma: error: {exc}\n")
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        sys.stderr.write("norma: interrupted\n")
        return 130
    except BrokenPipeError:
        # stdout closed early (`norma ... | head`): not an error worth a traceback
        _silence_stdout()
        return 1
    except OSError as exc:  # the system said no (a full disk, an I/O error): say what it said
        where = f": {exc.filename}" if exc.filename else ""
        sys.stderr.write(f"norma: error: {exc.strerror or exc}{where}\n")
        _silence_stdout()
        return 1
    except Exception as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        sys.stderr.write(
            f"norma: internal error: {type(exc).__name__}: {exc} (run with -v for details)\n"
        )
        return 1


def _silence_stdout() -> None:
    """After stdout failed: whatever is still buffered goes nowhere, quietly, at exit."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _check_streams() -> str | None:
    """Why norma cannot run with these arguments and streams, before anything runs."""
    global _ASCII_JSON
    if sys.stdout is None:  # started with fd 1 closed: every result would be lost
        return "stdout is closed"
    for n, arg in enumerate(sys.argv[1:], 1):
        if not arg.isascii():
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                return f"argument {n} is not valid UTF-8 text"
    encoding = (sys.stdout.encoding or "").lower().replace("-", "").replace("_", "")
    if encoding != "utf8":  # PYTHONIOENCODING=ascii and the like: JSON stays valid, as ASCII
        _ASCII_JSON = True
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(errors="backslashreplace")
    return None


def main() -> None:
    problem = _check_streams()
    if problem:
        if sys.stderr is not None:
            sys.stderr.write(f"norma: error: {problem}\n")
        sys.exit(2)
    fast = None if os.environ.get("NORMA_NO_FAST_PATH") else fast_argv(sys.argv[1:])
    if fast is None:
        from norma_cli.cli import main as click_main

        click_main()
        return
    options = dict(fast.globals)
    verbose = bool(options.get("verbose"))
    app = App(**options)
    if fast.session is not None:
        app.options["session_id"] = fast.session
    app.options["no_wait"] = fast.no_wait

    def body() -> int:
        return finish(
            app,
            lambda: run_one(app, fast.name, fast.input, tuple(fast.args), fast.dry_run, fast.text),
        )

    def close() -> int:
        app.close()
        return 0

    code = guarded(body, verbose)
    closed = guarded(close, verbose)  # also after a failure: SessionEnd fires whatever ended it
    sys.exit(code or closed)
