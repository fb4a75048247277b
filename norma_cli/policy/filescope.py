"""What file tools may see beyond the permission check of their starting path.

``ReadFilter`` hides what Read rules protect from tools that list or search many files at once.
``explicit_roots`` lists the places outside the working roots that an allow rule names, the
only places a file tool may open out there (SPEC §6).

A Read deny (or ask) rule governs Grep, Glob and LS "for every path they touch" (SPEC §4). The
permission check sees only the path a search starts from; this filter is applied by those
tools to every file and folder they would list or read beneath it, so ``Glob **/*`` from the
root never reveals ``./secrets/**`` and Grep never returns its lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext
    from norma_cli.policy.paths import PathPattern
    from norma_cli.policy.rules import RuleSet


class ReadFilter:
    """The path patterns of deny and ask rules that govern file-reading tools."""

    def __init__(self, patterns: list[PathPattern]) -> None:
        self.patterns = patterns

    @classmethod
    def from_rules(cls, rules: RuleSet) -> ReadFilter | None:
        candidates = [r for r in (*rules.rules["deny"], *rules.rules["ask"]) if r.specifier]
        if not candidates:
            return None
        from norma_cli.policy.specifiers import READ_FAMILY, PathSpec, spec_of

        patterns: list[PathPattern] = []
        for rule in candidates:
            if rule.name in READ_FAMILY:
                spec = spec_of(rule)
                if isinstance(spec, PathSpec):
                    patterns.append(spec.pattern)
        return cls(patterns) if patterns else None

    def hides(self, path: str, ctx: CallContext) -> bool:
        """True when a rule covers ``path`` under any of its spellings (spelled or resolved)."""
        from norma_cli.policy.paths import spellings

        return any(p.matches(s, ctx) for s in spellings(path, str(ctx.cwd)) for p in self.patterns)


def read_filter(ctx: CallContext) -> ReadFilter | None:
    session = ctx.session
    return getattr(session, "read_filter", None) if session is not None else None


def explicit_roots(rules: RuleSet) -> tuple[Path, ...]:
    """The literal leading folders (or files) of absolute/home allow rules for file tools.

    ``Read(//srv/data/**)`` names ``/srv/data``; ``Edit(~/notes.md)`` names ``~/notes.md``.
    The rule itself still decides each call; this only lets the tool open what was named.
    """
    if not any(r.specifier for r in rules.rules["allow"]):
        return ()
    from norma_cli.policy.specifiers import FILE_TOOLS, PathSpec, spec_of

    found: list[Path] = []
    if not any(r.specifier for r in rules.rules["allow"]):
        return ()
    for rule in rules.rules["allow"]:
        if rule.name not in FILE_TOOLS:
            continue
        spec = spec_of(rule)
        if not isinstance(spec, PathSpec) or spec.pattern.anchor not in ("abs", "home"):
            continue
        text = spec.pattern.text
        rest = text.lstrip("/") if spec.pattern.anchor == "abs" else text[2:]
        literal: list[str] = []
        for part in rest.split("/"):
            if not part or any(c in part for c in "*?[{"):
                break
            literal.append(part)
        base = Path("/") if spec.pattern.anchor == "abs" else Path(os.path.expanduser("~"))
        if literal:
            found.append(Path(os.path.realpath(base.joinpath(*literal))))
    return tuple(dict.fromkeys(found))
