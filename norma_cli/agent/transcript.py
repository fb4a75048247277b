"""The session transcript: ``<data dir>/sessions/<id>/transcript.jsonl`` and ``messages`` rows.

Each line is one complete JSON record, written with one ``write`` and made durable with
``fsync`` before the run goes on, so a run killed at any point leaves a file whose lines all
parse (a torn last line — power cut mid-write — is cut off when the session is next opened).
Records:

    {"type": "start", "session_id", "time", "resumed", "provider", "model", "agent", "system", ...}
    {"type": "message", "seq", "time", "message": {"role", "content": [blocks]}, "usage"?, ...}
    {"type": "end", "time", "reason", "exit_code", "usage"}

The file is locked (``flock``) while a run holds the session: two runs appending to one
conversation would interleave it. Every string in ``secrets`` (the API key) is redacted before
anything is written, here and in the store.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.agent.messages import Message
from norma_cli.core.record import field, record
from norma_cli.errors import StoreError, UsageError

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

FILE_NAME = "transcript.jsonl"


def transcript_path(session_dir: Path) -> Path:
    return session_dir / FILE_NAME


@record
class Transcript:
    path: Path
    session_id: str
    store: Store | None = None
    secrets: tuple[str, ...] = ()
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _fd: int = -1
    _seq: int = 0

    @classmethod
    def open(cls, session_dir: Path, session_id: str, *, store: Store | None = None,
             secrets: tuple[str, ...] = (), must_exist: bool = False) -> Transcript:  # fmt: skip
        path = transcript_path(session_dir)
        if must_exist and not path.is_file():
            raise UsageError(f"no transcript for session {session_id!r} to resume ({path})")
        try:
            session_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise UsageError(f"cannot open transcript {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"session {session_id!r} is in use by another norma run") from None
        t = cls(path, session_id, store, secrets, _fd=fd)
        t._load()
        return t

    def _load(self) -> None:
        with open(self._fd, "rb", closefd=False) as fh:
            fh.seek(0)
            raw = fh.read()
        complete = raw.rfind(b"\n") + 1
        if complete < len(raw):  # a torn last line: never a record, cut it off
            os.ftruncate(self._fd, complete)
            self.notes.append(
                f"{self.path}: dropped an incomplete last line ({len(raw) - complete} bytes)"
            )
        for number, line in enumerate(raw[:complete].splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.notes.append(f"{self.path}:{number}: unreadable line skipped")
                continue
            if isinstance(record, dict):
                self.records.append(record)
                if record.get("type") == "message":
                    self._seq = max(self._seq, int(record.get("seq") or 0))

    @property
    def exists(self) -> bool:
        return any(r.get("type") == "message" for r in self.records)

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for entry in self.records:
            if entry.get("type") != "message":
                continue
            try:
                out.append(Message.from_json(entry["message"]))
            except (KeyError, ValueError, TypeError) as exc:
                self.notes.append(
                    f"{self.path}: message {entry.get('seq')} unreadable ({exc}); skipped"
                )
        return out

    def last(self, kind: str) -> dict[str, Any] | None:
        return next((r for r in reversed(self.records) if r.get("type") == kind), None)

    # ------------------------------------------------------------------ writing
    def append(self, record: dict[str, Any]) -> None:
        from norma_cli.store.records import redact

        record = {"time": time.time(), **record}
        line = redact(json.dumps(record, ensure_ascii=False, default=str), self.secrets) + "\n"
        data = line.encode("utf-8")
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        os.fsync(self._fd)
        self.records.append(record)

    def add_message(self, message: Message, **extra: Any) -> None:
        self._seq += 1
        body = message.to_json()
        self.append(
            {
                "type": "message",
                "seq": self._seq,
                "session_id": self.session_id,
                "message": body,
                **extra,
            }
        )
        if self.store is not None:
            self._insert(message, body, extra)

    def _insert(self, message: Message, body: dict[str, Any], extra: dict[str, Any]) -> None:
        import sqlite3

        from norma_cli.store.records import redact

        assert self.store is not None
        usage = extra.get("usage") or {}
        row = (
            uuid.uuid4().hex, self.session_id, self._seq, message.role,
            redact(json.dumps(body, ensure_ascii=False, default=str), self.secrets),
            extra.get("agent"), extra.get("provider"), extra.get("model"),
            usage.get("input_tokens"), usage.get("output_tokens"), time.time(),
        )  # fmt: skip
        try:
            with self.store.write() as conn:
                conn.execute(
                    "INSERT INTO messages (id, session_id, seq, role, content, agent, provider, model,"
                    " input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.store.path}: cannot write messages: {exc}") from None

    def close(self) -> None:
        if self._fd >= 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = -1


def read_messages(store: Store, session_id: str) -> list[dict[str, Any]]:
    """The ``messages`` rows of a session, in order (for tools and tests reading the store)."""
    rows = store.query(
        "SELECT seq, role, content, agent, provider, model, input_tokens, output_tokens, created_at"
        " FROM messages WHERE session_id = ? ORDER BY seq",
        (session_id,),
    )
    return [{**dict(r), "content": json.loads(r["content"])} for r in rows]
