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

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple

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
# The directories a command may run in, each as the ``cd`` arguments that lead there from the
# working directory: ``((),)`` is the working directory itself, ``((), ("build",))`` either it
# or ./build (a ``cd build`` that may or may not have happened). None: not known.
Dirs = tuple[tuple[str, ...], ...]
HERE: Dirs = ((),)
MAX_DIRS = 4  # more possible directories than this: the directory is unknown
# Directory changes in one script whose reach ``_certain`` works out (it reads the syntax
# around each); any later one is taken as one that may or may not have happened.
MAX_CERTAIN_CDS = 64

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
    cd: Dirs | None  # every directory the redirection may be opened in; None: unknown
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
    given = _GIVEN.get()
    if given is not None and given.source == command:
        return given
    return _parse(command, 0)


# A reading ``read_as`` hands the engine instead of parsing (this thread / task only).
_GIVEN: ContextVar[ShellScript | None] = ContextVar("norma_shell_given", default=None)


@contextlib.contextmanager
def read_as(script: ShellScript) -> Iterator[None]:
    """Within the block, ``parse_script(script.source)`` is ``script`` (in this context only).

    ``norma policy check`` judges one piece of a line (a command, a redirection) through the
    whole permission engine exactly as it was read in the line: with the directory a ``cd``
    before it left, the readings guessed for it — nothing reparsed out of context, nothing
    nested reparsed once per level.
    """
    token = _GIVEN.set(script)
    try:
        yield
    finally:
        _GIVEN.reset(token)


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
_AND_OR = frozenset({"&&", "||"})
# After these the next command is still in the ``&&`` chain of a cd before (a pipeline's
# commands are one operand of ``&&``).
_CHAINED = frozenset({"&&", *_PIPES})
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
    commands = _simple_commands(command)
    for i, (before, text, words, quoted, after) in enumerate(commands):
        if before not in _CHAINED:
            walker.widen()  # past the ``&&`` chain of the last cd: it may not have happened
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
        walker.emit(text, tuple(words), guessed=False, at=functools.partial(_chains, commands, i))
    return walker.script(command)


def _chains(commands: list[tuple[str | None, str, list[str], bool, str | None]], i: int) -> bool:
    """Does a cd at ``commands[i]`` surely move the commands chained to it by ``&&``?

    Not when it is reached through ``||`` (skipped when what came before succeeded), runs in
    a pipeline, or in an and-or list sent to the background: those run in a child shell.
    """
    before, after = commands[i][0], commands[i][4]
    if before in ("||", *_PIPES) or after in _PIPES:
        return False
    while after in _AND_OR or after in _PIPES:
        i += 1
        after = commands[i][4]
    return after != "&"


class Recorder:
    """The programs, redirections and problems of one script, in the order bash meets them.

    Both readers feed it: the fast path for plain lines and the tree-sitter walk
    (``shelltree.TreeWalker``). It follows assignments (for deny-side guesses) and ``cd``.

    A ``cd`` is followed soundly: bash may skip it (``true || cd x``) or it may fail
    (``cd nope; make > log`` writes ./log), so its directory is *certain* only for the
    commands chained to it by ``&&`` (``cd build && make > log``), and only when the cd itself
    surely ran if they do (not after ``||``, not negated, not in a pipeline or background
    list). Past that chain (``widen``) a command may run in the directory before the cd or in
    any a cd since may have led to: ``trail`` holds those, in order.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.variables: dict[str, str] = {}  # literal assignments seen so far (guesses only)
        self.cd: Dirs | None = HERE  # the directories the next command may run in
        self.trail: list[Dirs | None] = []  # where each directory change so far may lead
        self.chain: tuple[Dirs | None, int] = (HERE, 0)  # ``cd`` and trail where it began
        self.commands: list[SubCommand] = []
        self.redirects: list[Redirect] = []
        self.problems: list[str] = []
        self.lost: list[tuple[int, int, int, int]] = []  # see ``lost_track``

    def script(self, command: str) -> ShellScript:
        return ShellScript(
            command,
            tuple(self.commands),
            tuple(self.redirects),
            tuple(dict.fromkeys(self.problems)),
        )

    def emit(self, text: str, words: Words, *, guessed: bool, at: Any) -> None:
        """Record the programs behind one simple command's words.

        ``at`` says where the command stands, for ``_certain`` (the readers differ).
        """
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
        moved = False
        for script in scripts:
            moved = self._nested(script, text, literal) or moved
        if moved and _builtin_head(words) in _IN_THIS_SHELL:
            self._moved(None, None)  # ``eval 'cd x'``: a cd we do not follow
        self._track_cd(words, programs, None if guessed else at)

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
            if _relative(head) and self.cd != HERE:
                return "runs a relative path after cd"
        return ""

    def _nested(self, script: str, text: str, literal: bool) -> bool:
        """A shell string run by ``bash -c``, ``eval``, ...: its commands are ours too.

        True when the string may change directory (which matters when it runs in this shell).
        """
        if self.depth >= MAX_REENTRY:
            self.problems.append(f"{text}: shell strings nested too deeply")
            return True
        inner = _parse(script, self.depth + 1)
        self.problems.extend(inner.problems)
        moved = False
        for c in inner.commands:
            reason = c.reason
            head = c.words[0] if c.words else ""
            moved = moved or head in _DIRECTORY_CHANGERS
            if not reason and not literal:
                reason = "runs a shell string that is not literal"
            elif not reason and self.cd != HERE and "/" in head and _relative(head):
                reason = "runs a relative path after cd"
            self.commands.append(c._replace(literal=c.literal and not reason, reason=reason))
        for r in inner.redirects:
            cd = _joined(self.cd, r.cd)
            if not literal and r.target is not None:
                r = replace(r, target=None, guesses=(r.target, *r.guesses))
            self.redirects.append(replace(r, cd=cd))
        return moved

    def _track_cd(self, words: Words, programs: list[Program], at: Any) -> None:
        """Follow ``cd`` so relative redirection targets land where bash would put them.

        ``at`` is None when the cd is surely not certain (a guessed reading).
        """
        for prog in programs:
            name = prog.words[0] if prog.words else ""
            if name not in _DIRECTORY_CHANGERS or prog.deny_only:
                continue
            args = [w for w in prog.words[1:] if w not in ("-L", "-P", "-e", "--")]
            new: Dirs | None = None
            if name != "cd" or len(args) > 1 or prog.open_ended:
                pass  # pushd/popd, or words appended at run time: unknown
            elif not args:
                new = _stepped(self.cd, "~")
            elif args[0] != UNKNOWN and args[0][:1] != "-" and type(args[0]) is str:
                new = _stepped(self.cd, args[0])
            # ``env cd x``, ``nice cd x``, ...: an external cd that moves nothing (perhaps,
            # as far as we care) — unless it is the builtin after all (``builtin cd``, ...).
            builtin = _builtin_head(words) in _DIRECTORY_CHANGERS
            self._moved(new, at if builtin else None)

    def _moved(self, new: Dirs | None, at: Any) -> None:
        """The script may now be in ``new`` (None: anywhere); ``at``: where the cd stands."""
        certain = (
            new is not None
            and at is not None
            and len(self.trail) < MAX_CERTAIN_CDS
            and self._certain(at)
        )
        self.trail.append(new)
        self.cd = new if certain else _union(self.cd, new)  # or: it may not have happened

    def _certain(self, at: Any) -> bool:
        """Will the commands chained to this cd by ``&&`` surely run where it went?

        The fast path passes a callable (``_chains``); ``TreeWalker`` reads the tree, and
        both call ``widen`` where the chain ends.
        """
        return bool(at())

    def lost_track(self, commands: int, redirects: int) -> None:
        """The directory changed in a loop body: from the given commands and redirections on
        (the loop's), and after the loop, it is unknown — a later pass starts where one ended.
        """
        self.cd = None
        self.trail.append(None)
        # Ranges an inner loop already went over are skipped: nested loops cost no more than
        # one (``lost``: the ranges done so far, in order, as command and redirection spans).
        lost = self.lost
        c_end, r_end = len(self.commands), len(self.redirects)
        while lost and lost[-1][0] >= commands and lost[-1][2] >= redirects:
            c0, c1, r0, r1 = lost.pop()
            self._lose(c1, c_end, r1, r_end)
            c_end, r_end = c0, r0
        self._lose(commands, c_end, redirects, r_end)
        lost.append((commands, len(self.commands), redirects, len(self.redirects)))

    def _lose(self, c0: int, c1: int, r0: int, r1: int) -> None:
        """Commands ``c0:c1`` and redirections ``r0:r1`` run in an unknown directory."""
        for i in range(r0, r1):
            r = self.redirects[i]
            if r.cd is not None:
                self.redirects[i] = replace(r, cd=None)
        for i in range(c0, c1):
            c = self.commands[i]
            head = c.words[0] if c.words else ""
            if c.literal and "/" in head and _relative(head):
                self.commands[i] = c._replace(literal=False, reason="runs a relative path after cd")

    def widen(self) -> None:
        """The end of an ``&&`` chain (fast path): its cds may or may not have happened."""
        cd, mark = self.chain
        if len(self.trail) > mark:
            self.cd = self.since(cd, mark)
            self.chain = (self.cd, len(self.trail))

    def since(self, cd: Dirs | None, mark: int) -> Dirs | None:
        """``cd``, or anywhere the directory changes after ``trail[mark]`` may have led."""
        for new in self.trail[mark:]:
            cd = _union(cd, new)
        return cd

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


# Words before a builtin that still run it in this shell (``builtin cd x``, ``command eval``).
_TRANSPARENT = frozenset({"builtin", "command", "time"})
_IN_THIS_SHELL = frozenset({"eval", "trap"})  # run a shell string here, not in a child


def _builtin_head(words: Words) -> str:
    """The builtin ``words`` run in this shell, past ``builtin``/``command``/``time``."""
    for i, w in enumerate(words):
        if type(w) is not str:
            return ""
        if w in _TRANSPARENT or (i and w.startswith("-")):
            continue
        return w
    return ""


def _union(a: Dirs | None, b: Dirs | None) -> Dirs | None:
    if a is None or b is None:
        return None
    out = tuple(dict.fromkeys(a + b))
    return out if len(out) <= MAX_DIRS else None


def _stepped(dirs: Dirs | None, step: str) -> Dirs | None:
    return None if dirs is None else tuple(dict.fromkeys((*d, step) for d in dirs))


def _joined(outer: Dirs | None, inner: Dirs | None) -> Dirs | None:
    """Directories of a nested script's redirection: its own cds, from wherever it starts."""
    if outer is None or inner is None:
        return None
    out = tuple(dict.fromkeys(o + i for o in outer for i in inner))
    return out if len(out) <= MAX_DIRS else None


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

    A relative target is resolved under every directory a ``cd`` may have left the shell in
    (the allow side needs each covered); when that is unknown, only the deny side guesses
    (from the working directory), and it also tries the working directory after any cd (it
    may have failed). Targets are not normalised here.
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
        for steps in r.cd or ():
            base = cwd
            for step in steps:
                base = os.path.join(base, os.path.expanduser(step))
            out.append(os.path.join(base, t))
        if deny_side and r.cd != HERE:
            out.append(os.path.join(cwd, t))
    return list(dict.fromkeys(out))
