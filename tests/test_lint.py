"""`norma tools lint PATH...`: real files in tmp_path, the command run through CliRunner (and once
through the installed `norma` CLI), outcomes read from stdout, stderr and the exit code."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from norma_cli.cli.lint import PROFILE_KEYS, lint
from norma_cli.lint import PROFILES, RULES


def run(*args: str | Path, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(lint, [str(a) for a in args], input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(textwrap.dedent(content).lstrip())
    else:
        path.write_text(json.dumps(content, indent=2))
    return path


def diagnostics(*args: str | Path) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = run(*args, "--format", "json")
    return code, json.loads(out)["diagnostics"]


def rules_of(diags: list[dict[str, Any]]) -> list[str]:
    return [d["rule"] for d in diags]


def good_tool(name: str = "read_file", **schema_extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "Read a text file from the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to read."},
                "limit": {"type": "integer", "description": "Max lines.", "default": 100},
            },
            "required": ["path"],
            **schema_extra,
        },
    }


def with_schema(schema: dict[str, Any], **tool: Any) -> dict[str, Any]:
    return {"name": "t", "description": "A tool.", "input_schema": schema, **tool}


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


# --------------------------------------------------------------------------- inputs and shapes


def test_a_clean_tool_exits_0_with_nothing_on_stdout(tmp_path: Path) -> None:
    code, out, err = run(write(tmp_path, "tool.json", good_tool()))
    assert (code, out) == (0, "")
    assert err.strip() == "norma tools lint: no problems in 1 tool (1 file)"


SHAPES = {
    "single": lambda t: t,
    "list": lambda t: [good_tool("other"), t],
    "mcp": lambda t: {"tools": [good_tool("other"), _mcp(t)]},
    "openai": lambda t: {"type": "function", "function": _openai(t)},
    "openai-list": lambda t: [{"type": "function", "function": _openai(t)}],
    "openai-tools": lambda t: {"tools": [{"type": "function", "function": _openai(t)}]},
    "responses": lambda t: [{"type": "function", **_openai(t), "strict": False}],
    "gemini": lambda t: {"tools": [{"functionDeclarations": [_openai(t)]}]},
}
POINTERS = {
    "single": "",
    "list": "/1",
    "mcp": "/tools/1",
    "openai": "/function",
    "openai-list": "/0/function",
    "openai-tools": "/tools/0/function",
    "responses": "/0",
    "gemini": "/tools/0/functionDeclarations/0",
}


def _mcp(t: dict[str, Any]) -> dict[str, Any]:
    t = dict(t)
    t["inputSchema"] = t.pop("input_schema")
    return t


def _openai(t: dict[str, Any]) -> dict[str, Any]:
    t = dict(t)
    t["parameters"] = t.pop("input_schema")
    return t


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_json_shape_is_found_and_pointed_into(tmp_path: Path, shape: str) -> None:
    bad = good_tool("broken")
    del bad["description"]
    code, diags = diagnostics(write(tmp_path, "tools.json", SHAPES[shape](bad)))
    assert code == 1
    assert [(d["rule"], d["tool"], d["pointer"]) for d in diags] == [
        ("D001", "broken", POINTERS[shape])
    ]


def test_toml_single_tool_with_line_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "grep.toml",
        '''
        name = "grep"
        description = """Search
        files."""

        [input_schema]
        type = "object"

        [input_schema.properties.pattern]
        type = "string"

        [input_schema.properties.limit]
        type = "integer"
        description = "Max hits."
        default = "ten"
        ''',
    )
    code, out, _ = run(path)
    assert code == 1
    assert out.splitlines() == [
        f"{path}:8: warning D002 grep: parameter 'pattern' has no description "
        "[/input_schema/properties/pattern]",
        f'{path}:14: error V001 grep: default "ten" is invalid: "ten" is not of type "integer" '
        "[/input_schema/properties/limit/default]",
    ]


def test_toml_array_of_tables_lines_follow_each_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tools.toml",
        """
        [[tools]]
        name = "a"
        description = "A."
        [tools.input_schema]
        type = "object"

        [[tools]]
        name = "b"
        [tools.input_schema]
        type = "object"
        [tools.input_schema.properties.x]
        type = "string"
        """,
    )
    code, diags = diagnostics(path)
    assert code == 1
    assert [(d["rule"], d["tool"], d["line"]) for d in diags] == [
        ("D001", "b", 7),
        ("D002", "b", 11),
    ]


def test_json_line_numbers_point_at_the_key(tmp_path: Path) -> None:
    tool = good_tool()
    tool["input_schema"]["properties"]["limit"]["default"] = "many"
    path = write(tmp_path, "t.json", {"tools": [good_tool("first"), tool]})
    lines = path.read_text().splitlines()
    code, diags = diagnostics(path)
    assert code == 1
    (diag,) = diags
    assert diag["pointer"] == "/tools/1/input_schema/properties/limit/default"
    assert lines[diag["line"] - 1].strip() == '"default": "many"'


def test_a_directory_stands_for_its_json_and_toml_files(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    write(tmp_path, "tools/a.json", good_tool("a"))
    write(
        tmp_path,
        "tools/b.toml",
        'name = "b"\ndescription = "B."\n[input_schema]\ntype = "object"\n',
    )
    write(tmp_path, "tools/notes.txt", "not a tool")
    code, _, err = run(tmp_path / "tools")
    assert code == 0
    assert "in 2 tools (2 files)" in err


def test_stdin_is_read_as_json(tmp_path: Path) -> None:
    code, out, _ = run("-", stdin=json.dumps(with_schema({"type": "array"})))
    assert code == 1
    assert out.startswith("-:1: error S002 t:")


# --------------------------------------------------------------------------- exit 2: bad input


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.json", '{"name": "x",,}', r"bad\.json:1:14: invalid JSON: Expecting property name"),
        ("bad.toml", "name = \n", r"bad\.toml: invalid TOML: Invalid value"),
        ("shape.json", '{"foo": 1}', r"shape\.json: no tool definitions found"),
        ("scalar.json", "42", r"scalar\.json: no tool definitions found"),
        ("latin1.json", b'{"name": "caf\xe9"}', r"latin1\.json: not UTF-8"),
    ],
)
def test_unreadable_or_malformed_input_exits_2_with_one_line(
    tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    good = write(tmp_path, "good.json", with_schema({"type": "array"}))
    code, out, err = run(good, path)
    assert code == 2
    assert out == ""  # a broken file stops the run before any diagnostics
    assert len(err.splitlines()) == 1
    assert re.match(rf"norma: error: .*{message}", err)


def test_missing_file_and_empty_directory_exit_2(tmp_path: Path) -> None:
    code, _, err = run(tmp_path / "nope.json")
    assert (code, err.strip()) == (2, f"norma: error: {tmp_path / 'nope.json'}: no such file")
    (tmp_path / "empty").mkdir()
    code, _, err = run(tmp_path / "empty")
    assert code == 2
    assert "no .json or .toml files" in err


def test_unknown_format_or_profile_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", good_tool())
    assert run(path, "--format", "xml")[0] == 2
    assert run(path, "--profile", "mistral")[0] == 2


# --------------------------------------------------------------------------- norma's own checks


def test_name_rules(tmp_path: Path) -> None:
    tools = [
        good_tool("bad name!"),
        {k: v for k, v in good_tool().items() if k != "name"},
        good_tool("x" * 65),
        good_tool("ok-name_1"),
    ]
    code, diags = diagnostics(write(tmp_path, "t.json", tools))
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [
        ("N001", "/0/name"),
        ("N001", "/1"),
        ("N001", "/2/name"),
    ]
    assert diags[0]["message"] == 'tool name "bad name!" does not match ^[A-Za-z0-9_-]{1,64}$'


def test_duplicate_names_within_and_across_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.json", [good_tool("dup"), good_tool("dup")])
    second = write(tmp_path, "b.json", good_tool("dup"))
    code, diags = diagnostics(first, second)
    assert code == 1
    assert [(d["file"], d["pointer"], d["message"]) for d in diags] == [
        (str(first), "/1/name", "duplicate tool name 'dup' (first defined at /0)"),
        (str(second), "/name", f"duplicate tool name 'dup' (first defined at {first} /0)"),
    ]


def test_descriptions_tool_is_an_error_parameter_a_warning(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "bare": {"type": "string"},
            "via_ref": {"$ref": "#/$defs/described"},
            "blank": {"type": "string", "description": "  "},
            "nested": {
                "type": "object",
                "description": "Nested.",
                "properties": {"inner": {"type": "integer"}},
            },
        },
        # properties that only constrain (if/then) are not parameters of their own
        "if": {"properties": {"bare": {"const": "x"}}},
        "then": {"required": ["via_ref"]},
        "$defs": {"described": {"type": "string", "description": "Has one."}},
    }
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema, description="")))
    assert code == 1
    assert [(d["rule"], d["severity"], d["pointer"]) for d in diags] == [
        ("D001", "error", "/description"),
        ("D002", "warning", "/input_schema/properties/bare"),
        ("D002", "warning", "/input_schema/properties/blank"),
        ("D002", "warning", "/input_schema/properties/nested/properties/inner"),
    ]


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    code, out, err = run(write(tmp_path, "t.json", with_schema(obj(x={"type": "string"}))))
    assert code == 0
    assert "warning D002" in out
    assert "0 errors, 1 warning in 1 tool (1 file)" in err


def test_metaschema_errors_name_the_pointer(tmp_path: Path) -> None:
    schema = obj(a={"type": "strin", "description": "A."}, b={"minLength": -1, "description": "B."})
    schema["required"] = "a"
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema)))
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [
        ("S001", "/input_schema/properties/a/type"),
        ("S001", "/input_schema/properties/b/minLength"),
        ("S001", "/input_schema/required"),
    ]
    assert diags[0]["message"].startswith('"strin" is not a JSON Schema type')
    assert diags[1]["message"] == "-1 is less than the minimum of 0"


@pytest.mark.parametrize(
    ("schema", "found"),
    [
        ({"type": "array"}, '"type": "array"'),
        ({"properties": {}}, "no type"),
        ({"type": ["object", "null"]}, '"type": ["object", "null"]'),
        (True, "a boolean schema"),
        ([], "a list"),
    ],
)
def test_root_must_be_an_object_schema(tmp_path: Path, schema: Any, found: str) -> None:
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema)))
    assert code == 1
    assert "S002" in rules_of(diags)
    assert found in next(d["message"] for d in diags if d["rule"] == "S002")


def test_missing_schema_and_ambiguous_schema_keys(tmp_path: Path) -> None:
    both = good_tool("both")
    both["parameters"] = {"type": "object"}
    tools = [{"name": "none", "description": "No schema."}, both]
    code, diags = diagnostics(write(tmp_path, "t.json", tools))
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [("S003", "/0"), ("T002", "/1/parameters")]


def test_entries_that_are_not_tools(tmp_path: Path) -> None:
    tools = [good_tool(), 7, {"type": "web_search_20250305", "name": "web_search"}]
    code, diags = diagnostics(write(tmp_path, "t.json", tools))
    assert code == 1  # T001 is an error; the skipped built-in tool only a warning
    assert [(d["rule"], d["severity"], d["pointer"]) for d in diags] == [
        ("T001", "error", "/1"),
        ("T003", "warning", "/2"),
    ]


@pytest.mark.parametrize(
    ("schema", "pointer", "message"),
    [
        (obj(p={"type": "string", "pattern": "(", "description": "P."}),
         "/input_schema/properties/p/pattern", "not a valid regular expression"),
        ({"type": "object", "patternProperties": {"[": {}}},
         "/input_schema/patternProperties/[", "not a valid regular expression"),
        (obj(p={"$ref": "#/$defs/missing", "description": "P."}),
         "/input_schema/properties/p/$ref", "resolves to nothing"),
        # remote and $id-relative refs are compiled for real, and never fetched
        (obj(p={"$ref": "http://127.0.0.1:9/schema.json", "description": "P."}),
         "/input_schema", "is not fetched by norma"),
        ({"$id": "https://example.com/s", "type": "object", "properties": {
            "p": {"$ref": "other.json", "description": "P."}}},
         "/input_schema", "https://example.com/other.json"),
    ],
)  # fmt: skip
def test_schemas_the_runtime_could_not_compile(
    tmp_path: Path, schema: dict[str, Any], pointer: str, message: str
) -> None:
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema)))
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [("S004", pointer)]
    assert message in diags[0]["message"]


def test_a_draft_07_dialect_is_a_warning(tmp_path: Path) -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", **good_tool()["input_schema"]}
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema)))
    assert code == 0
    assert [(d["rule"], d["pointer"]) for d in diags] == [("S005", "/input_schema/$schema")]


def test_required_name_missing_from_a_closed_object(tmp_path: Path) -> None:
    schema = {**good_tool()["input_schema"], "required": ["path", "pth"]}
    open_schema = dict(schema)
    schema["additionalProperties"] = False
    code, diags = diagnostics(
        write(tmp_path, "t.json", [with_schema(schema), with_schema(open_schema, name="u")])
    )
    assert code == 1
    assert [(d["rule"], d["tool"], d["pointer"]) for d in diags] == [
        ("S006", "t", "/0/input_schema/required/1")
    ]


def test_defaults_and_examples_must_match_their_own_schema(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "default": {"mode": "r"},  # valid at the root
        "properties": {
            "mode": {"enum": ["r", "w"], "default": "x", "description": "Mode."},
            "count": {
                "type": "integer",
                "minimum": 1,
                "examples": [3, 0, "two"],
                "description": "N.",
            },
            "good_ref": {"$ref": "#/$defs/level", "default": "high", "description": "L."},
            "bad_ref": {"$ref": "#/$defs/level", "default": "extreme", "description": "L."},
            "default": {"type": "string", "description": "A parameter named default."},
        },
        "$defs": {"level": {"enum": ["low", "high"]}, "n": {"type": "number", "default": True}},
    }
    code, diags = diagnostics(write(tmp_path, "t.json", with_schema(schema)))
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [
        ("V001", "/input_schema/properties/mode/default"),
        ("V002", "/input_schema/properties/count/examples/1"),
        ("V002", "/input_schema/properties/count/examples/2"),
        ("V001", "/input_schema/properties/bad_ref/default"),
        ("V001", "/input_schema/$defs/n/default"),
    ]
    assert diags[1]["message"] == "example 0 is invalid: 0 is less than the minimum of 1"


def test_the_same_subschema_in_many_tools_is_judged_alike(tmp_path: Path) -> None:
    # validators for identical subschemas are shared; 1 and 1.0 and true must stay distinct
    tools = [
        with_schema(obj(n={"type": "integer", "default": 1, "description": "N."}), name="a"),
        with_schema(obj(n={"type": "integer", "default": 1.5, "description": "N."}), name="b"),
        with_schema(obj(n={"enum": [1], "default": True, "description": "N."}), name="c"),
        with_schema(obj(n={"enum": [True], "default": True, "description": "N."}), name="d"),
    ]
    code, diags = diagnostics(write(tmp_path, "t.json", tools))
    assert code == 1
    assert [(d["rule"], d["tool"]) for d in diags] == [("V001", "b"), ("V001", "c")]


# --------------------------------------------------------------------------- provider profiles


def test_profile_choices_match_the_profile_table() -> None:
    assert set(PROFILE_KEYS) == set(PROFILES)


def strict_ready(**extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "Query."}},
        "required": ["q"],
        "additionalProperties": False,
        **extra,
    }


def test_openai_strict_rules_warn_unless_the_tool_is_strict(tmp_path: Path) -> None:
    schema = obj(q={"type": "string", "description": "Query.", "minLength": 2})
    loose = {"type": "function", "function": _openai(with_schema(schema, name="loose"))}
    strict = {
        "type": "function",
        "function": {**_openai(with_schema(schema, name="tight")), "strict": True},
    }
    code, diags = diagnostics(write(tmp_path, "t.json", [loose, strict]), "--profile", "openai")
    assert code == 1
    got = [(d["tool"], d["rule"], d["severity"]) for d in diags]
    assert got == [
        ("loose", "P-OPENAI-002", "warning"),
        ("loose", "P-OPENAI-003", "warning"),
        ("loose", "P-OPENAI-004", "warning"),
        ("tight", "P-OPENAI-002", "error"),
        ("tight", "P-OPENAI-003", "error"),
        ("tight", "P-OPENAI-004", "error"),
    ]
    assert diags[1]["message"].startswith('strict mode requires every property in "required" ("q"')
    # without the profile, the same file is clean
    assert run(write(tmp_path, "t.json", [loose, strict]))[0] == 0


def test_openai_strict_schema_passes_and_responses_tools_are_strict_by_default(
    tmp_path: Path,
) -> None:
    ready = {
        "type": "function",
        "function": {**_openai(with_schema(strict_ready())), "strict": True},
    }
    assert run(write(tmp_path, "ok.json", ready), "--profile", "openai")[0] == 0
    flat = {"type": "function", **_openai(with_schema(strict_ready(anyOf=[{"required": ["q"]}])))}
    code, diags = diagnostics(write(tmp_path, "flat.json", [flat]), "--profile", "openai")
    assert code == 1
    assert [(d["rule"], d["severity"], d["pointer"]) for d in diags] == [
        ("P-OPENAI-001", "error", "/0/parameters/anyOf")
    ]


def test_openai_formats_defaults_nesting_and_tool_count(tmp_path: Path) -> None:
    deep: dict[str, Any] = {"type": "string", "description": "Leaf."}
    for _ in range(11):
        deep = {"type": "object", "description": "Level.", "properties": {"x": deep},
                "required": ["x"], "additionalProperties": False}  # fmt: skip
    schema = strict_ready()
    schema["properties"] |= {
        "when": {"type": "string", "format": "uri", "description": "Link."},
        "n": {"type": "integer", "default": 3, "description": "N."},
        "deep": deep,
    }
    schema["required"] = ["q", "when", "n", "deep"]
    strict = {"type": "function", "function": {**_openai(with_schema(schema)), "strict": True}}
    others = [good_tool(f"t{i}") for i in range(128)]
    code, diags = diagnostics(write(tmp_path, "t.json", [strict, *others]), "--profile", "openai")
    got = [(d["rule"], d["severity"]) for d in diags if d["rule"].startswith("P-OPENAI-0")]
    assert ("P-OPENAI-005", "error") in got  # format "uri"
    assert ("P-OPENAI-006", "warning") in got  # default under strict
    assert ("P-OPENAI-007", "error") in got  # 12 levels deep
    assert got.count(("P-OPENAI-010", "warning")) == 1  # 129 tools, reported once
    assert code == 1


def test_anthropic_root_combinators_and_strict_only_rules(tmp_path: Path) -> None:
    root_union = with_schema(
        {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    )
    loose = with_schema(obj(n={"type": "integer", "minimum": 0, "description": "N."}), name="loose")
    strict = {**loose, "name": "tight", "strict": True}
    code, diags = diagnostics(
        write(tmp_path, "t.json", [root_union, loose, strict]), "--profile", "anthropic"
    )
    assert code == 1
    assert [(d["tool"], d["rule"], d["pointer"]) for d in diags] == [
        ("t", "P-ANTHROPIC-001", "/0/input_schema/oneOf"),
        ("tight", "P-ANTHROPIC-002", "/2/input_schema"),
        ("tight", "P-ANTHROPIC-003", "/2/input_schema/properties/n/minimum"),
    ]


def test_gemini_openapi_subset(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"type": ["string", "null"], "description": "Kind."},
            "level": {"type": "integer", "enum": [1, 2], "description": "Level."},
            "opts": {"type": "object", "description": "Options."},
            "tag": {"type": "string", "const": "x", "description": "Tag."},
        },
        "additionalProperties": False,
    }
    tools = [
        {**with_schema(schema), "name": "9lives"},
        {"name": "json_schema", "description": "Full JSON Schema.", "parametersJsonSchema": schema},
    ]
    code, diags = diagnostics(
        write(tmp_path, "t.json", {"functionDeclarations": tools}), "--profile", "gemini"
    )
    assert code == 1
    assert [(d["rule"], d["pointer"]) for d in diags] == [
        ("P-GEMINI-001", "/functionDeclarations/0/name"),
        ("P-GEMINI-002", "/functionDeclarations/0/input_schema/additionalProperties"),
        ("P-GEMINI-002", "/functionDeclarations/0/input_schema/properties/tag/const"),
        ("P-GEMINI-003", "/functionDeclarations/0/input_schema/properties/kind/type"),
        ("P-GEMINI-004", "/functionDeclarations/0/input_schema/properties/level/enum"),
        ("P-GEMINI-005", "/functionDeclarations/0/input_schema/properties/opts"),
    ]  # parametersJsonSchema takes full JSON Schema: exempt


def test_profiles_repeat_and_add_up(tmp_path: Path) -> None:
    schema = {**obj(a={"type": "string", "description": "A."}), "additionalProperties": False}
    path = write(tmp_path, "t.json", with_schema(schema))
    _, only_openai = diagnostics(path, "--profile", "openai")
    _, both = diagnostics(path, "--profile", "openai", "--profile", "gemini")
    assert {r.split("-")[1] for r in rules_of(only_openai)} == {"OPENAI"}
    assert {r.split("-")[1] for r in rules_of(both)} == {"OPENAI", "GEMINI"}


# --------------------------------------------------------------------------- output formats


def broken_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # a relative path, as CI passes them
    tool = good_tool("read, file:1")  # a comma and colon, to be escaped in workflow commands
    tool["input_schema"]["type"] = "array"
    tool["description"] = "100%\nsure"
    write(tmp_path, "odd, name.json", [tool, with_schema(obj(x={"type": "string"}), name="w")])
    return Path("odd, name.json")


def test_text_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = broken_file(tmp_path, monkeypatch)
    code, out, err = run(path)
    assert code == 1
    pattern = re.compile(
        r"^(?P<file>.+):(?P<line>\d+): (error|warning) [A-Z][-A-Z0-9]+ \S.*: .+ \[/.*\]$"
    )
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(pattern.match(line) for line in lines)
    assert lines[1] == f"{path}:5: error S002 read, file:1: input schema root must have " \
        '"type": "object" (found "type": "array") [/0/input_schema]'  # fmt: skip
    assert err.strip() == "norma tools lint: 2 errors, 1 warning in 2 tools (1 file)"


def test_json_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run(broken_file(tmp_path, monkeypatch), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["summary"] == {"files": 1, "tools": 2, "errors": 2, "warnings": 1}
    first = doc["diagnostics"][0]
    assert set(first) == {"file", "line", "pointer", "tool", "rule", "name", "severity", "message"}
    assert (first["rule"], first["name"]) == ("N001", "name-pattern")


def test_github_format_escapes_properties_and_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(broken_file(tmp_path, monkeypatch), "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        "::error file=odd%2C name.json,line=3,title=N001 name-pattern::read, file:1: "
    )
    assert lines[-1].startswith("::warning file=odd%2C name.json,line=")
    assert all(
        re.match(r"^::(error|warning) file=[^,]+(,line=\d+)?,title=[^,:]+::.+$", ln) for ln in lines
    )


# The parts of the SARIF 2.1.0 schema a consumer (GitHub code scanning) relies on; the official
# schema is not available offline, so these are its required fields and enums, by hand.
SARIF_SHAPE = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "format": "uri"},
        "runs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/run"}},
    },
    "$defs": {
        "message": {
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string"}},
        },
        "run": {
            "type": "object",
            "required": ["tool", "results"],
            "properties": {
                "tool": {
                    "type": "object",
                    "required": ["driver"],
                    "properties": {
                        "driver": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"const": "norma"},
                                "version": {"type": "string"},
                                "rules": {"type": "array", "items": {"$ref": "#/$defs/rule"}},
                            },
                        }
                    },
                },
                "results": {"type": "array", "items": {"$ref": "#/$defs/result"}},
            },
        },
        "rule": {
            "type": "object",
            "required": ["id", "shortDescription"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "shortDescription": {"$ref": "#/$defs/message"},
                "defaultConfiguration": {
                    "type": "object",
                    "properties": {"level": {"enum": ["none", "note", "warning", "error"]}},
                },
            },
        },
        "result": {
            "type": "object",
            "required": ["ruleId", "message", "locations", "level"],
            "properties": {
                "ruleId": {"type": "string"},
                "ruleIndex": {"type": "integer", "minimum": 0},
                "level": {"enum": ["none", "note", "warning", "error"]},
                "message": {"$ref": "#/$defs/message"},
                "locations": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": "#/$defs/location"},
                },
            },
        },
        "location": {
            "type": "object",
            "properties": {
                "physicalLocation": {
                    "type": "object",
                    "required": ["artifactLocation"],
                    "properties": {
                        "artifactLocation": {
                            "type": "object",
                            "required": ["uri"],
                            "properties": {"uri": {"type": "string", "format": "uri-reference"}},
                        },
                        "region": {
                            "type": "object",
                            "required": ["startLine"],
                            "properties": {"startLine": {"type": "integer", "minimum": 1}},
                        },
                    },
                },
                "logicalLocations": {"type": "array"},
            },
        },
    },
}


def test_sarif_format_is_structurally_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jsonschema_rs

    code, out, _ = run(
        broken_file(tmp_path, monkeypatch), "--format", "sarif", "--profile", "openai"
    )
    doc = json.loads(out)
    assert code == 1
    validator = jsonschema_rs.Draft202012Validator(SARIF_SHAPE, validate_formats=True)
    assert [e.message for e in validator.iter_errors(doc)] == []
    run_ = doc["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    for result in run_["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == "odd%2C%20name.json"
        assert location["region"]["startLine"] >= 1
    assert {r["id"] for r in rules} == {r["ruleId"] for r in run_["results"]}
    assert any(r["id"].startswith("P-OPENAI") for r in rules)


def test_every_rule_is_exercised_by_one_corpus(tmp_path: Path) -> None:
    """Adding a rule without a way to trigger it (or a test that does) fails here."""
    tight = {
        "type": "object",
        "properties": {
            "s": {"type": ["string", "null"], "minLength": 1, "format": "uri", "default": "x"},
            "n": {"type": "integer", "enum": [1], "minItems": 2, "maxItems": 3},
            "o": {"type": "object"},
            "r": {"$ref": "#"},
            "e": {"enum": [str(i) for i in range(1001)]},
        },
        "anyOf": [{"required": ["s"]}],
        "$defs": {"d": {"type": "integer", "default": "no", "examples": ["no"]}},
        "required": ["zz"],
        "additionalProperties": False,
    }
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5001)}}
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(11):
        deep = {"type": "object", "properties": {"x": deep}}
    files = [
        write(tmp_path, "a.json", [
            {"type": "function", "name": "9-strict", "parameters": tight, "strict": True},
            with_schema(wide, name="wide"), with_schema(deep, name="deep"),
            3, {"type": "web_search"}, {"name": "none"},
            {**good_tool("both"), "parameters": {"type": "object"}, "description": ""},
            with_schema({"type": "array", "properties": {"p": {"type": "strin"}}}, name="bad name"),
            with_schema({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"p": {"pattern": "("}}}, name="both"),
        ]),
        write(tmp_path, "b.json", [good_tool(f"t{i}") for i in range(128)]),
    ]  # fmt: skip
    _, diags = diagnostics(
        *files, "--profile", "openai", "--profile", "anthropic", "--profile", "gemini"
    )
    assert sorted(set(rules_of(diags))) == sorted(RULES)


# --------------------------------------------------------------------------- the real CLI


def test_norma_tools_lint_runs_in_a_real_process(norma: Any, tmp_path: Path) -> None:
    good = write(tmp_path, "good.json", good_tool())
    bad = write(tmp_path, "bad.json", with_schema({"type": "array"}))
    ok = norma("tools", "lint", str(good))
    assert (ok.returncode, ok.stdout) == (0, "")
    failing = norma("tools", "lint", str(bad), "--format", "json")
    assert failing.returncode == 1
    assert json.loads(failing.stdout)["summary"]["errors"] == 1
    broken = write(tmp_path, "broken.json", "{")
    crashed = norma("tools", "lint", str(broken))
    assert crashed.returncode == 2
    assert "Traceback" not in crashed.stderr
    assert len(crashed.stderr.strip().splitlines()) == 1
