"""Argument-aware matching of rule specifiers (SPEC §4).

A rule ``Name(specifier)`` looks at a call's arguments. The specifier's meaning depends on
the tool it names:

* ``Bash(git log:*)`` — the command's words start with ``git log`` (word boundary: not
  ``git logx``); ``Bash(npm test)`` — exactly those words. A trailing `` *`` means ``:*``.
  Matched against every sub-command of the parsed line (``norma_cli.policy.shell``).
* ``Read(./secrets/**)``, ``Edit(//etc/**)``, ... — path globs (``norma_cli.policy.paths``).
  Read rules govern every file-reading tool (Read, Grep, Glob, LS) and shell input
  redirections; Edit rules govern every file-writing tool (Edit, Write, MultiEdit) and shell
  output redirections; Write rules govern Write and shell output redirections.
* ``WebFetch(domain:example.com)`` — the URL's host (``norma_cli.policy.domains``).
* ``Any(param:glob)`` — a named input parameter. fnmatch-style (``*`` crosses ``/``), except
  that a glob starting with ``/``, ``~`` or ``./`` is a path glob (``/`` = absolute here)
  checked against every spelling of the value. A list value matches a deny rule when any
  item does and an allow rule when every item does. Never used to *allow* a Bash command:
  raw command text says nothing about what the line runs.

Deny and ask rules match when *any* reading of the call matches; allow rules only when
*every* part of the call is covered. A shell line that is not fully literal (expansions,
parse errors, unknown wrapper options, ...) is never allowed by a rule: the ask stage reports
it with the synthetic rule ``<unparseable shell>`` from the ``shell parser``.
Redirection targets of an allowed line must be covered by an Edit or Write allow rule, or —
in ``acceptEdits`` mode — lie inside the working roots (the same bar as the Write tool);
``/dev/null`` and friends are not files.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from norma_cli.core.record import record
from norma_cli.errors import ConfigError
from norma_cli.policy.domains import DomainPattern, url_hosts
from norma_cli.policy.paths import PathPattern, spellings
from norma_cli.policy.rules import Rule, RuleMatch
from norma_cli.policy.shellwords import GlobWord, glob_regex

if TYPE_CHECKING:
    from norma_cli.core.contract import Behavior, CallContext, Tool
    from norma_cli.policy.shell import Redirect, ShellScript

SHELL_TOOL = "Bash"
READ_FAMILY = frozenset({"Read", "Grep", "Glob", "LS"})
EDIT_FAMILY = frozenset({"Edit", "Write", "MultiEdit"})
FILE_TOOLS = READ_FAMILY | EDIT_FAMILY
UNPARSEABLE = Rule("<unparseable shell>", "ask", "shell parser", SHELL_TOOL)
_PARAM_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(.*)$", re.S)


@record(frozen=True)
class CommandSpec:
    words: tuple[str, ...]
    prefix: bool

    @classmethod
    def parse(cls, text: str) -> CommandSpec:
        t = text.strip()
        prefix = t == "*" or t.endswith((":*", " *"))
        if prefix:
            t = t[:-1].rstrip(":").rstrip() if t != "*" else ""
        try:
            words = tuple(shlex.split(t))
        except ValueError as e:
            raise ValueError(f"cannot split the command ({e})") from None
        if not words and not prefix:
            raise ValueError("empty command")
        if any(w == "*" or ":*" in w for w in words):
            raise ValueError("a wildcard is only allowed at the end, as ':*'")
        return cls(words, prefix)

    def matches(self, words: tuple[str, ...], *, broad: bool, open_ended: bool) -> bool:
        """Word-wise comparison; ``broad`` (deny/ask) lets a glob word stand for its matches."""
        n = len(self.words)
        if len(words) < n:
            return False
        if words[:n] != self.words:
            if not broad:
                return False
            for want, got in zip(self.words, words, strict=False):
                if want != got and not (
                    isinstance(got, GlobWord) and glob_regex(got).fullmatch(want)
                ):
                    return False
        return self.prefix or (len(words) == n and not open_ended)


@record(frozen=True)
class PathSpec:
    pattern: PathPattern


@record(frozen=True)
class DomainSpec:
    pattern: DomainPattern


@record(frozen=True)
class ParamSpec:
    param: str
    glob: str
    regex: re.Pattern[str]
    path: PathPattern | None  # a path-like glob, matched against normalised spellings

    @classmethod
    def parse(cls, param: str, glob: str) -> ParamSpec:
        path = None
        if glob.startswith(("/", "~", "./")):
            path = PathPattern.parse("/" + glob if glob.startswith("/") else glob)
        return cls(param, glob, re.compile(fnmatch.translate(glob), re.S), path)

    def matches(self, tool_input: dict[str, Any], ctx: CallContext, *, every: bool) -> bool:
        value = tool_input.get(self.param)
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, str | int | float | bool) for v in items):
            return False
        results = []
        for v in items:
            text = v if isinstance(v, str) else json.dumps(v)
            if self.path is not None:
                results += [self.path.matches(p, ctx) for p in spellings(text, str(ctx.cwd))]
            else:
                results.append(self.regex.fullmatch(text) is not None)
        return all(results) if every else any(results)


Spec = Union[CommandSpec, PathSpec, DomainSpec, ParamSpec]  # noqa: UP007 (runtime alias)


def check_syntax(rule: Rule) -> None:
    """Compile the specifier of ``rule`` (kept on the rule); raise ConfigError when invalid."""
    try:
        rule.compiled = _compile(rule)
    except ValueError as e:
        raise ConfigError(f"{rule.source}: rule {rule.text!r}: {e}") from None


def spec_of(rule: Rule) -> Spec | None:
    if rule.specifier is None:
        return None
    if rule.compiled is None:
        check_syntax(rule)
    return rule.compiled


def _compile(rule: Rule) -> Spec:
    text = rule.specifier or ""
    named = not any(c in rule.name for c in "*?")
    if named and rule.name == SHELL_TOOL:
        return CommandSpec.parse(text)
    if named and rule.name == "WebFetch" and text.strip().startswith("domain:"):
        return DomainSpec(DomainPattern.parse(text.strip()[len("domain:") :]))
    m = _PARAM_RE.match(text.strip())
    if m:
        return ParamSpec.parse(m.group(1), m.group(2))
    if named and rule.name in FILE_TOOLS:
        return PathSpec(PathPattern.parse(text))
    raise ValueError("expected param:glob here (for example repo_path:/srv/**)")


def governs(rule: Rule, tool_name: str) -> bool:
    """Does ``rule`` bear on calls of ``tool_name`` (by name, or as a Read/Edit/Write family rule)?"""
    if rule.matches_name(tool_name):
        return True
    if not isinstance(spec_of(rule), PathSpec | None):
        return False
    if rule.name == "Read":
        return tool_name in READ_FAMILY or tool_name == SHELL_TOOL
    if rule.name == "Edit":
        return tool_name in EDIT_FAMILY or tool_name == SHELL_TOOL
    return rule.name == "Write" and tool_name == SHELL_TOOL


def find_match(
    behavior: Behavior,
    candidates: list[Rule],
    tool: Tool,
    tool_input: dict[str, Any],
    ctx: CallContext,
) -> RuleMatch | None:
    """Does one of ``candidates`` (rules of ``behavior``) cover this call?"""
    return RuleGroup(behavior, tool.name, candidates).find(tool, tool_input, ctx)


def _entry(text: str, decision: str | None, rule: Rule | None) -> dict[str, Any]:
    return {
        "command": text,
        "decision": decision,
        "rule": rule.text if rule else None,
        "source": rule.source if rule else None,
    }


class RuleGroup:
    """The rules of one behavior that bear on one tool, sorted by how they match.

    Built once per (behavior, tool name) by ``RuleSet`` and reused for every call.
    ``ask_when_not_literal`` turns on the synthetic ``<unparseable shell>`` ask (ask groups).
    """

    def __init__(
        self,
        behavior: Behavior,
        tool_name: str,
        rules: list[Rule],
        *,
        ask_when_not_literal: bool | None = None,
    ) -> None:
        self.behavior = behavior
        self.shell = tool_name == SHELL_TOOL
        self.ask_when_not_literal = (
            behavior == "ask" if ask_when_not_literal is None else ask_when_not_literal
        )
        self.name_only: list[Rule] = []
        self.params: list[tuple[Rule, ParamSpec]] = []
        self.domains: list[tuple[Rule, DomainSpec]] = []
        self.paths: list[tuple[Rule, PathSpec]] = []
        self.writes: list[tuple[Rule, PathSpec | None]] = []  # shell: output redirections
        self.reads: list[tuple[Rule, PathSpec | None]] = []  # shell: input redirections
        self.by_head: dict[str, list[tuple[int, Rule, CommandSpec]]] = {}
        self.any_head: list[tuple[int, Rule, CommandSpec]] = []
        self.commands: list[tuple[int, Rule, CommandSpec]] = []
        for rule in rules:
            self._add(rule, tool_name)

    def _add(self, rule: Rule, tool_name: str) -> None:
        spec = spec_of(rule)
        by_name = rule.matches_name(tool_name)
        if self.shell and not by_name:
            if isinstance(spec, PathSpec | None):
                if rule.name in ("Edit", "Write"):
                    self.writes.append((rule, spec))
                elif rule.name == "Read":
                    self.reads.append((rule, spec))
            return
        if not by_name and spec is not None and not isinstance(spec, PathSpec):
            return
        if spec is None:
            self.name_only.append(rule)
        elif isinstance(spec, CommandSpec):
            entry = (len(self.commands), rule, spec)
            self.commands.append(entry)
            if spec.words:
                self.by_head.setdefault(spec.words[0], []).append(entry)
            else:
                self.any_head.append(entry)
        elif isinstance(spec, PathSpec):
            self.paths.append((rule, spec))
        elif isinstance(spec, DomainSpec):
            self.domains.append((rule, spec))
        else:
            self.params.append((rule, spec))

    def find(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> RuleMatch | None:
        if self.name_only:
            return RuleMatch(self.name_only[0])
        if self.shell:
            return self._shell(tool_input, ctx)
        if self.behavior == "allow":
            return self._allow(tool, tool_input, ctx)
        return self._restrict(tool, tool_input, ctx)

    # -- ordinary tools ---------------------------------------------------------------------

    def _restrict(
        self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext
    ) -> RuleMatch | None:
        for rule, param in self.params:
            if param.matches(tool_input, ctx, every=False):
                return RuleMatch(rule)
        if self.domains:
            hosts, _ = url_hosts(str(tool_input.get("url", "")))
            for rule, dom in self.domains:
                if any(dom.pattern.matches(h) for h in hosts):
                    return RuleMatch(rule)
        if self.paths:
            touched = [
                p for raw in tool.file_paths(tool_input, ctx) for p in spellings(raw, str(ctx.cwd))
            ]
            for rule, path in self.paths:
                if any(path.pattern.matches(p, ctx) for p in touched):
                    return RuleMatch(rule)
        return None

    def _allow(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> RuleMatch | None:
        for rule, param in self.params:
            if param.matches(tool_input, ctx, every=True):
                return RuleMatch(rule)
        if self.domains:
            hosts, clear = url_hosts(str(tool_input.get("url", "")))
            for rule, dom in self.domains:
                if clear and dom.pattern.matches(hosts[0]):
                    return RuleMatch(rule)
        if self.paths:
            raws = tool.file_paths(tool_input, ctx)
            touched = [p for raw in raws for p in spellings(raw, str(ctx.cwd))]
            covering = self._cover(touched, self.paths, ctx) if raws else None
            if covering is not None:
                return RuleMatch(covering)
        return None

    @staticmethod
    def _cover(
        paths: list[str], rules: list[tuple[Rule, PathSpec]], ctx: CallContext
    ) -> Rule | None:
        """The first rule used, when every path is covered by some rule; else None."""
        first: tuple[int, Rule] | None = None
        for p in paths:
            hit = next(
                ((i, r) for i, (r, s) in enumerate(rules) if s.pattern.matches(p, ctx)), None
            )
            if hit is None:
                return None
            first = hit if first is None or hit[0] < first[0] else first
        return first[1] if first else None

    # -- the shell --------------------------------------------------------------------------

    def _shell(self, tool_input: dict[str, Any], ctx: CallContext) -> RuleMatch | None:
        command = tool_input.get("command")
        restricting = self.behavior != "allow"
        if not (
            self.commands
            or self.writes
            or self.reads
            or self.params
            or (restricting and self.ask_when_not_literal)
        ):
            return None
        if not isinstance(command, str):
            if restricting and self.ask_when_not_literal:
                return RuleMatch(
                    UNPARSEABLE, reason="the shell command is not a string", stage="shell"
                )
            return None
        from norma_cli.policy.shell import parse_script

        script = parse_script(command)
        if restricting:
            return self._shell_restrict(script, tool_input, ctx)
        return self._shell_allow(script, ctx)

    def _shell_restrict(
        self, script: ShellScript, tool_input: dict[str, Any], ctx: CallContext
    ) -> RuleMatch | None:
        entries: list[dict[str, Any]] = []
        first: Rule | None = None
        for rule, param in self.params:
            if param.matches(tool_input, ctx, every=False):
                first = first or rule
        hits: dict[str, Rule | None] = {}  # by text: ``sudo rm x`` is two readings, one line
        for sub in script.commands:
            hit = self._command_rule(sub.readings, broad=True, open_ended=sub.open_ended)
            if hit is not None or not sub.deny_only:
                hits[sub.text] = hits.get(sub.text) or hit
                first = first or hit
        if first is not None:
            entries = [_entry(text, self.behavior if h else None, h) for text, h in hits.items()]
        for red in script.redirects:
            rules = self.writes if red.write else self.reads
            if not rules or red.harmless:
                continue
            hit = self._redirect_hit(red, rules, ctx)
            if hit is not None:
                entries.append(_entry(red.text, self.behavior, hit))
                first = first or hit
        if first is not None:
            return RuleMatch(first, entries)
        if self.behavior == "ask" and self.ask_when_not_literal and not script.literal:
            reasons = script.reasons()
            flagged = [
                _entry(c.text, None if c.literal else "ask", None if c.literal else UNPARSEABLE)
                for c in script.commands
                if not c.deny_only
            ]
            return RuleMatch(
                UNPARSEABLE,
                flagged,
                reason="shell command is not fully literal: " + "; ".join(reasons[:3]),
                stage="shell",
            )
        return None

    def _shell_allow(self, script: ShellScript, ctx: CallContext) -> RuleMatch | None:
        if not script.literal:
            return None
        entries: list[dict[str, Any]] = []
        first: Rule | None = None
        for sub in script.commands:
            if sub.deny_only:
                continue
            hit = self._command_rule((sub.words,), broad=False, open_ended=sub.open_ended)
            if hit is None:
                return None
            entries.append(_entry(sub.text, "allow", hit))
            first = first or hit
        for red in script.redirects:
            if not red.write or red.harmless:
                continue
            entry = self.redirect_allowed(red, ctx)
            if entry is None:
                return None
            entries.append(entry)
        return RuleMatch(first, entries) if first is not None else None

    def _command_rule(
        self, readings: tuple[tuple[str, ...], ...], *, broad: bool, open_ended: bool
    ) -> Rule | None:
        """The earliest command rule matching any of ``readings``."""
        if not self.commands:
            return None
        best_idx, best = len(self.commands), None
        for words in readings:
            if not words:
                continue
            head = words[0]
            if broad and isinstance(head, GlobWord):
                pools: tuple[list[tuple[int, Rule, CommandSpec]], ...] = (self.commands,)
            else:
                pool = self.by_head.get(head)
                pools = (pool, self.any_head) if pool else (self.any_head,)
            for pool in pools:
                for idx, rule, spec in pool:
                    if idx >= best_idx:
                        break
                    if spec.matches(words, broad=broad, open_ended=open_ended):
                        best_idx, best = idx, rule
                        break
        return best

    def _redirect_hit(
        self, red: Redirect, rules: list[tuple[Rule, PathSpec | None]], ctx: CallContext
    ) -> Rule | None:
        from norma_cli.policy.shell import resolve_redirect

        cwd = str(ctx.cwd)
        paths = [p for t in resolve_redirect(red, cwd, deny_side=True) for p in spellings(t, cwd)]
        for rule, spec in rules:
            if spec is None or any(spec.pattern.matches(p, ctx) for p in paths):
                return rule
        return None

    def redirect_allowed(self, red: Redirect, ctx: CallContext) -> dict[str, Any] | None:
        from norma_cli.policy.shell import resolve_redirect

        cwd = str(ctx.cwd)
        targets = resolve_redirect(red, cwd, deny_side=False)
        if not targets:
            return None
        for rule, spec in self.writes:
            if spec is None:
                return _entry(red.text, "allow", rule)
        paths = [p for t in targets for p in spellings(t, cwd)]
        with_spec = [(r, s) for r, s in self.writes if s is not None]
        covering = self._cover(paths, with_spec, ctx)
        if covering is not None:
            return _entry(red.text, "allow", covering)
        if ctx.mode == "acceptEdits" and all(ctx.inside_roots(Path(p)) for p in paths):
            return {
                "command": red.text,
                "decision": "allow",
                "rule": "acceptEdits: inside the working roots",
                "source": "mode",
            }
        return None
