"""File-path rules: gitignore-style globs matched against every spelling of a path.

Pattern anchors (the part of a rule like ``Read(./src/**)`` inside the parentheses):

* ``//abs/**``   — absolute (``/abs/**`` on disk);
* ``~/x/**``     — under the home directory;
* ``./x/**``, ``x/y``, and ``/x/**`` — under the *working root* (the first of the call's
  roots, else its cwd). A single leading ``/`` means the working root, as in a ``.gitignore``
  (Claude Code reads it as relative to the settings file; norma has one working root instead);
* ``*.env``, ``id_rsa`` — a pattern without a slash matches that name at any depth, anywhere.

Glob syntax (``core/globs.RULE_PATH``): ``*`` and ``?`` never cross ``/``, ``**`` does,
``[a-z]`` classes (never matching ``/``), ``\\`` escapes, no braces.
A pattern that matches a directory also matches everything below it (as in gitignore), and
``dir/**`` matches ``dir`` itself too, so listing a protected folder is covered. A trailing
``/`` is accepted and ignored. ``..`` is not allowed inside a pattern.

A path from a tool input is checked under three spellings: lexically normalised, with
symlinks resolved as the kernel would, and the resolution of the normalised spelling. A deny
(or ask) rule matches when *any* spelling matches; an allow rule must cover *every* spelling,
so a symlink from an allowed folder into an unprotected one is not allowed through the link.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Literal

from norma_cli.core.record import record

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext

Anchor = Literal["root", "abs", "home", "anywhere"]


@record(frozen=True)
class PathPattern:
    text: str
    anchor: Anchor
    regex: re.Pattern[str]  # full match against the path relative to the anchor ("" = anchor)

    @classmethod
    def parse(cls, text: str) -> PathPattern:
        """Raise ValueError with a user-facing message when ``text`` is not a valid pattern."""
        pat = text.strip()
        if not pat:
            raise ValueError("empty path pattern")
        anchor: Anchor
        if pat.startswith("//"):
            anchor, rest = "abs", pat.lstrip("/")
        elif pat == "~" or pat.startswith("~/"):
            anchor, rest = "home", pat[2:]
        elif pat.startswith("~"):
            raise ValueError(f"path pattern {pat!r}: only ~/ (your home) is supported")
        elif pat.startswith("./"):
            anchor, rest = "root", pat[2:]
        elif pat.startswith("/"):
            anchor, rest = "root", pat.lstrip("/")
        elif "/" in pat.rstrip("/"):
            anchor, rest = "root", pat
        else:
            anchor, rest = "anywhere", pat
        rest = rest.rstrip("/") if rest not in ("", "/") else ""
        if ".." in rest.split("/"):
            raise ValueError(f"path pattern {pat!r}: '..' is not allowed; spell the path with //")
        if rest:
            from norma_cli.core.globs import RULE_PATH, glob_to_regex  # lazy: start-up budget

            body = glob_to_regex(rest, RULE_PATH)
        else:
            body = ""
        if anchor == "anywhere":
            body = "(?:.*/)?" + body
        if not body:
            regex = ".*"
        elif body.endswith("(?:/.*)?") or body.endswith(".*"):
            regex = body
        else:
            regex = body + "(?:/.*)?"
        try:
            compiled = re.compile(regex, re.S)
        except re.error as e:  # '[z-a]', '[!]]': a one-line config error, not a crash
            raise ValueError(f"path pattern {pat!r}: {e.msg}") from None
        return cls(pat, anchor, compiled)

    def matches(self, path: str, ctx: CallContext) -> bool:
        """Does this pattern cover the absolute, normalised ``path``?"""
        for base in _anchor_bases(self.anchor, ctx):
            rel = _relative_to(path, base)
            if rel is not None and self.regex.fullmatch(rel):
                return True
        return False


def spellings(raw: str, cwd: str) -> tuple[str, ...]:
    """Every absolute spelling of ``raw`` a rule must consider (see the module docstring)."""
    p = os.path.expanduser(raw)
    if not os.path.isabs(p):
        p = os.path.join(cwd, p)
    lexical = _normpath(p)
    try:
        physical = os.path.realpath(p)
        via_lexical = os.path.realpath(lexical)
    except (OSError, ValueError):
        return (lexical,)
    return tuple(dict.fromkeys((lexical, physical, via_lexical)))


def working_root(ctx: CallContext) -> str:
    return str(ctx.roots[0]) if ctx.roots else str(ctx.cwd)


def _normpath(p: str) -> str:
    out = os.path.normpath(p)
    # POSIX keeps exactly two leading slashes; the kernel does not care, and neither do we.
    return "/" + out.lstrip("/") if out.startswith("//") else out


def _anchor_bases(anchor: Anchor, ctx: CallContext) -> tuple[str, ...]:
    if anchor in ("abs", "anywhere"):
        return ("/",)
    spelled = _normpath(os.path.expanduser("~") if anchor == "home" else working_root(ctx))
    return _with_real(spelled)


def _with_real(base: str) -> tuple[str, ...]:
    # The anchor's own symlinks (``/tmp`` → ``/private/tmp``) must not hide a match.
    return tuple(dict.fromkeys((base, os.path.realpath(base))))


def _relative_to(path: str, base: str) -> str | None:
    if base == "/":
        return path.lstrip("/")
    if path == base:
        return ""
    if path.startswith(base) and path[len(base)] == "/":
        return path[len(base) + 1 :]
    return None
