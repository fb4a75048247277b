"""A session: the identity and working state shared by the calls of one run.

A one-shot ``norma run`` is a session that closes when norma exits. SessionStart and SessionEnd
hooks fire here, and ``close`` fires SessionEnd exactly once whatever ended the session.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from norma_cli.core.hooks import HookOutcome, HookRunner
    from norma_cli.core.output import OutputCapper


def new_session_id() -> str:
    return uuid.uuid4().hex


@dataclass
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
    closed: bool = False
    hook_events: list[dict[str, Any]] = field(default_factory=list)

    def _payload(self, event: str, **extra: Any) -> dict[str, Any]:
        return {"session_id": self.id, "cwd": str(self.cwd), "hook_event_name": event,
                "permission_mode": self.mode, "agent": self.agent, **extra}

    def start(self, source: str = "startup") -> list[HookOutcome]:
        if not self.hooks.has("SessionStart"):
            return []
        outcomes = self.hooks.run("SessionStart", self._payload("SessionStart", source=source))
        self.hook_events.extend(o.to_event() for o in outcomes)
        return outcomes

    def close(self, reason: str = "exit") -> None:
        if self.closed:
            return
        self.closed = True
        if self.hooks.has("SessionEnd"):
            outcomes = self.hooks.run("SessionEnd", self._payload("SessionEnd", reason=reason))
            self.hook_events.extend(o.to_event() for o in outcomes)
