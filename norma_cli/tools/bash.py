"""The foreground ``Bash`` tool (SPEC §6). It is not a sandbox and says so.

The command runs as ``bash -c COMMAND`` (``/bin/sh`` where bash is missing) in the working
directory, in a new session and so a new process group, with stdin from /dev/null and
stderr merged into stdout. Output streams into the session's ``OutputCapper`` writer as it
arrives, so a huge output is spilled to a file instead of being held in memory.

Timeouts and leftovers end the whole process group, not just the shell: ``sleep 30 & sleep
30`` must not leave a sleeper behind. A foreground command is over when its shell exits;
anything it left running in its group is ended then too.

Background tasks (``norma_cli.tools.tasks``) are the way to keep a process alive:
``run_in_background: true`` starts the command as a task and returns its id at once, and
``background_on_timeout: true`` runs it as a task from the start but waits like a foreground
command: if it ends within ``timeout`` the result is the same as in the foreground, otherwise
it is *moved to the background* (left running, not killed) and the result carries the task
id. Both need background tasks enabled (``[tools] background``, on by default).
"""

from __future__ import annotations

import codecs
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import CallContext, Tool, ToolOutput
from norma_cli.core.output import CAPPED, SPILL, capped_text
from norma_cli.tools.procs import group_members

if TYPE_CHECKING:
    from norma_cli.core.output import OutputCapper, SpillWriter

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
DRAIN_AFTER_EXIT_S = 0.5  # how long output from leftovers is still read after the shell exits
MAX_COLLECT_CHARS = 8_000_000  # memory bound when no capper streams the output
# Disk bound for one command's output (`yes` for two minutes would otherwise fill the disk):
# beyond it the pipe is still drained, so the command does not stall, but bytes are dropped.
# Twice the 1 GB that SPEC §15 says must spill whole (bench/bench_spill.py measures it).
MAX_OUTPUT_BYTES = 2 * 1024 * 1024 * 1024
CHUNK = 65536


class BashTool(Tool):
    name = "Bash"
    description = (
        "Run a shell command with bash in the working directory and return its combined "
        "stdout and stderr and its exit code. Bash is NOT a sandbox: the command runs with "
        "norma's own user rights and can read, change or delete anything that user can, "
        "anywhere on the system; the file tools' root confinement does not apply to it. "
        f"Runs in the foreground with a timeout in milliseconds (default {DEFAULT_TIMEOUT_MS}, "
        f"max {MAX_TIMEOUT_MS}), or as a background task (run_in_background) whose output is "
        "read with TaskOutput."
    )
    prompt = (
        "Use Bash for builds, tests, git and other programs. Prefer Read/Write/Edit/LS/Glob for "
        "files. stdin is /dev/null, so interactive programs fail; pass flags such as --yes or "
        "--no-pager. Quote paths with spaces. Chain dependent steps with &&. When the command "
        "returns, processes it left running are ended; a command that outlives `timeout` is "
        "killed with its whole process group and you get the output so far, unless "
        "`background_on_timeout` is true: then it keeps running as a background task. For "
        "servers, watchers and long builds use `run_in_background: true` (no timeout) and "
        "then TaskOutput, Monitor (wait for a line such as 'listening on') and TaskStop. "
        "Give a short `description` of what the command does."
    )
    input_schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command to run."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_MS,
                "default": DEFAULT_TIMEOUT_MS,
                "description": f"Timeout in milliseconds (default {DEFAULT_TIMEOUT_MS}, max {MAX_TIMEOUT_MS}).",
            },
            "description": {
                "type": "string",
                "description": "What the command does, in 5-10 words (shown to the person approving it).",
            },
            "run_in_background": {
                "type": "boolean",
                "default": False,
                "description": "Start the command as a background task and return its task id at once (no timeout).",
            },
            "background_on_timeout": {
                "type": "boolean",
                "default": False,
                "description": "If the command is still running at the timeout, move it to the background as a task instead of killing it.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    read_only = False
    concurrency_safe = False
    requires_approval = True
    destructive = True
    raw_input = False
    timeout = None  # bounded by the command's own timeout, enforced here

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        command = tool_input["command"]
        timeout_ms = min(int(tool_input.get("timeout") or DEFAULT_TIMEOUT_MS), MAX_TIMEOUT_MS)
        if tool_input.get("run_in_background") or tool_input.get("background_on_timeout"):
            from norma_cli.tools.tasks import background_enabled

            if not background_enabled(ctx.session):
                flag = (
                    "run_in_background"
                    if tool_input.get("run_in_background")
                    else "background_on_timeout"
                )
                return ToolOutput.error(
                    f"background tasks are not enabled; run the command in the foreground ({flag}: false)"
                )
            if tool_input.get("run_in_background"):
                return _start_background(command, tool_input, ctx)
            return _run_movable(command, timeout_ms, tool_input, ctx)
        shell = shutil.which("bash") or "/bin/sh"
        sink = _Sink(getattr(ctx.session, "capper", None))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                [shell, "-c", command],
                cwd=ctx.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so we can end all of it
                close_fds=True,
            )
        except OSError as exc:
            sink.abort()
            return ToolOutput.error(f"cannot start {shell} in {ctx.cwd}: {exc.strerror or exc}")
        pgid = proc.pid
        leftovers = False
        try:
            timed_out = _pump(proc, sink, started + timeout_ms / 1000)
            if timed_out:
                _end_group(proc, pgid)
            elif _group_alive(pgid):
                leftovers = True
                _end_group(proc, pgid)
            assert proc.stdout is not None
            _drain(proc.stdout.fileno(), sink)
            code = proc.wait()
        except BaseException:
            _end_group(proc, pgid)
            sink.abort()
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        return _finish(sink, code, timed_out, leftovers, timeout_ms, started, pgid, shell)


def _finish(
    sink: _Sink,
    code: int,
    timed_out: bool,
    leftovers: bool,
    timeout_ms: int,
    started: float,
    pgid: int,
    shell: str,
) -> ToolOutput:
    """The result of a foreground command, from its collected output and how it ended."""
    duration = round(time.monotonic() - started, 3)
    text, meta = sink.finish()
    notes: list[str] = []
    if timed_out:
        notes.append(
            f"Command timed out after {timeout_ms / 1000:g}s; its process group was killed."
        )
    elif leftovers:
        notes.append("[processes the command left running were ended]")
    if not timed_out and code != 0:
        notes.append(_exit_text(code))
    if sink.dropped_bytes:
        notes.append(
            f"[output over {MAX_OUTPUT_BYTES:,} bytes: the last {sink.dropped_bytes:,} bytes were discarded]"
        )
    if not text and not notes:
        text = "(no output)"
    body = "\n\n".join(p for p in (text, *notes) if p)
    meta.update(
        exit_code=None if timed_out else code,
        duration=duration,
        timed_out=timed_out,
        pgid=pgid,
        shell=shell,
        dropped_bytes=sink.dropped_bytes,
    )
    return ToolOutput.text(body, is_error=timed_out or code != 0, **meta)


def _start_background(command: str, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
    from norma_cli.tools.tasks import TaskError, manager

    try:
        mgr = manager(ctx)
        rec = mgr.start(command, ctx.cwd, tool_input.get("description", ""))
    except TaskError as exc:
        return ToolOutput.error(str(exc))
    if getattr(ctx.session, "persistent", False):
        lifetime = "It keeps running after this norma exits (named session)."
    else:
        lifetime = (
            "It is ended when this session closes (a one-shot `norma run` closes when norma exits)."
        )
    return ToolOutput.text(
        f"Started background task {rec.id} (pid {rec.pid}). Read its output with TaskOutput "
        f'{{"task_id": "{rec.id}"}}, wait for a line or for the exit with Monitor, stop it '
        f"with TaskStop. {lifetime}",
        task_id=rec.id,
        pid=rec.pid,
        pgid=rec.pgid,
        log=str(mgr.log_path(rec.id)),
    )


def _run_movable(
    command: str, timeout_ms: int, tool_input: dict[str, Any], ctx: CallContext
) -> ToolOutput:
    """A foreground command run as a task: moved to the background at the timeout, not killed."""
    from norma_cli.tools.tasks import TaskError, manager, read_limit

    started = time.monotonic()
    try:
        mgr = manager(ctx)
        rec = mgr.start(command, ctx.cwd, tool_input.get("description", ""))
    except TaskError as exc:
        return ToolOutput.error(str(exc))
    try:
        finished = mgr.wait_exit(rec, started + timeout_ms / 1000)
    except BaseException:
        mgr.stop(rec)
        mgr.forget(rec)
        raise
    if not finished:
        text, more = mgr.read_new(rec, read_limit(ctx))
        body = (
            f"Command still running after {timeout_ms / 1000:g}s: moved to the background as task "
            f'{rec.id} (not killed). Read further output with TaskOutput {{"task_id": "{rec.id}"}}, '
            "wait with Monitor, stop it with TaskStop."
        )
        shown = text.rstrip("\n") or "(no output yet)"
        body += f"\n\nOutput so far:\n{shown}"
        if more:
            body += "\n\n[more output is waiting: call TaskOutput]"
        return ToolOutput.text(
            body,
            task_id=rec.id,
            moved_to_background=True,
            timed_out=True,
            pgid=rec.pgid,
            log=str(mgr.log_path(rec.id)),
        )
    sink = _Sink(getattr(ctx.session, "capper", None))
    try:
        state = mgr.state(rec)
        leftovers = bool(state.leftovers)
        if leftovers:
            mgr.stop(rec)
        with open(mgr.log_path(rec.id), "rb") as fh:
            while chunk := fh.read(CHUNK):
                sink.feed(chunk)
    except BaseException:
        sink.abort()
        raise
    finally:
        mgr.forget(rec)
    code = state.exit_code
    if code is None:  # the shell itself was killed: report the signal as Popen would
        code = -signal.Signals[state.signal_name].value if state.signal_name else 1
    return _finish(sink, code, False, leftovers, timeout_ms, started, rec.pgid, rec.shell)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"exit code {code} (killed by signal {signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit code {code}"


class _Sink:
    """Where output goes: the capper's spill writer when the session has one, else a list."""

    def __init__(self, capper: OutputCapper | None) -> None:
        self.writer: SpillWriter | None = (
            capper.writer(prefix="Bash") if capper is not None else None
        )
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0
        self.raw_bytes = 0
        self.dropped_bytes = 0

    def feed(self, data: bytes, final: bool = False) -> None:
        room = MAX_OUTPUT_BYTES - self.raw_bytes
        if len(data) > room:
            self.dropped_bytes += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        self.raw_bytes += len(data)
        # surrogateescape keeps undecodable bytes, so the spill file is byte-exact
        self.write(self.decoder.decode(data, final))

    def write(self, text: str) -> None:
        if not text:
            return
        if self.writer is not None:
            self.writer.write(text)
            return
        self.total += len(text)
        if self.kept < MAX_COLLECT_CHARS:
            piece = text[: MAX_COLLECT_CHARS - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)

    def finish(self) -> tuple[str, dict[str, Any]]:
        self.feed(b"", final=True)
        if self.writer is None:
            text = _printable("".join(self.parts))
            if self.total > self.kept:  # the executor's capper will cap this further
                return capped_text(text, self.total, None), {}
            return text.rstrip("\n"), {}
        writer, self.writer = self.writer, None
        try:
            spill = writer.close()
        except BaseException:
            writer.abort()
            raise
        if not writer.over_cap:
            return _printable(writer.head).rstrip("\n"), {}
        meta: dict[str, Any] = {CAPPED: True}
        if spill is not None:
            meta[SPILL] = spill
        if writer.error:
            meta["spill_error"] = writer.error
        return capped_text(_printable(writer.head), writer.chars, spill, writer.error), meta

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None


def _printable(text: str) -> str:
    # what the model sees must be valid Unicode: escaped raw bytes become U+FFFD
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _pump(proc: subprocess.Popen[bytes], sink: _Sink, deadline: float) -> bool:
    """Stream output until EOF (or the shell exited and leftovers went quiet). True on timeout."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= DRAIN_AFTER_EXIT_S:
                return False  # the shell is done; a leftover still holds the pipe open
            wait = min(deadline - now, 0.1 if exited_at is None else DRAIN_AFTER_EXIT_S)
            if not sel.select(wait):
                continue
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            if not data:
                break
            sink.feed(data)
    # EOF: everyone closed the pipe; the shell may still be running (e.g. `exec >&-; sleep 9`)
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def _drain(fd: int, sink: _Sink) -> None:
    """Read what is left in the pipe without blocking (after the group was ended)."""
    os.set_blocking(fd, False)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            return
        if not data:
            return
        sink.feed(data)


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in the group."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self"):
        for attempt in range(4):
            if group_members(pgid):
                return True
            # A /proc listing can miss a process being reparented at that moment (its parent
            # just exited): ask the kernel whether the group still exists before saying no.
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
            time.sleep(0.002 * (attempt + 1))
        return False  # only zombies left
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_group(proc: subprocess.Popen[bytes], pgid: int) -> None:
    """SIGTERM the group, then SIGKILL whatever is still there after a short grace."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        end = time.monotonic() + grace
        while time.monotonic() < end:
            proc.poll()  # reap the shell so its zombie does not count as alive
            if not _group_alive(pgid):
                break
            time.sleep(0.02)
        else:
            continue
        break
    proc.poll()


__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_TIMEOUT_MS", "BashTool"]
