"""The shape of norma's TOML configuration, and a validator that names file, line and key.

Every key norma reads is declared here; an unknown key is an error (a typo must never turn a
rule off silently). ``config.example.toml`` documents each of them and is checked against this
schema by the tests.
"""

from __future__ import annotations

import math
import re
from typing import Any

from norma_cli.core.hooks import EVENTS as HOOK_EVENTS
from norma_cli.core.hooks import compile_matcher
from norma_cli.core.modes import MODES
from norma_cli.core.record import record
from norma_cli.errors import ConfigError


class Spec:
    def check(self, value: Any, path: str, fail: Fail) -> None:
        raise NotImplementedError


class Fail:
    """Raises a ConfigError pointing at the key (the locator maps key paths to lines)."""

    def __init__(self, source: str, locate: Any) -> None:
        self.source = source
        self.locate = locate

    def __call__(self, path: str, message: str) -> None:
        line = self.locate(path)
        where = f"{self.source}:{line}" if line else self.source
        raise ConfigError(f"{where}: {path}: {message}")


@record
class Scalar(Spec):
    kind: type | tuple[type, ...]
    label: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any, path: str, fail: Fail) -> None:
        if isinstance(value, bool) and bool not in _kinds(self.kind):
            fail(path, f"expected {self.label}, got {type(value).__name__}")
        if not isinstance(value, self.kind):
            fail(path, f"expected {self.label}, got {_tname(value)}")
        if self.choices and value not in self.choices:
            fail(path, f"expected one of {', '.join(map(repr, self.choices))}, got {value!r}")
        # TOML allows inf and nan, and integers of any size in tomllib; every comparison
        # with nan is false, so these are refused before the bounds are checked.
        if isinstance(value, float) and not math.isfinite(value):
            fail(path, f"must be a finite number, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
            fail(path, f"must fit in a 64-bit integer, got {value}")
        if self.minimum is not None and value < self.minimum:
            fail(path, f"must be at least {self.minimum:g}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            fail(path, f"must be at most {self.maximum:g}, got {value!r}")


_INT64_MAX = 2**63 - 1
# A wait longer than this overflows some platform APIs (a lock's timeout past time_t), and no
# timeout of norma needs years.
MAX_SECONDS = 1e8


class Regex(Spec):
    """A string used as a Python regular expression (a hook's ``matcher``), compiled here so
    that a bad one is a config error naming its line rather than a crash on first use."""

    def check(self, value: Any, path: str, fail: Fail) -> None:
        STR.check(value, path, fail)
        try:
            compile_matcher(value)
        except re.error as exc:
            fail(path, f"invalid regular expression {value!r}: {exc}")
        except RecursionError:  # nesting deep enough to exhaust the compiler
            fail(path, f"regular expression too deeply nested: {value[:40]!r}...")


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _tname(value: Any) -> str:
    return {
        dict: "table",
        list: "array",
        str: "string",
        int: "integer",
        float: "float",
        bool: "boolean",
    }.get(type(value), type(value).__name__)


@record
class ListOf(Spec):
    item: Spec

    def check(self, value: Any, path: str, fail: Fail) -> None:
        if not isinstance(value, list):
            fail(path, f"expected an array, got {_tname(value)}")
        for i, item in enumerate(value):
            self.item.check(item, f"{path}[{i}]", fail)


@record
class Table(Spec):
    keys: dict[str, Spec]
    required: tuple[str, ...] = ()

    def check(self, value: Any, path: str, fail: Fail) -> None:
        if not isinstance(value, dict):
            fail(path, f"expected a table, got {_tname(value)}")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            spec = self.keys.get(key)
            if spec is None:
                known = ", ".join(sorted(self.keys))
                fail(sub, f"unknown key {key!r} (known: {known})")
            else:
                spec.check(item, sub, fail)
        for key in self.required:
            if key not in value:
                fail(path, f"missing required key {key!r}")


@record
class MapOf(Spec):
    """A table whose keys are names chosen by the user (agents, servers, providers)."""

    item: Spec
    key_pattern: str = r"^[A-Za-z0-9_.-]+$"

    def check(self, value: Any, path: str, fail: Fail) -> None:
        if not isinstance(value, dict):
            fail(path, f"expected a table, got {_tname(value)}")
        for key, item in value.items():
            sub = f"{path}.{key}"
            if not re.match(self.key_pattern, key):
                fail(sub, f"invalid name {key!r}")
            self.item.check(item, sub, fail)


class AnyValue(Spec):
    def check(self, value: Any, path: str, fail: Fail) -> None:
        return None


STR = Scalar(str, "a string")
BOOL = Scalar(bool, "a boolean")
INT = Scalar(int, "an integer", minimum=0)
NUM = Scalar((int, float), "a number", minimum=0, maximum=MAX_SECONDS)  # seconds
STRS = ListOf(STR)
DECISION = Scalar(str, "a decision", ("allow", "ask", "deny"))


class Command(Spec):
    """A hook's shell command: an empty one runs nothing, exits 0 and so allows every call."""

    def check(self, value: Any, path: str, fail: Fail) -> None:
        STR.check(value, path, fail)
        if not value.strip():
            fail(path, "must not be empty")


HOOK = Table(
    {
        "matcher": Regex(),
        "command": Command(),
        "timeout": NUM,
        "on_error": Scalar(str, "an on_error action", ("block", "ignore")),
    },
    required=("command",),
)

RULE = Table(
    {
        "rule": STR,
        "decision": DECISION,
        "match": ListOf(AnyValue()),
        "not_match": ListOf(AnyValue()),
        "reason": STR,
    },
    required=("rule", "decision"),
)

INTERCEPT = Table(
    {
        "tools": STRS,
        "default": DECISION,
        "rules": ListOf(
            Table({"rule": STR, "decision": DECISION, "reason": STR}, required=("rule", "decision"))
        ),
        "ask": Table(
            {"timeout_s": NUM, "on_timeout": Scalar(str, "an on_timeout action", ("allow", "deny"))}
        ),
        "judge": Table(
            {
                "enabled": BOOL,
                "provider": STR,  # openai | anthropic | plugin:NAME (checked when the judge is built)
                "base_url": STR,
                "model": STR,
                "api_key_env": STR,
                "timeout_s": NUM,
                "on_failure": DECISION,
            }
        ),
    }
)

# [agents.NAME] and [[custom_tools]] and [catalog]: read by norma_cli/catalog/
AGENT = Table(
    {
        "tools": STRS,
        "mcp": STRS,
        "skills": STRS,
        "mode": Scalar(str, "a permission mode", MODES),
        "allow": STRS,
        "ask": STRS,
        "deny": STRS,
    }
)

CUSTOM_TOOL = Table(
    {
        "name": STR,
        "kind": Scalar(str, "a custom tool kind", ("shell", "command", "script", "http")),
        "description": STR,
        "exec": STR,
        "input_schema": AnyValue(),  # a JSON Schema object; checked when the tool is assembled
        "timeout": Scalar((int, float), "a number", minimum=0.001, maximum=MAX_SECONDS),
        "max_output": Scalar(int, "an integer", minimum=1),
        "deferred": BOOL,
        "agents": STRS,
        "interpreter": STR,
        "method": STR,
        "url": STR,
        "headers": MapOf(STR),
        "body": STR,
    },
    required=("name", "kind"),
)

# [providers.NAME] and [agent]: read by norma_cli/agent/ (norma run -p)
PROVIDER = Table(
    {
        "kind": STR,  # openai | anthropic | a kind registered by a plugin (checked when the run starts)
        "base_url": STR,
        "model": STR,
        "api_key_env": STR,
        "headers": MapOf(STR),
        "timeout": Scalar((int, float), "a number", minimum=0.1, maximum=MAX_SECONDS),
        "max_tokens": Scalar(int, "an integer", minimum=1),
        "stream": BOOL,
        "max_retries": INT,
    },
    required=("kind",),
)

AGENT_SESSION = Table(
    {
        "provider": STR,
        "max_stop_continuations": INT,
        "max_turns": Scalar(int, "an integer", minimum=1),
        "max_tokens_total": Scalar(int, "an integer", minimum=1),
    }
)

# [mcp] and [mcp.servers.NAME]: read by norma_cli/mcp/config.py
SECONDS = Scalar((int, float), "a number of seconds", minimum=0.1, maximum=MAX_SECONDS)
MCP_SERVER = Table(
    {
        "command": STR,
        "args": STRS,
        "env": MapOf(STR),
        "env_passthrough": STRS,
        "cwd": STR,
        "url": STR,
        "transport": Scalar(str, "an MCP transport", ("stdio", "streamable-http", "sse")),
        "headers": MapOf(STR),
        "header_env": MapOf(STR),
        "timeout": SECONDS,
        "call_timeout": SECONDS,
        "trust_annotations": BOOL,
    }
)
MCP = Table(
    {
        # no "__" in a server name: it separates server and tool in mcp__SERVER__TOOL
        "servers": MapOf(MCP_SERVER, key_pattern=r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$"),
        "timeout": SECONDS,
        "call_timeout": SECONDS,
        "trust_annotations": BOOL,
    }
)

SCHEMA = Table(
    {
        "permissions": Table(
            {
                "mode": Scalar(str, "a permission mode", MODES),
                "roots": STRS,
                "allow": STRS,
                "ask": STRS,
                "deny": STRS,
                "rules": ListOf(RULE),
            }
        ),
        "hooks": Table({event: ListOf(HOOK) for event in HOOK_EVENTS}),
        "output": Table({"max_chars": Scalar(int, "an integer", minimum=100), "spill_dir": STR}),
        "store": Table({"url": STR}),
        "intercept": INTERCEPT,
        "tools": Table({"builtin": STRS, "background": BOOL}),
        "agents": MapOf(AGENT),
        "custom_tools": ListOf(CUSTOM_TOOL),
        "catalog": Table({"on_error": Scalar(str, "an on_error action", ("fail", "fallback"))}),
        "web": Table(
            {
                "allow_hosts": STRS,
                "proxy": STR,
                "ca_bundle": STR,
                "max_bytes": Scalar(int, "an integer", minimum=1),
                "timeout": Scalar((int, float), "a number", minimum=0.1, maximum=MAX_SECONDS),
                "max_redirects": INT,
            }
        ),
        "search": Table({"backend": STR, "api_key_env": STR, "base_url": STR}),
        "mcp": MCP,
        "providers": MapOf(PROVIDER),
        "agent": AGENT_SESSION,
    }
)


def validate(data: dict[str, Any], source: str, locate: Any) -> None:
    SCHEMA.check(data, "", Fail(source, locate))
