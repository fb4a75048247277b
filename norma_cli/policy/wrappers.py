"""Which programs a simple command really runs, once wrappers are seen through.

``timeout -s KILL 5 nice -n 5 rm -rf x`` runs ``rm``; ``bash -c 'rm x'``, ``eval``, ``trap``
and ``watch`` run shell source; ``xargs rm`` and ``find -exec rm {} +`` run ``rm`` with words
appended at run time. ``unwrap`` turns the argv words of one simple command into:

* ``Program`` objects, each with a *canonical* reading (what allow rules are matched against)
  and every *reading* deny and ask rules are tried against (the canonical one, the one with
  the wrapper still in front, ...);
* shell *scripts* (strings) the caller parses again, recursively;
* *problems*: environment assignments that change which code runs (``env PATH=...``).

Privilege wrappers (``sudo``, ``doas``, ``su``) are seen through for deny and ask, but an allow
rule must name them: ``Bash(rm:*)`` does not allow ``sudo rm``.
When a wrapper's options cannot be read (an unknown flag, a non-literal word), every later
word is tried as the start of the inner command — a deny must win over what we cannot read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any, NamedTuple

from norma_cli.core.record import field, record
from norma_cli.policy.shellwords import UNKNOWN

Words = tuple[str, ...]

ASSIGNMENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Variables whose value decides which code a later program runs; assigning one is never seen
# through by an allow rule.
CODE_VARIABLES = re.compile(
    r"^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|CDPATH|GLOBIGNORE|HOME|"
    r"ZDOTDIR|XDG_CONFIG_HOME|LD_\w+|DYLD_\w+|PYTHON(PATH|HOME|STARTUP)|NODE_(OPTIONS|PATH)|"
    r"PERL5(OPT|LIB)|RUBY(OPT|LIB)|GIT_(SSH|SSH_COMMAND|EXTERNAL_DIFF|EDITOR|PAGER|ASKPASS|"
    r"EXEC_PATH|CONFIG\w*|PROXY_COMMAND|TEMPLATE_DIR|DIR|WORK_TREE)|EDITOR|VISUAL|PAGER|"
    r"MANPAGER|SYSTEMD_PAGER|LESSOPEN|LESSCLOSE|BROWSER|SSH_ASKPASS|SUDO_ASKPASS)$"
)
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
_SHELL_ARG_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


@record(frozen=True)
class WrapperSpec:
    """How a wrapper spells its options before the wrapped command."""

    with_value: frozenset[str] = frozenset()  # options that take the next word (or =value)
    flags: frozenset[str] = frozenset()  # options that take nothing
    optional_value: frozenset[str] = frozenset()  # ``-ifoo`` or bare ``-i`` (xargs)
    no_command: frozenset[str] = frozenset()  # options meaning "run nothing" (command -v)
    positional: int = 0  # words before the command (timeout DURATION)
    numeric_flags: bool = False  # ``nice -10``
    assignments: bool = False  # NAME=value words before the command (env, sudo)
    privileged: bool = False  # an allow rule must name the wrapper itself
    open_ended: bool = False  # appends words at run time (xargs)
    default: Words = ()  # command run when none is given (xargs → echo)


def _spec(
    with_value: str = "", flags: str = "", optional: str = "", no_command: str = "", **kw: Any
) -> WrapperSpec:
    """A ``WrapperSpec`` from space-separated option lists (easier to read in bulk)."""
    return WrapperSpec(
        frozenset(with_value.split()),
        frozenset(flags.split()),
        frozenset(optional.split()),
        frozenset(no_command.split()),
        **kw,
    )


WRAPPERS: dict[str, WrapperSpec] = {
    "env": _spec(
        "-u --unset -C --chdir -S --split-string",
        "-i --ignore-environment - -0 --null "
        "-v --debug --default-signal --ignore-signal --block-signal",
        assignments=True,
    ),
    "timeout": _spec(
        "-s --signal -k --kill-after", "--preserve-status --foreground -v --verbose", positional=1
    ),
    "nice": _spec("-n --adjustment", numeric_flags=True),
    "nohup": _spec(),
    "command": _spec("", "-p", no_command="-v -V"),
    "builtin": _spec(),
    "exec": _spec("-a", "-c -l"),
    "coproc": _spec(),
    "busybox": _spec(),
    "stdbuf": _spec("-i -o -e --input --output --error"),
    "time": _spec(
        "-f --format -o --output", "-p -a --append -v --verbose --portability -q --quiet"
    ),
    "setsid": _spec("", "-c --ctty -f --fork -w --wait"),
    "ionice": _spec(
        "-c --class -n --classdata",
        "-t --ignore",
        no_command="-p --pid -P --pgid -u --uid",
    ),
    "sudo": _spec(
        "-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt -R --chroot "
        "-r --role -t --type -T --command-timeout -U --other-user",
        "-A --askpass -b --background -E --preserve-env -H --set-home -i --login -n "
        "--non-interactive -P --preserve-groups -S --stdin -s --shell -k --reset-timestamp "
        "-B --bell -N --no-update",
        no_command="-e --edit -l --list -v --validate -V --version -K --remove-timestamp --help",
        assignments=True,
        privileged=True,
    ),
    "doas": _spec("-u -C", "-n -s -L", privileged=True),
    "xargs": _spec(
        "-a --arg-file -d --delimiter -E -I -L -n --max-args -P --max-procs -s --max-chars "
        "--process-slot-var",
        "-0 --null -r --no-run-if-empty -t --verbose -p --interactive -x --exit -o --open-tty",
        optional="-e -i -l --eof --replace --max-lines",
        open_ended=True,
        default=("echo",),
    ),
}


# Every program ``unwrap`` treats specially; any other command name is just itself.
SPECIAL_PROGRAMS = frozenset(WRAPPERS) | SHELLS | {"eval", "trap", "watch", "su", "find"}


class Program(NamedTuple):
    """One program a command line runs (a NamedTuple: built for every command, so cheap)."""

    words: Words  # canonical reading: what allow rules see
    readings: tuple[Words, ...]  # every reading deny/ask rules are tried against
    open_ended: bool = False  # words are appended at run time
    opaque: str | None = None  # why no allow rule may vouch for this reading
    deny_only: bool = False  # the inner command of a privilege wrapper


@record
class Unwrapped:
    programs: list[Program] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)  # shell source that runs as well
    problems: list[str] = field(default_factory=list)


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word else word


def unwrap(words: Sequence[str], depth: int = 0) -> Unwrapped:
    """Reduce the argv of one simple command to the programs and scripts it runs."""
    words = tuple(words)
    if not words:
        return Unwrapped()
    if depth > 16:
        return Unwrapped([_opaque(words, "wrappers nested too deeply")])
    head = words[0]
    if head == UNKNOWN:
        return Unwrapped([_opaque(words, "the command name is not literal")])
    name = basename(head)
    if name in WRAPPERS:
        return _wrapper(words, WRAPPERS[name], depth)
    if name in SHELLS:
        return _shell(words)
    if name == "eval":
        return Unwrapped(scripts=[" ".join(_script_text(w) for w in words[1:])])
    if name == "trap" and len(words) > 2 and not words[1].startswith("-"):
        return Unwrapped(scripts=[_script_text(words[1])])
    if name == "watch":
        return _watch(words, depth)
    if name == "su":
        return _su(words)
    if name == "find":
        return _find(words, depth)
    return Unwrapped([Program(words, (words,))])


def _opaque(words: Words, reason: str, start: int = 1) -> Program:
    """A program we cannot see through: try every later word as the inner command."""
    readings = [words] + [words[i:] for i in range(start, len(words)) if words[i] != UNKNOWN]
    return Program(words, tuple(readings), opaque=reason)


def _script_text(word: str) -> str:
    # An unknown piece of a re-entered script parses as an expansion: never literal, but the
    # literal remainder is still checked against deny rules.
    return word.replace(UNKNOWN, "${__norma_unknown__}")


def _wrapper(words: Words, spec: WrapperSpec, depth: int) -> Unwrapped:
    start, stop = _skip_options(words, spec)
    if start is None:
        return Unwrapped([_opaque(words, f"cannot read the options of {basename(words[0])}")])
    if stop:
        return Unwrapped([Program(words, (words,))])
    problems: list[str] = []
    if spec.assignments:
        while start < len(words) and ASSIGNMENT_RE.match(words[start]):
            var = words[start].split("=", 1)[0]
            if CODE_VARIABLES.match(var):
                problems.append(f"{basename(words[0])} sets {var}, which changes what runs")
            start += 1
    start += spec.positional
    inner = words[start:]
    if start > len(words) or (
        spec.positional and UNKNOWN in words[start - spec.positional : start]
    ):
        return Unwrapped([_opaque(words, f"cannot find the command run by {basename(words[0])}")])
    split = _split_string_option(words, start)
    if split is not None:
        inner = split + inner
    if not inner:
        if not spec.default:
            return Unwrapped([Program(words, (words,))], problems=problems)
        inner = spec.default
    sub = unwrap(inner, depth + 1)
    sub.problems.extend(problems)
    programs = []
    for i, prog in enumerate(sub.programs):
        readings = prog.readings + ((words,) if i == 0 else ())
        open_ended = prog.open_ended or spec.open_ended
        if spec.privileged:
            programs.append(Program(prog.words, readings, open_ended, prog.opaque, deny_only=True))
        else:
            programs.append(Program(prog.words, readings, open_ended, prog.opaque, prog.deny_only))
    if spec.privileged:
        programs.insert(0, Program(words, (words,), spec.open_ended))
    sub.programs = programs
    return sub


def _skip_options(words: Words, spec: WrapperSpec) -> tuple[int | None, bool]:
    """Index of the first word after the wrapper's options, and whether it runs nothing."""
    i, n = 1, len(words)
    while i < n:
        w = words[i]
        if w == UNKNOWN:
            return None, False
        if w == "--":
            return i + 1, False
        if not w.startswith("-") or (w == "-" and "-" not in spec.flags):
            return i, False
        if w in spec.no_command:
            return i, True
        if w.startswith("--"):
            name, eq, _ = w.partition("=")
            if name in spec.no_command:
                return i, True
            if name in spec.with_value:
                i += 1 if eq else 2
            elif name in spec.flags or name in spec.optional_value:
                i += 1
            else:
                return None, False
            continue
        if spec.numeric_flags and w[1:].isdigit():
            i += 1
            continue
        step = _short_cluster(w, spec)
        if step is None:
            return None, False
        if step < 0:
            return i, True
        i += step
    return i, False


def _short_cluster(w: str, spec: WrapperSpec) -> int | None:
    """Words consumed by ``-abc`` / ``-sKILL``; -1 for a no-command flag, None if unknown."""
    if w in spec.flags or w in spec.optional_value:
        return 1
    for j in range(1, len(w)):
        opt = "-" + w[j]
        if opt in spec.no_command:
            return -1
        if opt in spec.with_value:
            return 1 if j + 1 < len(w) else 2
        if opt in spec.optional_value:
            return 1
        if opt not in spec.flags:
            return None
    return 1


def _split_string_option(words: Words, start: int) -> Words | None:
    """``env -S 'rm -rf x'`` splits its argument into words (no shell involved)."""
    if basename(words[0]) != "env":
        return None
    for i in range(1, start):
        w = words[i]
        value = None
        if w in ("-S", "--split-string") and i + 1 < start:
            value = words[i + 1]
        elif w.startswith("--split-string="):
            value = w.split("=", 1)[1]
        elif w.startswith("-S") and len(w) > 2:
            value = w[2:]
        if value is not None:
            try:
                return tuple(shlex.split(value))
            except ValueError:
                return (UNKNOWN,)
    return None


def _shell(words: Words) -> Unwrapped:
    """``bash -c SCRIPT``: the script runs; ``bash FILE`` is an ordinary program."""
    i, n, command_mode = 1, len(words), False
    while i < n:
        w = words[i]
        if w == UNKNOWN:
            return Unwrapped([_opaque(words, "cannot read the shell's options")])
        if w == "--":
            i += 1
            break
        if w in _SHELL_ARG_OPTIONS:
            i += 2
            continue
        if w.startswith("--"):
            i += 1
            continue
        if w[:1] in "-+" and len(w) > 1:
            command_mode = command_mode or (w[0] == "-" and "c" in w[1:])
            i += 1
            continue
        break
    if command_mode and i < n:
        return Unwrapped(scripts=[_script_text(words[i])])
    if command_mode:
        return Unwrapped([Program(words, (words,), opaque="shell -c without a command string")])
    if i >= n or any(w[:1] == "-" and "s" in w[1:] and not w.startswith("--") for w in words[1:i]):
        # ``curl ... | sh``, ``sh <<EOF``: the commands come from input nobody has checked.
        return Unwrapped(
            [Program(words, (words,), opaque="the shell reads its commands from input")]
        )
    return Unwrapped([Program(words, (words,))])


def _watch(words: Words, depth: int) -> Unwrapped:
    spec = _spec(
        "-n --interval -d --differences -q --equexit",
        "-t --no-title -b --beep -e "
        "--errexit -g --chgexit -c --color -C --no-color -p --precise -w --no-wrap -x --exec",
    )
    start, _ = _skip_options(words, spec)
    if start is None:
        return Unwrapped([_opaque(words, "cannot read the options of watch")])
    rest = words[start:]
    if not rest:
        return Unwrapped([Program(words, (words,))])
    if any(w in ("-x", "--exec") for w in words[1:start]):
        return unwrap(rest, depth + 1)
    return Unwrapped(scripts=[" ".join(_script_text(w) for w in rest)])


def _su(words: Words) -> Unwrapped:
    out = Unwrapped([Program(words, (words,))])
    for i, w in enumerate(words[1:], 1):
        if w in ("-c", "--command") and i + 1 < len(words):
            out.scripts.append(_script_text(words[i + 1]))
        elif w.startswith("--command="):
            out.scripts.append(_script_text(w.split("=", 1)[1]))
    return out


def _find(words: Words, depth: int) -> Unwrapped:
    """``find`` is a program of its own; each ``-exec ... ;`` / ``+`` runs another one."""
    out = Unwrapped([Program(words, (words,))])
    i, n = 1, len(words)
    while i < n:
        if words[i] in _FIND_EXEC:
            j = i + 1
            while j < n and words[j] not in (";", "+"):
                j += 1
            sub = unwrap(words[i + 1 : j], depth + 1)
            out.programs.extend(
                Program(p.words, p.readings, True, p.opaque, p.deny_only) for p in sub.programs
            )
            out.scripts.extend(sub.scripts)
            out.problems.extend(sub.problems)
            i = j
        i += 1
    return out
