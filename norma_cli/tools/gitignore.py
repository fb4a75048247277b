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
    segments = pattern.split("/")
    out: list[str] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg == "**":
            out.append(".*" if i == last else "(?:.*/)?")
        else:
            out.append(segment_regex(seg) + ("" if i == last else "/"))
    return "".join(out)


def segment_regex(seg: str) -> str:
    """Regex for one path segment: ``*``, ``?``, classes, ``{a,b}``, backslash escapes."""
    out: list[str] = []
    i = 0
    n = len(seg)
    while i < n:
        c = seg[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "*":
            while i + 1 < n and seg[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end, cls = _char_class(seg, i)
            if end < 0:
                out.append(re.escape(c))
            else:
                out.append(cls)
                i = end
        elif c == "{":
            end = _closing_brace(seg, i)
            if end < 0:
                out.append(re.escape(c))
            else:
                alts = _split_alternatives(seg[i + 1 : end])
                out.append("(?:" + "|".join(segment_regex(a) for a in alts) + ")")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _char_class(seg: str, start: int) -> tuple[int, str]:
    i = start + 1
    negated = i < len(seg) and seg[i] in "!^"
    if negated:
        i += 1
    body: list[str] = []
    first = True
    while i < len(seg):
        c = seg[i]
        if c == "]" and not first:
            head = "[^/" if negated else "["
            return i, head + "".join(body) + "]"
        if c == "\\" and i + 1 < len(seg):
            body.append(re.escape(seg[i + 1]))
            i += 2
            first = False
            continue
        body.append("-" if c == "-" else re.escape(c))
        first = False
        i += 1
    return -1, ""


def _closing_brace(seg: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(seg):
        c = seg[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_alternatives(body: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur.append(body[i : i + 2])
            i += 2
            continue
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            depth += c == "{"
            depth -= c == "}"
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


__all__ = ["GlobList", "GlobRule", "glob_regex", "parse_line", "segment_regex"]
