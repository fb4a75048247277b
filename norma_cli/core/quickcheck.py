"""A conservative pure-Python check for the simple schemas most tools have.

Loading the full validator (jsonschema-rs) costs a one-shot ``norma run`` more than the call
itself. Most tool schemas use a small subset of draft 2020-12: types, properties, required,
additionalProperties, enum of strings, bounds and lengths, items. For such a schema this
module can say "certainly valid" without loading anything.

It only ever answers *valid* or *not sure*: any keyword outside the subset, any value whose
JSON meaning differs from Python's (``1.0`` as an integer, ``True`` against a number enum,
NaN), any failed check — all answer *not sure*, and the caller asks jsonschema-rs, which also
produces the error messages. So this can make validation faster, never looser; a differential
test against jsonschema-rs holds it to that.
"""

from __future__ import annotations

import math
from typing import Any

# Keywords that never affect validity (annotations, and formats: not asserted by default in
# draft 2020-12 and not by norma's jsonschema-rs settings either).
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly", "format"}
)  # fmt: skip
_SCHEMA_URIS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
_CHECKED = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "const", "minimum",
     "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "items",
     "minItems", "maxItems"}
)  # fmt: skip


def eligible(schema: Any, root: bool = True) -> bool:
    """Whether every keyword of ``schema`` (recursively) is in the subset, well-formed."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key == "$schema":
            if not root or value not in _SCHEMA_URIS:
                return False
        elif key in _ANNOTATIONS:
            continue
        elif key not in _CHECKED or not _well_formed(key, value):
            return False
    return True


def _nonneg_int(value: Any) -> bool:
    return type(value) is int and value >= 0


def _finite_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _well_formed(key: str, value: Any) -> bool:
    if key == "type":
        types = value if isinstance(value, list) else [value]
        unique = len(set(map(str, types))) == len(types)  # the meta-schema wants them unique
        return bool(types) and unique and all(isinstance(t, str) and t in _TYPES for t in types)
    if key == "properties":
        return isinstance(value, dict) and all(eligible(v, False) for v in value.values())
    if key == "required":
        return (
            isinstance(value, list)
            and all(isinstance(v, str) for v in value)
            and len(set(value)) == len(value)
        )
    if key in ("additionalProperties", "items"):
        return eligible(value, False)
    if key == "enum":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if key == "const":
        return isinstance(value, str)
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _finite_number(value)
    return _nonneg_int(value)  # minLength maxLength minItems maxItems


def certainly_valid(schema: Any, value: Any) -> bool:
    """True only when ``value`` satisfies the (eligible) ``schema``; False means not sure."""
    if schema is True:
        return True
    if schema is False:
        return False
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, t) for t in types):
            return False
    if "enum" in schema and not (type(value) is str and value in schema["enum"]):
        return False
    if "const" in schema and not (type(value) is str and value == schema["const"]):
        return False
    if type(value) is str:
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get(
            "maxLength", len(value)
        ):
            return False
    elif type(value) in (int, float):
        if not _within_bounds(schema, value):
            return False
    elif type(value) is dict:
        return _object_ok(schema, value)
    elif type(value) is list:
        return _array_ok(schema, value)
    return True


def _is_type(value: Any, name: str) -> bool:
    kind = type(value)
    if name == "string":
        return kind is str
    if name == "integer":
        return kind is int  # 1.0 is an integer to JSON Schema: not sure, let the validator say
    if name == "number":
        return kind is int or (kind is float and math.isfinite(value))
    if name == "object":
        return kind is dict
    if name == "array":
        return kind is list
    if name == "boolean":
        return kind is bool
    return value is None  # null


def _within_bounds(schema: dict[str, Any], value: float) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if "minimum" in schema and not value >= schema["minimum"]:
        return False
    if "maximum" in schema and not value <= schema["maximum"]:
        return False
    if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
        return False
    return not ("exclusiveMaximum" in schema and not value < schema["exclusiveMaximum"])


def _object_ok(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    if any(name not in value for name in schema.get("required", ())):
        return False
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    return all(certainly_valid(properties.get(key, extra), item) for key, item in value.items())


def _array_ok(schema: dict[str, Any], value: list[Any]) -> bool:
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
        return False
    items = schema.get("items", True)
    return all(certainly_valid(items, item) for item in value)
