"""Session tools (SPEC §6, opt-in): TodoWrite, AskUser, EnterPlanMode, ExitPlanMode, Memory.

* ``TodoWrite`` replaces the session's task list. A named session (``--session ID``) keeps it
  in ``<data dir>/sessions/<id>/todos.json``; an unnamed one in memory, gone at exit.
* ``AskUser`` asks a person: a plugin's ``ask_user`` hook first (a chat bot, an approver UI),
  then the terminal (/dev/tty) when norma runs interactively; otherwise a clear error.
* ``EnterPlanMode`` switches the session to ``plan`` (only read-only tools run) for the calls
  that follow; ``ExitPlanMode`` leaves it, and its permission decision is *ask*: a person, a
  ``resolve_ask`` plugin or the approval queue must approve the plan first.
* ``Memory`` keeps notes in ``<project root>/.norma/memory.md`` or ``<user config
  dir>/memory.md``. It takes no path: the file is opened beneath its directory without
  following symlinks (a repository cannot point it at ``~/.bashrc``), and writes are atomic.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Decision, Tool, ToolOutput, object_schema
from norma_cli.errors import NormaError
from norma_cli.plugins import FAILURES

STATUSES = ("pending", "in_progress", "completed")
MAX_TODOS = 100
MAX_MEMORY_CHARS = 100_000
MAX_NOTE_CHARS = 20_000
_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
_LOCK = threading.Lock()


class SessionToolError(NormaError):
    pass


def _write_atomic(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``name`` beneath ``dir_fd`` through a temporary file and a rename."""
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


# ---------------------------------------------------------------------------------- TodoWrite
class TodoWriteTool(Tool):
    name = "TodoWrite"
    description = (
        "Replace this session's todo list with the given items (content and status: pending, "
        "in_progress or completed) and return the list. Use it to plan multi-step work and "
        "show progress."
    )
    prompt = (
        "Send the whole list every time (it replaces the previous one). Keep one item "
        "in_progress at a time, mark items completed as soon as they are done, and add items "
        "you discover along the way. Skip it for trivial one-step tasks."
    )
    input_schema = object_schema(
        {
            "todos": {
                "type": "array",
                "maxItems": MAX_TODOS,
                "description": "The complete, updated todo list.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {
                            "type": "string",
                            "minLength": 1,
                            "description": 'What to do, imperative ("Run the tests").',
                        },
                        "status": {
                            "type": "string",
                            "enum": list(STATUSES),
                            "description": "pending, in_progress or completed.",
                        },
                        "activeForm": {
                            "type": "string",
                            "description": 'Present-continuous form shown while in progress ("Running the tests").',
                        },
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        ["todos"],
    )
    read_only = False  # it changes the session's list (and so is refused in plan mode)
    concurrency_safe = False
    requires_approval = False
    timeout = None

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        return Decision.allow("tool", "changes only the session's own todo list")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        todos = tool_input["todos"]
        # The executor validated the schema; a direct call (embedding) is checked here too.
        for i, item in enumerate(todos):
            if not isinstance(item, dict) or item.get("status") not in STATUSES:
                return ToolOutput.error(
                    f"TodoWrite: /todos/{i}/status: must be one of {', '.join(STATUSES)}"
                )
            if not isinstance(item.get("content"), str) or not item["content"].strip():
                return ToolOutput.error(
                    f"TodoWrite: /todos/{i}/content: must be a non-empty string"
                )
        session = ctx.session
        if session is None or not hasattr(session, "state"):
            return ToolOutput.error("TodoWrite: needs a norma session")
        try:
            save_todos(session, todos)
        except OSError as exc:
            return ToolOutput.error(f"TodoWrite: cannot save the list: {exc.strerror or exc}")
        counts = {s: sum(1 for t in todos if t["status"] == s) for s in STATUSES}
        head = (
            f"Todo list updated ({len(todos)} items: {counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending)"
        )
        lines = [head + (":" if todos else ".")]
        for t in todos:
            text = (
                t.get("activeForm") or t["content"]
                if t["status"] == "in_progress"
                else t["content"]
            )
            lines.append(f"{_MARK[t['status']]} {text}")
        return ToolOutput.text("\n".join(lines), todos=todos)


def load_todos(session: Any) -> list[dict[str, Any]]:
    if getattr(session, "persistent", False):
        try:
            data = json.loads((session.dir / "todos.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return data if isinstance(data, list) else []
    return list(session.state.get("todos", []))


def save_todos(session: Any, todos: list[dict[str, Any]]) -> None:
    clean = [{k: t[k] for k in ("content", "status", "activeForm") if k in t} for t in todos]
    if not getattr(session, "persistent", False):
        session.state["todos"] = clean
        return
    folder: Path = session.dir
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _write_atomic(
            fd, "todos.json", json.dumps(clean, ensure_ascii=False, indent=1).encode("utf-8")
        )
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------- AskUser
class AskUserTool(Tool):
    name = "AskUser"
    description = (
        "Ask the user a question and wait for the answer: to clarify an ambiguous request or "
        "to choose between approaches. Optionally offer choices; the user may still answer "
        "in their own words."
    )
    prompt = (
        "Ask one clear question at a time, only when you cannot proceed well without the "
        "answer. Offer 2-6 short options when the choice is between known alternatives. "
        "It fails when nobody can answer (norma running unattended): then decide yourself "
        "and say what you assumed."
    )
    input_schema = object_schema(
        {
            "question": {
                "type": "string",
                "minLength": 1,
                "description": "The question, ending with '?'.",
            },
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": 10,
                "description": "Suggested answers (the user may answer otherwise).",
            },
        },
        ["question"],
    )
    read_only = True
    concurrency_safe = False  # one question at a time on the terminal
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        question = tool_input["question"]
        options = [str(o) for o in tool_input.get("options") or []]
        session = ctx.session
        plugins = getattr(session, "plugins", None)
        if plugins is not None and plugins.has("ask_user"):
            try:
                answer = plugins.pm.hook.ask_user(question=question, options=options, context=ctx)
            except FAILURES as exc:  # SystemExit too: a plugin never ends norma silently
                return ToolOutput.error(
                    f"AskUser: the ask_user plugin failed: {type(exc).__name__}: {exc}"
                )
            if answer is not None:
                return _answered(str(answer), "plugin")
        if getattr(session, "interactive", False):
            try:
                answer = _ask_tty(question, options)
            except OSError as exc:
                return ToolOutput.error(
                    f"AskUser: cannot ask at the terminal: {exc.strerror or exc}"
                )
            if answer:
                return _answered(answer, "terminal")
            return ToolOutput.error("AskUser: the user gave no answer")
        return ToolOutput.error(
            "AskUser: nobody can answer: norma is not running interactively (no terminal) and no "
            "plugin answers ask_user. Decide yourself and state the assumption."
        )


def _answered(answer: str, via: str) -> ToolOutput:
    return ToolOutput.text(f"The user answered: {answer}", answer=answer, answered_by=via)


def _ask_tty(question: str, options: list[str]) -> str:
    with open("/dev/tty", "r+", encoding="utf-8") as tty:
        tty.write(f"\nnorma: the agent asks: {question}\n")
        for i, option in enumerate(options, 1):
            tty.write(f"  {i}. {option}\n")
        tty.write("  answer" + (" (number or text)" if options else "") + ": ")
        tty.flush()
        answer = tty.readline().strip()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return options[int(answer) - 1]
    return answer


# ---------------------------------------------------------------------------------- plan mode
class EnterPlanModeTool(Tool):
    name = "EnterPlanMode"
    description = (
        "Switch this session to plan mode: until ExitPlanMode is approved only read-only tools "
        "run (reading, searching, listing), so you can explore and write a plan without "
        "changing anything."
    )
    prompt = (
        "Enter plan mode before a large or risky change you want the user to review. Explore, "
        "then call ExitPlanMode with the plan."
    )
    input_schema = object_schema({}, [])
    read_only = True  # it changes nothing outside norma and only narrows what later calls may do
    concurrency_safe = False  # the calls after it must see the new mode
    requires_approval = False
    timeout = None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        session = ctx.session
        if session is None or not hasattr(session, "mode") or not hasattr(session, "state"):
            return ToolOutput.error("EnterPlanMode: needs a norma session")
        with _LOCK:
            if session.mode == "plan":
                return ToolOutput.text("Already in plan mode.", mode="plan")
            session.state["mode_before_plan"] = session.mode
            session.mode = "plan"
        return ToolOutput.text(
            "Entered plan mode: only read-only tools run now. Explore, then call ExitPlanMode "
            "with your plan; leaving plan mode needs the user's approval.",
            mode="plan",
        )


class ExitPlanModeTool(Tool):
    name = "ExitPlanMode"
    description = (
        "Present your plan and ask to leave plan mode. The user (or an approver) must approve; "
        "once approved the session returns to the permission mode it had before plan mode."
    )
    prompt = (
        "Call it when the plan is ready: give concrete steps, the files you will change and "
        "how you will verify. If it is refused, revise the plan or ask what to change."
    )
    input_schema = object_schema(
        {
            "plan": {
                "type": "string",
                "minLength": 1,
                "description": "The plan, in Markdown, shown to the approver.",
            }
        },
        ["plan"],
    )
    # Read-only (it changes no file) *and* asking: in plan mode a read-only tool's own ask is
    # still an ask, so leaving always needs an approval.
    read_only = True
    concurrency_safe = False
    requires_approval = True
    timeout = None

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        if ctx.mode == "plan":
            return Decision.ask("tool", "leaving plan mode needs approval of the plan")
        return Decision.allow("tool", "not in plan mode: nothing to leave")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        session = ctx.session
        if session is None or not hasattr(session, "mode") or not hasattr(session, "state"):
            return ToolOutput.error("ExitPlanMode: needs a norma session")
        with _LOCK:
            if session.mode != "plan":
                return ToolOutput.error(
                    f"ExitPlanMode: not in plan mode (the mode is {session.mode})"
                )
            previous = session.state.pop("mode_before_plan", None)
            session.mode = previous if previous and previous != "plan" else "default"
        return ToolOutput.text(
            f"Plan approved. Permission mode is now {session.mode}: carry out the plan.",
            mode=session.mode,
        )


# ---------------------------------------------------------------------------------- Memory
class MemoryTool(Tool):
    name = "Memory"
    description = (
        "Keep notes that persist across sessions: facts about this project (scope project: "
        ".norma/memory.md in the project) or about the user's preferences (scope user). "
        "Actions: view, add (append a note), replace (the whole file), clear."
    )
    prompt = (
        "View memory at the start of work on a project. Add short, durable facts (build "
        "commands, conventions, preferences the user stated), not task progress. Never store "
        "secrets. Writes may need approval."
    )
    input_schema = object_schema(
        {
            "action": {
                "type": "string",
                "enum": ["view", "add", "replace", "clear"],
                "description": "What to do.",
            },
            "scope": {
                "type": "string",
                "enum": ["project", "user"],
                "default": "project",
                "description": "project: <project root>/.norma/memory.md; user: memory.md in norma's user config dir.",
            },
            "text": {
                "type": "string",
                "maxLength": MAX_NOTE_CHARS,
                "description": "The note to add, or the new content for replace.",
            },
        },
        ["action"],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    edits_files = True  # acceptEdits allows project notes inside the roots
    timeout = None

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        if tool_input.get("action") == "view":
            return []
        return [str(memory_file(tool_input.get("scope") or "project", ctx))]

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        if tool_input.get("action") == "view":
            return Decision.allow("tool", "viewing norma's own notes")
        return None

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        action = tool_input["action"]
        scope = tool_input.get("scope") or "project"
        text = tool_input.get("text")
        if action in ("add", "replace") and not (isinstance(text, str) and text.strip()):
            return ToolOutput.error(f"Memory: /text: required (non-empty) when action is {action}")
        path = memory_file(scope, ctx)
        try:
            with _memory_dir(path.parent, create=action != "view") as dir_fd:
                current = "" if dir_fd is None else _read_note(dir_fd, path.name)
                if action == "view":
                    body = current.strip() or "(no notes yet)"
                    return ToolOutput.text(f"{scope} memory ({path}):\n\n{body}", path=str(path))
                assert dir_fd is not None
                if action == "add":
                    new = (
                        current.rstrip("\n") + "\n" if current.strip() else ""
                    ) + f"- {text.strip()}\n"  # type: ignore[union-attr]
                elif action == "replace":
                    new = text.rstrip("\n") + "\n"  # type: ignore[union-attr]
                else:
                    new = ""
                if len(new) > MAX_MEMORY_CHARS:
                    return ToolOutput.error(
                        f"Memory: {scope} memory would exceed {MAX_MEMORY_CHARS:,} characters; replace it with a shorter summary"
                    )
                _write_atomic(
                    dir_fd, path.name, new.encode("utf-8"), 0o600 if scope == "user" else 0o644
                )
        except SessionToolError as exc:
            return ToolOutput.error(f"Memory: {exc}")
        except OSError as exc:
            return ToolOutput.error(f"Memory: {path}: {exc.strerror or exc}")
        done = {"add": "Added a note to", "replace": "Replaced", "clear": "Cleared"}[action]
        return ToolOutput.text(f"{done} {scope} memory ({path}).", path=str(path))


def memory_file(scope: str, ctx: CallContext) -> Path:
    if scope == "user":
        from norma_cli.config import user_config_path

        return user_config_path().parent / "memory.md"
    from norma_cli.config import find_project_config

    found = find_project_config(ctx.cwd)
    root = found.parent.parent if found is not None else ctx.cwd
    return root / ".norma" / "memory.md"


@contextlib.contextmanager
def _memory_dir(folder: Path, *, create: bool) -> Any:
    """A descriptor of the notes folder, its last component opened without following links.

    Yields None when the folder does not exist and ``create`` is false.
    """
    parent, name = folder.parent, folder.name
    if create:
        parent.mkdir(parents=True, exist_ok=True)
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent_fd)
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd
            )
        except FileNotFoundError:
            yield None
            return
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SessionToolError(
                    f"{folder} is a symlink or not a directory: refusing to use it"
                ) from None
            raise
    finally:
        os.close(parent_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_note(dir_fd: int, name: str) -> str:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SessionToolError(f"{name} is a symlink: refusing to follow it") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise SessionToolError(f"{name} is not a regular file")
        data = fh.read(MAX_MEMORY_CHARS * 4 + 1)
    return data.decode("utf-8", "replace")


__all__ = [
    "AskUserTool",
    "EnterPlanModeTool",
    "ExitPlanModeTool",
    "MemoryTool",
    "TodoWriteTool",
    "load_todos",
    "memory_file",
]
