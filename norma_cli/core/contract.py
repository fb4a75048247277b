"""The tool contract: what a tool is, what a call is, and what comes back.

Everything here is a small typed object; the pipeline passes these between layers instead of
loose dicts. Metadata left unset fails closed: a tool is mutating, exclusive and
approval-required unless it says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from norma_cli.core.record import field, record

if TYPE_CHECKING:
    from norma_cli.core.output import SpillInfo

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed draft 2020-12 object schema, the shape of every built-in tool's input."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


Behavior = Literal["allow", "deny", "ask"]


@record(frozen=True)
class RuleRef:
    """Which rule decided, and where that rule came from (file:line, CLI flag, plugin)."""

    text: str
    source: str


@record
class Decision:
    """A permission verdict with the party that reached it.

    ``stage`` names the deciding party: ``rule``, ``mode``, ``tool``, ``read_only``, ``hook``,
    ``plugin``, ``ask``, ``default`` ... ``updated_input`` carries a rewrite (allow only).
    """

    behavior: Behavior
    stage: str
    reason: str = ""
    rule: RuleRef | None = None
    updated_input: dict[str, Any] | None = None
    subcommands: list[dict[str, Any]] = field(default_factory=list)
    pending_id: str | None = None  # an ask left waiting in the approval queue

    @classmethod
    def allow(cls, stage: str = "tool", reason: str = "", **kw: Any) -> Decision:
        return cls("allow", stage, reason, **kw)

    @classmethod
    def deny(cls, stage: str = "tool", reason: str = "", **kw: Any) -> Decision:
        return cls("deny", stage, reason, **kw)

    @classmethod
    def ask(cls, stage: str = "tool", reason: str = "", **kw: Any) -> Decision:
        return cls("ask", stage, reason, **kw)


@record
class ContentBlock:
    """One block of a tool result: ``text``, ``json`` or ``image`` (base64 data + media type)."""

    type: Literal["text", "json", "image"]
    text: str = ""
    data: Any = None
    media_type: str = ""

    def to_wire(self) -> dict[str, Any]:
        if self.type == "text":
            return {"type": "text", "text": self.text}
        if self.type == "json":
            return {"type": "json", "json": finite_json(self.data)}
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": self.media_type, "data": self.data},
        }


def finite_json(value: Any) -> Any:
    """``value`` with every NaN / Infinity float replaced by the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"``.

    JSON has no such numbers: Python writes a bare ``NaN`` that strict parsers (and every
    other language) refuse, so one float would make a whole result line unreadable. A string
    rather than null keeps what the tool returned visible and is never mistaken for a real
    None. ``value`` itself comes back when nothing needed replacing (the common case copies
    nothing); data nested too deep to walk is left as it is, for the encoder to judge.
    """
    try:
        return _finite(value)
    except RecursionError:
        return value


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        if value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
            return value
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        copy: dict[Any, Any] | None = None
        for key, item in value.items():
            new = _finite(item)
            if new is not item:
                if copy is None:
                    copy = dict(value)
                copy[key] = new
        return value if copy is None else copy
    if isinstance(value, (list, tuple)):
        items: list[Any] | None = None
        for i, item in enumerate(value):
            new = _finite(item)
            if new is not item:
                if items is None:
                    items = list(value)
                items[i] = new
        return value if items is None else items
    return value


@record
class ToolOutput:
    """What a tool's ``call`` returns. ``metadata`` is for norma (capped flag, engine, ...)."""

    content: list[ContentBlock]
    is_error: bool = False
    extra_messages: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def text(cls, text: str, *, is_error: bool = False, **metadata: Any) -> ToolOutput:
        return cls([ContentBlock("text", text=text)], is_error=is_error, metadata=dict(metadata))

    @classmethod
    def error(cls, text: str, **metadata: Any) -> ToolOutput:
        return cls.text(text, is_error=True, **metadata)

    def joined_text(self) -> str:
        return "".join(b.text for b in self.content if b.type == "text")


@record
class CallContext:
    """Per-call facts a tool or a rule may consult. Built by the runtime, never by a model."""

    session_id: str
    cwd: Path
    roots: tuple[Path, ...]
    mode: str = "default"
    agent: str | None = None
    tool_use_id: str = ""
    session: Any = None  # the runtime Session (background tasks, unlock set, spill dir, ...)
    # raw path -> resolved path, so the rules and the tool of one call see the same resolution
    resolved: dict[str, Path] = field(default_factory=dict, repr=False)

    def inside_roots(self, path: Path) -> bool:
        return path_inside(str(path), self.roots)


def path_inside(path: str, roots: tuple[Path, ...]) -> bool:
    """``path`` (absolute, normalised) is one of ``roots`` or lies beneath one (string test:
    pathlib's ``is_relative_to`` costs microseconds on every call of every file tool)."""
    for root in roots:
        r = str(root)
        if path == r or path.startswith(r if r.endswith("/") else r + "/"):
            return True
    return False


class Tool:
    """Base class for tools. Subclasses set the class attributes and implement ``call``.

    ``call`` may be a plain method or ``async def``; the executor accepts both.
    """

    name: str = ""
    description: str = ""
    prompt: str = ""
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}
    # Fail-closed defaults: unset metadata means mutating, exclusive, approval-required.
    read_only: bool = False
    concurrency_safe: bool = False
    requires_approval: bool = True
    raw_input: bool = False
    destructive: bool = False
    # A file tool edits files (acceptEdits applies) when True.
    edits_files: bool = False
    # Hidden from the model's tool list until searched for (SearchExtraTools); still callable.
    deferred: bool = False
    # Seconds the executor waits for ``call`` (None: the tool bounds itself).
    timeout: float | None = None
    # Which plugin registered this tool ("builtin" for norma's own).
    plugin: str = "builtin"

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        """Paths this call would touch, as spelled in the input (file tools override)."""
        return []

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        """The tool's own opinion (allow/deny/ask) or None for no opinion."""
        return None

    def call(
        self, tool_input: dict[str, Any], ctx: CallContext
    ) -> ToolOutput | Awaitable[ToolOutput]:
        raise NotImplementedError

    def definition(self) -> dict[str, Any]:
        """The definition shown to a model and to ``tools show``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def metadata(self) -> dict[str, bool]:
        return {
            "read_only": self.read_only,
            "concurrency_safe": self.concurrency_safe,
            "requires_approval": self.requires_approval,
            "raw_input": self.raw_input,
            "destructive": self.destructive,
        }


@record
class ToolCall:
    """One ``tool_use``: id, name and input, plus the dialect it arrived in."""

    id: str
    name: str
    input: dict[str, Any]
    dialect: Literal["anthropic", "openai"] = "anthropic"


@record
class CallMeta:
    """The ``norma`` object attached to every result."""

    decision: str | None = None
    stage: str = "lookup"
    rule: str | None = None
    source: str | None = None
    reason: str = ""
    trace_id: str | None = None
    duration_ms: float = 0.0
    spill: SpillInfo | None = None
    pending_id: str | None = None
    status: str = "error"  # completed | failed | error | denied | pending
    input_digest: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "stage": self.stage,
            "rule": self.rule,
            "source": self.source,
            "reason": self.reason,
            "trace_id": self.trace_id,
            "duration_ms": round(self.duration_ms, 3),
            "spill": self.spill.to_wire() if self.spill else None,
            "pending_id": self.pending_id,
        }


@record
class ToolResult:
    """Exactly one paired result per call."""

    tool_use_id: str
    content: list[ContentBlock]
    is_error: bool
    meta: CallMeta
    extra_messages: list[dict[str, Any]] = field(default_factory=list)
    dialect: Literal["anthropic", "openai"] = "anthropic"

    def text(self) -> str:
        return "".join(b.text for b in self.content if b.type == "text")

    def exit_code(self) -> int:
        """Exit code of a one-shot run for this result (SPEC §12)."""
        if self.meta.status == "pending":
            return 4
        if self.meta.decision == "deny" and self.meta.status == "denied":
            return 3
        return 1 if self.is_error else 0

    def to_wire(self) -> dict[str, Any]:
        meta = self.meta.to_wire()
        if self.dialect == "openai":
            return {
                "role": "tool",
                "tool_call_id": self.tool_use_id,
                "content": self.text(),
                "is_error": self.is_error,
                "norma": meta,
            }
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "is_error": self.is_error,
            "content": [b.to_wire() for b in self.content],
            "norma": meta,
        }
        if self.extra_messages:
            out["extra_messages"] = self.extra_messages
        return out


ToolFunction = Callable[..., Any]
