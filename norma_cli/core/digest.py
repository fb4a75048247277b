"""Canonical JSON and its sha256, used to bind decisions and approvals to exact inputs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for the process: json.dumps with options builds a new one on every call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is (RFC 8785 in spirit)."""
    return _CANONICAL.encode(value)


def input_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
