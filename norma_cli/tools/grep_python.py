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

Patterns are matched with the ``regex`` module (``re``-compatible syntax, version 0), which
agrees with ripgrep's Rust syntax for ordinary patterns (classes, ``\\d \\w \\s \\b``,
alternation, repetition, ``(?i)``, POSIX classes, ``\\p{...}``); look-around and
back-references work here and are refused by ripgrep. ripgrep may also report matches found
before a NUL byte beyond its first read buffer, which this engine never does.

Time. ripgrep's automata never backtrack; a backtracking engine can spend hours on one line
(``(a|aa)+$`` against forty ``a``), and ``re`` cannot be interrupted, not even from another
thread. So every ``regex`` call runs with its own ``timeout``: the rest of the search's time,
at most ``MATCH_BUDGET`` (plus a second per 10 MB of text) for one call. A call that runs out
cuts the search: what was found is returned with a note saying so, or an error if nothing
was. A pattern with no repetition and at most one alternation cannot backtrack without end
and runs on ``re``, untimed, which is faster. Without the ``regex`` module (not installed)
every pattern runs on ``re`` and nothing guards against a runaway one.

Calls. A timed call costs more than an ``re`` one, so lines are not searched one call each
where that can be avoided: the pattern (``^``/``$`` at line ends) is run over the whole text,
one step per matching line, and a match that may depend on text beyond its line is checked
against that line alone (see ``_Searcher._by_text``).

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
from typing import Any

from norma_cli.core.record import record
from norma_cli.tools.gitignore import GlobList, parse_line, segment_regex
from norma_cli.tools.grep_model import VCS_DIRS, FileHits, Query, SearchError, SearchResult

# Seconds one regex call may run, plus a second per 10 MB of the text searched: far beyond
# what an ordinary pattern needs, so running out means the pattern backtracks without end.
MATCH_BUDGET = 5.0
_BUDGET_PER_CHAR = 1e-7

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


class _Cut(Exception):
    """A regex call ran out of time; the search ends where it is."""

    def __init__(self, path: str, at_deadline: bool, budget: float = 0.0) -> None:
        super().__init__(path)
        self.path = path
        self.at_deadline = at_deadline
        self.budget = budget


def search(q: Query) -> SearchResult:
    started = time.monotonic()
    searcher = _Searcher(q, _compile(q))
    files: list[FileHits] = []
    notes: list[str] = []
    walker = None
    try:
        if not q.is_dir:
            hit = searcher.file_path(q.root)
            if hit is not None:
                files.append(hit)
        else:
            walker = _Walker(q, searcher)
            for hit in walker.walk():
                files.append(hit)
    except _Cut as cut:
        if cut.at_deadline:
            notes.append("the search stopped at its time limit; results are incomplete")
        else:
            elapsed = time.monotonic() - started
            why = (
                f"matching the pattern against {cut.path} ran over {cut.budget:.0f} s: it "
                "backtracks without end in the Python engine (nested repetition such as "
                "(a|aa)+ does); simplify the pattern"
            )
            if not files:
                raise SearchError(
                    f"the search was cut at {elapsed:.1f} s with nothing found: {why}"
                ) from None
            notes.append(f"the search was cut at {elapsed:.1f} s, results are incomplete: {why}")
    if walker is not None and walker.timed_out:
        notes.append("the search stopped at its time limit; results are incomplete")
    if walker is not None and walker.unreadable:
        notes.append("some paths could not be read")
    return SearchResult("python", files, notes)


# ----------------------------------------------------------------------------- patterns
@record(frozen=True)
class _Pattern:
    """The compiled pattern and what the engine needs to know about its shape."""

    line: Any  # matches within one line (a ``regex`` pattern, or ``_Untimed``)
    # The same with ``^``/``$`` at line ends, to search a whole text: wherever it matches a
    # line alone it matches at the same place in the whole text. None when that may not hold:
    # ``\\A``/``\\Z``, or a pattern able to match a line end that holds a negative
    # look-around, an atomic group or a possessive repeat (more text can make those fail).
    whole: Any | None
    spans_lines: bool  # may match a line end (``.`` under dotall, ``\\s``, ``[^a]``, ...)
    peeks: bool  # spans lines and has look-around: a match of ``whole`` may look past its line
    timed: bool  # runs on ``regex``, each call with a timeout (else on ``re``, untimed)


class _Untimed:
    """An ``re`` pattern behind the ``regex`` call signature; the timeout is ignored."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self._p = pattern
        self.plain_search = pattern.search

    def search(self, text: str, pos: int = 0, timeout: float | None = None) -> Any:
        return self._p.search(text, pos)

    def finditer(self, text: str, pos: int = 0, timeout: float | None = None) -> Any:
        return self._p.finditer(text, pos)


def _compile(q: Query) -> _Pattern:
    flags = re.IGNORECASE if q.ignore_case else 0
    if q.multiline:
        flags |= re.MULTILINE | re.DOTALL
    parsed = _shape(q.pattern, flags)
    shape = parsed[0] if parsed is not None else None
    engine: Any = re
    if shape is None or not _bounded(shape):
        try:
            import regex  # imported here: only this fallback engine needs it

            engine = regex
        except ImportError:  # pragma: no cover - a dependency; degrade to ``re``, unguarded
            engine = re
    try:
        line = engine.compile(q.pattern, flags)
        whole = engine.compile(q.pattern, flags | re.MULTILINE)
    except (OverflowError, RecursionError):
        raise SearchError("regex parse error: the pattern is too large") from None
    except Exception as exc:
        if isinstance(exc, (re.error, engine.error)):
            raise SearchError(f"regex parse error: {exc}") from None
        raise
    if engine is re:
        line, whole = _Untimed(line), _Untimed(whole)
    if not q.multiline and _has_literal_newline(q.pattern, shape):
        raise SearchError("the literal '\\n' is not allowed in a pattern unless multiline is true")
    dotall = parsed is not None and bool(parsed[1] & re.DOTALL)  # with a global (?s) too
    spans = _can_match_newline(shape, dotall=dotall)
    ops = {op for op, _ in _walk_ops(shape)} if shape is not None else set()
    widens = shape is not None and not ops & {"ASSERT_NOT", "ATOMIC_GROUP", "POSSESSIVE_REPEAT"}
    return _Pattern(
        line,
        whole=None if _ANCHORS.search(q.pattern) or (spans and not widens) else whole,
        spans_lines=spans,
        peeks=spans and "ASSERT" in ops,
        timed=engine is not re,
    )


def _bounded(shape: list[tuple[object, object]]) -> bool:
    """Whether ``re`` does a bounded amount of work at each position: no repetition (``?``
    included) and at most one alternation, so there is no choice to multiply with another.
    Plain words, ``foo|bar``, ``\\bname\\b``, ``^import`` are; they run on ``re``, which is
    faster than ``regex`` with a timeout, and needs none."""
    branches = 0
    for op, _ in _walk_ops(shape):
        if op.endswith("_REPEAT") or op.startswith(("GROUPREF", "ATOMIC")):
            return False
        branches += op == "BRANCH"
    return branches <= 1


# Syntax ``re`` reads differently from ``regex`` (POSIX classes read as sets, a brace that is
# no ``{m,n}``, like the fuzzy ``{e<=1}``, as literal text): its parse would misdescribe it.
_REGEX_ONLY = re.compile(r"\[:|(?<!\\)\{(?!\d*(?:,\d*)?\})")


def _shape(pattern: str, flags: int) -> tuple[list[tuple[object, object]], int] | None:
    """The pattern's parse tree as ``re`` sees it and its global flags; None when unknown
    (the callers then assume the worst)."""
    if _REGEX_ONLY.search(pattern):
        return None
    try:
        import warnings
        from re import _parser  # type: ignore[attr-defined]

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "possible nested set" and the like: unknown
            tree = _parser.parse(pattern, flags)
        return list(tree), int(tree.state.flags)
    except Exception:  # not ``re`` syntax (\\p{..}, \\X, ...), or no _parser (Python < 3.11)
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


def _has_literal_newline(pattern: str, shape: list[tuple[object, object]] | None) -> bool:
    if shape is None:
        return "\n" in pattern or "\\n" in pattern
    return any(op == "LITERAL" and arg == 10 for op, arg in _walk_ops(shape))


def _can_match_newline(shape: list[tuple[object, object]] | None, dotall: bool) -> bool:
    """Whether the pattern can match a line end. In multiline mode ripgrep then counts
    matches instead of lines and searches the file as a whole; in either mode a pattern that
    cannot is searched over the whole text at once."""
    if shape is None:
        return True
    ops = list(_walk_ops(shape))
    # (?s:...) turns dotall on for part of the pattern
    dotall = dotall or any(
        op == "SUBPATTERN" and isinstance(arg, tuple) and arg[1] & re.DOTALL for op, arg in ops
    )
    for op, arg in ops:
        if op == "LITERAL" and arg == 10:
            return True
        if op == "NOT_LITERAL" and arg != 10:
            return True
        if op == "ANY" and dotall:
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
    def __init__(self, q: Query, pattern: _Pattern) -> None:
        self.q = q
        self.pattern = pattern
        # multiline and able to match a line end: matched over the whole text, like ripgrep
        self.newline_aware = q.multiline and pattern.spans_lines
        self.budget = MATCH_BUDGET  # for one regex call on the text being searched

    def _timeout(self, path: str) -> float:
        """The time the next regex call may take: the rest of the search's, at most its
        budget."""
        left = self.q.deadline - time.monotonic()
        if left <= 0:
            raise _Cut(path, at_deadline=True)
        return min(left, self.budget)

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
        self.budget = MATCH_BUDGET + len(text) * _BUDGET_PER_CHAR
        try:
            return self._text(path, text)
        except TimeoutError:  # raised by ``regex`` when a call runs out of its timeout
            at_deadline = time.monotonic() >= self.q.deadline
            raise _Cut(path, at_deadline, self.budget) from None

    def _text(self, path: str, text: str) -> FileHits | None:
        mode = self.q.mode
        whole = self.pattern.whole
        if self.newline_aware:
            spans, count = self._multiline(path, text)
            matched = sorted(spans)
        elif whole is not None and (self.pattern.timed or mode == "files_with_matches"):
            # fewer calls than one per line (a timed call costs more than an ``re`` one)
            matched = self._by_text(whole, path, text, first_only=mode == "files_with_matches")
            count = len(matched)
        else:
            if whole is not None and not whole.search(text):  # an untimed ``re`` call here
                return None  # no line can match if the text as a whole does not
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            matched = self._per_line(path, lines, first_only=mode == "files_with_matches")
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

    def _per_line(self, path: str, lines: list[str], first_only: bool) -> list[int]:
        if self.pattern.timed:
            timed_search = self.pattern.line.search

            def search(line: str) -> Any:
                return timed_search(line, timeout=self._timeout(path))
        else:
            search = self.pattern.line.plain_search
        matched: list[int] = []
        for i, line in enumerate(lines):
            if search(line):
                matched.append(i)
                if first_only:
                    break
        return matched

    def _by_text(self, whole: Any, path: str, text: str, first_only: bool) -> list[int]:
        """Indexes of the matching lines, from the matches of ``whole`` in the whole text.

        A line that matches on its own matches there too (see ``_Pattern.whole``), so no
        matching line is passed over. A match that crosses a line end, or that look-around
        may have found by looking past one, is checked against its line alone. A second match
        on a line starts the search again at the next line, so a pattern that matches
        everywhere (``.``, ``x*``) costs a step per line, not per character.
        """
        matched: list[int] = []
        check_all = self.pattern.peeks
        pos = line = 0  # ``line`` is the index of the line ``pos`` is on
        while True:
            for m in whole.finditer(text, pos, timeout=self._timeout(path)):
                start = m.start()
                if _after_last_line(start, text):
                    return matched
                line += text.count("\n", pos, start)
                pos = start
                if matched and matched[-1] == line:
                    break
                eol = text.find("\n", start)
                if eol < 0:
                    eol = len(text)
                if check_all or m.end() > eol:
                    alone = text[text.rfind("\n", 0, start) + 1 : eol]
                    if self.pattern.line.search(alone, timeout=self._timeout(path)):
                        matched.append(line)
                    break  # the iteration may have gone past lines that match alone
                matched.append(line)
                if first_only:
                    return matched
            else:
                return matched
            if first_only and matched:
                return matched
            end = text.find("\n", pos)
            if end < 0:
                return matched
            pos, line = end + 1, line + 1

    def _multiline(self, path: str, text: str) -> tuple[set[int], int]:
        """Lines covered by matches over the whole text (ripgrep's line extension of a
        match) and the number of matches."""
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        covered: set[int] = set()
        count = 0
        # one timeout for the whole iteration (``regex`` counts it from the first step)
        for m in self.pattern.line.finditer(text, timeout=self._timeout(path)):
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


def _after_last_line(pos: int, text: str) -> bool:
    """An (empty) match after the final line end is on no line."""
    return pos == len(text) and text.endswith("\n")


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
