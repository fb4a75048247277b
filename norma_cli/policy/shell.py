"""Bash command lines, parsed into every simple command and redirection they run.

``parse_script`` reads a command line — a plain line directly, anything else with
tree-sitter-bash (``shelltree``) — and finds every command wherever bash would run it: after
``&&``, ``||``, ``;``, newlines and pipes, inside ``$(...)``, backticks, subshells, brace
groups, ``<(...)``, unquoted heredocs, loops, conditionals and function bodies, and — through
``wrappers.unwrap`` — inside ``bash -c``, ``eval``, ``xargs``, ``find -exec`` and the usual
wrappers. ``Recorder`` is what both readers feed.

Each ``SubCommand`` says whether its words are *literal* (exactly what bash would run). An
expansion, a glob or substitution as the command name, an unknown wrapper option or a parse
error makes the script non-literal: allow rules never vouch for it, while deny rules are still
tried on every literal (and best-guess) reading. The parse is cached by command text, so one
evaluation parses once however many rule stages look at it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import NamedTuple

from norma_cli.core.record import record, replace
from norma_cli.policy.shellwords import UNKNOWN, GlobWord
from norma_cli.policy.wrappers import (
    ASSIGNMENT_RE,
    CODE_VARIABLES,
    SPECIAL_PROGRAMS,
    Program,
    basename,
    unwrap,
)

Words = tuple[str, ...]

MAX_REENTRY = 8  # bash -c inside bash -c ...
MAX_NODES = 50_000  # syntax nodes walked before we give up (and ask)
WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", ">&", "&>|"})
READ_OPS = frozenset({"<"})
# Redirection targets that are not files anyone could mean to protect.
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
_DIRECTORY_CHANGERS = frozenset({"cd", "pushd", "popd"})
# Command names ``Recorder.emit`` cannot record without looking closer.
_NOT_PLAIN_NAMES = SPECIAL_PROGRAMS | _DIRECTORY_CHANGERS | {UNKNOWN}


class SubCommand(NamedTuple):
    """One program the command line runs (a NamedTuple: built for every command, so cheap)."""

    text: str  # as written, for explanations
    words: Words  # canonical reading (wrappers and assignments removed): what allow rules see
    readings: tuple[Words, ...]  # every reading deny and ask rules are tried against
    literal: bool  # ``words`` are exactly what runs; only then may an allow rule match
    reason: str = ""  # why it is not literal
    open_ended: bool = False  # more words are appended at run time (xargs, find -exec +)
    deny_only: bool = False  # a guessed reading, or the inner command of sudo


@record(frozen=True)
class Redirect:
    """A redirection to or from a file."""

    text: str
    op: str
    target: str | None  # the path as written, when literal
    guesses: tuple[str, ...]  # best-guess spellings of a non-literal target (deny side)
    cd: tuple[str, ...] | None  # ``cd`` arguments in force, in order; None: unknown directory
    write: bool

    @property
    def harmless(self) -> bool:
        t = self.target
        return t is not None and (t in HARMLESS_TARGETS or t.startswith("/dev/fd/"))


@record(frozen=True)
class ShellScript:
    source: str
    commands: tuple[SubCommand, ...]
    redirects: tuple[Redirect, ...]
    problems: tuple[str, ...]  # script-wide reasons it is not literal (parse error, PATH=...)

    @functools.cached_property
    def literal(self) -> bool:
        return (
            not self.problems
            and all(c.literal for c in self.commands if not c.deny_only)
            and all(
                r.target is not None and not (r.cd is None and _relative(r.target))
                for r in self.redirects
            )
        )

    def reasons(self) -> list[str]:
        """Why the script is not literal, in words a user can act on."""
        out = list(self.problems)
        out += [f"{c.text}: {c.reason}" for c in self.commands if not c.deny_only and not c.literal]
        for r in self.redirects:
            if r.target is None:
                out.append(f"{r.text}: the redirection target is not literal")
            elif r.cd is None and _relative(r.target):
                out.append(f"{r.text}: relative target after a cd into an unknown directory")
        return out


def parse_script(command: str) -> ShellScript:
    """Every simple command and file redirection of ``command`` (cached by text)."""
    return _parse(command, 0)


@functools.lru_cache(maxsize=1024)
def _parse(command: str, depth: int) -> ShellScript:
    simple = _parse_simple(command, depth)
    if simple is not None:
        return simple
    from norma_cli.policy.shelltree import parse_tree  # tree-sitter: loaded on first real need

    return parse_tree(command, depth)


# A line made only of these characters — plus single-quoted strings, and double-quoted ones
# without ``$``, backquote or backslash (bash takes both literally) — has no expansion,
# redirection, grouping or comment: bash splits it on blanks and on the list/pipe operators,
# nothing else. Such lines (most agent commands) skip the tree-sitter parse; anything else
# takes the full path.
_SAFE = r"A-Za-z0-9_./:=@%+,\-"
_QUOTED = r"'[^'\n]*'|\"[^\"$`\\\n]*\""
# Possessive runs: one pass over the line, no backtracking when it does not match.
_SIMPLE_LINE = re.compile(rf"(?:[{_SAFE} \t\n|&;]++|{_QUOTED})*+")
_TOKEN = re.compile(rf"(&&|\|\||\|&|[|;&\n])|([ \t]+)|((?:[{_SAFE}]|{_QUOTED})+)")
_PIECE = re.compile(rf"[{_SAFE}]+|{_QUOTED}")
_KEYWORDS = "if then else elif fi case esac for select while until do done in function time coproc"
_RESERVED = frozenset(_KEYWORDS.split())
_PIPES = frozenset({"|", "|&"})
APPEND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+=")


def _unquote(word: str) -> str:
    return "".join(p[1:-1] if p[0] in "'\"" else p for p in _PIECE.findall(word))


def _simple_commands(command: str) -> list[tuple[str | None, str, list[str], bool, str | None]]:
    """Split a plain line into (operator before, text, words, any word quoted, operator after)."""
    out: list[tuple[str | None, str, list[str], bool, str | None]] = []
    words: list[str] = []
    quoted = False
    start = end = -1
    before: str | None = None
    for m in _TOKEN.finditer(command):
        op, _, word = m.groups()
        if word is not None:
            if start < 0:
                start = m.start()
            end = m.end()
            if "'" in word or '"' in word:
                quoted = True
                word = _unquote(word)
            words.append(word)
        elif op is not None:
            out.append((before, command[start:end] if start >= 0 else "", words, quoted, op))
            words, quoted, start, before = [], False, -1, op
    out.append((before, command[start:end] if start >= 0 else "", words, quoted, None))
    return out


def _parse_simple(command: str, depth: int) -> ShellScript | None:
    """The fast path for simple lines; None sends the line to tree-sitter."""
    if not _SIMPLE_LINE.fullmatch(command):
        return None
    walker = Recorder(depth)
    for before, text, words, quoted, after in _simple_commands(command):
        if not words:
            if before in (None, "\n", ";", "&") and after in (None, "\n"):
                continue  # an empty line, or a trailing terminator
            return None  # a syntax error: let tree-sitter say so
        if quoted and any(w in _RESERVED or "=" in w for w in words):
            return None  # quoted keywords or assignment-like words: let tree-sitter decide
        while words and ASSIGNMENT_RE.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            walker.assign(name, value)
        if words and APPEND_RE.match(words[0]):
            return None
        if not words:
            continue
        if words[0] in _RESERVED:
            return None
        scoped = before in _PIPES or after in _PIPES or after == "&"
        walker.emit(text, tuple(words), guessed=False, scoped=functools.partial(bool, scoped))
    return walker.script(command)


class Recorder:
    """The programs, redirections and problems of one script, in the order bash meets them.

    Both readers feed it: the fast path for plain lines and the tree-sitter walk
    (``shelltree.TreeWalker``). It follows assignments (for deny-side guesses) and ``cd``.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.variables: dict[str, str] = {}  # literal assignments seen so far (guesses only)
        self.cd: tuple[str, ...] | None = ()
        self.commands: list[SubCommand] = []
        self.redirects: list[Redirect] = []
        self.problems: list[str] = []

    def script(self, command: str) -> ShellScript:
        return ShellScript(
            command,
            tuple(self.commands),
            tuple(self.redirects),
            tuple(dict.fromkeys(self.problems)),
        )

    def emit(self, text: str, words: Words, *, guessed: bool, scoped: Callable[[], bool]) -> None:
        """Record the programs behind one simple command's words."""
        head = words[0] if words else UNKNOWN
        if (
            not guessed
            and type(head) is str  # not a GlobWord
            and head not in _NOT_PLAIN_NAMES
            and "/" not in head
            and UNKNOWN not in words
        ):
            # Most commands, short: a literal program name with nothing to see through, no cd
            # to follow — exactly what the general case below records for them.
            self.commands.append(SubCommand(text, words, (words,), True))
            return
        if head != UNKNOWN and basename(head) not in SPECIAL_PROGRAMS:
            programs = [Program(words, (words,))]  # the common case: nothing to see through
            scripts: list[str] = []
        else:
            unwrapped = unwrap(words)
            self.problems.extend(unwrapped.problems)
            programs, scripts = unwrapped.programs, unwrapped.scripts
        for prog in programs:
            reason = "" if guessed else self._not_literal(words, prog)
            self.commands.append(
                SubCommand(
                    text,
                    prog.words,
                    with_basenames(prog.readings),
                    not guessed and not reason,
                    reason,
                    prog.open_ended,
                    prog.deny_only or guessed,
                )
            )
        literal = not guessed and UNKNOWN not in words
        for script in scripts:
            self._nested(script, text, literal)
        if not guessed:
            self._track_cd(programs, scoped)

    def _not_literal(self, words: Words, prog: Program) -> str:
        if UNKNOWN in words:
            return "contains an expansion or substitution whose value is unknown"
        if prog.opaque:
            return prog.opaque
        head = prog.words[0] if prog.words else ""
        if isinstance(head, GlobWord):
            return "the command name is a glob"
        if "/" in head:
            if head.startswith("/dev/fd/"):
                return "the command name is a process substitution"
            if _relative(head) and self.cd != ():
                return "runs a relative path after cd"
        return ""

    def _nested(self, script: str, text: str, literal: bool) -> None:
        """A shell string run by ``bash -c``, ``eval``, ...: its commands are ours too."""
        if self.depth >= MAX_REENTRY:
            self.problems.append(f"{text}: shell strings nested too deeply")
            return
        inner = _parse(script, self.depth + 1)
        self.problems.extend(inner.problems)
        for c in inner.commands:
            reason = c.reason
            if not reason and not literal:
                reason = "runs a shell string that is not literal"
            elif not reason and self.cd != () and "/" in c.words[0] and _relative(c.words[0]):
                reason = "runs a relative path after cd"
            self.commands.append(c._replace(literal=c.literal and not reason, reason=reason))
        for r in inner.redirects:
            cd = None if self.cd is None or r.cd is None else self.cd + r.cd
            if not literal and r.target is not None:
                r = replace(r, target=None, guesses=(r.target, *r.guesses))
            self.redirects.append(replace(r, cd=cd))

    def _track_cd(self, programs: list[Program], scoped: Callable[[], bool]) -> None:
        """Follow ``cd`` so relative redirection targets land where bash would put them."""
        for prog in programs:
            name = prog.words[0] if prog.words else ""
            if name not in _DIRECTORY_CHANGERS or prog.deny_only:
                continue
            args = [w for w in prog.words[1:] if w not in ("-L", "-P", "-e", "--")]
            if scoped() or name != "cd" or len(args) > 1 or self.cd is None:
                self.cd = None
            elif not args:
                self.cd = (*self.cd, "~")
            elif args[0] in (UNKNOWN, "-") or isinstance(args[0], GlobWord):
                self.cd = None
            else:
                self.cd = (*self.cd, args[0])

    def assign(self, name: str, value: str | None, append: bool = False) -> None:
        """Note ``name=value``: code variables make the line non-literal; values feed guesses."""
        if CODE_VARIABLES.match(name):
            self.problems.append(f"assigns {name}, which changes what later commands run")
        if value is None or (append and name not in self.variables):
            self.variables.pop(name, None)
        elif append:
            self.variables[name] += value
        else:
            self.variables[name] = value


def _relative(path: str) -> bool:
    return not path.startswith(("/", "~"))


def with_basenames(readings: tuple[Words, ...]) -> tuple[Words, ...]:
    """``/usr/bin/rm`` is ``rm`` to a deny rule."""
    if all("/" not in r[0] for r in readings if r):
        return readings
    out = list(readings)
    for r in readings:
        if not r or "/" not in r[0] or r[0].endswith("/"):
            continue
        name = basename(r[0])
        out.append((GlobWord(name) if isinstance(r[0], GlobWord) else name, *r[1:]))
    return tuple(dict.fromkeys(out))


def resolve_redirect(r: Redirect, cwd: str, *, deny_side: bool) -> list[str]:
    """Absolute spellings (before symlink resolution) of a redirection's target.

    A relative target after ``cd`` lands under the directory cd chose; when that is unknown,
    only the deny side guesses (from the working directory). Targets are not normalised here.
    """
    spelled = [r.target] if r.target is not None else []
    if deny_side:
        spelled += list(r.guesses)
    out: list[str] = []
    for t in spelled:
        t = os.path.expanduser(t)
        if os.path.isabs(t):
            out.append(t)
            continue
        if r.cd is not None:
            base = cwd
            for step in r.cd:
                base = os.path.join(base, os.path.expanduser(step))
            out.append(os.path.join(base, t))
        if deny_side and r.cd != ():
            out.append(os.path.join(cwd, t))
    return list(dict.fromkeys(out))
