"""Custom tools (``[[custom_tools]]`` in config, or operator rows in the catalog), SPEC §8.

Kinds:

* ``shell`` — not callable. Its hint (name, description, ``exec`` text) is added to Bash's
  description and prompt, so a model learns that a CLI exists on this host.
* ``command`` — ``exec`` is a shell template; each ``{{param}}`` becomes exactly one shell
  word (``shlex.quote`` of the value; non-strings are JSON-encoded first). A placeholder may
  not sit inside quotes or a here-document, where quoting would not hold; such a template is
  a config error. The rendered line runs through the built-in Bash handler, and its
  permission is decided twice over: by the rules on the custom tool's own name (the normal
  pipeline) and, inside that, by the Bash rules applied to the rendered line (a Bash deny or
  ask rule on any sub-command denies or asks; a Bash allow rule allows).
* ``script`` — Python code run by ``interpreter`` (default: the Python running norma) with
  the JSON input on stdin. ``exec`` is inline code, or ``@path`` to a script file (relative to
  the config file that defines it). Output: a JSON block when stdout is JSON, else text.
* ``http`` — a request rendered from ``method``/``url``/``headers``/``body`` and sent with
  the WebFetch client and its SSRF guard. In ``url`` a ``{{param}}`` is percent-encoded; in
  ``body`` it is JSON-encoded; in ``headers`` it is the text (CR/LF refused). The WebFetch
  rules (``WebFetch(domain:...)``) apply to the rendered URL. A non-empty input schema is
  required.

Every kind has ``timeout`` (seconds) and ``max_output`` (characters) limits.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.config_schema import MAX_SECONDS
from norma_cli.core.contract import TOOL_NAME_RE, CallContext, Decision, Tool, ToolOutput
from norma_cli.core.record import field, record, replace
from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    from norma_cli.config import Config
    from norma_cli.core.permission import PermissionEngine
    from norma_cli.store.catalog_repo import CatalogRow

KINDS = ("shell", "command", "script", "http")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT = 100_000
MAX_OUTPUT_LIMIT = 2**63 - 1  # the catalog stores it as an INTEGER (signed 64-bit)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")


@record(frozen=True)
class CustomToolSpec:
    name: str
    kind: str
    exec: str = ""
    description: str = ""
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    timeout: float = DEFAULT_TIMEOUT_S
    max_output: int = DEFAULT_MAX_OUTPUT
    deferred: bool = False
    agents: tuple[str, ...] | None = None
    interpreter: str | None = None
    method: str = "GET"
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    source: str = ""  # file:line of its definition, or "catalog"
    base_dir: str = "."  # where a relative @script path is resolved

    @property
    def callable(self) -> bool:
        return self.kind != "shell"

    def options(self) -> dict[str, Any]:
        """The kind-specific fields, as stored in the catalog's ``custom_options`` column."""
        opts: dict[str, Any] = {"base_dir": self.base_dir}
        if self.interpreter:
            opts["interpreter"] = self.interpreter
        if self.kind == "http":
            opts.update(method=self.method, url=self.url, headers=self.headers, body=self.body)
        return opts

    def definition(self) -> dict[str, Any]:
        """What the code digest covers: everything that changes what the tool does."""
        return {
            "kind": self.kind,
            "exec": self.exec,
            "description": self.description,
            "input_schema": self.input_schema,
            "timeout": self.timeout,
            "max_output": self.max_output,
            "deferred": self.deferred,
            "agents": self.agents,
            **self.options(),
        }

    def with_row(self, row: CatalogRow, *, all_fields: bool = False) -> CustomToolSpec:
        """Apply a catalog row: its operator-edited fields (or every field, for operator rows)."""
        take = (lambda f: True) if all_fields else (lambda f: f in row.edited)
        changes: dict[str, Any] = {}
        if take("custom_kind") and row.custom_kind:
            changes["kind"] = row.custom_kind
        if take("custom_exec") and row.custom_exec is not None:
            changes["exec"] = row.custom_exec
        if take("custom_timeout") and row.custom_timeout is not None:
            changes["timeout"] = float(row.custom_timeout)
        if take("custom_max_output") and row.custom_max_output is not None:
            changes["max_output"] = int(row.custom_max_output)
        if take("custom_options") and row.custom_options_text:
            opts = row.custom_options
            for key in ("interpreter", "method", "url", "headers", "body", "base_dir"):
                if key in opts:
                    changes[key] = opts[key]
        if all_fields:
            changes["description"] = row.description or ""
            changes["input_schema"] = row.input_schema or {"type": "object", "properties": {}}
            changes["deferred"] = row.deferred
            changes["source"] = "catalog"
        return replace(self, **changes) if changes else self


# ----------------------------------------------------------------------------- parsing
def from_config(config: Config) -> list[CustomToolSpec]:
    """``[[custom_tools]]`` from every layer that may contribute them (an untrusted project
    config never does: config.py drops them); a later layer's tool replaces an earlier one."""
    found: dict[str, CustomToolSpec] = {}
    for layer in config.layers:
        for i, entry in enumerate(layer.effective.get("custom_tools") or []):
            where = layer.source_of(f"custom_tools[{i}].name")
            base = str(layer.path.parent) if layer.path is not None else "."
            spec = parse_entry(entry, where, base)
            found[spec.name] = spec
    return list(found.values())


def parse_entry(entry: dict[str, Any], where: str, base_dir: str = ".") -> CustomToolSpec:
    name = str(entry.get("name", ""))
    check_name(name, where)
    spec = CustomToolSpec(
        name=name,
        kind=entry.get("kind", ""),
        exec=entry.get("exec", ""),
        description=entry.get("description", ""),
        input_schema=entry.get("input_schema") or {},
        timeout=float(entry.get("timeout", DEFAULT_TIMEOUT_S)),
        max_output=int(entry.get("max_output", DEFAULT_MAX_OUTPUT)),
        deferred=bool(entry.get("deferred", False)),
        agents=tuple(entry["agents"]) if "agents" in entry else None,
        interpreter=entry.get("interpreter"),
        method=str(entry.get("method", "GET")).upper(),
        url=entry.get("url", ""),
        headers=dict(entry.get("headers") or {}),
        body=entry.get("body"),
        source=where,
        base_dir=base_dir,
    )
    return check(spec)


def check_name(name: str, where: str) -> None:
    """The one rule for a custom tool's name, wherever it is defined (config or `catalog
    add`): the registry's own (a name it refuses would stop every command from starting)."""
    if not TOOL_NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}: custom tool name {name!r} must match {TOOL_NAME_RE.pattern}")


def check(spec: CustomToolSpec) -> CustomToolSpec:
    """Validate a spec (config or catalog); fill in a schema a command template implies."""
    where, name = spec.source or "catalog", spec.name
    check_name(name, where)
    if spec.kind not in KINDS:
        raise ConfigError(
            f"{where}: custom tool {name!r}: kind must be one of {', '.join(KINDS)}, got {spec.kind!r}"
        )
    if spec.kind in ("shell", "command", "script") and not spec.exec.strip():
        raise ConfigError(f"{where}: custom tool {name!r} ({spec.kind}) needs exec")
    # `not a < x <= b` also refuses nan and inf (every comparison with nan is false): a
    # timeout the clock cannot hold, or a limit SQLite's INTEGER cannot, fails each call later
    if not 0 < spec.timeout <= MAX_SECONDS:
        raise ConfigError(
            f"{where}: custom tool {name!r}: timeout must be a number of seconds above 0 and at"
            f" most {MAX_SECONDS:,.0f}, got {spec.timeout!r}"
        )
    if not 0 < spec.max_output <= MAX_OUTPUT_LIMIT:
        raise ConfigError(
            f"{where}: custom tool {name!r}: max_output must be a positive number of characters"
            f" (at most {MAX_OUTPUT_LIMIT}), got {spec.max_output!r}"
        )
    schema = spec.input_schema
    if spec.kind == "command" and not schema:
        params = list(dict.fromkeys(PLACEHOLDER.findall(spec.exec)))
        schema = {
            "type": "object",
            "properties": {p: {"type": "string"} for p in params},
            "required": params,
            "additionalProperties": False,
        }
    schema = schema or {"type": "object", "properties": {}}
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConfigError(
            f'{where}: custom tool {name!r}: input_schema must be an object schema (type = "object")'
        )
    props = schema.get("properties") or {}
    if spec.kind == "command":
        check_template(spec.exec, where, name)
        unknown = [p for p in PLACEHOLDER.findall(spec.exec) if p not in props]
        if unknown:
            raise ConfigError(
                f"{where}: custom tool {name!r}: exec uses {{{{{unknown[0]}}}}}, which input_schema lacks"
            )
    if spec.kind == "http":
        if not props:
            raise ConfigError(
                f"{where}: custom tool {name!r} (http) needs an input_schema with properties"
            )
        if not spec.url.startswith(("http://", "https://")):
            raise ConfigError(f'{where}: custom tool {name!r} (http) needs url = "http(s)://..."')
        if spec.method not in HTTP_METHODS:
            raise ConfigError(
                f"{where}: custom tool {name!r}: method must be one of {', '.join(HTTP_METHODS)}"
            )
        text = " ".join([spec.url, *spec.headers.values(), spec.body or ""])
        unknown = [p for p in PLACEHOLDER.findall(text) if p not in props]
        if unknown:
            raise ConfigError(
                f"{where}: custom tool {name!r}: {{{{{unknown[0]}}}}} is not in input_schema"
            )
    return replace(spec, input_schema=schema) if schema is not spec.input_schema else spec


def check_template(template: str, where: str, name: str) -> None:
    """Every placeholder must stand where the shell reads a plain word: not inside '...',
    "..." or a here-document, where a quoted value would not stay one word."""
    quote: str | None = None
    i = 0
    heredoc = False
    while i < len(template):
        c = template[i]
        if template.startswith("{{", i) and PLACEHOLDER.match(template, i):
            if quote or heredoc:
                where_in = "a here-document" if heredoc else f"{quote}...{quote} quotes"
                raise ConfigError(
                    f"{where}: custom tool {name!r}: a placeholder inside {where_in} would not stay one "
                    "shell word; put it outside quotes (norma quotes the value)"
                )
            i = PLACEHOLDER.match(template, i).end()  # type: ignore[union-attr]
            continue
        if quote == "'":
            if c == "'":
                quote = None
        elif c == "\\":
            i += 1
        elif quote == '"':
            if c == '"':
                quote = None
        elif c in "'\"":
            quote = c
        elif template.startswith("<<", i) and not template.startswith("<<<", i):
            heredoc = True
        i += 1


# ----------------------------------------------------------------------------- rendering
def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_command(template: str, tool_input: dict[str, Any]) -> str:
    """Each ``{{param}}`` → one shell word; a missing optional value → an empty word ''."""
    return PLACEHOLDER.sub(lambda m: shlex.quote(_text(tool_input.get(m.group(1), ""))), template)


def render_url(template: str, tool_input: dict[str, Any]) -> str:
    from urllib.parse import quote

    return PLACEHOLDER.sub(
        lambda m: quote(_text(tool_input.get(m.group(1), "")), safe=""), template
    )


def render_body(template: str, tool_input: dict[str, Any]) -> str:
    return PLACEHOLDER.sub(
        lambda m: json.dumps(tool_input.get(m.group(1)), ensure_ascii=False), template
    )


def render_header(template: str, tool_input: dict[str, Any]) -> str:
    text = PLACEHOLDER.sub(lambda m: _text(tool_input.get(m.group(1), "")), template)
    if "\r" in text or "\n" in text:
        raise ValueError("a header value may not contain a line break")
    return text


def limit_output(output: ToolOutput, max_output: int) -> ToolOutput:
    """Keep the first ``max_output`` characters of the text (the global cap applies after)."""
    total = sum(len(b.text) for b in output.content if b.type == "text")
    if total <= max_output:
        return output
    from norma_cli.core.contract import ContentBlock

    head = output.joined_text()[:max_output]
    note = f"\n\n[output limited to {max_output:,} of {total:,} characters (max_output)]"
    others = [b for b in output.content if b.type != "text"]
    output.content = [ContentBlock("text", text=head + note), *others]
    return output


# ----------------------------------------------------------------------------- permission
def delegated_opinion(decision: Decision, what: str) -> Decision | None:
    """A decision about the underlying Bash/WebFetch call, as the custom tool's own opinion.

    Deny and rule-made asks carry over; an allow only when a rule (or a plugin) made it. The
    fall-through "nobody allowed it" says nothing, so the custom tool's own rules decide. So
    does the shell parser's ask about a line that is not fully literal: in a rendered template
    every value is a quoted literal word, so expansions can only be the template's own, written
    by the operator who defined (and allows) the custom tool.
    """
    rule = f" by {decision.rule.text} ({decision.rule.source})" if decision.rule else ""
    if decision.behavior == "deny":
        return Decision.deny(
            "tool", f"{what} is denied{rule}: {decision.reason}", subcommands=decision.subcommands
        )
    if decision.behavior == "ask" and decision.stage not in ("default", "shell"):
        return Decision.ask(
            "tool",
            f"{what} needs approval{rule}: {decision.reason}",
            subcommands=decision.subcommands,
        )
    if decision.behavior == "allow" and decision.stage in ("rule", "plugin"):
        return Decision.allow("tool", f"{what} is allowed{rule}")
    return None


def _probe_context(ctx: CallContext) -> CallContext:
    # The mode is applied once, to the custom tool itself; the probe asks only what the rules say.
    return CallContext(
        session_id=ctx.session_id,
        cwd=ctx.cwd,
        roots=ctx.roots,
        mode="default",
        agent=ctx.agent,
        tool_use_id=ctx.tool_use_id,
        session=ctx.session,
    )


# ----------------------------------------------------------------------------- tools
class CustomTool(Tool):
    read_only = False
    concurrency_safe = False
    requires_approval = True
    timeout = None  # each kind bounds itself with spec.timeout

    def __init__(self, spec: CustomToolSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.description = spec.description or f"Custom {spec.kind} tool {spec.name}."
        self.input_schema = spec.input_schema
        self.plugin = "custom"


class CommandTool(CustomTool):
    def __init__(self, spec: CustomToolSpec, engine: PermissionEngine) -> None:
        super().__init__(spec)
        self.engine = engine
        self._bash: Tool | None = None

    @property
    def bash(self) -> Tool:
        if self._bash is None:
            from norma_cli.tools.bash import BashTool

            self._bash = BashTool()
        return self._bash

    def render(self, tool_input: dict[str, Any]) -> str:
        return render_command(self.spec.exec, tool_input)

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        line = self.render(tool_input)
        verdict = self.engine.evaluate(self.bash, {"command": line}, _probe_context(ctx))
        return delegated_opinion(verdict, f"the rendered command {line!r}")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> Any:
        from norma_cli.tools.bash import MAX_TIMEOUT_MS

        timeout_ms = min(int(self.spec.timeout * 1000), MAX_TIMEOUT_MS)
        output = self.bash.call({"command": self.render(tool_input), "timeout": timeout_ms}, ctx)
        assert isinstance(output, ToolOutput)
        return limit_output(output, self.spec.max_output)


class ScriptTool(CustomTool):
    def __init__(self, spec: CustomToolSpec) -> None:
        super().__init__(spec)

    def argv(self) -> list[str]:
        interpreter = self.spec.interpreter or sys.executable
        if self.spec.exec.startswith("@"):
            path = Path(self.spec.exec[1:]).expanduser()
            if not path.is_absolute():
                path = Path(self.spec.base_dir) / path
            return [interpreter, str(path)]
        return [interpreter, "-c", self.spec.exec]

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        from norma_cli.catalog.process import run_with_limits

        done = run_with_limits(
            self.argv(),
            json.dumps(tool_input),
            cwd=ctx.cwd,
            timeout=self.spec.timeout,
            max_chars=self.spec.max_output,
        )
        if done.timed_out:
            return ToolOutput.error(
                f"{self.name} timed out after {self.spec.timeout:g}s{done.tail()}"
            )
        if done.code != 0:
            return ToolOutput.error(f"{self.name} exited with code {done.code}{done.tail()}")
        text = done.stdout
        try:
            value = json.loads(text) if text.strip() and not done.truncated else None
        except ValueError:
            value = None
        if isinstance(value, dict | list):
            from norma_cli.core.contract import ContentBlock

            return ToolOutput([ContentBlock("json", data=value)])
        if done.truncated:
            text += f"\n\n[output limited to {self.spec.max_output:,} characters (max_output)]"
        return ToolOutput.text(text.rstrip("\n"))


class _WebFetchProbe(Tool):
    """Stands for WebFetch when the WebFetch rules are asked about a rendered URL."""

    name = "WebFetch"
    read_only = False


class HttpTool(CustomTool):
    def __init__(self, spec: CustomToolSpec, engine: PermissionEngine) -> None:
        super().__init__(spec)
        self.engine = engine

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        url = render_url(self.spec.url, tool_input)
        verdict = self.engine.evaluate(_WebFetchProbe(), {"url": url}, _probe_context(ctx))
        return delegated_opinion(verdict, f"the request to {url}")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        from norma_cli.catalog.http import send

        try:
            url = render_url(self.spec.url, tool_input)
            headers = {k: render_header(v, tool_input) for k, v in self.spec.headers.items()}
            body = render_body(self.spec.body, tool_input) if self.spec.body is not None else None
        except ValueError as exc:
            return ToolOutput.error(f"{self.name}: {exc}")
        output = send(
            self.name, self.spec.method, url, headers, body, timeout=self.spec.timeout, ctx=ctx
        )
        return limit_output(output, self.spec.max_output)


def build_tool(spec: CustomToolSpec, engine: PermissionEngine) -> Tool | None:
    if spec.kind == "command":
        return CommandTool(spec, engine)
    if spec.kind == "script":
        return ScriptTool(spec)
    if spec.kind == "http":
        return HttpTool(spec, engine)
    return None  # shell: a hint, not a tool


def shell_hints(specs: list[CustomToolSpec]) -> str:
    """The text added to Bash's description and prompt for ``shell`` custom tools."""
    lines = [f"- {s.name}: {s.description or '(no description)'} — usage: {s.exec}" for s in specs]
    return "CLI tools installed on this host (run them with Bash):\n" + "\n".join(lines)
