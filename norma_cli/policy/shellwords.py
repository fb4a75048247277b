"""What a bash word really is once quotes, escapes, braces and known variables are applied.

The shell parser hands this module a word as *segments*: literal text (quoted or not),
variable references and parts nobody can know statically (command substitution, ``${x:-y}``).
From them we compute the argv words bash would produce:

* the **strict** reading, for allow rules: only literal text counts; a word with anything
  else in it becomes ``UNKNOWN``;
* the **guessed** reading, for deny and ask rules only: variables assigned earlier in the same
  script are substituted and ``$IFS`` splits, so ``a=rm; $a -rf /`` and ``rm${IFS}-rf`` still
  meet a ``Bash(rm:*)`` deny.

Internally a word is kept in *escaped form*: every quoted character is preceded by a
backslash, so brace expansion, field splitting and glob detection only see unquoted
metacharacters — the same trick bash uses.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping, Sequence

# A word the parser cannot know. NUL never occurs in a real argv word, so it equals no rule word.
UNKNOWN = "\x00"
# Brace expansions larger than this are treated as unknown rather than enumerated.
MAX_BRACE_WORDS = 256

Segment = tuple[str, str, bool]  # (kind, text, quoted); kind is "lit", "var" or "unknown"


class GlobWord(str):
    """An unquoted word holding glob characters; its text is the escaped pattern.

    Bash replaces it by matching file names, so deny rules treat it as a pattern
    (``/bin/r?`` meets ``Bash(rm:*)``) while allow rules compare it as text.
    """


def unquoted_word(text: str) -> list[Segment]:
    """Segments of an unquoted word: ``\\x`` quotes x, backslash-newline disappears."""
    segs: list[Segment] = []
    plain: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] != "\n":
                if plain:
                    segs.append(("lit", "".join(plain), False))
                    plain = []
                segs.append(("lit", text[i + 1], True))
            i += 2
            continue
        plain.append(c)
        i += 1
    if plain:
        segs.append(("lit", "".join(plain), False))
    return segs


_DQUOTE_ESCAPE = re.compile(r"\\([$`\"\\\n])")


def double_quoted_text(text: str) -> str:
    """Inside double quotes a backslash only escapes ``$ ` " \\`` and newline."""
    return _DQUOTE_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_RE = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S
)


def ansi_c_text(body: str) -> str:
    """Decode the body of ``$'...'``; bash cuts the string at a NUL."""

    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e[0] in "xuU":
            return chr(min(int(e[1:], 16), 0x10FFFF))
        if e[0] in "01234567":
            return chr(int(e, 8) & 0xFF)
        if e[0] == "c" and len(e) == 2:
            return chr(ord(e[1].upper()) ^ 0x40)
        return _ANSI_SIMPLE.get(e, "\\" + e)

    return _ANSI_RE.sub(one, body).split("\x00", 1)[0]


def _escape(text: str) -> str:
    return "".join("\\" + c for c in text)


def literal_value(segs: Sequence[Segment]) -> str | None:
    """The single string an assignment would store, or None when it is not literal."""
    if any(kind != "lit" for kind, _, _ in segs):
        return None
    return "".join(text for _, text, _ in segs)


def guessed_value(segs: Sequence[Segment], variables: Mapping[str, str]) -> str | None:
    """Like ``literal_value`` but with known variables substituted (deny-side guesses)."""
    out = []
    for kind, text, _ in segs:
        if kind == "lit":
            out.append(text)
        elif kind == "var" and text in variables:
            out.append(variables[text])
        else:
            return None
    return "".join(out)


def words_of(
    segs: Sequence[Segment], variables: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The argv words one shell word expands to.

    With ``variables`` None this is the strict reading (anything not literal → ``UNKNOWN``);
    otherwise known variables (and ``$IFS``) are substituted and split as bash would, and an
    unknown part leaves an ``UNKNOWN`` character inside the word (``rm -rf \x00`` for
    ``"rm -rf $x"``), so a re-parsed ``eval`` string still shows its literal commands.
    """
    parts: list[str] = []
    split = False
    for kind, text, quoted in segs:
        if kind == "lit":
            parts.append(_escape(text) if quoted else text)
            continue
        if variables is None:
            return (UNKNOWN,)
        if kind == "var" and text in variables:
            value = variables[text]
        elif kind == "var" and text == "IFS":
            value = " "
        else:
            parts.append(UNKNOWN)
            continue
        if quoted:
            parts.append(_escape(value))
        else:
            parts.append(value.replace("\\", "\\\\"))
            split = True
    escaped = "".join(parts)
    fields = _split_fields(escaped) if split else [escaped]
    words: list[str] = []
    for field in fields:
        expanded = brace_expand(field)
        if expanded is None:
            return (UNKNOWN,)
        words.extend(_finish(w) for w in expanded)
    return tuple(words)


def _split_fields(escaped: str) -> list[str]:
    """Split on unescaped blanks (what unquoted expansions contribute)."""
    fields: list[str] = []
    cur: list[str] = []
    i, n = 0, len(escaped)
    while i < n:
        c = escaped[i]
        if c == "\\" and i + 1 < n:
            cur.append(escaped[i : i + 2])
            i += 2
            continue
        if c in " \t\n":
            if cur:
                fields.append("".join(cur))
                cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        fields.append("".join(cur))
    return fields


def _finish(escaped: str) -> str:
    """Quote removal; a word with live glob characters stays a (escaped) ``GlobWord``."""
    out: list[str] = []
    glob = False
    i, n = 0, len(escaped)
    while i < n:
        c = escaped[i]
        if c == "\\" and i + 1 < n:
            out.append(escaped[i + 1])
            i += 2
            continue
        if c in "*?" or (c == "[" and "]" in escaped[i + 2 :]):
            glob = True
        out.append(c)
        i += 1
    return GlobWord(escaped) if glob else "".join(out)


class _TooLarge(Exception):
    pass


def brace_expand(escaped: str) -> list[str] | None:
    """Bash brace expansion of one escaped word; None when it would be too large."""
    try:
        return _brace(escaped)
    except _TooLarge:
        return None


def _brace(s: str) -> list[str]:
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{" and not (i > 0 and s[i - 1] == "$"):
            group = _brace_group(s, i)
            if group is not None:
                end, alternatives = group
                tails = _brace(s[end + 1 :])
                out: list[str] = []
                for alt in alternatives:
                    out.extend(s[:i] + h + t for h in _brace(alt) for t in tails)
                    if len(out) > MAX_BRACE_WORDS:
                        raise _TooLarge
                return out
        i += 1
    return [s]


def _brace_group(s: str, start: int) -> tuple[int, list[str]] | None:
    """The closing index and alternatives of ``{a,b}`` / ``{1..5}`` at ``start``, if any."""
    depth, i = 0, start + 1
    commas: list[int] = []
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                body = s[start + 1 : i]
                if commas:
                    cuts = [start, *commas, i]
                    return i, [s[a + 1 : b] for a, b in itertools.pairwise(cuts)]
                seq = _sequence(body)
                return (i, seq) if seq is not None else None
            depth -= 1
        elif c == "," and depth == 0:
            commas.append(i)
        i += 1
    return None


_SEQ_RE = re.compile(r"^(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?$")


def _sequence(body: str) -> list[str] | None:
    m = _SEQ_RE.match(body)
    if not m:
        return None
    a, b, step_text = m.group(1), m.group(2), m.group(3)
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    numeric = a.lstrip("-").isdigit() and b.lstrip("-").isdigit()
    if numeric:
        lo, hi = int(a), int(b)
    elif a.isalpha() and b.isalpha():
        lo, hi = ord(a), ord(b)
    else:
        return None
    if abs(hi - lo) // step + 1 > MAX_BRACE_WORDS:
        raise _TooLarge
    rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
    return [str(v) if numeric else chr(v) for v in rng]


@functools.lru_cache(maxsize=512)
def glob_regex(escaped: str) -> re.Pattern[str]:
    """Regex for a ``GlobWord``: every name bash could expand it to (and perhaps more).

    Only deny and ask rules use it, so it may match too much but never too little. The word
    is read twice: as norma always read it (``SHELL_WORD``) and with bash's own bracket
    rules (``BASH_WORD``: a quoted ``\\]`` or a ``[:alpha:]`` inside ``[...]``), and a name
    either reading accepts counts: with a file ``-rf`` in the directory, ``rm -r[f\\]]``
    and ``rm -r[[:alpha:]]`` run ``rm -rf``, and a ``Bash(rm -rf:*)`` deny must see that.
    A word the first reading cannot compile still raises ``re.error`` (the check fails).
    """
    from norma_cli.core.globs import BASH_WORD, SHELL_WORD, glob_to_regex  # lazy: rarely needed

    usual = glob_to_regex(escaped, SHELL_WORD)
    regex = re.compile(usual, re.S)
    exact = glob_to_regex(escaped, BASH_WORD)
    if exact == usual:
        return regex
    return re.compile(f"(?:{usual})|(?:{exact})", re.S)
