"""The tree-sitter side of the shell parser: lines that need the real bash grammar.

``shell.parse_script`` sends here every line its fast path cannot read (quotes, expansions,
redirections, substitutions, compound commands, heredocs, ...). ``TreeWalker`` visits the
syntax tree once, in the order bash would meet things, and feeds each simple command's words
to the shared ``Recorder``. Where tree-sitter-bash reads bash differently (line continuations
inside words, backticks in heredocs, ``<<-`` bodies, escaped backticks inside backticks, a
trailing redirection read as redirecting a whole ``&&`` list) this module rereads the text
itself or corrects for it; a line that does not parse is also tokenised plainly so a deny rule
still meets what it can see.

Redirections are resolved against the directory in force when bash opens them: before the
command they belong to runs (``cd build > out`` writes ./out), and, in a function body, an
unknown one (the body runs when called, from wherever the shell is by then). A ``cd`` moves
the commands chained to it by ``&&`` for certain and any later one only perhaps (see
``shell.Recorder``); a subshell or substitution gives the directory back when it ends, and a
loop whose body changes directory leaves it unknown (a later pass starts where the last ended).

Every step is linear in the size of the line, so a hostile line cannot stall a decision:
substitutions and subshells nested more than ``MAX_NESTING`` deep are not walked (the line
asks; deny rules still meet a plain tokenizer's reading of what is inside), and a ``cd`` is
placed by climbing a parent map built once (``_links``), never more than ``MAX_CLIMB`` nodes.

Importing this module is cheap; tree-sitter itself is imported on the first parse.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from norma_cli.policy.shell import (
    APPEND_RE,
    MAX_NODES,
    READ_OPS,
    WRITE_OPS,
    Dirs,
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

T = TypeVar("T")

# Constructs that run in a child shell the walk gives the directory back after; a pipeline or
# a list sent to the background (``&``) also does, but the walk does not (a cd there may or
# may not move what follows, as far as the walk knows).
_RESTORED = frozenset({"subshell", "command_substitution", "process_substitution"})
_LOOPS = frozenset({"while_statement", "for_statement", "c_style_for_statement"})
_PLAIN_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONTINUATION = re.compile(rb"(?:\\\r?\n)+")
_PLAIN_WORD = re.compile(r"[^\\{}*?\[$'\"`~]+")
_SIMPLE_COMMAND = re.compile(r"[A-Za-z0-9_./:=@%+,\- \t]+")
_SKIP_IN_COMMAND = frozenset(
    {"variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect", "comment"}
)
# Substitutions and subshells nested deeper than this are not walked: every level's command is
# the whole text of the levels inside it, so the walk would cost the square of the depth. The
# line asks, and deny rules still meet the plain words inside (``_too_deep``).
MAX_NESTING = 64
_COMMAND_ENDS = str.maketrans("`\n", ";;")
# ``_certain`` climbs at most this many syntax nodes up from a ``cd`` (twice: to the shell it
# runs in, and up the ``&&`` lists it is part of); a cd buried deeper (in an and-or list of
# hundreds of commands, say) is taken as one that may not have happened.
MAX_CLIMB = 256


def parse_tree(command: str, depth: int) -> ShellScript:
    """Read a line that needs the real bash grammar (see ``shell.parse_script``)."""
    src = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(src)
    walker = TreeWalker(src, depth, command)
    if "\x00" in command:
        walker.problems.append("the command contains a NUL byte")
    if walker.line is None and not command.isascii():
        try:
            command.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no byte string bash could be given
            walker.problems.append("the command is not valid UTF-8 text")
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


# What the walk does with a node, by type (one dict lookup instead of a chain of compares).
_COMMAND, _ASSIGNMENT, _REDIRECT, _HEREDOC, _SUBSTITUTION = 1, 2, 3, 4, 5
_REDIRECTED, _LIST, _FUNCTION, _RESUME, _CHILD, _LOOP, _PIPELINE = 6, 7, 8, 9, 10, 11, 12
_VISIT = {
    "command": _COMMAND,
    "variable_assignment": _ASSIGNMENT,
    "file_redirect": _REDIRECT,
    "heredoc_redirect": _HEREDOC,
    "command_substitution": _SUBSTITUTION,
    "redirected_statement": _REDIRECTED,
    "list": _LIST,
    "function_definition": _FUNCTION,
    "norma:resume": _RESUME,
    "pipeline": _PIPELINE,
    "subshell": _CHILD,
    "process_substitution": _CHILD,
    **dict.fromkeys(_LOOPS, _LOOP),
}
# Reserved words tree-sitter-bash reads as command words after ``!`` or ``time`` (``_misread``).
_MISREAD = frozenset(
    {"{", "}", "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while"}
    | {"until", "do", "done", "in"}
)
_MISREAD_HEADS = _MISREAD | {"time"}
_REDIRECT_OPS = WRITE_OPS | READ_OPS | {"<&", "<>", ">&-", "<&-"}
_DUPLICATING = frozenset({">&", "<&"})


class _Resume:
    """A stack entry popped once a subtree has been walked: restores what it changed."""

    type = "norma:resume"

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action


class TreeWalker(Recorder):
    """One pre-order pass over the syntax tree, in the order bash would meet things.

    The walk is the hot part of a first evaluation of a new line, so it reads each node's
    type and byte range once, and slices the text of an ASCII line (nearly all of them)
    straight out of the command string rather than decoding bytes.
    """

    def __init__(self, src: bytes, depth: int, line: str | None = None) -> None:
        super().__init__(depth)
        self.src = src
        if line is None:
            line = src.decode("utf-8", "surrogatepass")
        # Byte offsets are character offsets exactly when every character is one byte.
        self.line: str | None = line if len(line) == len(src) else None
        # Bash opens a command's redirections before the command runs, so a ``cd`` in that
        # command (``cd build > out``, ``{ cd build; } > out``) does not move them; the walk
        # meets them after the command, so each one carries the directory in force before it
        # (a one-item list, filled when the walk reaches the command it belongs to).
        self.redirect_cd: dict[Any, list[Dirs | None]] = {}
        self.anchors: dict[Any, list[Dirs | None]] = {}
        self.stack: list[Any] = []  # the walk's stack (``_certain`` schedules on it)
        self.nesting = 0  # substitutions and subshells the walk is inside
        self.root: Node | None = None
        # Parent of every inner node, and the nodes a ``&`` follows (``_links``): tree-sitter
        # finds a node's parent or sibling by descending from the root, so climbing a deep
        # tree through it would cost the square of its depth.
        self.links: tuple[dict[Any, Any], set[Any]] | None = None

    def walk(self, root: Node) -> bool:
        """Visit the whole tree; False when it did not parse or was too large to finish."""
        if root.has_error:
            self.problems.append("the command does not parse as bash")
        stack: list[Any] = [root]  # syntax nodes, and _Resume entries
        self.stack = stack
        self.root = root
        pop = stack.pop
        visit = _VISIT.get
        line = self.line
        simple = _SIMPLE_COMMAND.fullmatch
        emit = self.emit
        anchors = self.anchors  # lists whose last command some redirections belong to
        seen = 0
        while stack:
            node = pop()
            what = visit(node.type)
            if what == _RESUME:  # not a syntax node
                node.action()
                continue
            seen += 1
            if seen > MAX_NODES:
                self.problems.append("the command is too large to check")
                return False
            if what is not None:
                if what == _COMMAND:
                    if line is not None:
                        # The common case, inline: plain words, no assignment (see _command).
                        text = line[node.start_byte : node.end_byte]
                        if "=" not in text and simple(text):
                            words = text.split()
                            if words and words[0] in _MISREAD_HEADS:
                                words = _without(words, self._misread(words))
                            if words:
                                emit(text.strip(), tuple(words), guessed=False, at=node)
                            continue
                    deeper = self._command(node)
                    if deeper:
                        deeper.reverse()
                        stack += deeper
                    continue
                if what == _ASSIGNMENT:
                    self._assignment(node)
                elif what == _REDIRECT:
                    self._redirect(node)
                elif what == _REDIRECTED:
                    self._redirected(node)
                elif what in (_LIST, _PIPELINE):
                    if anchors:
                        cell = anchors.pop(node, None)
                        if cell is not None:
                            self._anchored_list(node, cell, stack)
                            continue
                elif what == _FUNCTION:
                    stack.append(self._function(node))
                elif what == _CHILD:
                    if self.nesting >= MAX_NESTING:
                        self._too_deep(node)
                        continue
                    stack.append(self._child())
                elif what == _LOOP:
                    stack.append(self._loop())
                elif what == _HEREDOC:
                    rest = self._heredoc(node)
                    rest.reverse()
                    stack += rest
                    continue
                else:  # _SUBSTITUTION
                    if self.nesting >= MAX_NESTING:
                        self._too_deep(node)
                        continue
                    if self.src[node.start_byte : node.start_byte + 1] == b"`":
                        text = self._text(node)
                        if "\\" in text:
                            # Inside backticks ``\` \$ \\`` are unescaped before the text is
                            # parsed again, so tree-sitter's reading of it is not what bash runs.
                            self._nested(re.sub(r"\\([`$\\])", r"\1", text[1:-1]), text, True)
                            continue
                    stack.append(self._child())
            children = node.named_children
            if children:
                stack += children[::-1]  # a copy: never reorder a list tree-sitter may cache
        return not root.has_error

    # -- commands --------------------------------------------------------------------------

    def _command(self, node: Node) -> list[Node]:
        """Record the programs of one simple command; return the children still to walk."""
        text = self._slice(node.start_byte, node.end_byte)
        if _SIMPLE_COMMAND.fullmatch(text):
            words = text.split()  # plain words only: bash splits them on blanks, and that is all
            if "=" in text:
                leading = itertools.takewhile(lambda w: "=" in w, words) if "+=" in text else ()
                if any(APPEND_RE.match(w) for w in leading):
                    words = []  # ``a+=x cmd``: the full reading below
                else:
                    while words and ASSIGNMENT_RE.match(words[0]):
                        name, value = words.pop(0).split("=", 1)
                        self.assign(name, value)
                    if not words:
                        return []
            elif not words:
                return []
            if words and words[0] in _MISREAD_HEADS:
                words = _without(words, self._misread(words))
                if not words:
                    return []
            if words:
                self.emit(text.strip(), tuple(words), guessed=False, at=node)
                return []
        parts: list[Node] = []
        deeper: list[Node] = []
        kinds: list[str] = []
        before = [self.cd]
        for child in node.children:
            kind = child.type
            if kind in _SKIP_IN_COMMAND:
                deeper.append(child)
                if kind == "file_redirect":
                    self.redirect_cd[child] = before
                elif kind == "heredoc_redirect":
                    for r in _heredoc_file_redirects(child):
                        self.redirect_cd[r] = before
            else:
                parts.append(child)
                kinds.append(kind)
        if parts and self._text(parts[0]) in _MISREAD_HEADS:
            misread = self._misread([self._text(p) for p in parts])
            parts, kinds = _without(parts, misread), _without(kinds, misread)
        if not parts:
            return deeper
        # tree-sitter splits ``r\<newline>m`` into two words; bash joins them.
        src = self.src
        groups: list[list[int]] = [[0]]
        end = parts[0].end_byte
        for i in range(1, len(parts)):
            cur = parts[i]
            start = cur.start_byte
            if end == start or (
                src[end] == 0x5C and _CONTINUATION.fullmatch(src[end:start]) is not None
            ):
                groups[-1].append(i)
            elif b"\n" in src[end:start] and b"\n" in _CONTINUATION.sub(b"", src[end:start]):
                # tree-sitter-bash reads ``a | b | c <newline> d && e`` as having the command
                # ``c d``; bash ends a command at a newline, so each line is a command.
                self.problems.append("the parser joined two lines into one command")
                self._words(node, None, parts, kinds, groups, deeper)
                groups = [[i]]
            else:
                groups.append([i])
            end = cur.end_byte
        self._words(node, text if groups[0][0] == 0 else None, parts, kinds, groups, deeper)
        return deeper

    def _words(
        self,
        node: Node,
        text: str | None,
        parts: list[Node],
        kinds: list[str],
        groups: list[list[int]],
        deeper: list[Node],
    ) -> None:
        """Record the command whose words are ``groups`` of ``parts`` (``text``: as written)."""
        if text is None:
            text = self._slice(parts[groups[0][0]].start_byte, parts[groups[-1][-1]].end_byte)
        # Most words are plain (no quotes, escapes, braces, globs or $): take them as they are.
        segments: list[list[Segment] | str] = []
        strict: list[str] = []
        for group in groups:
            plain = self._plain_word(parts[group[0]], kinds[group[0]]) if len(group) == 1 else None
            if plain is not None:
                segments.append(plain)
                strict.append(plain)
            else:
                segs: list[Segment] = []
                for i in group:
                    segs += self._segments(parts[i])
                    deeper.append(parts[i])  # substitutions inside run too
                segments.append(segs)
                strict.extend(words_of(segs))
        text = text.strip()
        self.emit(text, tuple(strict), guessed=False, at=node)
        if UNKNOWN in strict:
            guess: list[str] = []
            for word in segments:
                if isinstance(word, str):
                    guess.append(word)
                else:
                    guess.extend(words_of(word, self.variables))
            if guess != strict:
                self.emit(text, tuple(guess), guessed=True, at=node)

    def _widen_from(self, prior: Dirs | None, mark: int) -> None:
        self.cd = self.since(prior, mark)

    def _misread(self, words: list[str]) -> slice:
        """The reserved words tree-sitter-bash took for command words (an empty slice: none).

        It reads ``! { cd x; }`` and ``time { ...; }`` (``! if``, ``! while``, ...) as the
        commands ``{ cd x`` and ``}``; bash never runs an unquoted reserved word. The line is
        not literal, and what follows the reserved words is still checked (deny rules, cd).
        ``words`` are as written (a quoted ``"{"`` is not a reserved word).
        """
        lead = 0
        if words[0] == "time":
            lead = 2 if len(words) > 1 and words[1] == "-p" else 1
        end = lead
        while end < len(words) and words[end] in _MISREAD:
            end += 1
        if end > lead:
            self.problems.append("a reserved word where a command should be (after ! or time?)")
        return slice(lead, end)

    def _plain_word(self, node: Node, kind: str) -> str | None:
        if kind == "command_name":
            if node.child_count != 1:
                return None
            node = node.children[0]
            kind = node.type
        if kind != "word":
            return None
        text = self._slice(node.start_byte, node.end_byte)
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
            kind = child.type
            if kind == "heredoc_start":
                start = self._text(child)
                quoted = "'" in start or '"' in start or "\\" in start
            elif kind == "heredoc_body":
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

    def _function(self, node: Node) -> _Resume:
        """A function body runs only when called, from wherever the shell is by then.

        Its commands are walked (they may run) with the directory unknown; after the
        definition the directory is as before, unless the body can change it.
        """
        saved, mark = self.cd, len(self.trail)
        self.cd = None

        def resume() -> None:
            if len(self.trail) == mark:
                self.cd = saved

        return _Resume(resume)

    def _child(self) -> _Resume:
        """A subshell or substitution: a cd inside it is undone when it ends."""
        saved, mark = self.cd, len(self.trail)
        self.nesting += 1

        def resume() -> None:
            self.cd = saved
            del self.trail[mark:]
            self.nesting -= 1

        return _Resume(resume)

    def _too_deep(self, node: Node) -> None:
        """A substitution or subshell past ``MAX_NESTING``: ask, and give deny rules the
        commands a plain tokenizer finds in it — double quotes dropped and backquotes and
        newlines read as command ends, so what bash runs inside them (or in a heredoc) is
        met too, and perhaps more (a deny-only reading may be wider than bash's).
        """
        self.problems.append(f"substitutions or subshells nested more than {MAX_NESTING} deep")
        text = self._text(node)
        plain = text.replace('"', " ").translate(_COMMAND_ENDS)
        found = _fallback_commands(plain, "nested too deeply to check")
        self.commands.extend(c._replace(text=text) for c in found)

    def _loop(self) -> _Resume:
        """A loop runs its body again from where the last pass left the shell."""
        commands, redirects, mark = len(self.commands), len(self.redirects), len(self.trail)

        def resume() -> None:
            if len(self.trail) != mark:
                self.lost_track(commands, redirects)

        return _Resume(resume)

    def _certain(self, at: Any) -> bool:
        """Does the cd command ``at`` surely run before the commands ``&&`` chains to it?

        If so, schedule ``widen`` for the end of that chain and say yes. Not when the cd is
        reached through ``||``, negated, or in a pipeline or background list this walk does
        not give the directory back after (see ``_RESTORED``).
        """
        parents, before_amp = self._links()
        parent_of = parents.get
        climbed = 0
        node = at
        while node is not None and node.type not in _RESTORED:
            if node.type == "pipeline" and not _before_pipeline(at, node):
                return False
            if node in before_amp:
                return False
            node = parent_of(node)
            climbed += 1
            if climbed > MAX_CLIMB:
                return False
        # Up through the lists whose last command the cd is: ``a && cd x`` succeeds only if
        # cd ran and succeeded; ``a || cd x`` also when cd never ran.
        climbed = 0
        node = at
        parent = parent_of(node)
        while parent is not None:
            kind = parent.type
            if kind == "redirected_statement" and _body(parent) == node:
                pass
            elif kind == "list" and _operands(parent)[2] == node:
                if _operands(parent)[1] != "&&":
                    return False
            else:
                break
            node, parent = parent, parent_of(parent)
            climbed += 1
            if climbed > MAX_CLIMB:
                return False
        # Then every ``&& right`` the cd's list is the left side of runs only after the cd.
        end: Node | None = None
        while parent is not None:
            kind = parent.type
            if kind == "redirected_statement" and _body(parent) == node:
                pass
            elif kind == "list":
                left, op, right = _operands(parent)
                if left != node or op != "&&" or right is None:
                    break
                end = right
            elif kind == "pipeline" and end is not None and _before_pipeline(at, parent):
                end = parent.named_children[-1]  # ``cd x && a 2>&1 | b``: b is chained too
            else:
                break
            node, parent = parent, parent_of(parent)
            climbed += 1
            if climbed > MAX_CLIMB:
                return False
        if end is None:
            return False
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] == end:
                # Popped once ``end`` has been walked: from there on, the directory before
                # this cd, or wherever it and the cds after it may have led.
                widen = functools.partial(self._widen_from, self.cd, len(self.trail))
                stack.insert(i, _Resume(widen))
                return True
        return False

    def _links(self) -> tuple[dict[Any, Any], set[Any]]:
        """Each inner node's parent, and the nodes a ``&`` follows: one pass over the tree,
        made when the first ``cd`` needs them.
        """
        if self.links is None:
            parents: dict[Any, Any] = {}
            before_amp: set[Any] = set()
            todo = [self.root] if self.root is not None else []
            while todo:
                node = todo.pop()
                prev = None
                for child in node.children:
                    if child.child_count:
                        parents[child] = node
                        todo.append(child)
                    elif prev is not None and child.type == "&":
                        before_amp.add(prev)
                    prev = child
            self.links = parents, before_amp
        return self.links

    # -- assignments and redirections ------------------------------------------------------

    def _redirected(self, node: Node) -> None:
        """Note the directory each redirection of ``node`` is opened in (see ``redirect_cd``).

        tree-sitter-bash reads ``a && b > f`` as a redirected *list*; bash redirects only the
        last command of it, so the directory is the one in force when that command starts.
        Likewise it reads ``a && b > f | c > g`` as ``(a && b > f) | c``, redirected to g:
        bash runs ``a`` first (a cd there moves g), then the pipeline ``b > f | c > g``.
        """
        redirects: list[Node] = []
        body: Node | None = None
        for child in node.named_children:
            kind = child.type
            if kind == "file_redirect":
                redirects.append(child)
            elif kind == "heredoc_redirect":
                redirects += _heredoc_file_redirects(child)
            elif body is None and kind != "herestring_redirect":
                body = child
        if not redirects:
            return
        cell: list[Dirs | None] = []
        if body is not None and (body.type == "list" or _misread_pipeline(body)):
            self.anchors[body] = cell  # filled by _anchored_list
        else:
            cell.append(self.cd)
        for r in redirects:
            self.redirect_cd[r] = cell

    def _anchored_list(self, node: Node, cell: list[Dirs | None], stack: list[Any]) -> None:
        """Walk a list so that ``cell`` gets the directory in force as its last command starts."""
        children: list[Any] = list(node.named_children)
        last = len(children) - 1
        while last >= 0 and children[last].type == "comment":
            last -= 1
        if last >= 0 and children[last].type == "list":
            self.anchors[children[last]] = cell
        elif last >= 0:

            def snapshot() -> None:
                cell.append(self.cd)

            children.insert(last, _Resume(snapshot))
        children.reverse()
        stack += children

    def _assignment(self, node: Node) -> None:
        children = node.children
        if not children:
            return
        name = self._text(children[0])
        value: str | None = ""
        if len(children) > 2:
            segs: list[Segment] = []
            for n in children[2:]:
                segs += self._segments(n)
            value = literal_value(segs)
            if value is None:
                value = guessed_value(segs, self.variables)
        self.assign(name, value, append=len(children) > 1 and children[1].type == "+=")

    def _redirect(self, node: Node) -> None:
        op = ""
        dest: Node | None = None
        dest_kind = ""
        for child in node.children:
            kind = child.type
            if kind in _REDIRECT_OPS:
                op = kind
            elif kind != "file_descriptor" and child.is_named:
                dest, dest_kind = child, kind
        if dest is None or not op:
            return
        text: str | None = None
        if dest_kind == "word":
            text = self._slice(dest.start_byte, dest.end_byte)
        if op in _DUPLICATING and (
            dest_kind == "number" or (text if text is not None else self._text(dest)) == "-"
        ):
            return  # duplicates a file descriptor, touches no file
        write = op in WRITE_OPS or op == "<>"
        if not write and op not in READ_OPS:
            return
        guesses: tuple[str, ...] = ()
        if text is not None and text != UNKNOWN and _PLAIN_WORD.fullmatch(text):
            target: str | None = text  # no quotes, escapes, braces, globs or $: as written
        else:
            segs = self._segments(dest)
            strict = words_of(segs)
            target = strict[0] if len(strict) == 1 and _plain(strict[0]) else None
            if target is None:
                guesses = tuple(w for w in words_of(segs, self.variables) if _plain(w))
        cell = self.redirect_cd.pop(node, None)
        self.redirects.append(
            Redirect(
                self._slice(node.start_byte, node.end_byte).strip(),
                op,
                target,
                guesses,
                cell[0] if cell else self.cd,
                write,
            )
        )

    # -- words ------------------------------------------------------------------------------

    def _segments(self, node: Node, quoted: bool = False) -> list[Segment]:
        kind = node.type
        if kind == "string":
            return self._double_quoted(node)
        if kind == "concatenation" or kind == "command_name":
            out: list[Segment] = []
            for child in node.children:
                out += self._segments(child, quoted)
            return out
        if kind == "process_substitution":
            # Its value is always a /dev/fd path; the commands inside are found by the walk.
            return [("lit", "/dev/fd/63", True)]
        text = self._slice(node.start_byte, node.end_byte)
        if kind == "word":
            if "\\" not in text:  # no escapes: the word is its text (what unquoted_word gives)
                return [("lit", text, False)] if text else []
            return unquoted_word(text)
        if kind == "number" or kind == "brace_expression":
            return [("lit", text, quoted)]
        if kind == "raw_string":
            return [("lit", text[1:-1], True)]
        if kind == "ansi_c_string":
            return [("lit", ansi_c_text(text[2:-1]), True)]
        if kind == "simple_expansion":
            return [("var", text[1:], quoted)]
        if kind == "expansion" and (m := _PLAIN_EXPANSION.fullmatch(text)):
            return [("var", m.group(1), quoted)]
        return [("unknown", text, quoted)]

    def _double_quoted(self, node: Node) -> list[Segment]:
        segs: list[Segment] = []
        pending: list[str] = []
        pos = node.start_byte + 1
        end = node.end_byte - 1
        for child in node.children:
            kind = child.type
            if kind == '"':
                continue
            start = child.start_byte
            if start > pos:
                pending.append(self._slice(pos, start))
            if kind == "string_content":
                pending.append(self._slice(start, child.end_byte))
            else:
                if pending:
                    segs.append(("lit", double_quoted_text("".join(pending)), True))
                    pending.clear()
                segs += self._segments(child, quoted=True)
            pos = max(pos, child.end_byte)
        if end > pos:
            pending.append(self._slice(pos, end))
        if pending:
            segs.append(("lit", double_quoted_text("".join(pending)), True))
        return segs or [("lit", "", True)]

    def _text(self, node: Node) -> str:
        return self._slice(node.start_byte, node.end_byte)

    def _slice(self, start: int, end: int) -> str:
        if self.line is not None:
            return self.line[start:end]
        try:
            return self.src[start:end].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # tree-sitter cut a lone surrogate's bytes (see parse_tree)
            return self.src[start:end].decode("utf-8", "replace")


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


def _fallback_commands(
    command: str, reason: str = "the command does not parse as bash"
) -> list[SubCommand]:
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
                        reason,
                        prog.open_ended,
                        True,
                    )
                )
            current = []
            continue
        expanded = brace_expand(token.replace("\\", "\\\\")) or [token.replace("\\", "\\\\")]
        current.extend(w.replace("\\\\", "\\") for w in expanded)
    return out


def _heredoc_file_redirects(node: Node) -> list[Node]:
    """tree-sitter-bash hangs ``> f`` of ``cmd <<EOF > f`` under the heredoc redirection."""
    return [c for c in node.named_children if c.type == "file_redirect"]


def _plain(word: str) -> bool:
    return word != UNKNOWN and not isinstance(word, GlobWord)


def _body(node: Node) -> Node | None:
    """What a redirected statement redirects."""
    for child in node.named_children:
        if child.type not in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            return child
    return None


def _without(items: list[T], misread: slice) -> list[T]:
    """``items`` less the ``misread`` ones; nothing when nothing else is left but ``time``."""
    if misread.start == misread.stop:
        return items
    rest = items[misread.stop :]
    return items[: misread.start] + rest if rest else []


def _misread_pipeline(node: Node) -> bool:
    """A pipeline tree-sitter-bash built from an and-or list (``a && b > f | c``, nested)."""
    if node.type != "pipeline":
        return False
    for child in node.named_children:
        body = _body(child) if child.type == "redirected_statement" else child
        if body is not None and (body.type == "list" or _misread_pipeline(body)):
            return True
    return False


def _before_pipeline(cd: Node, pipeline: Node) -> bool:
    """Does ``cd`` run before ``pipeline`` starts, not in it (it is there by misreading)?

    tree-sitter-bash reads ``cd x && a 2>&1 | b`` as the pipeline ``(cd x && a 2>&1) | b``;
    bash runs ``cd x``, then the pipeline ``a 2>&1 | b``: what precedes the last side of an
    and-or list at the head of a pipeline is not in the pipeline.
    """
    first = pipeline.named_children[0]
    head = _body(first) if first.type == "redirected_statement" else first
    if head is None or head.type != "list":
        return False
    last = _operands(head)[2]
    return last is not None and head.start_byte <= cd.start_byte and cd.end_byte <= last.start_byte


def _operands(node: Node) -> tuple[Node | None, str, Node | None]:
    """A ``list`` node's left side, operator (``&&`` or ``||``) and right side."""
    left: Node | None = None
    right: Node | None = None
    op = ""
    for child in node.children:
        kind = child.type
        if kind == "&&" or kind == "||":
            op = kind
        elif child.is_named and kind != "comment":
            if op:
                right = child
            elif left is None:
                left = child
    return left, op, right
