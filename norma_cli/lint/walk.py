"""Walking a JSON Schema: every subschema with its path, following schema keywords only."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

Parts = tuple[str | int, ...]


def split_pointer(pointer: str) -> list[str]:
    """The unescaped reference tokens of an RFC 6901 pointer."""
    if not pointer:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_ONE_KEYWORDS = frozenset(
    {
        "additionalProperties",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "additionalItems",
        "contentSchema",
    }
)
_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


# Subschemas under these only constrain input that other keywords describe, so their
# properties are not parameters that need descriptions of their own.
_CONSTRAINT_KEYWORDS = frozenset(
    {"if", "then", "else", "not", "contains", "propertyNames", "dependentSchemas", "allOf"}
)


class Node(NamedTuple):
    parts: Parts  # path from the schema root
    schema: dict[str, Any]
    prop: str | None  # the property name when this declares a parameter under "properties"
    nesting: int  # how many "properties" levels deep


def walk(root: dict[str, Any]) -> list[Node]:
    """Every subschema (objects only; boolean schemas have nothing to check), in document order.

    Only schema-valued keywords are followed, so a property *named* "default" is not mistaken
    for the keyword.
    """
    out: list[Node] = []
    # (parts, schema, property name, nesting, declares parameters)
    stack: list[tuple[Parts, Any, str | None, int, bool]] = [((), root, None, 0, True)]
    while stack:
        parts, node, prop, nesting, declares = stack.pop()
        if not isinstance(node, dict):
            continue
        out.append(Node(parts, node, prop, nesting))
        children: list[tuple[Parts, Any, str | None, int, bool]] = []
        for key, value in node.items():
            inner = declares and key not in _CONSTRAINT_KEYWORDS
            if key in _MAP_KEYWORDS and isinstance(value, dict):
                is_props = key == "properties"
                depth = nesting + 1 if is_props else nesting
                for name, sub in value.items():
                    named = name if is_props and inner else None
                    children.append(((*parts, key, name), sub, named, depth, inner))
            elif key in _ONE_KEYWORDS:
                if isinstance(value, list):  # draft-07 tuple "items"
                    for i, sub in enumerate(value):
                        children.append(((*parts, key, i), sub, None, nesting, inner))
                else:
                    children.append(((*parts, key), value, None, nesting, inner))
            elif key in _LIST_KEYWORDS and isinstance(value, list):
                for i, sub in enumerate(value):
                    children.append(((*parts, key, i), sub, None, nesting, inner))
        stack.extend(reversed(children))
    return out


def is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        return True
    return kind is None and "properties" in schema


def has_ref(schema: Any) -> bool:
    if isinstance(schema, dict):
        if "$ref" in schema or "$dynamicRef" in schema:
            return True
        return any(has_ref(v) for v in schema.values() if isinstance(v, dict | list))
    if isinstance(schema, list):
        return any(has_ref(v) for v in schema if isinstance(v, dict | list))
    return False


def resolve_local(root: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in split_pointer(ref[1:]):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def described(schema: Any, root: dict[str, Any]) -> bool:
    if not isinstance(schema, dict):
        return True  # a boolean schema has nothing to describe
    desc = schema.get("description")
    if isinstance(desc, str) and desc.strip():
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = resolve_local(root, ref)
        if isinstance(target, dict):
            tdesc = target.get("description")
            return isinstance(tdesc, str) and bool(tdesc.strip())
    return False


def short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
