"""The per-session unlock set: which skill-gated tools a session has unlocked.

Kept apart from the search machinery so that a run which gates nothing imports nothing more.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from norma_cli.store.catalog_repo import CatalogRepo


class UnlockSet:
    """Which gated tools this session has unlocked, persisted per session id in the store.

    ``gated`` maps a tool to the skills that unlock it. Unlocks are loaded once (one query,
    only when something is gated) and written through on each ``Skill`` call, so a resumed
    session (``norma run --session ID``) gets them back.
    """

    def __init__(
        self, gated: dict[str, tuple[str, ...]], session_id: str, repo: CatalogRepo | None
    ) -> None:
        self.gated = gated
        self.session_id = session_id
        self.repo = repo
        self.unlocked: set[str] = set()
        self._lock = threading.Lock()
        if gated and repo is not None:
            self.unlocked.update(t for t in repo.unlocks(session_id) if t in gated)
        if repo is not None and not repo.writable:
            self.repo = None  # a read-only catalog: unlocks last for this process only

    def locked_by(self, name: str) -> tuple[str, ...]:
        skills = self.gated.get(name)
        if not skills or name in self.unlocked:
            return ()
        return skills

    def unlock(self, skill: str) -> list[str]:
        tools = sorted(t for t, skills in self.gated.items() if skill in skills)
        with self._lock:
            fresh = [t for t in tools if t not in self.unlocked]
            if fresh and self.repo is not None:
                self.repo.add_unlocks(self.session_id, fresh, skill)
            self.unlocked.update(fresh)
        return tools
