"""A one-line status on stderr while a session runs (model thinking, tool running).

Only on a terminal: when stderr is a pipe or a file (CI, scripts) nothing is written, so logs
hold only what matters. The line is redrawn in place and cleared before anything else is
printed.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
REDRAW_S = 0.1


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self._text = ""
        self._started = 0.0
        self._frame = 0
        self._drawn = 0.0
        self._lock = threading.Lock()

    def thinking(self, label: str = "model thinking") -> None:
        self._set(label)

    def streamed(self, chars: int) -> None:
        """More streamed text arrived: keep the line alive (throttled redraw)."""
        if self.enabled and time.monotonic() - self._drawn >= REDRAW_S:
            self._draw(f" ({chars} chars)")

    def tool(self, names: list[str]) -> None:
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        self._set(f"running {shown}")

    def clear(self) -> None:
        if not self.enabled or not self._text:
            return
        with self._lock:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._text = ""

    def _set(self, text: str) -> None:
        if not self.enabled:
            return
        self._text = text
        self._started = time.monotonic()
        self._draw("")

    def _draw(self, suffix: str) -> None:
        with self._lock:
            self._frame = (self._frame + 1) % len(FRAMES)
            elapsed = time.monotonic() - self._started
            self.stream.write(
                f"\r\x1b[K{FRAMES[self._frame]} norma: {self._text}… {elapsed:.0f}s{suffix}"
            )
            self.stream.flush()
            self._drawn = time.monotonic()
