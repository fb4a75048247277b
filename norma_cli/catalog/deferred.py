"""Deferred tools: the search index, ``SearchExtraTools`` and ``ExecuteExtraTool`` (the
per-session unlock set is in ``unlocks.py``).

A deferred tool's schema is kept out of the list a model is shown (context economy). It stays
reachable: ``SearchExtraTools`` finds it and ``ExecuteExtraTool`` runs it — through the whole
pipeline under the inner tool's own name, so its rules, its permission check and its hooks
decide, exactly as if it had been called directly. Hiding a schema is never an authorization
boundary; locking is a gate (a tool gated by a skill is refused until that skill is invoked),
and the rules still decide every call that passes the gate.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import CallContext, Tool, ToolCall, ToolOutput
from norma_cli.core.record import record

if TYPE_CHECKING:
    from norma_cli.core.executor import Executor

DEFAULT_LIMIT = 5
MAX_LIMIT = 25
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "with",
    ]
)
# weights: a query word found in the tool's name counts most, then its parameters, then prose
W_NAME, W_PARAM, W_TEXT = 4.0, 2.0, 1.0
PREFIX_FACTOR = 0.5
EXACT_NAME_BONUS = 20.0


def words(text: str) -> list[str]:
    """``searchGitHubIssues`` / ``search_issues`` / ``search-issues`` → search, git, hub, issues."""
    return [w for w in map(str.lower, _WORD.findall(text)) if w not in _STOP]


@lru_cache(maxsize=8192)
def _param_words(name: str) -> tuple[str, ...]:
    return tuple(words(name))  # parameter names repeat across tools: split each once


@record(frozen=True)
class Entry:
    name: str
    description: str
    schema: dict[str, Any]


class SearchIndex:
    """An inverted index over name, description and parameter names, built once per assembly.

    A query scores each tool by the query words it contains (exact word anywhere, or a name or
    parameter word the query word is a prefix of, at half weight); a query equal to a tool's
    name ranks that tool first.
    """

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: list[Entry] = list(entries)
        self._by_name = {e.name.lower(): i for i, e in enumerate(self.entries)}
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, e in enumerate(self.entries):
            best: dict[str, float] = {}  # one weight per word and tool: the best field it is in
            for w in words(e.description):
                best[w] = W_TEXT
            for p in e.schema.get("properties") or ():
                for w in _param_words(str(p)):
                    best[w] = W_PARAM
            for w in words(e.name):
                best[w] = W_NAME
            for w, weight in best.items():
                postings.setdefault(w, []).append((i, weight))
        # word -> {tool: weight}; dicts, so the first query word's scores are one C-level copy
        self._postings = {w: dict(p) for w, p in postings.items()}
        # prefix matches look at name and parameter words only (prose would drown them), at
        # their reduced weight, precomputed
        self._prefix_postings = {
            w: pp
            for w, p in postings.items()
            if (pp := {i: weight * PREFIX_FACTOR for i, weight in p if weight > W_TEXT})
        }
        self._vocab = sorted(self._prefix_postings)

    def __len__(self) -> int:
        return len(self.entries)

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[Entry]:
        lists: list[dict[int, float]] = []
        for q in dict.fromkeys(words(query)):
            if q in self._postings:
                lists.append(self._postings[q])
            if len(q) >= 3:  # prefix matches: "repo" finds "repository"
                start = bisect.bisect_right(self._vocab, q)
                for w in self._vocab[start : start + 64]:
                    if not w.startswith(q):
                        break
                    lists.append(self._prefix_postings[w])
        lists.sort(key=len, reverse=True)
        scores: dict[int, float] = dict(lists[0]) if lists else {}
        get = scores.get
        for more in lists[1:]:
            for i, weight in more.items():
                scores[i] = get(i, 0.0) + weight
        exact = self._by_name.get(query.strip().lower())
        if exact is not None:
            scores[exact] = get(exact, 0.0) + EXACT_NAME_BONUS
        # ties keep insertion order (nlargest is stable): the same query gives the same answer
        best = heapq.nlargest(limit, scores, key=scores.__getitem__)
        return [self.entries[i] for i in best]


class SearchExtraToolsTool(Tool):
    name = "SearchExtraTools"
    description = (
        "Search the extra tools whose schemas are not listed up front. Returns the best matches "
        "with their input schemas; call one with ExecuteExtraTool {name, input}."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "Words to look for in tool names, descriptions and parameters.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": "How many tools to return.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    read_only = True
    concurrency_safe = True
    requires_approval = False

    def __init__(
        self, index: Callable[[], SearchIndex], locked_by: Callable[[str], tuple[str, ...]]
    ) -> None:
        self._index = index  # built on the first search, not when the tool set is assembled
        self._locked_by = locked_by

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        limit = int(tool_input.get("limit") or DEFAULT_LIMIT)
        found = []
        for e in self._index().search(str(tool_input["query"]), limit):
            item: dict[str, Any] = {
                "name": e.name,
                "description": e.description,
                "input_schema": e.schema,
            }
            skills = self._locked_by(e.name)
            if skills:
                item["locked"] = f"invoke the skill {' or '.join(skills)} (Skill tool) to unlock it"
            found.append(item)
        if not found:
            return ToolOutput.text(f"no extra tool matches {tool_input['query']!r}")
        return ToolOutput.text(json.dumps(found, ensure_ascii=False, indent=1), matches=len(found))


class ExecuteExtraToolTool(Tool):
    """A dispatcher: it decides nothing itself. The inner call runs through the executor under
    its own name (lookup, gate, schema, rules, hooks, trace), and its result is returned."""

    name = "ExecuteExtraTool"
    description = (
        "Run an extra tool found with SearchExtraTools. The call is checked and recorded under "
        "the inner tool's own name, exactly as a direct call would be."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "pattern": "^[A-Za-z0-9_-]{1,64}$",
                "description": "The tool to run.",
            },
            "input": {"type": "object", "description": "Its input, as its schema describes."},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    # Read-only so that plan mode lets the dispatcher through: the inner call meets plan mode
    # (and every other rule) under its own name.
    read_only = True
    concurrency_safe = False
    requires_approval = False

    def __init__(self) -> None:
        self.executor: Executor | None = None

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Any:
        from norma_cli.core.contract import Decision

        return Decision.allow("tool", "dispatcher: the inner call is decided under its own name")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        inner_name = tool_input["name"]
        if inner_name == self.name:
            return ToolOutput.error("ExecuteExtraTool cannot run itself")
        if self.executor is None:
            return ToolOutput.error("ExecuteExtraTool is not connected to an executor")
        inner = ToolCall(f"{ctx.tool_use_id}.inner", inner_name, tool_input.get("input") or {})
        result = self.executor.run(inner)
        from norma_cli.core.output import CAPPED, SPILL

        # the inner result already passed the one output cap; do not cap it twice
        m = result.meta
        spill = {SPILL: m.spill} if m.spill is not None else {}
        return ToolOutput(
            list(result.content),
            is_error=result.is_error,
            extra_messages=list(result.extra_messages),
            metadata={
                # the executor reads this: a denied or pending inner call decides the outer result
                "dispatched": {
                    "tool": inner_name,
                    "trace_id": m.trace_id,
                    "status": m.status,
                    "decision": m.decision,
                    "stage": m.stage,
                    "rule": m.rule,
                    "source": m.source,
                    "reason": m.reason,
                    "pending_id": m.pending_id,
                },
                CAPPED: True,
                **spill,
            },
        )
