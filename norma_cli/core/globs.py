"""Glob patterns to regular expressions: one translator, a dialect per glob syntax norma reads.

Each dialect below is one caller's syntax, and each field of ``GlobDialect`` is a difference
some caller depends on. They produce exactly the regexes the separate translators did before
they were merged (``tests/test_globs.py`` holds them to a recording of those), so two
dialects may spell the same idea differently — ``[^/a]`` and ``(?!/)[^a]``.

* ``GLOB_TOOL`` — the Glob tool's ``pattern``: ``*``/``?`` stay in one segment, a whole
  ``**`` segment is any number of directories, ``{a,b}``; no escapes (``\\`` is a character).
* ``GITIGNORE`` — one line of a ``.gitignore`` (and Grep's ``glob``), as ripgrep reads it:
  backslash escapes, POSIX-style classes, ``{a,b}``.
* ``RULE_PATH`` — a permission rule's path (``Read(./src/**)``): ``**`` crosses ``/``
  wherever it stands, ``**/`` is any directories, a trailing ``/**`` also matches the folder.
* ``SHELL_WORD`` — an unquoted bash word holding glob characters, in escaped form (a quoted
  character follows a backslash): ``*`` and ``?`` cross ``/``.
* ``BASH_WORD`` — the same word with bracket expressions read as bash reads them; deny rules
  match a word when either reading does (see ``policy/shellwords.glob_regex``).

What no dialect does: hide dotfiles (``*`` matches a leading ``.``), fold case, or anchor. The
result is meant for ``fullmatch``; anchoring ("no slash: any depth", "covers what lies below")
is part of each caller's line syntax and stays with the caller.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from norma_cli.core.record import record, replace

if TYPE_CHECKING:  # the aliases cost start-up time and only the type checker reads them
    from typing import Literal

    StarRuns = Literal["one", "pairs", "each"]
    Globstar = Literal["segments", "slashes", "none"]
    Classes = Literal["first-bracket", "skip-one", "posix", "bash"]


@record(frozen=True)
class GlobDialect:
    name: str
    # '*' and '?' match '/' too (a shell word) or stay inside one path segment.
    wildcards_cross_slash: bool
    # Stars in a row: "one" — any run is one '*'; "pairs" — each '**' crosses '/' (a star
    # left over is a plain '*'); "each" — every star on its own.
    star_runs: StarRuns
    # "segments": the pattern is cut at '/' first, a whole '**' segment is any directories
    # (the last one: anything); "slashes": '**/' at the start or after '/' is any
    # directories and a final '/**' is "this folder and below"; "none": '/' is a character.
    globstar: Globstar
    globstar_dirs: str  # the regex for "any directories" (empty segments allowed or not)
    escapes: bool  # a backslash makes the next character literal
    braces: bool  # {a,b} alternatives, nested, within one segment
    # How '[' ... ']' is read:
    # "first-bracket" — the first ']' after '[' (and an optional '!'/'^') closes it, even
    #   right away; members are copied as written.
    # "skip-one" — the character right after '[' never closes it (so '[]]' is a ']' but
    #   '[!]]' is an empty '[!]' then ']'); members copied as written, '[' escaped.
    # "posix" — a ']' right after '[' or '[!' is a member; members escaped one by one.
    # "bash" — posix, plus bash's named classes ('[:alpha:]', read as any character) and
    #   reversed ranges ('z-a', which match nothing).
    classes: Classes
    classes_match_slash: bool  # False: no class ever matches '/'


GLOB_TOOL = GlobDialect(
    name="Glob tool",
    wildcards_cross_slash=False,
    star_runs="one",
    globstar="segments",
    globstar_dirs="(?:[^/]+/)*",
    escapes=False,
    braces=True,
    classes="first-bracket",  # '[]]' and '[!]]' do not compile: the tool reports an error
    classes_match_slash=True,  # '**/a[!x]b' finds 'a/b' (kept as it was; see the tests)
)
GITIGNORE = GlobDialect(
    name="gitignore",
    wildcards_cross_slash=False,
    star_runs="one",
    globstar="segments",
    globstar_dirs="(?:.*/)?",
    escapes=True,
    braces=True,
    classes="posix",
    classes_match_slash=False,
)
RULE_PATH = GlobDialect(
    name="rule path",
    wildcards_cross_slash=False,
    star_runs="pairs",
    globstar="slashes",
    globstar_dirs="(?:.*/)?",
    escapes=True,
    braces=False,
    classes="skip-one",
    classes_match_slash=False,
)
SHELL_WORD = GlobDialect(
    name="shell word",
    wildcards_cross_slash=True,
    star_runs="each",
    globstar="none",
    globstar_dirs="",
    escapes=True,
    braces=False,  # brace expansion happens earlier, on the word (policy/shellwords)
    classes="skip-one",
    classes_match_slash=True,
)
# The same word with bash's bracket rules: '[f\]]' is f or ']', '[[:alpha:]]' a letter.
BASH_WORD = replace(SHELL_WORD, name="bash word", classes="bash", classes_match_slash=False)


def glob_to_regex(pattern: str, dialect: GlobDialect) -> str:
    """The regex (for ``fullmatch``, with ``re.DOTALL``) of ``pattern`` in ``dialect``."""
    if dialect.globstar != "segments":
        return segment_to_regex(pattern, dialect)
    segments = pattern.split("/")
    last = len(segments) - 1
    out: list[str] = []
    for i, seg in enumerate(segments):
        if seg == "**":
            out.append(".*" if i == last else dialect.globstar_dirs)
        else:
            out.append(segment_to_regex(seg, dialect) + ("" if i == last else "/"))
    return "".join(out)


def segment_to_regex(text: str, dialect: GlobDialect) -> str:
    """Like ``glob_to_regex`` but without cutting at '/' (one segment, or a whole word)."""
    star, any_char = (".*", ".") if dialect.wildcards_cross_slash else ("[^/]*", "[^/]")
    slashes = dialect.globstar == "slashes"
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and dialect.escapes and i + 1 < n:
            out.append(re.escape(text[i + 1]))
            i += 2
            continue
        if c == "*":
            if slashes and text.startswith("**/", i) and (i == 0 or text[i - 1] == "/"):
                out.append(dialect.globstar_dirs)
                i += 3
                continue
            if dialect.star_runs == "pairs" and text.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            if dialect.star_runs == "one":
                while i + 1 < n and text[i + 1] == "*":
                    i += 1
            out.append(star)
        elif c == "/" and slashes and i + 3 == n and text.endswith("/**"):
            out.append("(?:/.*)?")  # the folder itself, and everything below it
            i += 3
            continue
        elif c == "?":
            out.append(any_char)
        elif c == "[" and (found := _class(text, i, dialect)) is not None:
            i, regex = found  # i: the closing ']'
            out.append(regex)
        elif c == "{" and dialect.braces and (end := _closing_brace(text, i, dialect)) >= 0:
            alternatives = _alternatives(text[i + 1 : end], dialect)
            out.append("(?:" + "|".join(segment_to_regex(a, dialect) for a in alternatives) + ")")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class(text: str, i: int, dialect: GlobDialect) -> tuple[int, str] | None:
    """The index of the ']' closing the class opened at ``i``, and its regex; None: a literal."""
    negated = text[i + 1 : i + 2] in ("!", "^")
    start = i + 1 + negated
    if dialect.classes in ("posix", "bash"):
        return _posix_class(text, start, negated, dialect)
    close = text.find("]", i + 2 if dialect.classes == "skip-one" else start)
    if close < 0:
        return None
    body = text[start:close].replace("\\", "\\\\")
    if dialect.classes == "skip-one":
        body = body.replace("[", "\\[")
    guard = "" if dialect.classes_match_slash else "(?!/)"
    return close, guard + ("[^" if negated else "[") + body + "]"


def _posix_class(
    text: str, start: int, negated: bool, dialect: GlobDialect
) -> tuple[int, str] | None:
    members: list[str] = []  # each re.escape'd, or "-" for an unescaped dash
    named = False  # a '[:alpha:]'-style name (bash): the class is read as any character
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "]" and i > start:
            head = "[^" if negated else "["
            if negated and not dialect.classes_match_slash:
                head += "/"
            if dialect.classes == "bash":
                return i, _bash_class(members, named, head)
            return i, head + "".join(members) + "]"
        if c == "\\" and dialect.escapes and i + 1 < n:
            members.append(re.escape(text[i + 1]))
            i += 2
            continue
        if dialect.classes == "bash" and c == "[" and text[i + 1 : i + 2] in (":", "=", "."):
            end = text.find(text[i + 1] + "]", i + 2)
            if end >= 0:
                named = True
                i = end + 2
                continue
        members.append("-" if c == "-" else re.escape(c))
        i += 1
    return None


def _bash_class(members: list[str], named: bool, head: str) -> str:
    """A class bash would accept, always a valid regex: reversed ranges dropped, as bash does."""
    if named:
        return "[^/]"  # wider than the name: a deny-side reading may match more, never less
    kept: list[str] = []
    k = 0
    while k < len(members):
        if k + 2 < len(members) and members[k + 1] == "-" and members[k + 2] != "-":
            lo, hi = _unescape(members[k]), _unescape(members[k + 2])
            if lo <= hi:
                kept.append(f"{members[k]}-{members[k + 2]}")
            k += 3
            continue
        kept.append("\\-" if members[k] == "-" else members[k])
        k += 1
    if not kept:
        return "[^/]" if head.startswith("[^") else "(?!)"
    return head + "".join(kept) + "]"


def _unescape(member: str) -> str:
    return member[1:] if member.startswith("\\") else member


def _closing_brace(text: str, start: int, dialect: GlobDialect) -> int:
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\" and dialect.escapes:
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


def _alternatives(body: str, dialect: GlobDialect) -> list[str]:
    """The top-level comma-separated parts of a brace body (escapes kept for the next pass)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and dialect.escapes and i + 1 < len(body):
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


__all__ = [
    "BASH_WORD",
    "GITIGNORE",
    "GLOB_TOOL",
    "RULE_PATH",
    "SHELL_WORD",
    "GlobDialect",
    "glob_to_regex",
    "segment_to_regex",
]
