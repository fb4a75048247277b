"""Background tasks (SPEC §6): ``Bash run_in_background`` and the TaskOutput, TaskStop,
TaskList and Monitor tools.

A task is a shell command started in its own session (so its own process group) with stdin
from /dev/null and stdout+stderr going to its log file,
``<data dir>/sessions/<session id>/tasks/<task id>.log``: norma never holds the output in
memory, and a task keeps writing even when the norma that started it is gone. A small ``sh``
wrapper is the group leader; it runs the command with bash and writes the exit status to
``<task id>.exit``, so any later invocation can tell "exited 3" from "still running". The
task's record (pid, pgid, the leader's start time, the read offset) is ``<task id>.json``.

Log bound. The command writes into a pipe (a fifo the wrapper opens) read by a *drain*, a
one-process ``python -c`` loop in the same group that appends to the log as it reads: at most
``MAX_OUTPUT_BYTES`` (as the foreground Bash; ``NORMA_TASK_LOG_MAX_BYTES`` lowers it), then
one line ``[norma: output beyond N bytes was dropped]``, after which it keeps reading and
discards, so the command neither blocks nor dies of SIGPIPE. The drain depends on nothing
but the pipe (a named session's task outlives norma) and dies with the group (TaskStop).
It is not counted as a leftover; while it alone is alive the task still counts as running,
so "exited" means the command's output is all in the log.

Lifetime. Closing an unnamed session (a one-shot ``norma run`` exiting, normally or on
SIGINT/SIGTERM) ends the whole process group of every task — SIGTERM, then SIGKILL after a
grace — and deletes the logs. A named session (``norma run --session ID``) is left running:
a later ``norma run --session ID TaskOutput/TaskStop ...`` finds the tasks by their records.
Before signalling a group recorded by another invocation, the leader's start time (and the
boot id) are compared with the record, so a recycled pid is never signalled.

Not a sandbox (as Bash): a task runs with norma's own rights; TaskStop a runaway task.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Decision, Tool, ToolOutput, object_schema
from norma_cli.core.record import asdict, fields, record
from norma_cli.errors import NormaError
from norma_cli.tools.bash import MAX_OUTPUT_BYTES
from norma_cli.tools.procs import group_or_session_members

KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
POLL_S = 0.05
DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 600_000
DEFAULT_READ_CHARS = 30_000
TASK_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)
_STATE_KEY = "tasks"
_CREATE_LOCK = threading.Lock()
LOG_MAX_ENV = "NORMA_TASK_LOG_MAX_BYTES"  # lowers the log bound (tests)
_DRAIN_TAG = "norma-task-drain"
# The drain: stdin is the fifo (unlinked once open), stdout the log. Unbuffered os.read/write,
# so TaskOutput and Monitor see output as soon as the command writes it. A failed write (disk
# full) must not kill it: the command would then die of SIGPIPE.
_DRAIN = """
import os, sys
cap = int(sys.argv[1]); left = cap; marked = False
def put(data):
    try:
        while data:
            data = data[os.write(1, data):]
    except OSError:
        pass
try:
    os.unlink(sys.argv[2])
except OSError:
    pass
while True:
    try:
        data = os.read(0, 65536)
    except InterruptedError:
        continue
    if not data:
        break
    kept = data[:max(left, 0)]
    if kept:
        left -= len(kept); put(kept)
    if len(kept) < len(data) and not marked:
        marked = True
        put(b"\\n[norma: output beyond %d bytes was dropped]\\n" % cap)
"""
# "$1" is the shell, "$2" the command, "$3" the exit-status file, "$4" the fifo, "$5" python,
# "$6" the drain code, "$7" the log bound. The wrapper leads the group. It opens the fifo
# read-write (never blocks, even if the drain failed to start) and closes its own copy for the
# command, so the drain sees EOF when the command and whatever it left running are done.
_WRAPPER = (
    '"$5" -I -S -c "$6" "$7" "$4" ' + _DRAIN_TAG + ' < "$4" & '
    'exec 3<>"$4"; '
    '"$1" -c "$2" >&3 2>&3 3>&-; '
    'printf "%s\\n" "$?" > "$3"'
)
_LINE_LIMIT = 65_536  # Monitor tests an over-long line in pieces of this many bytes


class TaskError(NormaError):
    """A task tool cannot do what was asked (unknown id, tasks disabled, ...)."""


@record
class TaskRecord:
    id: str
    command: str
    cwd: str
    shell: str
    pid: int
    pgid: int
    start_ticks: int | None  # the leader's start time (/proc/<pid>/stat field 22)
    boot_id: str
    started_at: float
    description: str = ""
    read_offset: int = 0
    stopped: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@record
class TaskState:
    state: str  # running | exited | stopped | killed
    exit_code: int | None = None
    leftovers: int = 0  # live processes still in the group after the shell ended
    signal_name: str = ""

    def describe(self) -> str:
        if self.state == "running":
            return "running"
        if self.state == "exited":
            text = f"exited with code {self.exit_code}"
        elif self.state == "stopped":
            text = "stopped by TaskStop"
        else:
            text = f"killed{' by ' + self.signal_name if self.signal_name else ''} (no exit status)"
        if self.leftovers:
            text += f"; {self.leftovers} process(es) it started still running"
        return text


def background_enabled(session: Any) -> bool:
    """Background tasks need a real session, and ``[tools] background`` not set to false."""
    if session is None or not hasattr(session, "state") or not hasattr(session, "data_dir"):
        return False
    config = getattr(session, "config", None)
    return config is None or config.get("tools", "background", True) is not False


def manager(ctx: CallContext) -> TaskManager:
    """The session's task manager, created on first use (and closed with the session)."""
    session = ctx.session
    if not background_enabled(session):
        raise TaskError(
            "background tasks are not enabled ([tools] background = false, or no session)"
        )
    with _CREATE_LOCK:
        mgr: TaskManager | None = session.state.get(_STATE_KEY)
        if mgr is None:
            mgr = TaskManager(
                session.dir / "tasks",
                persistent=bool(getattr(session, "persistent", False)),
                cancelled=getattr(session, "cancelled", None) or threading.Event(),
            )
            session.state[_STATE_KEY] = mgr
            session.closers.append(mgr.close)
            # Embedding code that never closes its runtime must not orphan tasks either.
            atexit.register(mgr.close)
    return mgr


class TaskManager:
    def __init__(self, directory: Path, *, persistent: bool, cancelled: threading.Event) -> None:
        self.dir = directory
        self.persistent = persistent
        self.cancelled = cancelled
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ files
    def log_path(self, task_id: str) -> Path:
        return self.dir / f"{task_id}.log"

    def _record_path(self, task_id: str) -> Path:
        return self.dir / f"{task_id}.json"

    def _exit_path(self, task_id: str) -> Path:
        return self.dir / f"{task_id}.exit"

    def _fifo_path(self, task_id: str) -> Path:
        return self.dir / f"{task_id}.fifo"

    def _save(self, rec: TaskRecord) -> None:
        path = self._record_path(rec.id)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(asdict(rec)), encoding="utf-8")
        os.replace(tmp, path)

    def get(self, task_id: str) -> TaskRecord:
        if not _TASK_ID_RE.match(task_id):
            raise TaskError(f"invalid task id {task_id!r}")
        try:
            data = json.loads(self._record_path(task_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = ", ".join(r.id for r in self.records()) or "none"
            raise TaskError(f"no task {task_id!r} in this session (tasks: {known})") from None
        except (OSError, ValueError) as exc:
            raise TaskError(f"task {task_id}: unreadable record: {exc}") from None
        return TaskRecord.from_json(data)

    def records(self) -> list[TaskRecord]:
        out: list[TaskRecord] = []
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return out
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                with contextlib.suppress(TaskError):
                    out.append(self.get(name[: -len(".json")]))
        return sorted(out, key=lambda r: r.started_at)

    # ------------------------------------------------------------------ start
    def _last_number(self) -> int:
        last = 0
        for name in os.listdir(self.dir):
            m = re.match(r"^task_(\d+)\.", name)
            if m:
                last = max(last, int(m.group(1)))
        return last

    def start(self, command: str, cwd: Path, description: str = "") -> TaskRecord:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        shell = shutil.which("bash") or "/bin/sh"
        with self._lock:
            # Ids count up per session (task_1, task_2, ...), so a --calls batch can name the
            # task it starts; O_EXCL settles a race with another invocation of a named session.
            number = self._last_number()
            while True:
                number += 1
                task_id = f"task_{number}"
                try:
                    log_fd = os.open(
                        self.log_path(task_id),
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                        0o600,
                    )
                    break
                except FileExistsError:
                    continue
            fifo = self._fifo_path(task_id)
            try:
                fifo.unlink(missing_ok=True)  # a leftover of a task whose drain never started
                os.mkfifo(fifo, 0o600)
                proc = subprocess.Popen(
                    [
                        "/bin/sh",
                        "-c",
                        _WRAPPER,
                        "norma-task",
                        shell,
                        command,
                        str(self._exit_path(task_id)),
                        str(fifo),
                        sys.executable,
                        _DRAIN,
                        str(log_max_bytes()),
                    ],
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    start_new_session=True,  # its own process group: stopping it ends all of it
                    close_fds=True,
                )
            except OSError as exc:
                self.log_path(task_id).unlink(missing_ok=True)
                fifo.unlink(missing_ok=True)
                raise TaskError(f"cannot start a task in {cwd}: {exc.strerror or exc}") from None
            finally:
                os.close(log_fd)
            rec = TaskRecord(
                task_id,
                command,
                str(cwd),
                shell,
                proc.pid,
                proc.pid,
                _start_ticks(proc.pid),
                _boot_id(),
                time.time(),
                description,
            )
            self._procs[task_id] = proc
            self._save(rec)
        return rec

    # ------------------------------------------------------------------ state
    def _leader_alive(self, rec: TaskRecord) -> bool:
        proc = self._procs.get(rec.id)
        if proc is not None:
            return proc.poll() is None
        if rec.boot_id != _boot_id():
            return False
        ticks = _start_ticks(rec.pid)
        if ticks is None:
            return False  # gone (or a zombie)
        return rec.start_ticks is None or ticks == rec.start_ticks

    def _running(self, rec: TaskRecord) -> bool:
        """The shell is alive, or its drain alone is still writing the command's last output."""
        if self._leader_alive(rec):
            return True
        others, drains = self._split(rec)
        return bool(drains) and not others

    def _split(self, rec: TaskRecord) -> tuple[list[int], list[int]]:
        """The group's live members: (the command's processes, the log drain)."""
        others: list[int] = []
        drains: list[int] = []
        for pid in self._members(rec):
            (drains if _is_drain(pid) else others).append(pid)
        return others, drains

    def _members(self, rec: TaskRecord) -> list[int]:
        """Live processes of the task's group, if the group is still the task's."""
        if rec.boot_id != _boot_id():
            return []
        proc = self._procs.get(rec.id)
        if proc is not None:
            proc.poll()  # reap the wrapper so its zombie does not count
        elif rec.start_ticks is not None:
            ticks = _start_ticks(rec.pid)
            if ticks is not None and ticks != rec.start_ticks:
                return []  # the pid was recycled, so the task's group has long been empty
        return members(rec.pgid)

    def state(self, rec: TaskRecord) -> TaskState:
        # Leader first: once it is dead, its exit file (written just before it exits) is final.
        if self._leader_alive(rec):
            return TaskState("running")
        others, drains = self._split(rec)
        if drains and not others:
            return TaskState("running")  # the drain is writing the last of the output
        leftovers = len(others)
        code = self._exit_code(rec.id)
        if code is not None:
            return TaskState("exited", code, leftovers)
        proc = self._procs.get(rec.id)
        sig = ""
        if proc is not None and proc.returncode is not None and proc.returncode < 0:
            with contextlib.suppress(ValueError):
                sig = signal.Signals(-proc.returncode).name
        return TaskState("stopped" if rec.stopped else "killed", None, leftovers, sig)

    def _exit_code(self, task_id: str) -> int | None:
        try:
            text = self._exit_path(task_id).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        try:
            return int(text)
        except ValueError:
            return None

    # ------------------------------------------------------------------ waiting and reading
    def wait_exit(self, rec: TaskRecord, deadline: float) -> bool:
        """Wait until the task's shell ends (True) or the deadline passes (False)."""
        while True:
            if not self._running(rec):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.cancelled.wait(min(POLL_S, left)):
                raise TaskError("interrupted")

    def read_new(self, rec: TaskRecord, max_chars: int, *, final: bool = False) -> tuple[str, bool]:
        """Output since the last read (at most ``max_chars``), advancing the read offset.

        Returns the text and whether more output is waiting. A multi-byte character cut by
        the limit (or still being written) stays for the next read, unless ``final``.
        """
        with self._lock:
            rec = self.get(rec.id)  # another call (or invocation) may have read meanwhile
            try:
                with open(self.log_path(rec.id), "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    fh.seek(rec.read_offset)
                    data = fh.read(max(0, min(max_chars, size - rec.read_offset)))
            except FileNotFoundError:
                return "", False
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            last = final and rec.read_offset + len(data) >= size
            text = decoder.decode(data, last)
            consumed = len(data) - len(decoder.getstate()[0])
            if consumed:
                rec.read_offset += consumed
                self._save(rec)
            return text, size > rec.read_offset

    def monitor(
        self, rec: TaskRecord, pattern: re.Pattern[str] | None, deadline: float, keep_chars: int
    ) -> tuple[str, str | None, str]:
        """Scan unread output line by line for ``pattern`` until it matches, the task ends, or
        the deadline passes (without a pattern: wait for the end).

        Returns ``(outcome, matched line, text)`` with outcome ``matched``, ``exited`` or
        ``timeout``. On a match the output up to and including the matching line is consumed
        (its last ``keep_chars`` characters are returned); otherwise nothing is consumed.
        """
        rec = self.get(rec.id)
        if pattern is None:
            return ("exited" if self.wait_exit(rec, deadline) else "timeout"), None, ""
        path = self.log_path(rec.id)
        pos = rec.read_offset  # file offset of the next byte to read
        partial = b""  # an unfinished line: the bytes just before ``pos``
        tail: deque[str] = deque()
        kept = skipped = 0

        def hit(line: str) -> bool:
            nonlocal kept, skipped
            tail.append(line + "\n")
            kept += len(line) + 1
            while kept > keep_chars and len(tail) > 1:
                dropped = tail.popleft()
                kept -= len(dropped)
                skipped += len(dropped)
            return pattern.search(line) is not None

        def matched(line: str, offset: int) -> tuple[str, str | None, str]:
            self._advance(rec.id, offset)
            note = (
                f"[{skipped:,} earlier characters not shown; full log {path}]\n" if skipped else ""
            )
            return "matched", line, note + "".join(tail)

        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below, across the waits
        except FileNotFoundError:
            raise TaskError(f"task {rec.id}: its log is gone") from None
        with fh:
            while True:
                # Liveness first: once the whole group is gone, what the log holds is complete.
                # (Not just the shell: a server it started with `&` may print the line later.)
                ended = not self._members(rec)
                fh.seek(pos)
                chunk = fh.read(CHUNK)
                if chunk:
                    pos += len(chunk)
                    buf, start = partial + chunk, 0
                    while (nl := buf.find(b"\n", start)) >= 0:
                        line = buf[start:nl].decode("utf-8", "replace")
                        start = nl + 1
                        if hit(line):
                            return matched(line, pos - (len(buf) - start))
                    partial = buf[start:]
                    if len(partial) > _LINE_LIMIT:  # an endless line is tested in pieces
                        line, partial = partial.decode("utf-8", "replace"), b""
                        if hit(line):
                            return matched(line, pos)
                    continue
                if ended:
                    if partial:
                        line = partial.decode("utf-8", "replace")
                        if hit(line):
                            return matched(line, pos)
                    return "exited", None, ""
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout", None, ""
                if self.cancelled.wait(min(POLL_S * 2, left)):
                    raise TaskError("interrupted")

    def _advance(self, task_id: str, offset: int) -> None:
        with self._lock:
            rec = self.get(task_id)
            if offset > rec.read_offset:
                rec.read_offset = offset
                self._save(rec)

    # ------------------------------------------------------------------ stopping
    def stop(self, rec: TaskRecord) -> TaskState:
        with self._lock:
            rec = self.get(rec.id)
            if self._members(rec):
                rec.stopped = True
                self._save(rec)
        self._end_groups([rec])
        return self.state(rec)

    def _end_groups(self, recs: list[TaskRecord]) -> None:
        """SIGTERM every live group, then SIGKILL what is left after the grace."""
        live = [r for r in recs if self._members(r)]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for r in live:
                signal_members(r.pgid, self._members(r), sig)
            end = time.monotonic() + KILL_GRACE_S
            while live and time.monotonic() < end:
                time.sleep(0.02)
                live = [r for r in live if self._members(r)]
            if not live:
                return

    def forget(self, rec: TaskRecord) -> None:
        """Drop a finished task and its files (a foreground command that ended in time)."""
        with self._lock:
            self._procs.pop(rec.id, None)
            for path in (
                self.log_path(rec.id),
                self._exit_path(rec.id),
                self._record_path(rec.id),
                self._fifo_path(rec.id),
            ):
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """Session end: an unnamed session's tasks die with it; a named one's keep running."""
        if self.persistent:
            self._procs.clear()
            return
        try:
            self._end_groups(self.records())
        finally:
            self._procs.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.dir.parent.rmdir()  # the session dir, when nothing else lives there


CHUNK = 65_536


def log_max_bytes() -> int:
    """The log bound for a task started now: ``MAX_OUTPUT_BYTES``, or the env override."""
    raw = os.environ.get(LOG_MAX_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return min(int(raw), MAX_OUTPUT_BYTES)
    return MAX_OUTPUT_BYTES


def _is_drain(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return _DRAIN_TAG.encode() in argv and _DRAIN.encode() in argv


def _start_ticks(pid: int) -> int | None:
    """The start time of a live (non-zombie) process, in clock ticks since boot (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields_ = stat[stat.rfind(b")") + 2 :].split()
    if len(fields_) < 20 or fields_[0] in (b"Z", b"X"):
        return None
    return int(fields_[19])


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def members(leader: int) -> list[int]:
    """Live (non-zombie) pids in the process group *or the session* led by ``leader``.

    The session catches what a task or shell moved into a group of its own (job control in
    an interactive shell, ``set -m``); only ``setsid`` escapes. /proc on Linux; elsewhere a
    signal-0 probe of the group.
    """
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(leader, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [leader]
    for attempt in range(4):
        found = group_or_session_members(leader)
        if found:
            return found
        # A /proc listing can miss a process that is being reparented at that very moment (its
        # parent just exited); the kernel's own answer about the group settles it.
        try:
            os.killpg(leader, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        if attempt < 3:
            time.sleep(0.002 * (attempt + 1))
    return []  # only zombies are left


def signal_members(leader: int, pids: list[int], sig: int) -> None:
    """Signal the group of ``leader`` and each listed pid (session members in other groups)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# ---------------------------------------------------------------------------------- tools
_TASK_ID_PROP = {
    "type": "string",
    "pattern": TASK_ID_PATTERN,
    "description": "The id returned by Bash with run_in_background (for example task_1a2b3c4d).",
}
_WAIT_PROP = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_WAIT_MS,
    "default": DEFAULT_WAIT_MS,
    "description": f"How long to wait, in milliseconds (default {DEFAULT_WAIT_MS}, max {MAX_WAIT_MS}).",
}


def read_limit(ctx: CallContext) -> int:
    capper = getattr(ctx.session, "capper", None)
    limit = getattr(capper, "max_chars", DEFAULT_READ_CHARS)
    return max(100, int(limit) - 400)  # room for the status line, so nothing is spilled


def _header(rec: TaskRecord, st: TaskState) -> str:
    return f"Task {rec.id}: {st.describe()}."


class TaskOutputTool(Tool):
    name = "TaskOutput"
    description = (
        "Read the new output of a background task started with Bash run_in_background: each "
        "call returns what the task printed since the previous TaskOutput (stdout and stderr "
        "together) and whether it is still running or exited, with its exit code."
    )
    prompt = (
        "Call TaskOutput to check on a background task. Output already returned is not "
        "repeated. With block: true it first waits (up to timeout ms) for the task to finish. "
        "To wait for a particular line (a server's 'listening on'), use Monitor instead."
    )
    input_schema = object_schema(
        {
            "task_id": _TASK_ID_PROP,
            "block": {
                "type": "boolean",
                "default": False,
                "description": "Wait for the task to finish (up to timeout) before reading.",
            },
            "timeout": _WAIT_PROP,
        },
        ["task_id"],
    )
    read_only = True
    concurrency_safe = True
    requires_approval = False
    timeout = None  # bounded by its own wait

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            mgr = manager(ctx)
            rec = mgr.get(tool_input["task_id"])
            if tool_input.get("block"):
                wait_ms = int(tool_input.get("timeout", DEFAULT_WAIT_MS))
                mgr.wait_exit(rec, time.monotonic() + wait_ms / 1000)
            st = mgr.state(rec)
            text, more = mgr.read_new(rec, read_limit(ctx), final=st.state != "running")
        except TaskError as exc:
            return ToolOutput.error(f"TaskOutput: {exc}")
        parts = [_header(rec, st), text.rstrip("\n") if text else "(no new output)"]
        if more:
            parts.append("[more output is waiting: call TaskOutput again]")
        return ToolOutput.text(
            "\n\n".join(parts),
            task_id=rec.id,
            status=st.state,
            exit_code=st.exit_code,
            more=more,
            log=str(mgr.log_path(rec.id)),
        )


class TaskStopTool(Tool):
    name = "TaskStop"
    description = (
        "Stop a background task started with Bash run_in_background: its whole process group "
        "(the command and everything it started) gets SIGTERM, then SIGKILL after "
        f"{KILL_GRACE_S:g} s. Output it printed stays readable with TaskOutput."
    )
    prompt = "Stop background tasks you no longer need, such as a dev server after the tests ran."
    input_schema = object_schema({"task_id": _TASK_ID_PROP}, ["task_id"])
    read_only = False
    concurrency_safe = False
    requires_approval = False
    destructive = False
    timeout = None

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        # Only tasks of this session can be named: stopping what the session started.
        return Decision.allow("tool", "stops a task this session started")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            mgr = manager(ctx)
            rec = mgr.get(tool_input["task_id"])
            before = mgr.state(rec)
            if before.state != "running" and not before.leftovers:
                return ToolOutput.text(
                    f"{_header(rec, before)} Nothing to stop.",
                    task_id=rec.id,
                    status=before.state,
                    exit_code=before.exit_code,
                )
            after = mgr.stop(rec)
        except TaskError as exc:
            return ToolOutput.error(f"TaskStop: {exc}")
        if after.leftovers or after.state == "running":
            return ToolOutput.error(
                f"TaskStop: task {rec.id} could not be stopped ({after.describe()})", task_id=rec.id
            )
        return ToolOutput.text(
            f"Stopped task {rec.id} ({rec.command[:200]}).",
            task_id=rec.id,
            status=after.state,
            exit_code=after.exit_code,
        )


class TaskListTool(Tool):
    name = "TaskList"
    description = "List this session's background tasks with their status, age and command."
    prompt = "Use TaskList to find a task id you lost track of."
    input_schema = object_schema({}, [])
    read_only = True
    concurrency_safe = True
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            mgr = manager(ctx)
        except TaskError as exc:
            return ToolOutput.error(f"TaskList: {exc}")
        rows = []
        lines = []
        now = time.time()
        for rec in mgr.records():
            st = mgr.state(rec)
            age = int(now - rec.started_at)
            command = rec.command if len(rec.command) <= 120 else rec.command[:119] + "…"
            lines.append(f"{rec.id}  {st.describe()}  started {age}s ago  $ {command}")
            rows.append(
                {
                    "task_id": rec.id,
                    "status": st.state,
                    "exit_code": st.exit_code,
                    "command": rec.command,
                    "log": str(mgr.log_path(rec.id)),
                }
            )
        return ToolOutput.text(
            "\n".join(lines) if lines else "No background tasks in this session.", tasks=rows
        )


class MonitorTool(Tool):
    name = "Monitor"
    description = (
        "Wait until a background task prints a line matching a regular expression, or until "
        "it exits, with a timeout. Returns the matching line and the output up to it."
    )
    prompt = (
        "Use Monitor to wait for readiness ('Listening on', 'Compiled successfully') or for a "
        "task to finish, instead of polling TaskOutput. `pattern` is a Python regular "
        "expression searched in each output line; without it Monitor waits for the exit. "
        "Output up to the matching line counts as read; a timeout reads nothing."
    )
    input_schema = object_schema(
        {
            "task_id": _TASK_ID_PROP,
            "pattern": {
                "type": "string",
                "description": "Regular expression searched in each new output line; omit to wait for the exit.",
            },
            "timeout": _WAIT_PROP,
        },
        ["task_id"],
    )
    read_only = True
    concurrency_safe = True
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raw = tool_input.get("pattern")
        try:
            pattern = re.compile(raw) if raw else None
        except re.error as exc:
            return ToolOutput.error(f"Monitor: /pattern: invalid regular expression: {exc}")
        wait_ms = int(tool_input.get("timeout", DEFAULT_WAIT_MS))
        try:
            mgr = manager(ctx)
            rec = mgr.get(tool_input["task_id"])
            outcome, line, text = mgr.monitor(
                rec, pattern, time.monotonic() + wait_ms / 1000, read_limit(ctx)
            )
            st = mgr.state(rec)
        except TaskError as exc:
            return ToolOutput.error(f"Monitor: {exc}")
        meta: dict[str, Any] = {
            "task_id": rec.id,
            "outcome": outcome,
            "status": st.state,
            "exit_code": st.exit_code,
        }
        if outcome == "matched":
            return ToolOutput.text(
                f"Matched: {line}\n{_header(rec, st)}\n\n{text.rstrip()}", matched=line, **meta
            )
        if outcome == "exited":
            if pattern is None:
                return ToolOutput.text(
                    f"{_header(rec, st)} Read its output with TaskOutput.", **meta
                )
            return ToolOutput.error(f"{_header(rec, st)} The pattern {raw!r} was not seen.", **meta)
        what = (
            f"The pattern {raw!r} was not seen" if pattern is not None else "The task did not exit"
        )
        return ToolOutput.error(f"{what} within {wait_ms / 1000:g} s. {_header(rec, st)}", **meta)


__all__ = [
    "MonitorTool",
    "TaskError",
    "TaskListTool",
    "TaskManager",
    "TaskOutputTool",
    "TaskStopTool",
    "background_enabled",
    "manager",
]
