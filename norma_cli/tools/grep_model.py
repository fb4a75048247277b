"""What a Grep search asks and what an engine (ripgrep or pure Python) finds.

Both engines fill the same ``SearchResult``; the Grep tool alone turns it into text, so the
two cannot drift apart in how results look.
"""

from __future__ import annotations

import time
from typing import Literal

from norma_cli.core.record import field, record

Mode = Literal["content", "files_with_matches", "count"]
MODES: tuple[Mode, ...] = ("content", "files_with_matches", "count")
# Skipped as ripgrep's --glob '!NAME' overrides (a search includes other dotfiles).
VCS_DIRS = (".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", "CVS")


@record(frozen=True)
class Query:
    pattern: str
    root: str  # absolute, symlinks resolved: the directory or file searched
    is_dir: bool
    mode: Mode
    ignore_case: bool = False
    before: int = 0  # context lines (content mode)
    after: int = 0
    multiline: bool = False
    globs: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    deadline: float = field(default_factory=lambda: time.monotonic() + 60.0)
    # Where ``root`` is opened beneath (its working root) and its path relative to that, so the
    # Python engine opens it confined like the file tools do; "" = open ``root`` directly.
    base: str = ""
    rel: str = "."


@record
class FileHits:
    path: str
    # content mode: (line number, is a match line (else context), text without line ending)
    lines: list[tuple[int, bool, str]] = field(default_factory=list)
    count: int = 0  # count mode
    binary: bool = False  # an explicitly named binary file that matched


@record
class SearchResult:
    engine: Literal["ripgrep", "python"]
    files: list[FileHits]
    notes: list[str] = field(default_factory=list)  # incomplete search, unreadable paths...


class SearchError(Exception):
    """The search cannot run as asked (bad pattern, unknown type); the message is for the model."""
