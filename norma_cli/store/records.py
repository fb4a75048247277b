"""Record surfaces beside the trace (SPEC §10): activity, LLM records, traffic, tool usage.

* **activity** — session events (start, end with its reason), one row each.
* **llm_records** — requests to and replies from models norma itself calls (the judge), with
  secrets redacted before anything is written.
* **traffic** — every outbound HTTP request made by norma's own tools and the judge: method,
  URL (credentials removed), status, byte counts and sha256 of both bodies.
* **tool_usage** — a view over the trace: calls per tool/agent/session by outcome.

These rows are not hash-chained: the trace is the tamper-evident record of what ran and why;
these are the operational surfaces around it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from norma_cli.errors import StoreError

if TYPE_CHECKING:
    from norma_cli.store.sqlite import Store

REDACTED = "[REDACTED]"
# Header names whose values are credentials; never written anywhere.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "set-cookie",
        "x-auth-token",
    }
)
# Query parameters that carry credentials in the wild (?key=, ?api_key=, ?access_token=, ...).
# (A pattern string, compiled on first use by re's cache: recording activity must stay cheap.)
_SECRET_PARAM = r"(?i)^(.*[_-])?(key|token|secret|password|passwd|signature|sig|auth|credential)s?$"
KINDS = ("activity", "usage", "llm", "traffic")


def _insert(store: Store, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    marks = ", ".join("?" * len(row))
    try:
        with store.write() as conn:
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))
    except sqlite3.Error as exc:
        raise StoreError(f"store {store.path}: cannot write {table}: {exc}") from None


def record_activity(
    store: Store, *, session_id: str, event: str, reason: str | None = None,
    agent: str | None = None, cwd: str | None = None,
) -> None:  # fmt: skip
    _insert(store, "activity", {
        "id": os.urandom(16).hex(), "session_id": session_id, "event": event, "reason": reason,
        "agent": agent, "cwd": cwd, "pid": os.getpid(), "created_at": time.time(),
    })  # fmt: skip


def record_traffic(
    store: Store,
    *,
    method: str,
    url: str,
    status: int | None,
    request_bytes: int = 0,
    response_bytes: int = 0,
    request_sha256: str | None = None,
    response_sha256: str | None = None,
    duration_ms: float | None = None,
    error: str | None = None,
    tool: str | None = None,
    session_id: str | None = None,
    tool_use_id: str | None = None,
) -> None:
    """Record one outbound HTTP request. ``url`` is stored with credentials removed
    (user:password@ and credential-looking query parameters); bodies are never stored, only
    their size and sha256. ``status`` is None when no response came (``error`` says why)."""
    _insert(store, "traffic", {
        "id": os.urandom(16).hex(), "tool": tool, "session_id": session_id, "tool_use_id": tool_use_id,
        "method": method.upper(), "url": redact_url(url), "status": status,
        "request_bytes": int(request_bytes), "response_bytes": int(response_bytes),
        "request_sha256": request_sha256, "response_sha256": response_sha256,
        "duration_ms": duration_ms, "error": error, "created_at": time.time(),
    })  # fmt: skip


def record_llm(
    store: Store,
    *,
    purpose: str,
    provider: str | None,
    model: str | None,
    url: str | None,
    request: Any,
    response: str | None,
    status: int | None,
    error: str | None = None,
    duration_ms: float | None = None,
    secrets: tuple[str, ...] = (),
    session_id: str | None = None,
    trace_id: str | None = None,
    tool_use_id: str | None = None,
) -> None:
    """Record one model exchange. Every string in ``secrets`` (an API key...) is replaced by
    ``[REDACTED]`` wherever it appears, in the request, the reply and the error."""
    request_text = (
        request
        if isinstance(request, str)
        else json.dumps(request, ensure_ascii=False, default=str)
    )
    _insert(store, "llm_records", {
        "id": os.urandom(16).hex(), "purpose": purpose, "provider": provider, "model": model,
        "url": redact_url(url) if url else None, "session_id": session_id, "trace_id": trace_id,
        "tool_use_id": tool_use_id, "request": redact(request_text, secrets),
        "response": redact(response, secrets) if response is not None else None,
        "status": status, "error": redact(error, secrets) if error else None,
        "duration_ms": duration_ms, "created_at": time.time(),
    })  # fmt: skip


# ----------------------------------------------------------------------------- redaction
def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:  # a 1-3 character "secret" would shred the text
            text = text.replace(secret, REDACTED)
    return text


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


def redact_url(url: str) -> str:
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(re.match(_SECRET_PARAM, k) for k, _ in pairs):
            query = urlencode(
                [(k, REDACTED if re.match(_SECRET_PARAM, k) else v) for k, v in pairs]
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# ----------------------------------------------------------------------------- reading
_QUERIES = {
    "activity": "SELECT created_at, session_id, event, reason, agent, cwd, pid FROM activity",
    "usage": "SELECT tool, agent, session_id, calls, completed, failed, denied, pending, total_ms, first_at, last_at FROM tool_usage",
    "llm": "SELECT created_at, purpose, provider, model, url, status, error, duration_ms, trace_id, request, response FROM llm_records",
    "traffic": "SELECT created_at, method, url, status, request_bytes, response_bytes, request_sha256, response_sha256, duration_ms, error, tool, session_id FROM traffic",
}
_ORDER = {
    "activity": "created_at",
    "usage": "last_at",
    "llm": "created_at",
    "traffic": "created_at",
}


def read(
    store: Store, kind: str, *, session: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Rows of one record surface, oldest first (the newest ``limit`` when given)."""
    sql = _QUERIES[kind]
    params: tuple[Any, ...] = ()
    if session is not None:
        sql += " WHERE session_id = ?"
        params = (session,)
    sql += f" ORDER BY {_ORDER[kind]} DESC"
    if limit:
        sql += f" LIMIT {int(limit)}"
    rows = store.query(sql, params)
    return [dict(r) for r in reversed(rows)]
