"""The six permission modes (SPEC §4), and their order from loosest to strictest."""

from __future__ import annotations

MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto")
# Used when layers disagree: an untrusted project layer may only move to a stricter mode.
MODE_STRICTNESS = {
    "bypassPermissions": 0,
    "auto": 1,
    "acceptEdits": 2,
    "default": 3,
    "dontAsk": 4,
    "plan": 5,
}
