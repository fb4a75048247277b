"""The linter: norma's own checks and the chosen provider profiles, over tool definitions."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import unquote

from norma_cli.core.contract import TOOL_NAME_RE
from norma_cli.core.schema import json_pointer
from norma_cli.errors import UsageError
from norma_cli.lint.profiles import PROFILE_CHECKS, PROFILES, TOOL_KINDS, ProfileCheck
from norma_cli.lint.rules import RULES, Diagnostic, LintReport, Severity
from norma_cli.lint.sources import (
    LintInputError,
    Problem,
    SourceDocument,
    ToolDefinition,
    extract_tools,
    paused_gc,
)
from norma_cli.lint.walk import Node, Parts, described, resolve_local, short, walk

META_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DIALECTS_2020_12 = frozenset({META_2020_12, META_2020_12 + "#"})
# A URI no real schema uses, under which a tool's schema is registered so that a default or an
# example can be checked against one of its subschemas with the root's $refs still resolving.
_LINT_ROOT_URI = "urn:norma:lint:root"
_VALIDATOR_CACHE_SIZE = 4096
# Keywords that never change what validates: left out of a cached subschema's key.
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
    }
)
_MAX_SCHEMA_ERRORS = 10  # per tool: past this, more S001 lines only bury the first ones


class _Emit(Protocol):
    def __call__(
        self, rule: str, pointer: str, message: str, severity: Severity | None = None
    ) -> None: ...


# Keywords whose resolution depends on more than a JSON pointer into the root: a schema using
# any of them is compiled for real to find out whether its references resolve.
_SIMPLE_REFS_ONLY = frozenset({"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef"})


def _at(base: str, parts: Parts, *more: str | int) -> str:
    """The document pointer of a place inside the schema at `base`."""
    return base + json_pointer([*parts, *more])


def _refuse_remote(uri: str) -> Any:
    # Linting must never fetch: a remote $ref is reported, not followed.
    raise LookupError(f"remote $ref {uri} is not fetched by norma")


class Linter:
    """Lints tool definitions; reuse one instance (its meta-schema validator is compiled once)."""

    def __init__(self, profiles: Iterable[str] = ()) -> None:
        import jsonschema_rs

        self._rs = jsonschema_rs
        self._meta = jsonschema_rs.Draft202012Validator({"$ref": META_2020_12})
        chosen = list(dict.fromkeys(profiles))
        unknown = [p for p in chosen if p not in PROFILES]
        if unknown:
            raise UsageError(
                f"unknown profile {unknown[0]!r} (choose from {', '.join(sorted(PROFILES))})"
            )
        self.profiles = [PROFILES[p] for p in chosen]
        self._regexes: dict[str, bool] = {}
        self._validators: dict[str, Any] = {}

    # -- entry points

    def lint(self, sources: Iterable[SourceDocument]) -> LintReport:
        with paused_gc():
            return self._lint(sources)

    def _lint(self, sources: Iterable[SourceDocument]) -> LintReport:
        diagnostics: list[Diagnostic] = []
        seen: dict[str, tuple[str, str]] = {}  # name -> (file, pointer) of its first definition
        files = tools = 0
        tool_limits = [
            (check, profile)
            for profile in self.profiles
            for check in profile.checks
            if check.kind == "max-tools"
        ]
        reported_limits: set[str] = set()
        for source in sources:
            files += 1
            try:
                found, problems = extract_tools(source.data)
            except LintInputError as exc:
                raise LintInputError(f"{source.file}: {exc}") from None
            raw: list[Problem] = list(problems)
            for tool in found:
                tools += 1
                raw.extend(self.lint_tool(tool))
                label = tool.label
                if label is not None:
                    first = seen.get(label)
                    if first is None:
                        seen[label] = (source.file, tool.pointer)
                    else:
                        where = first[1] or "/"
                        if first[0] != source.file:
                            where = f"{first[0]} {where}"
                        raw.append(
                            Problem(
                                "N002",
                                tool.pointer + "/name",
                                label,
                                f"duplicate tool name {label!r} (first defined at {where})",
                            )
                        )
                for check, _profile in tool_limits:
                    limit = check.params["limit"]
                    if tools == limit + 1 and check.rule not in reported_limits:
                        reported_limits.add(check.rule)
                        message = check.message.format(count=f"more than {limit}", limit=limit)
                        raw.append(
                            Problem(check.rule, tool.pointer, label, message, check.severity)
                        )
            for p in raw:
                severity = p.severity or RULES[p.rule].severity
                diagnostics.append(
                    Diagnostic(
                        source.file,
                        p.pointer,
                        source.line_of(p.pointer),
                        p.tool,
                        p.rule,
                        severity,
                        p.message,
                    )
                )
        return LintReport(diagnostics, files, tools)

    def lint_definitions(
        self, definitions: list[dict[str, Any]], file: str = "<registered tools>"
    ) -> LintReport:
        """Lint tool definitions given as data (e.g. the registry's), without a source text."""
        return self.lint([SourceDocument(file, definitions)])

    # -- one tool

    def lint_tool(self, tool: ToolDefinition) -> list[Problem]:
        """Every diagnostic for one tool except duplicates (which need the whole run)."""
        out: list[Problem] = []
        label = tool.label

        def emit(rule: str, pointer: str, message: str, severity: Severity | None = None) -> None:
            out.append(Problem(rule, pointer, label, message, severity))

        self._check_identity(tool, emit)
        if tool.schema_key is None:
            emit(
                "S003",
                tool.pointer,
                'no input schema (input_schema, inputSchema or parameters); use {"type": '
                '"object", "properties": {}} for a tool without parameters',
            )
            return out
        base = tool.pointer + json_pointer([tool.schema_key])
        for key in tool.extra_schema_keys:
            emit(
                "T002",
                tool.pointer + json_pointer([key]),
                f'both "{tool.schema_key}" and "{key}" are present; "{tool.schema_key}" is used',
            )
        schema = tool.input_schema
        if not isinstance(schema, dict):
            found = "a boolean schema" if isinstance(schema, bool) else f"a {type(schema).__name__}"
            emit(
                "S002",
                base,
                f'input schema must be an object schema with "type": "object", not {found}',
            )
            return out
        meta_ok = self._check_schema(schema, base, emit)
        nodes = walk(schema)
        compiles = meta_ok and self._check_compiles(schema, nodes, base, emit)
        self._check_nodes(schema, nodes, compiles, base, emit)
        self._check_profiles(tool, schema, nodes, base, emit)
        return out

    def _check_identity(self, tool: ToolDefinition, emit: _Emit) -> None:
        name_ok = isinstance(tool.name, str) and bool(TOOL_NAME_RE.match(tool.name))
        if tool.name is None:
            emit("N001", tool.pointer, "tool has no name")
        elif not name_ok:
            emit(
                "N001",
                tool.pointer + "/name",
                f"tool name {short(tool.name)} does not match ^[A-Za-z0-9_-]{{1,64}}$",
            )
        if not (isinstance(tool.description, str) and tool.description.strip()):
            where = tool.pointer + "/description" if tool.description is not None else tool.pointer
            emit("D001", where, "tool has no description; the model relies on it to pick the tool")
        if not name_ok:
            return  # N001 already covers a name that no profile would accept
        severity = self._profile_severity(tool)
        for profile in self.profiles:
            for check in profile.checks:
                if check.kind != "name-pattern" or re.match(check.params["pattern"], tool.name):
                    continue
                sev = severity(check)
                if sev is not None:
                    emit(check.rule, tool.pointer + "/name", check.message, sev)

    def _check_schema(self, schema: dict[str, Any], base: str, emit: _Emit) -> bool:
        """Meta-schema, root type and dialect; True when the schema is valid JSON Schema."""
        meta_ok = bool(self._meta.is_valid(schema))
        if not meta_ok:
            seen: set[tuple[str, str]] = set()
            for err in self._meta.iter_errors(schema):
                pointer = base + json_pointer(list(err.instance_path))
                message = self._meta_message(err)
                if (pointer, message) in seen:
                    continue  # the 2020-12 meta-schema reaches some keywords by several paths
                seen.add((pointer, message))
                emit("S001", pointer, message)
                if len(seen) >= _MAX_SCHEMA_ERRORS:
                    break
        root_type = schema.get("type")
        if root_type != "object":
            found = "no type" if root_type is None else f'"type": {short(root_type)}'
            emit("S002", base, f'input schema root must have "type": "object" (found {found})')
        dialect = schema.get("$schema")
        if isinstance(dialect, str) and dialect not in DIALECTS_2020_12:
            emit(
                "S005",
                base + "/$schema",
                f"schema declares {dialect}; norma validates tool input as draft 2020-12",
            )
        return meta_ok

    def _check_compiles(
        self, schema: dict[str, Any], nodes: list[Node], base: str, emit: _Emit
    ) -> bool:
        """S004: would the runtime fail to compile this (valid) schema? True when it compiles.

        Past the meta-schema, compiling fails only on a bad regular expression or a $ref that
        resolves nowhere. For the common schema (local "#/..." refs only) those are checked
        here, each distinct regex compiled once per Linter; anything with $id, anchors,
        dynamic or remote refs gets a real compile. A full compile of every schema would cost
        more than the rest of the linting put together.
        """
        ok = True
        for node in nodes:
            sub = node.schema
            if not _SIMPLE_REFS_ONLY.isdisjoint(sub):
                return self._compile(schema, base, emit) is not None
            ref = sub.get("$ref")
            if isinstance(ref, str):
                if ref != "#" and not ref.startswith("#/"):
                    return self._compile(schema, base, emit) is not None
                target = resolve_local(schema, unquote(ref))
                if not isinstance(target, dict | bool):
                    emit("S004", _at(base, node.parts, "$ref"), f"$ref {ref!r} resolves to nothing")
                    ok = False
            pattern = sub.get("pattern")
            if isinstance(pattern, str) and not self._regex_ok(pattern):
                emit(
                    "S004",
                    _at(base, node.parts, "pattern"),
                    f"pattern {short(pattern)} is not a valid regular expression",
                )
                ok = False
            pattern_props = sub.get("patternProperties")
            if isinstance(pattern_props, dict):
                for key in pattern_props:
                    if not self._regex_ok(key):
                        emit(
                            "S004",
                            _at(base, node.parts, "patternProperties", key),
                            f"patternProperties key {short(key)} is not a valid regular expression",
                        )
                        ok = False
        return ok

    def _compile(self, schema: dict[str, Any], base: str, emit: _Emit) -> Any:
        try:
            return self._rs.Draft202012Validator(schema, retriever=_refuse_remote)
        except Exception as exc:
            emit("S004", base, f"schema cannot be compiled: {self._first_line(exc)}")
            return None

    def _value_validator(self, root: dict[str, Any], node: Node, registry_box: list[Any]) -> Any:
        """A validator for the subschema at `node`, to check its default and examples with.

        A $ref-free subschema is compiled on its own, and shared by every identical one in the
        run: tool sets repeat parameter shapes (a "limit" with a default, an enum of modes), and
        compiling costs several times what the cache key does. A subschema with a $ref is
        validated in place, through the root registered under a private URI, so the ref
        resolves as it does at run time.
        """
        if node.parent is None:
            return self._rs.Draft202012Validator(root, retriever=_refuse_remote)
        core = {k: v for k, v in node.schema.items() if k not in _ANNOTATIONS}
        key = repr(core)  # repr keeps 1, 1.0 and True apart, as JSON Schema does
        if "'$ref'" in key or "'$dynamicRef'" in key:
            if not registry_box:
                registry_box.append(self._rs.Registry([(_LINT_ROOT_URI, root)]))
            ref = {"$ref": _LINT_ROOT_URI + "#" + json_pointer(list(node.parts))}
            return self._rs.Draft202012Validator(
                ref, registry=registry_box[0], retriever=_refuse_remote
            )
        validator = self._validators.get(key)
        if validator is None:
            if len(self._validators) >= _VALIDATOR_CACHE_SIZE:
                self._validators.clear()
            validator = self._rs.Draft202012Validator(core, retriever=_refuse_remote)
            self._validators[key] = validator
        return validator

    def _regex_ok(self, pattern: str) -> bool:
        ok = self._regexes.get(pattern)
        if ok is None:
            try:  # the validator's own regex engine, so lint agrees with the runtime
                self._rs.Draft202012Validator({"pattern": pattern})
                ok = True
            except Exception:
                ok = False
            self._regexes[pattern] = ok
        return ok

    def _check_nodes(
        self, schema: dict[str, Any], nodes: list[Node], compiles: bool, base: str, emit: _Emit
    ) -> None:
        """Parameter descriptions, unsatisfiable required names, defaults and examples."""
        registry_box: list[Any] = []  # the root as a registry, built on first need
        for node in nodes:
            sub = node.schema
            if node.prop is not None and not described(sub, schema):
                emit("D002", _at(base, node.parts), f"parameter {node.prop!r} has no description")
            if "required" in sub:
                self._check_required(node, base, emit)
            if not compiles or not ("default" in sub or isinstance(sub.get("examples"), list)):
                continue
            try:
                validator = self._value_validator(schema, node, registry_box)
            except Exception:
                continue  # the schema as a whole compiles; a corner we cannot judge alone
            if "default" in sub and not validator.is_valid(sub["default"]):
                emit(
                    "V001",
                    _at(base, node.parts, "default"),
                    f"default {short(sub['default'])} is invalid: "
                    f"{self._why(validator, sub['default'])}",
                )
            for i, example in enumerate(sub.get("examples") or ()):
                if not validator.is_valid(example):
                    emit(
                        "V002",
                        _at(base, node.parts, "examples", i),
                        f"example {short(example)} is invalid: {self._why(validator, example)}",
                    )

    def _check_profiles(
        self,
        tool: ToolDefinition,
        schema: dict[str, Any],
        nodes: list[Node],
        base: str,
        emit: _Emit,
    ) -> None:
        severity = self._profile_severity(tool)
        for profile in self.profiles:
            if tool.schema_key in profile.exempt_schema_keys:
                continue
            for check in profile.checks:
                if check.kind in TOOL_KINDS:
                    continue
                sev = severity(check)
                if sev is None:
                    continue
                for parts, fields in PROFILE_CHECKS[check.kind](check, schema, nodes):
                    emit(
                        check.rule,
                        _at(base, parts),
                        check.message.format(**fields),
                        sev,
                    )

    # -- helpers

    @staticmethod
    def _profile_severity(tool: ToolDefinition) -> Callable[[ProfileCheck], Severity | None]:
        def severity(check: ProfileCheck) -> Severity | None:
            if check.when == "always":
                return check.severity
            if check.when == "strict":
                return check.severity if tool.strict else "warning"
            return check.severity if tool.strict else None

        return severity

    @staticmethod
    def _check_required(node: Node, base: str, emit: _Emit) -> None:
        sub = node.schema
        required, props = sub.get("required"), sub.get("properties")
        if not isinstance(required, list) or not isinstance(props, dict):
            return
        # Only a closed object makes an undeclared required name unsatisfiable.
        if sub.get("additionalProperties") is not False or "patternProperties" in sub:
            return
        for i, name in enumerate(required):
            if isinstance(name, str) and name not in props:
                emit(
                    "S006",
                    _at(base, node.parts, "required", i),
                    f"required property {name!r} is not in properties, and additionalProperties "
                    "is false: no input can satisfy this schema",
                )

    @staticmethod
    def _first_line(exc: BaseException) -> str:
        text = str(getattr(exc, "message", None) or exc)
        return text.strip().splitlines()[0] if text.strip() else type(exc).__name__

    @staticmethod
    def _meta_message(err: Any) -> str:
        path = list(err.instance_path)
        if path and path[-1] == "type" and err.kind.name == "anyOf":
            return (
                f"{short(err.instance)} is not a JSON Schema type (use array, boolean, integer, "
                "null, number, object or string)"
            )
        return str(err.message)

    @staticmethod
    def _why(validator: Any, instance: Any) -> str:
        for err in validator.iter_errors(instance):
            at = json_pointer(list(err.instance_path))
            return f"{at}: {err.message}" if at else str(err.message)
        return "does not match"
