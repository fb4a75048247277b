"""The pure-Python Grep engine: used when ripgrep is disabled or missing (SPEC §6).

It walks and filters exactly as Grep runs ripgrep (``--hidden --no-ignore-global``, VCS
directories excluded, no symlinks followed) and prints the same results for the same tree:

* ignore files: ``.gitignore`` (inside a git work tree, up to its top), ``.git/info/exclude``,
  ``.ignore`` and ``.rgignore``, in the searched directories and their parents, with
  ripgrep's precedence (``.rgignore`` > ``.ignore`` > ``.gitignore`` > exclude; the deepest
  directory decides) — see ``norma_cli.tools.gitignore`` for the line syntax;
* ``glob`` filters with ripgrep's override meaning (a plain glob selects files and beats the
  ignore files, ``!glob`` excludes), and ripgrep's own ``type`` table;
* text: UTF-8 (a UTF-8 BOM is dropped, UTF-16 with a BOM is decoded), invalid bytes replaced;
  a file holding a NUL byte is binary and skipped while walking; one named explicitly is
  searched with NULs read as line ends and reported as "binary file matches";
* line-by-line matching, or with ``multiline`` the whole file (``.`` matches newlines, ``^``
  and ``$`` at line ends) where a match covers every line it touches.

Patterns are Python ``re`` syntax, which agrees with ripgrep's Rust syntax for ordinary
patterns (classes, ``\\d \\w \\s \\b``, alternation, repetition, ``(?i)``); look-around and
back-references work here and are refused by ripgrep; POSIX classes (``[[:alpha:]]``) and
``\\p{...}`` work only with ripgrep. ripgrep may also report matches found before a NUL byte
beyond its first read buffer, which this engine never does.

Every directory and file is opened beneath a descriptor of its parent with ``O_NOFOLLOW``, so
a symlink swapped in during the walk is not followed.
"""

from __future__ import annotations

import bisect
import errno
import os
import re
import stat
import time
from collections.abc import Iterator

from norma_cli.core.record import record
from norma_cli.tools.gitignore import GlobList, parse_line, segment_regex
from norma_cli.tools.grep_model import VCS_DIRS, FileHits, Query, SearchError, SearchResult

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_ANCHORS = re.compile(r"\\[AZz]")


@record
class _DirRules:
    """The ignore files of one directory, rooted there."""

    path: str
    has_git: bool
    rgignore: GlobList | None
    ignore: GlobList | None
    gitignore: GlobList | None
    exclude: GlobList | None


def search(q: Query) -> SearchResult:
    regex = _compile(q)
    newline_aware = q.multiline and _can_match_newline(regex)
    prefilter = (
        None if _ANCHORS.search(q.pattern) else re.compile(regex.pattern, regex.flags | re.M)
    )
    searcher = _Searcher(q, regex, newline_aware, prefilter)
    notes: list[str] = []
    if not q.is_dir:
        hit = searcher.file_path(q.root)
        return SearchResult("python", [hit] if hit else [], notes)
    walker = _Walker(q, searcher)
    files = list(walker.walk())
    if walker.timed_out:
        notes.append("the search stopped at its time limit; results are incomplete")
    if walker.unreadable:
        notes.append("some paths could not be read")
    return SearchResult("python", files, notes)


# ----------------------------------------------------------------------------- patterns
def _compile(q: Query) -> re.Pattern[str]:
    flags = re.IGNORECASE if q.ignore_case else 0
    if q.multiline:
        flags |= re.MULTILINE | re.DOTALL
    try:
        regex = re.compile(q.pattern, flags)
    except re.error as exc:
        raise SearchError(f"regex parse error: {exc}") from None
    except (OverflowError, RecursionError):
        raise SearchError("regex parse error: the pattern is too large") from None
    if not q.multiline and _has_literal_newline(regex):
        raise SearchError("the literal '\\n' is not allowed in a pattern unless multiline is true")
    return regex


def _parsed(regex: re.Pattern[str]) -> list[tuple[object, object]] | None:
    try:
        from re import _parser  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        return None
    try:
        return list(_parser.parse(regex.pattern, regex.flags))
    except Exception:
        return None


def _walk_ops(items: object) -> Iterator[tuple[str, object]]:
    for op, arg in items:  # type: ignore[attr-defined]
        yield str(op), arg
        args = arg if isinstance(arg, (list, tuple)) else [arg]
        for sub in args:
            if hasattr(sub, "data") or (
                isinstance(sub, list) and sub and isinstance(sub[0], tuple)
            ):
                yield from _walk_ops(sub)
            elif isinstance(sub, (list, tuple)):
                for inner in sub:
                    if hasattr(inner, "data"):
                        yield from _walk_ops(inner)


def _has_literal_newline(regex: re.Pattern[str]) -> bool:
    parsed = _parsed(regex)
    if parsed is None:
        return "\n" in regex.pattern or "\\n" in regex.pattern
    return any(op == "LITERAL" and arg == 10 for op, arg in _walk_ops(parsed))


def _can_match_newline(regex: re.Pattern[str]) -> bool:
    """Whether the (multiline, dotall) pattern can match a line end: ripgrep then counts
    matches instead of lines and searches the file as a whole."""
    parsed = _parsed(regex)
    if parsed is None:
        return True
    for op, arg in _walk_ops(parsed):
        if op == "LITERAL" and arg == 10:
            return True
        if op == "NOT_LITERAL" and arg != 10:
            return True
        if op == "ANY":  # dotall is on in multiline mode
            return True
        if op == "IN" and _set_has_newline(arg):
            return True
    return False


def _set_has_newline(items: object) -> bool:
    negated = False
    hit = False
    for op, arg in items:  # type: ignore[attr-defined]
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif (
            (name == "LITERAL" and arg == 10)
            or (name == "RANGE" and arg[0] <= 10 <= arg[1])
            or (
                name == "CATEGORY"
                and str(arg)
                in (
                    "CATEGORY_SPACE",
                    "CATEGORY_NOT_DIGIT",
                    "CATEGORY_NOT_WORD",
                    "CATEGORY_UNI_SPACE",
                    "CATEGORY_UNI_NOT_DIGIT",
                    "CATEGORY_UNI_NOT_WORD",
                    "CATEGORY_LINEBREAK",
                    "CATEGORY_UNI_LINEBREAK",
                )
            )
        ):
            hit = True
    return hit != negated


# ----------------------------------------------------------------------------- files
def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    return data.decode("utf-8", "replace")


class _Searcher:
    def __init__(
        self,
        q: Query,
        regex: re.Pattern[str],
        newline_aware: bool,
        prefilter: re.Pattern[str] | None,
    ) -> None:
        self.q = q
        self.regex = regex
        self.newline_aware = newline_aware
        self.prefilter = prefilter

    def file_path(self, path: str) -> FileHits | None:
        """An explicitly named file: searched even when binary (NULs read as line ends)."""
        fd = _open_root(self.q, os.O_RDONLY | _O_NONBLOCK)
        data = _read_regular(fd)
        if data is None:
            return None
        binary = b"\0" in data and not data.startswith((b"\xff\xfe", b"\xfe\xff"))
        if binary:
            data = data.replace(b"\0", b"\n")
        hits = self.text(path, _decode(data))
        if hits is not None and binary:
            hits.binary = True
            hits.lines = []
        return hits

    def data(self, path: str, data: bytes) -> FileHits | None:
        if b"\0" in data and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return None  # binary: skipped while walking, as ripgrep does
        return self.text(path, _decode(data))

    def text(self, path: str, text: str) -> FileHits | None:
        if not text:
            return None  # no lines, so nothing can match (not even an empty pattern)
        if self.prefilter is not None and not self.prefilter.search(text):
            return None
        mode = self.q.mode
        if self.newline_aware:
            spans, count = self._multiline(text)
            matched = sorted(spans)
        else:
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            search = self.regex.search
            if mode == "files_with_matches":
                return FileHits(path) if any(search(line) for line in lines) else None
            matched = [i for i, line in enumerate(lines) if search(line)]
            count = len(matched)
        if not matched:
            return None
        if mode == "files_with_matches":
            return FileHits(path)
        if mode == "count":
            return FileHits(path, count=count)
        all_lines = text.split("\n")
        if text.endswith("\n"):
            all_lines.pop()
        return FileHits(path, lines=self._with_context(matched, all_lines))

    def _multiline(self, text: str) -> tuple[set[int], int]:
        """Lines covered by matches over the whole text (ripgrep's line extension of a
        match) and the number of matches."""
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        covered: set[int] = set()
        count = 0
        for m in self.regex.finditer(text):
            count += 1
            s, e = m.start(), m.end()
            first = bisect.bisect_right(starts, s) - 1
            if e > starts[first] and text[e - 1 : e] == "\n":
                last = bisect.bisect_right(starts, e - 1) - 1
            else:
                last = bisect.bisect_right(starts, e) - 1
            covered.update(range(first, last + 1))
        n_lines = len(starts) - (1 if text.endswith("\n") else 0)
        return {i for i in covered if i < n_lines}, count

    def _with_context(self, matched: list[int], lines: list[str]) -> list[tuple[int, bool, str]]:
        before, after = self.q.before, self.q.after
        is_match = set(matched)
        shown: list[int] = []
        last = -1
        for i in matched:
            lo = max(i - before, last + 1, 0)
            hi = min(i + after, len(lines) - 1)
            for j in range(lo, hi + 1):
                if j > last:
                    shown.append(j)
                    last = j
        return [(j + 1, j in is_match, lines[j]) for j in shown]


def _open_root(q: Query, flags: int) -> int:
    """The searched directory or file, opened beneath its working root (no symlinks)."""
    if not q.base:
        return os.open(q.root, flags | _O_NOFOLLOW | _O_CLOEXEC)
    from pathlib import Path

    from norma_cli.tools.confine import open_beneath, root_fd

    with root_fd(Path(q.base)) as rfd:
        return open_beneath(rfd, q.rel, flags)


def _read_regular(fd: int) -> bytes | None:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- walking
class _Walker:
    def __init__(self, q: Query, searcher: _Searcher) -> None:
        self.q = q
        self.searcher = searcher
        globs = [*q.globs, *(f"!{d}" for d in VCS_DIRS)]
        self.overrides = _overrides(globs)
        # Override lines are stored inverted: a "!" rule is a glob that selects files.
        self.selecting = any(r.negated for r in self.overrides.rules)
        self.type_regex = _type_regex(q.types) if q.types else None
        self.timed_out = False
        self.unreadable = False

    def walk(self) -> Iterator[FileHits]:
        root = self.q.root
        chain = _parent_rules(root)
        fd = _open_root(self.q, os.O_RDONLY | _O_DIRECTORY)
        # (dir fd, absolute path, path relative to the searched root, ignore chain deepest first)
        stack: list[tuple[int, str, str, list[_DirRules]]] = [(fd, root, "", chain)]
        try:
            while stack:
                dfd, path, rel, parents = stack.pop()
                try:
                    rules = [_dir_rules(dfd, path), *parents]
                    yield from self._scan(dfd, path, rel, rules, stack)
                finally:
                    os.close(dfd)
                if self.timed_out:
                    break
        finally:
            for dfd, _, _, _ in stack:
                os.close(dfd)

    def _scan(
        self,
        dfd: int,
        path: str,
        rel: str,
        rules: list[_DirRules],
        stack: list[tuple[int, str, str, list[_DirRules]]],
    ) -> Iterator[FileHits]:
        try:
            entries = list(os.scandir(dfd))
        except OSError:
            self.unreadable = True
            return
        for entry in entries:
            if time.monotonic() > self.q.deadline:
                self.timed_out = True
                return
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            is_dir = stat.S_ISDIR(mode)
            if not is_dir and not stat.S_ISREG(mode):
                continue  # symlinks, sockets, FIFOs: never followed or read
            child_rel = f"{rel}{entry.name}"
            child = f"{path}/{entry.name}" if path != "/" else f"/{entry.name}"
            if not self._wanted(child, child_rel, entry.name, is_dir, rules):
                continue
            if is_dir:
                sub = _open_at(dfd, entry.name, os.O_RDONLY | _O_DIRECTORY)
                if sub is None:
                    self.unreadable = True
                else:
                    stack.append((sub, child, child_rel + "/", rules))
                continue
            fd = _open_at(dfd, entry.name, os.O_RDONLY | _O_NONBLOCK)
            if fd is None:
                self.unreadable = True
                continue
            data = _read_regular(fd)
            if data is not None:
                hit = self.searcher.data(child, data)
                if hit is not None:
                    yield hit

    def _wanted(self, path: str, rel: str, name: str, is_dir: bool, rules: list[_DirRules]) -> bool:
        verdict = self.overrides.match(rel, is_dir) if self.overrides else None
        if verdict is not None:
            return not verdict  # an override decides outright: plain glob selects, ! excludes
        if self.selecting and not is_dir:
            return False  # globs given and none selected this file
        if _ignored(path, is_dir, rules):
            return False
        if self.type_regex is not None and not is_dir:
            return bool(self.type_regex.fullmatch(name))
        return True


def _overrides(globs: list[str]) -> GlobList:
    rules = []
    for g in globs:
        # ripgrep's overrides are gitignore lines with the meaning inverted.
        rule = parse_line(g[1:] if g.startswith("!") else "!" + g)
        if rule is not None:
            rules.append(rule)
    return GlobList(rules)


def _type_regex(types: tuple[str, ...]) -> re.Pattern[str]:
    from norma_cli.tools.grep_types import type_globs

    table = type_globs()
    globs: list[str] = []
    for name in types:
        if name == "all":
            globs += [g for gs in table.values() for g in gs]
        elif name in table:
            globs += table[name]
        else:
            raise SearchError(f"unrecognized file type: {name}")
    return re.compile("|".join(f"(?:{segment_regex(g)})" for g in globs), re.DOTALL)


def _open_at(dir_fd: int, name: str, flags: int) -> int | None:
    try:
        return os.open(name, flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.ENOENT, errno.EPERM):
            return None  # became a symlink, vanished, or unreadable
        raise


# ----------------------------------------------------------------------------- ignore files
def _read_rules_at(dir_fd: int | None, dir_path: str, name: str) -> GlobList | None:
    try:
        if dir_fd is not None:
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd)
        else:
            fd = os.open(os.path.join(dir_path, name), os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC)
    except OSError:
        return None
    data = _read_regular(fd)
    if not data:
        return None
    rules = GlobList.parse(data.decode("utf-8", "replace"))
    return rules or None


def _exists_at(dir_fd: int | None, dir_path: str, name: str) -> bool:
    try:
        if dir_fd is not None:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        else:
            os.stat(os.path.join(dir_path, name), follow_symlinks=False)
        return True
    except OSError:
        return False


def _dir_rules(dir_fd: int | None, path: str) -> _DirRules:
    has_git = _exists_at(dir_fd, path, ".git")
    return _DirRules(
        path,
        has_git,
        _read_rules_at(dir_fd, path, ".rgignore"),
        _read_rules_at(dir_fd, path, ".ignore"),
        _read_rules_at(dir_fd, path, ".gitignore"),
        _read_rules_at(None, os.path.join(path, ".git", "info"), "exclude") if has_git else None,
    )


def _parent_rules(root: str) -> list[_DirRules]:
    """Ignore files of the directories above the searched one, nearest first (as ripgrep
    reads them: they filter what is searched, nothing of theirs is shown)."""
    chain: list[_DirRules] = []
    here = os.path.dirname(root)
    while True:
        chain.append(_dir_rules(None, here))
        parent = os.path.dirname(here)
        if parent == here:
            return chain
        here = parent


def _ignored(path: str, is_dir: bool, chain: list[_DirRules]) -> bool:
    """ripgrep's verdict from the ignore files: for each kind of file the deepest directory
    with a matching line decides; kinds rank .rgignore > .ignore > .gitignore > exclude."""
    any_git = any(d.has_git for d in chain)
    found: list[bool | None] = [None, None, None, None]
    saw_git = False
    for d in chain:
        rel = _relative(path, d.path)
        kinds = (d.rgignore, d.ignore) + (
            (d.gitignore, d.exclude) if any_git and not saw_git else (None, None)
        )
        for k, rules in enumerate(kinds):
            if found[k] is None and rules is not None:
                found[k] = rules.match(rel, is_dir)
        saw_git = saw_git or d.has_git
    for verdict in found:
        if verdict is not None:
            return verdict
    return False


def _relative(path: str, base: str) -> str:
    if base == "/":
        return path[1:]
    return path[len(base) + 1 :]


__all__ = ["search"]
