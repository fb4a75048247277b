"""Persistent interactive shells on a real pseudo-terminal (SPEC §6, opt-in): ShellStart,
ShellSend, ShellRead, ShellList, ShellClose.

A shell runs on a pty as the leader of its own session with the pty as its controlling
terminal, so job control, Ctrl-C (``\\x03``) and programs that insist on a terminal work. It
lives in the session's memory: a one-shot ``norma run`` can use it within one ``--calls``
batch, and closing the session (or ShellClose) ends every process of the shell's session —
SIGHUP and SIGTERM, then SIGKILL after a grace.

Policy. The seed's PTY tools did not share Bash's rule parser; norma's do: the text ShellSend
types is matched by the Bash deny and ask rules (``RuleSet.find`` reads ``shell_text``), with
the text typed since the last Enter in front of it, so ``r`` + ``m -rf x\\n`` in two sends is
still ``rm -rf x``. Input carrying line-editing keys (arrows, Ctrl-A/E/T/W, ...) could turn
text into another command inside the line editor, so it needs approval. Bash *allow* rules do
not allow ShellSend (the terminal may be running a program other than the shell): allow
``ShellSend`` itself. Like Bash, a shell is not a sandbox, and state it keeps between sends
(aliases, functions, variables, a REPL started in it) can make text do something other than
what it reads as; deny ``ShellStart`` for a hard boundary.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import fcntl
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Decision, Tool, ToolOutput, object_schema
from norma_cli.core.record import field, record
from norma_cli.errors import NormaError
from norma_cli.tools.tasks import KILL_GRACE_S, members, read_limit, signal_members

SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
# Flags that keep a user's rc files out: a predictable prompt and no aliases from them.
_SHELL_ARGS = {"bash": ["--norc", "--noprofile", "-i"], "zsh": ["-f", "-i"]}
SHELL_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_SHELLS = 16
MAX_BUFFER = 4 * 1024 * 1024  # unread output kept per shell; older bytes are dropped beyond it
MAX_INPUT = 16_384
DEFAULT_READ_MS = 1_000
MAX_READ_MS = 600_000
QUIET_S = 0.25  # a read returns once output has been quiet this long
ROWS, COLS = 50, 200
_STATE_KEY = "shells"
_CREATE_LOCK = threading.Lock()
# The keys a person presses alone to signal the foreground program: Ctrl-C, Ctrl-D, Ctrl-Z, Ctrl-\.
SIGNAL_KEYS = frozenset({"\x03", "\x04", "\x1a", "\x1c"})
_LINE_ENDS = "\r\n\x03\x15"  # Enter, and Ctrl-C / Ctrl-U, which discard the typed line
# Tab too: completion can turn "rebo" into "reboot".
_EDITING = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f]")
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)


class ShellError(NormaError):
    """A shell tool cannot do what was asked."""


@record
class Shell:
    id: str
    proc: subprocess.Popen[bytes]
    fd: int
    shell: str
    cwd: str
    started_at: float = field(default_factory=time.time)
    unread: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    # What was typed since the last Enter: the shell's line editor still holds it.
    pending: str = ""
    eof: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _take(self, data: bytes) -> None:
        self.unread += data
        over = len(self.unread) - MAX_BUFFER
        if over > 0:
            del self.unread[:over]
            self.dropped += over

    def pump(self) -> bool:
        """Read whatever the pty has now, without blocking. True when something arrived."""
        got = False
        while not self.eof:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:  # EIO: every process holding the terminal is gone
                self.eof = True
                break
            if not data:
                self.eof = True
                break
            self._take(data)
            got = True
        return got

    def wait_readable(self, seconds: float) -> bool:
        if self.eof or seconds <= 0:
            return False
        readable, _, _ = select.select([self.fd], [], [], seconds)
        return bool(readable)

    def write(self, data: bytes, deadline: float, cancelled: threading.Event) -> None:
        """Write all of ``data``, reading output meanwhile so a chatty program cannot stall us."""
        view = memoryview(data)
        while view:
            if cancelled.is_set():
                raise ShellError("interrupted")
            if not self.alive() and self.eof:
                raise ShellError(f"shell {self.id} has exited")
            _, writable, _ = select.select([], [self.fd], [], 0.05)
            self.pump()
            if writable:
                try:
                    n = os.write(self.fd, view)
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    raise ShellError(
                        f"shell {self.id}: cannot write: {exc.strerror or exc}"
                    ) from None
                view = view[n:]
            if view and time.monotonic() > deadline:
                raise ShellError(f"shell {self.id} is not reading its input (the terminal is full)")

    def take_text(self, limit: int) -> tuple[str, bool]:
        """Decode and clear up to ``limit`` bytes of unread output (terminal codes removed)."""
        chunk = bytes(self.unread[:limit])
        del self.unread[: len(chunk)]
        text = self.decoder.decode(chunk, self.eof and not self.unread)
        text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "").replace("\x07", "")
        return text, bool(self.unread)


def next_pending(pending: str, text: str) -> str:
    """The line left in the shell's editor after typing ``text`` behind ``pending``."""
    for i in range(len(text) - 1, -1, -1):
        if text[i] in _LINE_ENDS:
            return text[i + 1 :]
    return pending + text


def needs_approval(text: str) -> bool:
    """Line-editing keys (arrows, Ctrl-A/E/T/W/K/Y, Backspace...) can rewrite the typed line."""
    if text in SIGNAL_KEYS:
        return False
    return (
        "\x1b" in text or _EDITING.search(text.replace("\x03", "").replace("\x15", "")) is not None
    )


class ShellRegistry:
    def __init__(self, cancelled: threading.Event) -> None:
        self.cancelled = cancelled
        self.shells: dict[str, Shell] = {}
        self.count = 0
        self._lock = threading.Lock()

    def start(self, cwd: Path, name: str) -> Shell:
        path = shutil.which(name)
        if path is None:
            raise ShellError(f"{name} is not installed (PATH has no {name})")
        with self._lock:
            if len([s for s in self.shells.values() if s.alive()]) >= MAX_SHELLS:
                raise ShellError(
                    f"at most {MAX_SHELLS} shells per session; close one with ShellClose"
                )
            master, slave = os.openpty()
            try:
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
                env = {
                    k: v
                    for k, v in os.environ.items()
                    if k not in ("PROMPT_COMMAND", "BASH_ENV", "ENV")
                }
                env.update(TERM="dumb", PS1="$ ", PS2="> ", PAGER="cat", GIT_PAGER="cat")
                proc = subprocess.Popen(
                    [path, *_SHELL_ARGS.get(name, ["-i"])],
                    cwd=cwd,
                    env=env,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    start_new_session=True,
                    preexec_fn=_take_terminal,
                    close_fds=True,
                )
            except OSError as exc:
                os.close(master)
                raise ShellError(f"cannot start {name} in {cwd}: {exc.strerror or exc}") from None
            finally:
                os.close(slave)
            os.set_blocking(master, False)
            self.count += 1  # sh_1, sh_2, ...: a --calls batch can name the shell it starts
            shell_id = f"sh_{self.count}"
            shell = Shell(shell_id, proc, master, name, str(cwd))
            self.shells[shell_id] = shell
        return shell

    def get(self, shell_id: str) -> Shell:
        shell = self.shells.get(shell_id)
        if shell is None:
            known = ", ".join(self.shells) or "none"
            raise ShellError(
                f"no shell {shell_id!r} in this session (shells: {known}); start one with ShellStart"
            )
        return shell

    def close(self, shell_id: str) -> Shell:
        with self._lock:
            shell = self.get(shell_id)
            del self.shells[shell_id]
        _end(shell)
        return shell

    def close_all(self) -> None:
        with self._lock:
            shells, self.shells = list(self.shells.values()), {}
        for shell in shells:
            with contextlib.suppress(Exception):
                _end(shell)


def _take_terminal() -> None:
    # In the child, after setsid: make the pty (stdin) the controlling terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _end(shell: Shell) -> None:
    """SIGHUP+SIGTERM every process of the shell's session, then SIGKILL what is left."""
    leader = shell.pid
    for sigs in ((signal.SIGHUP, signal.SIGCONT, signal.SIGTERM), (signal.SIGKILL,)):
        live = members(leader)
        if not live and shell.proc.poll() is not None:
            break
        for sig in sigs:
            signal_members(leader, live, sig)
        end = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < end:
            shell.proc.poll()
            if not members(leader):
                break
            time.sleep(0.02)
    with contextlib.suppress(OSError):
        os.close(shell.fd)
    shell.eof = True
    with contextlib.suppress(subprocess.TimeoutExpired):
        shell.proc.wait(1)


def registry(ctx: CallContext, *, create: bool = True) -> ShellRegistry | None:
    session = ctx.session
    if session is None or not hasattr(session, "state"):
        if not create:
            return None
        raise ShellError("PTY shells need a norma session")
    with _CREATE_LOCK:
        reg: ShellRegistry | None = session.state.get(_STATE_KEY)
        if reg is None and create:
            reg = ShellRegistry(getattr(session, "cancelled", None) or threading.Event())
            session.state[_STATE_KEY] = reg
            session.closers.append(reg.close_all)
            atexit.register(reg.close_all)  # also when embedding code never closes the runtime
    return reg


def _registry(ctx: CallContext) -> ShellRegistry:
    reg = registry(ctx)
    assert reg is not None
    return reg


# ---------------------------------------------------------------------------------- tools
_SHELL_ID_PROP = {
    "type": "string",
    "pattern": SHELL_ID_PATTERN,
    "description": "The id ShellStart returned.",
}


def _status(shell: Shell) -> str:
    if shell.alive():
        return "running"
    code = shell.proc.returncode
    return (
        f"exited with code {code}"
        if code is not None and code >= 0
        else f"killed (signal {-(code or 0)})"
    )


class ShellStartTool(Tool):
    name = "ShellStart"
    description = (
        "Start a persistent interactive shell on a pseudo-terminal and return its shell_id. "
        "Unlike Bash, state (current directory, variables, a running program such as a REPL "
        "or ssh) survives between ShellSend calls. Not a sandbox."
    )
    prompt = (
        "Prefer Bash for one-off commands. Use a shell when a program needs a terminal or "
        "keeps state across commands. Type with ShellSend (end a command with \\n), read with "
        "ShellRead, and ShellClose it when done."
    )
    input_schema = object_schema(
        {
            "cwd": {
                "type": "string",
                "description": "Starting directory (relative to the working directory; default: the working directory).",
            },
            "shell": {
                "type": "string",
                "enum": list(SHELLS),
                "default": "bash",
                "description": "Which shell to run (default bash).",
            },
        },
        [],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    destructive = True
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raw = tool_input.get("cwd") or "."
        cwd = (ctx.cwd / Path(raw).expanduser()).resolve()
        if not cwd.is_dir():
            return ToolOutput.error(f"ShellStart: /cwd: {raw} is not a directory")
        try:
            shell = _registry(ctx).start(cwd, tool_input.get("shell") or "bash")
        except ShellError as exc:
            return ToolOutput.error(f"ShellStart: {exc}")
        return ToolOutput.text(
            f"Started {shell.shell} as shell {shell.id} (pid {shell.pid}) in {cwd}. Send input with "
            f'ShellSend {{"shell_id": "{shell.id}", "input": "ls\\n"}} and read with ShellRead.',
            shell_id=shell.id,
            pid=shell.pid,
        )


class ShellSendTool(Tool):
    name = "ShellSend"
    description = (
        "Type text into a shell started with ShellStart, as if at its keyboard. End a command "
        "with \\n to run it; \\u0003 is Ctrl-C. Returns at once: read the output with ShellRead. "
        "The text is checked against the same rules as Bash commands."
    )
    prompt = (
        "Send one command per call, ending with \\n. Keep lines under 4000 characters. Use "
        "\\u0003 (Ctrl-C) alone to interrupt a running program. Tab, arrow keys and other "
        "editing keys need approval; type whole commands instead."
    )
    input_schema = object_schema(
        {
            "shell_id": _SHELL_ID_PROP,
            "input": {
                "type": "string",
                "maxLength": MAX_INPUT,
                "description": "Text to type; include \\n to press Enter.",
            },
        },
        ["shell_id", "input"],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    destructive = True
    timeout = None

    def shell_text(self, tool_input: dict[str, Any], ctx: CallContext) -> str:
        """The shell line(s) this input would complete, for the Bash rule matcher.

        Ctrl-C / Ctrl-U end a line here (the shell discards it); checking the discarded part
        as a line of its own can only deny more.
        """
        text = tool_input.get("input")
        if not isinstance(text, str):
            return ""
        pending = ""
        reg = registry(ctx, create=False)
        if reg is not None:
            shell = reg.shells.get(str(tool_input.get("shell_id")))
            if shell is not None:
                pending = shell.pending
        line = pending + text
        for key in ("\r", "\x03", "\x15"):
            line = line.replace(key, "\n")
        return line

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        text = tool_input.get("input")
        if isinstance(text, str) and needs_approval(text):
            return Decision.ask(
                "tool", "the input holds terminal editing keys, which can change the typed command"
            )
        return None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        text = tool_input["input"]
        try:
            reg = _registry(ctx)
            shell = reg.get(tool_input["shell_id"])
            with shell.lock:
                if not shell.alive():
                    return ToolOutput.error(f"ShellSend: shell {shell.id} has {_status(shell)}")
                shell.write(text.encode("utf-8"), time.monotonic() + 10, reg.cancelled)
                shell.pending = next_pending(shell.pending, text)
        except ShellError as exc:
            return ToolOutput.error(f"ShellSend: {exc}")
        return ToolOutput.text(
            f"Sent {len(text)} characters to shell {shell.id}. Read the output with ShellRead.",
            shell_id=shell.id,
        )


class ShellReadTool(Tool):
    name = "ShellRead"
    description = (
        "Read the new output of a shell started with ShellStart (terminal codes removed). "
        "Waits up to timeout ms for output to appear, then returns once it has been quiet "
        f"for {QUIET_S:g} s."
    )
    prompt = (
        "Call ShellRead after ShellSend. For a slow command raise timeout, or call ShellRead "
        "again: output already returned is not repeated."
    )
    input_schema = object_schema(
        {
            "shell_id": _SHELL_ID_PROP,
            "timeout": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_READ_MS,
                "default": DEFAULT_READ_MS,
                "description": f"Milliseconds to wait for output (default {DEFAULT_READ_MS}, max {MAX_READ_MS}).",
            },
        },
        ["shell_id"],
    )
    read_only = True
    concurrency_safe = False  # consumes the shell's output: order matters
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        wait_s = int(tool_input.get("timeout", DEFAULT_READ_MS)) / 1000
        try:
            reg = _registry(ctx)
            shell = reg.get(tool_input["shell_id"])
            with shell.lock:
                deadline = time.monotonic() + wait_s
                quiet_since: float | None = None
                shell.pump()
                while True:
                    if reg.cancelled.is_set():
                        raise ShellError("interrupted")
                    now = time.monotonic()
                    if shell.unread and quiet_since is None:
                        quiet_since = now
                    if now >= deadline or shell.eof or len(shell.unread) >= MAX_BUFFER:
                        break
                    if quiet_since is not None and now - quiet_since >= QUIET_S:
                        break
                    slice_s = min(deadline - now, 0.1 if quiet_since is None else QUIET_S)
                    if shell.wait_readable(slice_s) and shell.pump():
                        quiet_since = time.monotonic()
                    elif not shell.alive():
                        shell.pump()
                        break
                if shell.eof:
                    # The terminal closes while the shell is still exiting: give the kernel a
                    # moment to make the exit status readable, so the status line is not lost.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        shell.proc.wait(max(0.0, min(deadline - time.monotonic(), 1.0)))
                text, more = shell.take_text(read_limit(ctx))
                dropped, shell.dropped = shell.dropped, 0
        except ShellError as exc:
            return ToolOutput.error(f"ShellRead: {exc}")
        parts = [text.rstrip("\n") if text else "(no new output)"]
        if dropped:
            parts.insert(
                0,
                f"[{dropped:,} bytes of older output were dropped: the shell was not read for a while]",
            )
        if more:
            parts.append("[more output is waiting: call ShellRead again]")
        if not shell.alive():
            parts.append(f"[shell {shell.id} has {_status(shell)}]")
        return ToolOutput.text("\n".join(parts), shell_id=shell.id, alive=shell.alive(), more=more)


class ShellListTool(Tool):
    name = "ShellList"
    description = "List this session's PTY shells: id, shell, status, directory it started in."
    prompt = "Use ShellList to find a shell id."
    input_schema = object_schema({}, [])
    read_only = True
    concurrency_safe = True
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        reg = registry(ctx, create=False)
        shells = list(reg.shells.values()) if reg is not None else []
        if not shells:
            return ToolOutput.text("No shells in this session.", shells=[])
        now = time.time()
        lines = [
            f"{s.id}  {s.shell}  {_status(s)}  pid {s.pid}  started {int(now - s.started_at)}s ago  in {s.cwd}"
            for s in shells
        ]
        rows = [
            {"shell_id": s.id, "shell": s.shell, "alive": s.alive(), "pid": s.pid, "cwd": s.cwd}
            for s in shells
        ]
        return ToolOutput.text("\n".join(lines), shells=rows)


class ShellCloseTool(Tool):
    name = "ShellClose"
    description = (
        "Close a shell started with ShellStart: every process it started gets SIGHUP and "
        f"SIGTERM, then SIGKILL after {KILL_GRACE_S:g} s."
    )
    prompt = "Close shells you no longer need."
    input_schema = object_schema({"shell_id": _SHELL_ID_PROP}, ["shell_id"])
    read_only = False
    concurrency_safe = False
    requires_approval = False
    timeout = None

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        # Only shells of this session can be named: closing what the session started.
        return Decision.allow("tool", "closes a shell this session started")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            shell = _registry(ctx).close(tool_input["shell_id"])
        except ShellError as exc:
            return ToolOutput.error(f"ShellClose: {exc}")
        return ToolOutput.text(f"Closed shell {shell.id}.", shell_id=shell.id)


__all__ = [
    "ShellCloseTool",
    "ShellListTool",
    "ShellReadTool",
    "ShellRegistry",
    "ShellSendTool",
    "ShellStartTool",
    "needs_approval",
    "next_pending",
]
