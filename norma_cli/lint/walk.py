"""Walking a JSON Schema: every subschema with its path, following schema keywords only."""

from __future__ import annotations

import json
from typing import Any

Parts = tuple[str | int, ...]


def split_pointer(pointer: str) -> list[str]:
    """The unescaped reference tokens of an RFC 6901 pointer."""
    if not pointer:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


# How each schema-valued keyword holds its subschemas.
_MAP, _ONE, _LIST = "map", "one", "list"
_KINDS = {
    **dict.fromkeys(
        ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"), _MAP
    ),
    **dict.fromkeys(
        (
            "additionalProperties",
            "items",  # a list here is draft-07 tuple form
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
        ),
        _ONE,
    ),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), _LIST),
}
# Subschemas under these only constrain input that other keywords describe, so their
# properties are not parameters that need descriptions of their own.
_CONSTRAINT_KEYWORDS = frozenset(
    {"if", "then", "else", "not", "contains", "propertyNames", "dependentSchemas", "allOf"}
)


class Node:
    """One subschema. Its path is kept as a link to its parent and the step from there, and
    spelled out only when a diagnostic needs it."""

    __slots__ = ("_is_object", "nesting", "parent", "prop", "schema", "step")

    def __init__(
        self,
        schema: dict[str, Any],
        parent: Node | None,
        step: Parts,
        prop: str | None,
        nesting: int,
    ) -> None:
        self.schema = schema
        self.parent = parent
        self.step = step  # keys from the parent to here: ("items",) or ("properties", "path")
        self.prop = prop  # the property name when this declares a parameter under "properties"
        self.nesting = nesting  # how many "properties" levels deep
        self._is_object: bool | None = None

    @property
    def is_object(self) -> bool:
        """Does this subschema describe an object (by "type", or by "properties" alone)?"""
        if self._is_object is None:
            self._is_object = is_object_schema(self.schema)
        return self._is_object

    @property
    def parts(self) -> Parts:
        """The path from the schema root."""
        steps: list[Parts] = []
        node: Node | None = self
        while node is not None:
            steps.append(node.step)
            node = node.parent
        return tuple(part for step in reversed(steps) for part in step)


def walk(root: dict[str, Any]) -> list[Node]:
    """Every subschema (objects only; boolean schemas have nothing to check), in document order.

    Only schema-valued keywords are followed, so a property *named* "default" is not mistaken
    for the keyword. Runs once per tool and dominates linting time, hence the plain loop.
    """
    out: list[Node] = []
    # (schema, parent, step, property name, nesting, declares parameters)
    stack: list[tuple[Any, Node | None, Parts, str | None, int, bool]] = [
        (root, None, (), None, 0, True)
    ]
    push = stack.append
    while stack:
        schema, parent, step, prop, nesting, declares = stack.pop()
        if not isinstance(schema, dict):
            continue
        node = Node(schema, parent, step, prop, nesting)
        out.append(node)
        for key in reversed(schema):  # pushed last-first, so popped in document order
            kind = _KINDS.get(key)
            if kind is None:
                continue
            value = schema[key]
            inner = declares and key not in _CONSTRAINT_KEYWORDS
            if kind is _MAP:
                if isinstance(value, dict):
                    is_props = key == "properties"
                    depth = nesting + 1 if is_props else nesting
                    named = is_props and inner
                    for name in reversed(value):
                        push(
                            (value[name], node, (key, name), name if named else None, depth, inner)
                        )
            elif isinstance(value, list):
                for i in range(len(value) - 1, -1, -1):
                    push((value[i], node, (key, i), None, nesting, inner))
            elif kind is _ONE:
                push((value, node, (key,), None, nesting, inner))
    return out


def is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        return True
    return kind is None and "properties" in schema


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
