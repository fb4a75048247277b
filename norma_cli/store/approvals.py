"""Durable approval requests (SPEC §9): one row per asked call, decided from any process.

A request is bound to one exact call: the tool name, the agent, and the sha256 of the canonical
JSON of the final input. Life of a row (``status``)::

    pending ──approve──▶ approved ──(one matching run)──▶ consumed_at set
            ──deny─────▶ denied   ──(one matching run)──▶ consumed_at set
            ──deadline─▶ expired
            ──requester killed (SIGTERM) while waiting──▶ cancelled

Every transition is a single ``UPDATE ... WHERE status = 'pending'`` (or ``consumed_at IS
NULL``) so two processes can never both decide, or both use, one request. A grant does not
expire once given; it is used by exactly one run of exactly that call.
"""

from __future__ import annotations

import getpass
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import fields, record
from norma_cli.errors import NormaError, StoreError, UsageError

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

STATUSES = ("pending", "approved", "denied", "expired", "cancelled")
# The shortest id prefix that names a request: a one- or two-character slip must not match
# (and decide) whichever request happens to start with it.
MIN_PREFIX = 4


class ApprovalError(NormaError):
    """An approval that cannot be decided (unknown, ambiguous, already decided, expired)."""


@record
class Approval:
    id: str
    tool: str
    input_digest: str
    input: str  # the canonical JSON the digest covers: what the approver is shown
    agent: str | None
    session_id: str
    requester: str
    stage: str  # who asked: "intercept" (a guard rule / judge) or "permission"
    rule: str | None
    rule_source: str | None
    reason: str
    status: str
    created_at: float
    expires_at: float
    decider: str | None = None
    decision_reason: str | None = None
    decided_at: float | None = None
    consumed_at: float | None = None
    consumed_by: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Approval:
        return cls(**dict(row))

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_COLUMNS = ", ".join(f.name for f in fields(Approval))


def requester() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    import socket

    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def decider_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


class Approvals:
    """The approval queue of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ requester side
    def request(
        self, *, tool: str, input_digest: str, input_json: str, agent: str | None, session_id: str,
        stage: str, rule: str | None, rule_source: str | None, reason: str, timeout_s: float,
    ) -> tuple[Approval, bool]:  # fmt: skip
        """A pending request for this call: the live one if the same call already waits, else a
        new one. The flag says whether it is new (only its creator may cancel it)."""
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE tool = ? AND input_digest = ? AND COALESCE(agent, '') = ?"
                " AND status = 'pending' AND expires_at > ? ORDER BY created_at LIMIT 1",
                (tool, input_digest, agent or "", now),
            ).fetchone()
            if row is not None:
                return Approval(*row), False
            approval = Approval(
                id=secrets.token_hex(5), tool=tool, input_digest=input_digest, input=input_json,
                agent=agent, session_id=session_id, requester=requester(), stage=stage, rule=rule,
                rule_source=rule_source, reason=reason, status="pending", created_at=now,
                expires_at=now + timeout_s,
            )  # fmt: skip
            values = approval.to_json()
            conn.execute(
                f"INSERT INTO approvals ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
        return approval, True

    def take_decided(
        self, *, tool: str, input_digest: str, agent: str | None, consumer: str
    ) -> Approval | None:
        """Use up the oldest decided (approved or denied), unused answer for exactly this call."""
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM approvals WHERE tool = ? AND input_digest = ? AND COALESCE(agent, '') = ?"
            " AND status IN ('approved', 'denied') AND consumed_at IS NULL ORDER BY decided_at",
            (tool, input_digest, agent or ""),
        )
        for row in rows:
            approval = Approval.from_row(row)
            if self.consume(approval.id, consumer):
                approval.consumed_by = consumer
                return approval
        return None

    def consume(self, approval_id: str, consumer: str) -> bool:
        """Mark a decided request used; False when another run used it first."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE approvals SET consumed_at = ?, consumed_by = ? WHERE id = ? AND consumed_at IS NULL"
                " AND status IN ('approved', 'denied')",
                (time.time(), consumer, approval_id),
            )
            return cur.rowcount == 1

    def wait(
        self, approval_id: str, *, poll_s: float = 0.05, stop: Callable[[], bool] | None = None
    ) -> Approval:
        """Block until the request is decided or its deadline passes (then it is marked
        expired), or ``stop()`` turns true (then it is returned still pending). Polls the row
        every ``poll_s`` (a read in WAL mode costs microseconds)."""
        while True:
            approval = self.get(approval_id)
            if approval.status != "pending":
                return approval
            if time.time() >= approval.expires_at:
                return self.expire(approval_id)
            if stop is not None and stop():
                return approval
            time.sleep(min(poll_s, max(0.0, approval.expires_at - time.time())))

    def expire(self, approval_id: str) -> Approval:
        return self._finish(approval_id, "expired", "expiry", "expired")

    def cancel(
        self, approval_id: str, reason: str = "cancelled: the requesting run was stopped"
    ) -> Approval:
        return self._finish(approval_id, "cancelled", "requester", reason)

    def _finish(self, approval_id: str, status: str, decider: str, reason: str) -> Approval:
        with self._write() as conn:
            conn.execute(
                "UPDATE approvals SET status = ?, decider = ?, decision_reason = ?, decided_at = ?"
                " WHERE id = ? AND status = 'pending'",
                (status, decider, reason, time.time(), approval_id),
            )
        return self.get(approval_id)  # a decision that won the race is returned as it is

    # ------------------------------------------------------------------ approver side
    def decide(
        self, key: str, *, approve: bool, decider: str, reason: str | None = None
    ) -> Approval:
        approval = self.resolve(key)
        if approval.status == "pending" and time.time() >= approval.expires_at:
            approval = self.expire(approval.id)
        if approval.status != "pending":
            by = (
                f" by {approval.decider}"
                if approval.decider and approval.status in ("approved", "denied")
                else ""
            )
            raise ApprovalError(f"approval {approval.id} is already {approval.status}{by}")
        status = "approved" if approve else "denied"
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE approvals SET status = ?, decider = ?, decision_reason = ?, decided_at = ?"
                " WHERE id = ? AND status = 'pending' AND expires_at > ?",
                (status, decider, reason, time.time(), approval.id, time.time()),
            )
            won = cur.rowcount == 1
        if not won:
            current = self.get(approval.id)
            raise ApprovalError(f"approval {approval.id} is already {current.status}")
        return self.get(approval.id)

    def resolve(self, key: str) -> Approval:
        """An approval by id or by a unique prefix of it at least ``MIN_PREFIX`` long."""
        if not key.strip():
            # "" is a prefix of every id: `norma approve "$ID"` with ID unset decided the
            # only pending request.
            raise UsageError("the approval ID is empty (see `norma approve --list`)")
        exact = self.store.query(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (key,))
        if exact:
            return Approval.from_row(exact[0])
        if len(key) < MIN_PREFIX:
            raise UsageError(
                f"approval ID {key!r} is too short: give the full ID or at least its first"
                f" {MIN_PREFIX} characters (see `norma approve --list`)"
            )
        escaped = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM approvals WHERE id LIKE ? ESCAPE '\\'", (escaped + "%",)
        )
        if not rows:
            raise ApprovalError(f"no approval request {key!r} (see `norma approve --list`)")
        if len(rows) > 1:
            raise ApprovalError(
                f"approval id {key!r} is ambiguous ({', '.join(r['id'] for r in rows)})"
            )
        return Approval.from_row(rows[0])

    def get(self, approval_id: str) -> Approval:
        rows = self.store.query(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,))
        if not rows:
            raise ApprovalError(f"no approval request {approval_id!r}")
        return Approval.from_row(rows[0])

    def queue(self, *, everything: bool = False) -> list[Approval]:
        """Pending requests (after marking the overdue ones expired); ``everything``: all rows."""
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "UPDATE approvals SET status = 'expired', decider = 'expiry', decision_reason = 'expired',"
                " decided_at = ? WHERE status = 'pending' AND expires_at <= ?",
                (now, now),
            )
        where = "" if everything else " WHERE status = 'pending'"
        rows = self.store.query(f"SELECT {_COLUMNS} FROM approvals{where} ORDER BY created_at")
        return [Approval.from_row(r) for r in rows]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            with self.store.write() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.store.path}: approvals: {exc}") from None
