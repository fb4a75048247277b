"""A session: the identity and working state shared by the calls of one run.

A one-shot ``norma run`` is a session that closes when norma exits. SessionStart and SessionEnd
hooks fire here, and ``close`` fires SessionEnd exactly once whatever ended the session.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record
from norma_cli.errors import UsageError

if TYPE_CHECKING:
    from norma_cli.core.hooks import HookOutcome, HookRunner
    from norma_cli.core.output import OutputCapper


# A session id names a directory under the data dir (tasks, todos): a safe path component.
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_session_id() -> str:
    return os.urandom(16).hex()


def check_session_id(session_id: str) -> str:
    if not SESSION_ID_RE.match(session_id) or ".." in session_id:
        raise UsageError(
            f"invalid session id {session_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return session_id


@record
class Session:
    id: str
    cwd: Path
    roots: tuple[Path, ...]
    mode: str
    agent: str | None
    data_dir: Path
    capper: OutputCapper
    hooks: HookRunner
    # Paths outside the roots that an explicit allow rule names (file tools may open them).
    extra_roots: tuple[Path, ...] = ()
    # Read deny/ask rules' paths, hidden from listing and searching tools (policy.filescope).
    read_filter: Any = None
    closed: bool = False
    hook_events: list[dict[str, Any]] = field(default_factory=list)
    # Set by the runtime for tools that need them (background switch, AskUser, ...).
    config: Any = None
    plugins: Any = None
    interactive: bool = False
    # A named session (--session ID) outlives one invocation: closing it leaves its
    # background tasks running; an unnamed one ends them.
    persistent: bool = False
    # Working state of session tools (task manager, PTY shells, plan mode), keyed by feature.
    state: dict[str, Any] = field(default_factory=dict)
    # Set on SIGINT/SIGTERM so tools waiting on worker threads give up promptly.
    cancelled: threading.Event = field(default_factory=threading.Event)
    closers: list[Callable[[], None]] = field(default_factory=list)
    # Records session events (start, end + reason) in the store's activity surface.
    activity: Callable[[str, str | None], None] | None = None
    # The store (None without one): tools record their outbound requests in its traffic surface.
    store: Any = None

    @property
    def dir(self) -> Path:
        """``<data dir>/sessions/<id>``: where this session's tasks and todos live."""
        return self.data_dir / "sessions" / check_session_id(self.id)

    def _payload(self, event: str, **extra: Any) -> dict[str, Any]:
        return {
            "session_id": self.id,
            "cwd": str(self.cwd),
            "hook_event_name": event,
            "permission_mode": self.mode,
            "agent": self.agent,
            **extra,
        }

    def start(self, source: str = "startup") -> list[HookOutcome]:
        if self.activity is not None:
            self.activity("start", source)
        if not self.hooks.has("SessionStart"):
            return []
        outcomes = self.hooks.run("SessionStart", self._payload("SessionStart", source=source))
        self.hook_events.extend(o.to_event() for o in outcomes)
        return outcomes

    def close(self, reason: str = "exit") -> None:
        if self.closed:
            return
        self.closed = True
        self.cancelled.set()  # a wait still running on some thread gives up
        # Background tasks and shells end before the hooks run (a hook may hang for 60 s);
        # one closer failing must not keep the others from ending their processes.
        failures: list[Exception] = []
        for closer in reversed(self.closers):
            try:
                closer()
            except Exception as exc:
                failures.append(exc)
        if self.hooks.has("SessionEnd"):
            outcomes = self.hooks.run("SessionEnd", self._payload("SessionEnd", reason=reason))
            self.hook_events.extend(o.to_event() for o in outcomes)
        if self.activity is not None:
            try:
                self.activity("end", reason)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
