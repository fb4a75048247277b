"""Bash command lines, parsed into every simple command and redirection they run.

``parse_script`` reads a command line with tree-sitter-bash and walks the whole tree, so a
command is found wherever bash would run it: after ``&&``, ``||``, ``;``, newlines and pipes,
inside ``$(...)``, backticks, subshells, brace groups, ``<(...)``, unquoted heredocs, loops,
conditionals and function bodies, and — through ``wrappers.unwrap`` — inside ``bash -c``,
``eval``, ``xargs``, ``find -exec`` and the usual wrappers.

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
import shlex
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from norma_cli.policy.shellwords import (
    UNKNOWN,
    GlobWord,
    Segment,
    ansi_c_text,
    brace_expand,
    double_quoted_text,
    guessed_value,
    literal_value,
    unquoted_word,
    words_of,
)
from norma_cli.policy.wrappers import CODE_VARIABLES, Program, basename, unwrap

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

Words = tuple[str, ...]

MAX_REENTRY = 8  # bash -c inside bash -c ...
MAX_NODES = 50_000  # syntax nodes walked before we give up (and ask)
WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", ">&", "&>|"})
READ_OPS = frozenset({"<"})
# Redirection targets that are not files anyone could mean to protect.
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
# Constructs that run in a child shell: a ``cd`` inside them does not outlive them.
_CHILD_SCOPES = frozenset({"subshell", "pipeline", "command_substitution", "process_substitution"})
_PLAIN_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONTINUATION = re.compile(rb"(?:\\\r?\n)+")
_SKIP_IN_COMMAND = frozenset(
    {"variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect", "comment"}
)


@dataclass(frozen=True)
class SubCommand:
    """One program the command line runs."""

    text: str  # as written, for explanations
    words: Words  # canonical reading (wrappers and assignments removed): what allow rules see
    readings: tuple[Words, ...]  # every reading deny and ask rules are tried against
    literal: bool  # ``words`` are exactly what runs; only then may an allow rule match
    reason: str = ""  # why it is not literal
    open_ended: bool = False  # more words are appended at run time (xargs, find -exec +)
    deny_only: bool = False  # a guessed reading, or the inner command of sudo


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ShellScript:
    source: str
    commands: tuple[SubCommand, ...]
    redirects: tuple[Redirect, ...]
    problems: tuple[str, ...]  # script-wide reasons it is not literal (parse error, PATH=...)

    @property
    def literal(self) -> bool:
        return (
            not self.problems
            and all(c.literal for c in self.commands if not c.deny_only)
            and all(r.target is not None and not (r.cd is None and _relative(r.target))
                    for r in self.redirects)
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
    src = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(src)
    walker = _Walker(src, depth)
    walker.walk(tree.root_node)
    if tree.root_node.has_error:
        walker.commands.extend(_fallback_commands(command))
    return ShellScript(
        command, tuple(walker.commands), tuple(walker.redirects), tuple(dict.fromkeys(walker.problems))
    )


_local = threading.local()


def _parser() -> Parser:
    # tree-sitter parsers are not thread-safe; the import is here so ``norma --help`` never pays it.
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        import tree_sitter
        import tree_sitter_bash

        parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
        _local.parser = parser
    return parser


def _relative(path: str) -> bool:
    return not path.startswith(("/", "~"))


class _Walker:
    """One pre-order pass over the syntax tree, in the order bash would meet things."""

    def __init__(self, src: bytes, depth: int) -> None:
        self.src = src
        self.depth = depth
        self.variables: dict[str, str] = {}  # literal assignments seen so far (guesses only)
        self.cd: tuple[str, ...] | None = ()
        self.commands: list[SubCommand] = []
        self.redirects: list[Redirect] = []
        self.problems: list[str] = []

    def walk(self, root: Node) -> None:
        if root.has_error:
            self.problems.append("the command does not parse as bash")
        stack = [root]
        seen = 0
        while stack:
            node = stack.pop()
            seen += 1
            if seen > MAX_NODES:
                self.problems.append("the command is too large to check")
                return
            kind = node.type
            if kind == "command":
                self._command(node)
            elif kind == "variable_assignment":
                self._assignment(node)
            elif kind == "file_redirect":
                self._redirect(node)
            children = node.children
            if children:
                stack.extend(reversed(children))

    # -- commands --------------------------------------------------------------------------

    def _command(self, node: Node) -> None:
        parts: list[Node] = []
        for child in node.children:
            if child.type in _SKIP_IN_COMMAND:
                continue
            parts.append(child)
        if not parts:
            return
        # tree-sitter splits ``r\<newline>m`` into two words; bash joins them.
        groups: list[list[Node]] = [[parts[0]]]
        for prev, cur in zip(parts, parts[1:], strict=False):
            gap = self.src[prev.end_byte : cur.start_byte]
            if not gap or _CONTINUATION.fullmatch(gap):
                groups[-1].append(cur)
            else:
                groups.append([cur])
        segments = [[s for n in group for s in self._segments(n)] for group in groups]
        strict = tuple(w for segs in segments for w in words_of(segs))
        text = self._text(node).strip()
        self._emit(node, text, strict, guessed=False)
        if UNKNOWN in strict:
            guess = tuple(w for segs in segments for w in words_of(segs, self.variables))
            if guess != strict:
                self._emit(node, text, guess, guessed=True)

    def _emit(self, node: Node, text: str, words: Words, *, guessed: bool) -> None:
        unwrapped = unwrap(words)
        self.problems.extend(unwrapped.problems)
        for prog in unwrapped.programs:
            reason = "" if guessed else self._not_literal(words, prog)
            self.commands.append(SubCommand(
                text, prog.words, _with_basenames(prog.readings), not guessed and not reason,
                reason, prog.open_ended, prog.deny_only or guessed,
            ))
        literal = not guessed and UNKNOWN not in words
        for script in unwrapped.scripts:
            self._nested(script, text, literal)
        if not guessed:
            self._track_cd(node, unwrapped.programs)

    def _not_literal(self, words: Words, prog: Program) -> str:
        if UNKNOWN in words:
            return "contains an expansion or substitution whose value is unknown"
        if prog.opaque:
            return prog.opaque
        head = prog.words[0] if prog.words else ""
        if isinstance(head, GlobWord):
            return "the command name is a glob"
        if head.startswith("/dev/fd/"):
            return "the command name is a process substitution"
        if "/" in head and _relative(head) and self.cd != ():
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
            self.commands.append(replace(c, literal=c.literal and not reason, reason=reason))
        for r in inner.redirects:
            cd = None if self.cd is None or r.cd is None else self.cd + r.cd
            if not literal and r.target is not None:
                r = replace(r, target=None, guesses=(r.target, *r.guesses))
            self.redirects.append(replace(r, cd=cd))

    def _track_cd(self, node: Node, programs: list[Program]) -> None:
        """Follow ``cd`` so relative redirection targets land where bash would put them."""
        for prog in programs:
            name = prog.words[0] if prog.words else ""
            if name not in ("cd", "pushd", "popd") or prog.deny_only:
                continue
            args = [w for w in prog.words[1:] if w not in ("-L", "-P", "-e", "--")]
            scoped = _in_child_scope(node)
            if scoped or name != "cd" or len(args) > 1 or self.cd is None:
                self.cd = None
            elif not args:
                self.cd = (*self.cd, "~")
            elif args[0] in (UNKNOWN, "-") or isinstance(args[0], GlobWord):
                self.cd = None
            else:
                self.cd = (*self.cd, args[0])

    # -- assignments and redirections ------------------------------------------------------

    def _assignment(self, node: Node) -> None:
        children = node.children
        if not children:
            return
        name = self._text(children[0])
        if CODE_VARIABLES.match(name):
            self.problems.append(f"assigns {name}, which changes what later commands run")
        value_nodes = children[2:] if len(children) > 2 else []
        if not value_nodes:
            self.variables[name] = ""
            return
        segs = [s for n in value_nodes for s in self._segments(n)]
        value = literal_value(segs)
        if value is None:
            value = guessed_value(segs, self.variables)
        if value is not None and children[1].type == "=":
            self.variables[name] = value
        elif value is not None and name in self.variables:
            self.variables[name] += value
        else:
            self.variables.pop(name, None)

    def _redirect(self, node: Node) -> None:
        op = ""
        dest: Node | None = None
        for child in node.children:
            if child.type in WRITE_OPS or child.type in READ_OPS or child.type in ("<&", "<>", ">&-", "<&-"):
                op = child.type
            elif child.is_named and child.type != "file_descriptor":
                dest = child
        if dest is None or not op:
            return
        if op in (">&", "<&") and (dest.type == "number" or self._text(dest) == "-"):
            return  # duplicates a file descriptor, touches no file
        write = op in WRITE_OPS or op == "<>"
        if not write and op not in READ_OPS:
            return
        segs = self._segments(dest)
        strict = words_of(segs)
        target = strict[0] if len(strict) == 1 and _plain(strict[0]) else None
        guesses: tuple[str, ...] = ()
        if target is None:
            guesses = tuple(w for w in words_of(segs, self.variables) if _plain(w))
        self.redirects.append(Redirect(self._text(node).strip(), op, target, guesses, self.cd, write))

    # -- words ------------------------------------------------------------------------------

    def _segments(self, node: Node, quoted: bool = False) -> list[Segment]:
        kind = node.type
        text = self._text(node)
        if kind == "word":
            return unquoted_word(text)
        if kind in ("number", "brace_expression"):
            return [("lit", text, quoted)]
        if kind == "raw_string":
            return [("lit", text[1:-1], True)]
        if kind == "ansi_c_string":
            return [("lit", ansi_c_text(text[2:-1]), True)]
        if kind == "string":
            return self._double_quoted(node)
        if kind in ("concatenation", "command_name"):
            out: list[Segment] = []
            for child in node.children:
                out.extend(self._segments(child, quoted))
            return out
        if kind == "simple_expansion":
            return [("var", text[1:], quoted)]
        if kind == "expansion" and (m := _PLAIN_EXPANSION.fullmatch(text)):
            return [("var", m.group(1), quoted)]
        if kind == "process_substitution":
            # Its value is always a /dev/fd path; the commands inside are found by the walk.
            return [("lit", "/dev/fd/63", True)]
        return [("unknown", text, quoted)]

    def _double_quoted(self, node: Node) -> list[Segment]:
        segs: list[Segment] = []
        pending: list[str] = []
        start, end = node.start_byte + 1, node.end_byte - 1
        pos = start

        def flush() -> None:
            if pending:
                segs.append(("lit", double_quoted_text("".join(pending)), True))
                pending.clear()

        for child in node.children:
            if child.type == '"':
                continue
            if child.start_byte > pos:
                pending.append(self._slice(pos, child.start_byte))
            if child.type == "string_content":
                pending.append(self._text(child))
            else:
                flush()
                segs.extend(self._segments(child, quoted=True))
            pos = max(pos, child.end_byte)
        if end > pos:
            pending.append(self._slice(pos, end))
        flush()
        return segs or [("lit", "", True)]

    def _text(self, node: Node) -> str:
        return self._slice(node.start_byte, node.end_byte)

    def _slice(self, start: int, end: int) -> str:
        return self.src[start:end].decode("utf-8", "surrogatepass")


def _fallback_commands(command: str) -> list[SubCommand]:
    """Deny-only readings of a line tree-sitter could not parse, from a plain tokenizer.

    A parse error already makes the line *ask*; this is so a deny rule still wins over it
    (``{rm,-rf,/}`` is ``rm -rf /`` to bash and an ERROR node to tree-sitter).
    """
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = command.split()
    out: list[SubCommand] = []
    current: list[str] = []
    for token in [*tokens, ";"]:
        if token and all(c in ";&|()<>" for c in token):
            for prog in unwrap(tuple(current)).programs if current else []:
                out.append(SubCommand(command, prog.words, _with_basenames(prog.readings), False,
                                      "the command does not parse as bash", prog.open_ended, True))
            current = []
            continue
        escaped = "".join("\\" + c if c in "*?[\\" else c for c in token)
        current.extend(brace_expand(escaped) or [token])
    return out


def _plain(word: str) -> bool:
    return word != UNKNOWN and not isinstance(word, GlobWord)


def _in_child_scope(node: Any) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type in _CHILD_SCOPES:
            return True
        parent = parent.parent
    return False


def _with_basenames(readings: tuple[Words, ...]) -> tuple[Words, ...]:
    """``/usr/bin/rm`` is ``rm`` to a deny rule."""
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
