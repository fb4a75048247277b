"""Provider profiles: what OpenAI, Anthropic and Gemini refuse or mishandle in a tool schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from norma_cli.core.record import field, record
from norma_cli.lint.rules import RULES, RuleInfo, Severity
from norma_cli.lint.walk import Node, Parts, short, split_pointer

# Each provider restriction is one row: a generic check (`kind`, implemented in PROFILE_CHECKS)
# with its parameters, when it applies, and where the restriction is documented. Adding a
# restriction is adding a row; adding a provider is adding a Profile.
#
# `when`:  "always"       the provider rejects (or mishandles) this for every tool;
#          "strict"       a strict-mode restriction: an error on a tool sent with "strict": true,
#                         a warning otherwise (the tool cannot be switched to strict as it is);
#          "strict-only"  checked only on a tool sent with "strict": true.


@record(frozen=True)
class ProfileCheck:
    rule: str
    name: str
    kind: str
    when: Literal["always", "strict", "strict-only"]
    severity: Severity
    message: str  # str.format fields: {keyword}, {value}, {limit}, {count}, {names}
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""


@record(frozen=True)
class Profile:
    key: str
    title: str
    checks: tuple[ProfileCheck, ...]
    # Schemas under these keys are exempt from the schema checks (not from the name checks).
    exempt_schema_keys: frozenset[str] = frozenset()


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_OPENAI_SO = "OpenAI guide 'Structured Outputs', section 'Supported schemas'"
_ANTHROPIC_STRICT = "Anthropic docs 'Structured outputs: JSON Schema limitations' (strict tool use)"
_GEMINI_FD = "Gemini API reference: FunctionDeclaration.name"
_GEMINI_SCHEMA = "Gemini API reference: Schema (a select subset of the OpenAPI 3.0 schema object)"

# OpenAI ("a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64",
# API reference tools[].function.name) and Anthropic (^[a-zA-Z0-9_-]{1,64}$, tool use docs)
# accept exactly the names norma's own N001 does, so they have no name row: it could never fire.
# Gemini's rule is stricter (a leading letter or underscore), so it has one.
PROFILES: dict[str, Profile] = {
    "openai": Profile(
        key="openai",
        title="OpenAI function calling",
        checks=(
            # "Root objects must not be anyOf and must be an object."
            ProfileCheck(
                "P-OPENAI-001",
                "root-combinator",
                "root-keywords",
                "strict",
                "error",
                'strict mode requires a plain object at the root, not "{keyword}"',
                {"keywords": _words("anyOf oneOf allOf")},
                _OPENAI_SO,
            ),
            # "additionalProperties: false must always be set in objects."
            ProfileCheck(
                "P-OPENAI-002",
                "object-not-closed",
                "closed-object",
                "strict",
                "error",
                'strict mode requires "additionalProperties": false on every object',
                source=_OPENAI_SO,
            ),
            # "All fields or function parameters must be specified as required."
            ProfileCheck(
                "P-OPENAI-003",
                "property-not-required",
                "all-required",
                "strict",
                "error",
                'strict mode requires every property in "required" ({names} missing); '
                'express optional as a union with "null"',
                source=_OPENAI_SO,
            ),
            # The guide's lists of keywords that are not supported (strings, objects, arrays,
            # composition); oneOf is refused as "'oneOf' is not permitted" (anyOf is the
            # supported union). pattern, format, minimum/maximum, multipleOf, minItems/maxItems
            # are supported.
            ProfileCheck(
                "P-OPENAI-004",
                "keyword-unsupported",
                "keywords",
                "strict",
                "error",
                '"{keyword}" is not supported in strict mode',
                {
                    "keywords": _words(
                        "allOf oneOf not if then else dependentRequired dependentSchemas "
                        "patternProperties unevaluatedProperties propertyNames minProperties "
                        "maxProperties unevaluatedItems contains minContains maxContains "
                        "uniqueItems minLength maxLength"
                    )
                },
                _OPENAI_SO,
            ),
            ProfileCheck(
                "P-OPENAI-005",
                "format-unsupported",
                "format-allowed",
                "strict",
                "error",
                'format "{value}" is not supported in strict mode',
                {"allowed": _words("date-time time date duration email hostname ipv4 ipv6 uuid")},
                _OPENAI_SO,
            ),
            # Strict mode makes every property required, so a default is never used; Azure
            # OpenAI rejects it outright ("'default' is not permitted", openai-agents-python
            # issue #4390).
            ProfileCheck(
                "P-OPENAI-006",
                "default-in-strict",
                "keywords",
                "strict-only",
                "warning",
                '"default" has no effect in strict mode, and some OpenAI-compatible endpoints '
                "reject it",
                {"keywords": _words("default")},
                _OPENAI_SO,
            ),
            ProfileCheck(
                "P-OPENAI-007",
                "nesting-too-deep",
                "max-nesting",
                "strict",
                "error",
                "objects nest {count} levels deep; strict mode allows {limit}",
                {"limit": 10},
                _OPENAI_SO,
            ),
            ProfileCheck(
                "P-OPENAI-008",
                "too-many-properties",
                "max-properties",
                "strict",
                "error",
                "the schema has {count} object properties; strict mode allows {limit}",
                {"limit": 5000},
                _OPENAI_SO,
            ),
            ProfileCheck(
                "P-OPENAI-009",
                "too-many-enum-values",
                "max-enum-values",
                "strict",
                "error",
                "the schema has {count} enum values; strict mode allows {limit}",
                {"limit": 1000},
                _OPENAI_SO,
            ),
            # "A max of 128 functions are supported." (tools parameter)
            ProfileCheck(
                "P-OPENAI-010",
                "too-many-tools",
                "max-tools",
                "always",
                "warning",
                "{count} tools linted; one OpenAI request accepts at most {limit}",
                {"limit": 128},
                "OpenAI API reference, Chat Completions: tools",
            ),
        ),
    ),
    "anthropic": Profile(
        key="anthropic",
        title="Anthropic tool use",
        checks=(
            # The API answers "input_schema does not support oneOf, allOf, or anyOf at the top
            # level" (seen in anthropics/claude-code issues #5319, #5878, #5973).
            ProfileCheck(
                "P-ANTHROPIC-001",
                "root-combinator",
                "root-keywords",
                "always",
                "error",
                'input_schema does not support "{keyword}" at the top level',
                {"keywords": _words("oneOf allOf anyOf")},
                "Anthropic Messages API error for tools[].input_schema",
            ),
            ProfileCheck(
                "P-ANTHROPIC-002",
                "object-not-closed",
                "closed-object",
                "strict-only",
                "error",
                'strict tool use requires "additionalProperties": false on every object',
                source=_ANTHROPIC_STRICT,
            ),
            ProfileCheck(
                "P-ANTHROPIC-003",
                "keyword-unsupported",
                "keywords",
                "strict-only",
                "error",
                '"{keyword}" is not supported in strict tool use',
                {
                    "keywords": _words(
                        "minimum maximum exclusiveMinimum exclusiveMaximum multipleOf minLength "
                        "maxLength maxItems uniqueItems contains minContains maxContains"
                    )
                },
                _ANTHROPIC_STRICT,
            ),
            ProfileCheck(
                "P-ANTHROPIC-004",
                "min-items-unsupported",
                "keyword-max",
                "strict-only",
                "error",
                '"minItems": {value} is not supported in strict tool use (only 0 or 1)',
                {"keyword": "minItems", "limit": 1},
                _ANTHROPIC_STRICT,
            ),
            ProfileCheck(
                "P-ANTHROPIC-005",
                "recursive-schema",
                "recursive-ref",
                "strict-only",
                "error",
                'recursive "$ref": "{value}" is not supported in strict tool use',
                source=_ANTHROPIC_STRICT,
            ),
        ),
    ),
    "gemini": Profile(
        key="gemini",
        title="Gemini function calling",
        # parametersJsonSchema takes full JSON Schema; only `parameters` is the OpenAPI subset.
        exempt_schema_keys=frozenset({"parametersJsonSchema"}),
        checks=(
            ProfileCheck(
                "P-GEMINI-001",
                "function-name",
                "name-pattern",
                "always",
                "error",
                "Gemini function names must start with a letter or '_' and use a-z, A-Z, 0-9, "
                "'_', '.', ':' or '-', at most 64 characters",
                {"pattern": r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$"},
                _GEMINI_FD,
            ),
            # Any other key is refused: 'Invalid JSON payload received. Unknown name
            # "additionalProperties" ... Cannot find field.' (same for $schema, const, $ref, ...).
            ProfileCheck(
                "P-GEMINI-002",
                "keyword-unsupported",
                "keywords-allowed",
                "always",
                "error",
                '"{keyword}" is not a field of the Gemini Schema object (the request fails with '
                '"Unknown name"); send the schema as parametersJsonSchema or drop the keyword',
                {
                    "allowed": _words(
                        "anyOf default description enum example format items maximum maxItems "
                        "maxLength maxProperties minimum minItems minLength minProperties "
                        "nullable pattern properties propertyOrdering required title type"
                    )
                },
                _GEMINI_SCHEMA,
            ),
            # Schema.type is a single enum value: a list fails with "Proto field is not
            # repeating, cannot start list".
            ProfileCheck(
                "P-GEMINI-003",
                "type-array",
                "type-array",
                "always",
                "error",
                '"type" must be a single type for Gemini; use "nullable": true instead of a '
                'type list with "null"',
                source=_GEMINI_SCHEMA,
            ),
            # Schema.enum is `repeated string`: numbers fail with "Invalid value ... (TYPE_STRING)".
            ProfileCheck(
                "P-GEMINI-004",
                "enum-not-string",
                "enum-non-string",
                "always",
                "error",
                "Gemini enum values must be strings (found {value})",
                source=_GEMINI_SCHEMA,
            ),
            # "parameters.properties: should be non-empty for OBJECT type".
            ProfileCheck(
                "P-GEMINI-005",
                "object-without-properties",
                "object-without-properties",
                "always",
                "error",
                "Gemini rejects an object schema without properties; omit `parameters` for a "
                "function that takes none",
                source=_GEMINI_SCHEMA,
            ),
            ProfileCheck(
                "P-GEMINI-006",
                "format-unsupported",
                "format-allowed",
                "always",
                "warning",
                'format "{value}" is not one the Gemini API supports (enum, date-time, int32, '
                "int64, float, double)",
                {"allowed": _words("enum date-time int32 int64 float double")},
                "Firebase AI Logic reference: Schema.format (Gemini Developer API)",
            ),
        ),
    ),
}

_Hit = tuple[Parts, dict[str, Any]]  # where (relative to the schema root) and format fields
_Check = Callable[[ProfileCheck, dict[str, Any], list[Node]], Iterator[_Hit]]


def _check_root_keywords(
    check: ProfileCheck, root: dict[str, Any], _: list[Node]
) -> Iterator[_Hit]:
    banned = check.params["keywords"]
    for keyword in root:
        if keyword in banned:
            yield (keyword,), {"keyword": keyword}


def _check_keywords(check: ProfileCheck, _: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    banned = check.params["keywords"]
    for node in nodes:
        for keyword in node.schema:
            if keyword in banned:
                yield (*node.parts, keyword), {"keyword": keyword}


def _check_keywords_allowed(
    check: ProfileCheck, _: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    allowed = check.params["allowed"]
    for node in nodes:
        for keyword in node.schema:
            if keyword not in allowed:
                yield (*node.parts, keyword), {"keyword": keyword}


def _check_type_array(_c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    for node in nodes:
        if isinstance(node.schema.get("type"), list):
            yield (*node.parts, "type"), {"value": short(node.schema["type"])}


def _check_enum_non_string(
    _c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    for node in nodes:
        values = node.schema.get("enum")
        if isinstance(values, list):
            bad = [v for v in values if not isinstance(v, str)]
            if bad:
                yield (*node.parts, "enum"), {"value": short(bad[0])}


def _check_closed_object(_c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    for node in nodes:
        if node.is_object and node.schema.get("additionalProperties") is not False:
            yield node.parts, {}


def _check_all_required(_c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    for node in nodes:
        props = node.schema.get("properties")
        if not isinstance(props, dict) or not props:
            continue
        required = node.schema.get("required")
        listed = set(required) if isinstance(required, list) else set()
        missing = [name for name in props if name not in listed]
        if missing:
            names = ", ".join(json.dumps(m) for m in missing[:5])
            if len(missing) > 5:
                names += f" and {len(missing) - 5} more"
            yield node.parts, {"names": names}


def _check_object_without_properties(
    _c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    for node in nodes:
        if node.is_object and not node.schema.get("properties"):
            yield node.parts, {}


def _check_format_allowed(
    check: ProfileCheck, _: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    allowed = check.params["allowed"]
    for node in nodes:
        fmt = node.schema.get("format")
        if isinstance(fmt, str) and fmt not in allowed:
            yield (*node.parts, "format"), {"value": fmt}


def _check_keyword_max(check: ProfileCheck, _: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    keyword, limit = check.params["keyword"], check.params["limit"]
    for node in nodes:
        value = node.schema.get(keyword)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > limit:
            yield (*node.parts, keyword), {"value": value, "limit": limit}


def _check_recursive_ref(_c: ProfileCheck, _r: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    for node in nodes:
        ref = node.schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            continue
        target = tuple(split_pointer(ref[1:]))
        here = tuple(str(p) for p in node.parts)
        if here[: len(target)] == target:  # the ref points at this node or one enclosing it
            yield (*node.parts, "$ref"), {"value": ref}


def _check_max_nesting(check: ProfileCheck, _: dict[str, Any], nodes: list[Node]) -> Iterator[_Hit]:
    limit = check.params["limit"]
    deepest = max(nodes, key=lambda n: n.nesting, default=None)
    if deepest is not None and deepest.nesting > limit:
        yield deepest.parts, {"count": deepest.nesting, "limit": limit}


def _check_max_properties(
    check: ProfileCheck, _: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    limit = check.params["limit"]
    count = sum(1 for n in nodes if n.prop is not None)
    if count > limit:
        yield (), {"count": count, "limit": limit}


def _check_max_enum_values(
    check: ProfileCheck, _: dict[str, Any], nodes: list[Node]
) -> Iterator[_Hit]:
    limit = check.params["limit"]
    count = sum(len(n.schema["enum"]) for n in nodes if isinstance(n.schema.get("enum"), list))
    if count > limit:
        yield (), {"count": count, "limit": limit}


PROFILE_CHECKS: dict[str, _Check] = {
    "root-keywords": _check_root_keywords,
    "keywords": _check_keywords,
    "keywords-allowed": _check_keywords_allowed,
    "type-array": _check_type_array,
    "enum-non-string": _check_enum_non_string,
    "closed-object": _check_closed_object,
    "all-required": _check_all_required,
    "object-without-properties": _check_object_without_properties,
    "format-allowed": _check_format_allowed,
    "keyword-max": _check_keyword_max,
    "recursive-ref": _check_recursive_ref,
    "max-nesting": _check_max_nesting,
    "max-properties": _check_max_properties,
    "max-enum-values": _check_max_enum_values,
}
# Checks on the tool itself or the whole run rather than on schema nodes.
TOOL_KINDS = frozenset({"name-pattern", "max-tools"})


def _register_rules() -> None:
    """Give every profile row a rule entry (for SARIF and --format json), refusing typos early."""
    for profile in PROFILES.values():
        for check in profile.checks:
            if check.kind not in PROFILE_CHECKS and check.kind not in TOOL_KINDS:
                raise AssertionError(f"{check.rule}: unknown check kind {check.kind!r}")
            RULES[check.rule] = RuleInfo(
                check.rule,
                check.name,
                check.severity,
                f"{profile.title}: {check.message.split(';')[0]} (source: {check.source})",
            )


_register_rules()
