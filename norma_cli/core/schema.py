"""JSON Schema (draft 2020-12) validation of tool input, compiled once per schema.

The validator is jsonschema-rs: it passed the most of the official test suite for draft
2020-12 at the lowest per-call cost of the candidates measured in ``bench/schema_validators.py``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from norma_cli.core import quickcheck
from norma_cli.core.record import record
from norma_cli.errors import NormaError


def json_pointer(parts: list[str | int]) -> str:
    """RFC 6901 pointer for a path of keys and indexes ("" is the whole document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@record(frozen=True)
class SchemaIssue:
    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"


class InvalidSchema(NormaError):
    """The schema itself is not a valid draft 2020-12 schema."""


def _refuse_remote(uri: str) -> Any:
    # A tool schema must never make norma fetch anything over the network.
    raise LookupError(f"remote $ref {uri} is not fetched")


class CompiledSchema:
    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema_rs

        try:
            self._validator = jsonschema_rs.Draft202012Validator(
                schema, validate_formats=False, retriever=_refuse_remote
            )
        except jsonschema_rs.ValidationError as exc:
            raise InvalidSchema(f"invalid JSON Schema: {exc.message}") from None
        except Exception as exc:  # a bad $ref or regex in the schema
            raise InvalidSchema(f"invalid JSON Schema: {str(exc).splitlines()[0]}") from None

    def is_valid(self, instance: Any) -> bool:
        return bool(self._validator.is_valid(instance))

    def issues(self, instance: Any, limit: int = 20) -> list[SchemaIssue]:
        out: list[SchemaIssue] = []
        for err in self._validator.iter_errors(instance):
            out.append(SchemaIssue(json_pointer(list(err.instance_path)), err.message))
            if len(out) >= limit:
                break
        return out


class SchemaCache:
    """Compiles each distinct schema once; lookups are by object identity, then by content."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[dict[str, Any], CompiledSchema]] = {}
        self._by_text: dict[str, CompiledSchema] = {}
        self._quick: dict[int, tuple[dict[str, Any], bool]] = {}
        self._lock = threading.Lock()

    def get(self, schema: dict[str, Any]) -> CompiledSchema:
        hit = self._by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
        with self._lock:
            compiled = self._by_text.get(key)
            if compiled is None:
                compiled = CompiledSchema(schema)
                self._by_text[key] = compiled
            self._by_id[id(schema)] = (schema, compiled)
        return compiled

    def validate(self, schema: dict[str, Any], instance: Any) -> list[SchemaIssue]:
        # Simple schemas and valid input: answered without loading jsonschema-rs (quickcheck
        # only ever says "certainly valid"; everything else goes to the full validator).
        quick = self._quick.get(id(schema))
        if quick is None or quick[0] is not schema:
            quick = (schema, quickcheck.eligible(schema))
            self._quick[id(schema)] = quick
        if quick[1] and quickcheck.certainly_valid(schema, instance):
            return []
        compiled = self.get(schema)
        if compiled.is_valid(instance):
            return []
        return compiled.issues(instance)
