"""The tree-sitter side of the shell parser: lines that need the real bash grammar.

``shell.parse_script`` sends here every line its fast path cannot read (quotes, expansions,
redirections, substitutions, compound commands, heredocs, ...). ``TreeWalker`` visits the
syntax tree once, in the order bash would meet things, and feeds each simple command's words
to the shared ``Recorder``. Where tree-sitter-bash reads bash differently (line continuations
inside words, backticks in heredocs, ``<<-`` bodies, escaped backticks inside backticks) this
module rereads the text itself; a line that does not parse is also tokenised plainly so a deny
rule still meets what it can see.

Importing this module is cheap; tree-sitter itself is imported on the first parse.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
import threading
from typing import TYPE_CHECKING, Any

from norma_cli.policy.shell import (
    APPEND_RE,
    MAX_NODES,
    READ_OPS,
    WRITE_OPS,
    Recorder,
    Redirect,
    ShellScript,
    SubCommand,
    with_basenames,
)
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
from norma_cli.policy.wrappers import ASSIGNMENT_RE, unwrap

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# Constructs that run in a child shell: a ``cd`` inside them does not outlive them.
_CHILD_SCOPES = frozenset({"subshell", "pipeline", "command_substitution", "process_substitution"})
_PLAIN_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONTINUATION = re.compile(rb"(?:\\\r?\n)+")
_PLAIN_WORD = re.compile(r"[^\\{}*?\[$'\"`~]+")
_SIMPLE_COMMAND = re.compile(r"[A-Za-z0-9_./:=@%+,\- \t]+")
_SKIP_IN_COMMAND = frozenset(
    {"variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect", "comment"}
)


def parse_tree(command: str, depth: int) -> ShellScript:
    """Read a line that needs the real bash grammar (see ``shell.parse_script``)."""
    src = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(src)
    walker = TreeWalker(src, depth)
    if "\x00" in command:
        walker.problems.append("the command contains a NUL byte")
    if not walker.walk(tree.root_node):
        walker.commands.extend(_fallback_commands(command))
    return walker.script(command)


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


class TreeWalker(Recorder):
    """One pre-order pass over the syntax tree, in the order bash would meet things."""

    def __init__(self, src: bytes, depth: int) -> None:
        super().__init__(depth)
        self.src = src

    def walk(self, root: Node) -> bool:
        """Visit the whole tree; False when it did not parse or was too large to finish."""
        if root.has_error:
            self.problems.append("the command does not parse as bash")
        stack = [root]
        seen = 0
        while stack:
            node = stack.pop()
            seen += 1
            if seen > MAX_NODES:
                self.problems.append("the command is too large to check")
                return False
            kind = node.type
            if kind == "command":
                stack.extend(reversed(self._command(node)))
                continue
            if kind == "variable_assignment":
                self._assignment(node)
            elif kind == "file_redirect":
                self._redirect(node)
            elif kind == "heredoc_redirect":
                stack.extend(reversed(self._heredoc(node)))
                continue
            elif (
                kind == "command_substitution"
                and self.src[node.start_byte : node.start_byte + 1] == b"`"
            ):
                text = self._text(node)
                if "\\" in text:
                    # Inside backticks ``\` \$ \\`` are unescaped before the text is parsed again,
                    # so tree-sitter's reading of the escaped text is not what bash runs.
                    self._nested(re.sub(r"\\([`$\\])", r"\1", text[1:-1]), text, True)
                    continue
            if node.named_child_count:
                stack.extend(reversed(node.named_children))
        return not root.has_error

    # -- commands --------------------------------------------------------------------------

    def _command(self, node: Node) -> list[Node]:
        """Record the programs of one simple command; return the children still to walk."""
        text = self._text(node)
        if _SIMPLE_COMMAND.fullmatch(text):
            words = text.split()  # plain words only: bash splits them on blanks, and that is all
            leading = itertools.takewhile(lambda w: "=" in w, words) if "+=" in text else ()
            if not any(APPEND_RE.match(w) for w in leading):
                while words and ASSIGNMENT_RE.match(words[0]):
                    name, value = words.pop(0).split("=", 1)
                    self.assign(name, value)
                if words:
                    self.emit(
                        text.strip(),
                        tuple(words),
                        guessed=False,
                        scoped=functools.partial(_in_child_scope, node),
                    )
                return []
        parts: list[Node] = []
        deeper: list[Node] = []
        for child in node.children:
            if child.type in _SKIP_IN_COMMAND:
                deeper.append(child)
            else:
                parts.append(child)
        if not parts:
            return deeper
        # tree-sitter splits ``r\<newline>m`` into two words; bash joins them.
        groups: list[list[Node]] = [[parts[0]]]
        for prev, cur in itertools.pairwise(parts):
            end = prev.end_byte
            if end == cur.start_byte or (
                self.src[end] == 0x5C and _CONTINUATION.fullmatch(self.src[end : cur.start_byte])
            ):
                groups[-1].append(cur)
            else:
                groups.append([cur])
        # Most words are plain (no quotes, escapes, braces, globs or $): take them as they are.
        segments: list[list[Segment] | str] = []
        strict: list[str] = []
        for group in groups:
            plain = self._plain_word(group[0]) if len(group) == 1 else None
            if plain is not None:
                segments.append(plain)
                strict.append(plain)
            else:
                segs = [s for n in group for s in self._segments(n)]
                segments.append(segs)
                strict.extend(words_of(segs))
                deeper.extend(group)  # substitutions inside run too
        text = text.strip()
        scoped = functools.partial(_in_child_scope, node)
        self.emit(text, tuple(strict), guessed=False, scoped=scoped)
        if UNKNOWN in strict:
            guess: list[str] = []
            for word in segments:
                if isinstance(word, str):
                    guess.append(word)
                else:
                    guess.extend(words_of(word, self.variables))
            if guess != strict:
                self.emit(text, tuple(guess), guessed=True, scoped=scoped)
        return deeper

    def _plain_word(self, node: Node) -> str | None:
        if node.type == "command_name" and node.child_count == 1:
            node = node.children[0]
        if node.type != "word":
            return None
        text = self._text(node)
        return text if _PLAIN_WORD.fullmatch(text) else None

    def _heredoc(self, node: Node) -> list[Node]:
        """Scan an unquoted heredoc body ourselves; return the other children to walk.

        tree-sitter-bash misses backticks in heredoc bodies and does not parse ``<<-`` bodies
        at all, yet bash runs every substitution in an unquoted heredoc.
        """
        rest: list[Node] = []
        quoted = False
        body: Node | None = None
        for child in node.children:
            if child.type == "heredoc_start":
                quoted = any(c in self._text(child) for c in "'\"\\")
            elif child.type == "heredoc_body":
                body = child
            else:
                rest.append(child)
        if body is not None and not quoted:
            found = _substitutions(self._text(body))
            if found is None:
                self.problems.append("cannot read a command substitution in a heredoc")
                found = []
            for script in found:
                self._nested(script, "heredoc", True)
        return rest

    # -- assignments and redirections ------------------------------------------------------

    def _assignment(self, node: Node) -> None:
        children = node.children
        if not children:
            return
        name = self._text(children[0])
        value_nodes = children[2:]
        value: str | None = ""
        if value_nodes:
            segs = [s for n in value_nodes for s in self._segments(n)]
            value = literal_value(segs)
            if value is None:
                value = guessed_value(segs, self.variables)
        self.assign(name, value, append=len(children) > 1 and children[1].type == "+=")

    def _redirect(self, node: Node) -> None:
        op = ""
        dest: Node | None = None
        for child in node.children:
            if (
                child.type in WRITE_OPS
                or child.type in READ_OPS
                or child.type in ("<&", "<>", ">&-", "<&-")
            ):
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
        self.redirects.append(
            Redirect(self._text(node).strip(), op, target, guesses, self.cd, write)
        )

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


def _substitutions(text: str) -> list[str] | None:
    """The scripts of every ``$(...)`` and backtick substitution in heredoc text.

    None when one is not closed (the caller asks instead of guessing).
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif text.startswith("$((", i):
            i += 3  # arithmetic: substitutions inside are found as the scan goes on
        elif text.startswith("$(", i):
            end = _closing_paren(text, i + 2)
            if end is None:
                return None
            out.append(text[i + 2 : end])
            i = end + 1
        elif c == "`":
            j = i + 1
            while j < n and text[j] != "`":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return None
            out.append(re.sub(r"\\([`$\\])", r"\1", text[i + 1 : j]))
            i = j + 1
        else:
            i += 1
    return out


def _closing_paren(text: str, start: int) -> int | None:
    depth, i, quote = 0, start, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return None


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
                out.append(
                    SubCommand(
                        command,
                        prog.words,
                        with_basenames(prog.readings),
                        False,
                        "the command does not parse as bash",
                        prog.open_ended,
                        True,
                    )
                )
            current = []
            continue
        expanded = brace_expand(token.replace("\\", "\\\\")) or [token.replace("\\", "\\\\")]
        current.extend(w.replace("\\\\", "\\") for w in expanded)
    return out


def _plain(word: str) -> bool:
    return word != UNKNOWN and not isinstance(word, GlobWord)


def _in_child_scope(node: Any) -> bool:
    """Does ``node`` run in a child shell (subshell, pipeline, substitution, ``&``)?"""
    while node is not None:
        if node.type in _CHILD_SCOPES:
            return True
        after = node.next_sibling
        if after is not None and after.type == "&":
            return True
        node = node.parent
    return False
