"""quickcheck may only ever answer "certainly valid" where jsonschema-rs agrees (differential)."""

from __future__ import annotations

import random
from typing import Any

import jsonschema_rs
import pytest

from norma_cli.core import quickcheck
from norma_cli.core.schema import SchemaCache

TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]


def rand_schema(rng: random.Random, depth: int = 0) -> Any:
    if rng.random() < 0.08:
        return rng.choice([True, False])
    schema: dict[str, Any] = {}
    kind = rng.choice([*TYPES, None])
    if kind is not None:
        schema["type"] = kind if rng.random() < 0.8 else rng.sample(TYPES, rng.randint(1, 3))
    if rng.random() < 0.3:
        schema["description"] = "d"
    if kind in ("object", None) and depth < 3 and rng.random() < 0.7:
        props = {f"p{i}": rand_schema(rng, depth + 1) for i in range(rng.randint(0, 4))}
        schema["properties"] = props
        if props and rng.random() < 0.6:
            schema["required"] = rng.sample(sorted(props), rng.randint(1, len(props)))
        if rng.random() < 0.5:
            schema["additionalProperties"] = rng.choice([False, True, rand_schema(rng, depth + 1)])
    if kind in ("array", None) and depth < 3 and rng.random() < 0.6:
        schema["items"] = rand_schema(rng, depth + 1)
        if rng.random() < 0.4:
            schema["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.4:
            schema["maxItems"] = rng.randint(0, 3)
    if kind in ("string", None) and rng.random() < 0.5:
        if rng.random() < 0.5:
            schema["enum"] = rng.sample(["a", "b", "c", "1", ""], rng.randint(1, 3))
        if rng.random() < 0.3:
            schema["const"] = rng.choice(["a", "1", ""])
        if rng.random() < 0.5:
            schema["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.5:
            schema["maxLength"] = rng.randint(0, 4)
    if kind in ("integer", "number", None) and rng.random() < 0.6:
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if rng.random() < 0.4:
                schema[key] = rng.choice([0, 1, -1, 2.5, 10])
    return schema


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randint(0, 10 if depth < 3 else 7)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice([0, 1, -1, 3, 10, 11, 2**70])
    if choice == 3:
        return rng.choice([0.0, 1.0, 2.5, -0.5, 10.0, float("nan"), float("inf")])
    if choice in (4, 5, 6, 7):
        return rng.choice(["", "a", "b", "c", "1", "ab", "abcd", "é", "日本語"])
    if choice in (8, 9):
        return {
            f"p{i}": rand_value(rng, depth + 1) for i in rng.sample(range(6), rng.randint(0, 4))
        }
    return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("seed", range(8))
def test_never_says_valid_when_jsonschema_rs_disagrees(seed: int) -> None:
    rng = random.Random(seed)
    said_valid = 0
    for _ in range(600):
        schema = rand_schema(rng)
        if not isinstance(schema, dict):
            schema = {"type": "object", "additionalProperties": schema}
        assert quickcheck.eligible(schema), schema
        validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=False)
        for _ in range(8):
            value = rand_value(rng)
            if quickcheck.certainly_valid(schema, value):
                said_valid += 1
                assert validator.is_valid(value), (schema, value)
    assert said_valid > 200  # the fast answer is actually given, not always deferred


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}},
        {"anyOf": [{"type": "string"}]},
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"type": "string", "enum": [1, 2]},
        {"required": ["a", "a"]},
        {"type": ["string", "string"]},
        {"minLength": -1},
        {"properties": {"a": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#"},
    ],
)
def test_outside_the_subset_is_not_eligible(schema: dict) -> None:
    assert not quickcheck.eligible(schema)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (
            {"type": "integer"},
            1.0,
        ),  # valid to JSON Schema, but quickcheck leaves it to the validator
        ({"type": "number"}, True),
        ({"enum": ["1"]}, 1),
        ({"type": "number"}, float("nan")),
    ],
)
def test_json_and_python_disagreements_are_not_sure(schema: dict, value: Any) -> None:
    assert not quickcheck.certainly_valid(schema, value)


def test_schema_cache_uses_the_full_validator_for_errors() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    cache = SchemaCache()
    assert cache.validate(schema, {"n": 1}) == []
    issues = cache.validate(schema, {"n": "x"})
    assert [(i.pointer, "integer" in i.message) for i in issues] == [("/n", True)]
    assert cache.validate(schema, {"n": 1.0}) == []  # the full validator accepts 1.0


def test_one_shot_with_valid_input_never_loads_the_full_validator(tmp_path, isolated_env) -> None:  # type: ignore[no-untyped-def]
    import os
    import re
    import subprocess
    import sys

    (tmp_path / "a.txt").write_text("x")

    def imported(tool_input: str) -> set[str]:
        proc = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "norma_cli",
                "run",
                "Read",
                "-i",
                tool_input,
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(os.environ),
        )
        return {m.group(1) for m in re.finditer(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M)}

    assert "jsonschema_rs" not in imported('{"file_path": "a.txt"}')
    assert "jsonschema_rs" in imported('{"file_path": 7}')  # an error needs its message
