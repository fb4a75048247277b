"""Gitignore-style globs, as ripgrep applies them, for the pure-Python Grep engine.

One matcher serves both ignore files (``.gitignore``, ``.ignore``, ``.rgignore``,
``.git/info/exclude``) and Grep's ``glob`` filter (ripgrep's ``--glob`` overrides use the same
line syntax with the meaning inverted). Supported, as in ripgrep's ``ignore`` crate:

* ``#`` comments, blank lines, trailing spaces trimmed unless escaped (``\\ ``);
* ``!`` negation (re-include), ``\\!`` and ``\\#`` for literal leading characters;
* a trailing ``/`` matches directories only;
* a pattern with no ``/`` (other than a trailing one) matches a name at any depth; with a
  ``/`` it is anchored to the file's directory (a leading ``/`` only anchors);
* ``*`` and ``?`` within one path segment, ``[a-z]`` / ``[!a-z]`` classes, ``{a,b}``
  alternatives, ``**`` as a whole segment for any number of directories, backslash escapes;
* the last matching line wins.

Not supported: case-insensitive ignore files and git's ``core.excludesFile``/global ignores
(Grep asks ripgrep to skip those too, with ``--no-ignore-global``, so both engines agree).
"""

from __future__ import annotations

import re

from norma_cli.core.globs import GITIGNORE, glob_to_regex, segment_to_regex
from norma_cli.core.record import record


@record(frozen=True)
class GlobRule:
    regex: re.Pattern[str]
    negated: bool  # a "!" line (re-include) in an ignore file
    dir_only: bool
    text: str


class GlobList:
    """The lines of one ignore file (or the overrides), matched against relative paths."""

    def __init__(self, rules: list[GlobRule]) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str) -> GlobList:
        rules = [r for r in (parse_line(line) for line in text.splitlines()) if r is not None]
        return cls(rules)

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """True: a plain line matched last; False: a ``!`` line matched last; None: none did."""
        for rule in reversed(self.rules):
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.fullmatch(rel):
                return not rule.negated
        return None

    def __bool__(self) -> bool:
        return bool(self.rules)


def parse_line(line: str) -> GlobRule | None:
    """One gitignore line as a rule, or None for a blank line or a comment."""
    text = line
    if not line or line.startswith("#"):
        return None
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    if dir_only:
        line = line[:-1]
    anchored = line.startswith("/")
    if anchored:
        line = line[1:]
    if not line:
        return None
    if not anchored and "/" not in line:
        line = "**/" + line
    if line.endswith("/**"):
        line += "/*"  # everything inside a directory, never the directory itself
    try:
        regex = re.compile(glob_regex(line), re.DOTALL)
    except re.error:
        return None  # ripgrep drops a line it cannot compile, too
    return GlobRule(regex, negated, dir_only, text)


def glob_regex(pattern: str) -> str:
    """A regex (for ``fullmatch``) equivalent to a '/'-separated glob with literal separators."""
    return glob_to_regex(pattern, GITIGNORE)


def segment_regex(seg: str) -> str:
    """Regex for one path segment: ``*``, ``?``, classes, ``{a,b}``, backslash escapes."""
    return segment_to_regex(seg, GITIGNORE)


__all__ = ["GlobList", "GlobRule", "glob_regex", "parse_line", "segment_regex"]
