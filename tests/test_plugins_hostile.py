"""Plugins that misbehave, beyond the QA sweep in test_hostile_extensions.py: each fails closed
with one clear line (exit 2) or a deny naming the plugin (exit 3), never a silent exit 0, an
allow, or invalid JSON on stdout.

Plugins are real packages found through a ``*.dist-info`` entry point on PYTHONPATH.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import ContentBlock, Tool, ToolOutput
from norma_cli.core.registry import InvalidTool, ToolRegistry
from norma_cli.errors import ConfigError

READ = ("run", "Read", "-i", '{"file_path": "a.txt"}')


@pytest.fixture(autouse=True)
def a_txt(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")


def plugin(tmp_path: Path, source: str, name: str = "hostile") -> dict[str, str]:
    """A plugin package on PYTHONPATH with a `norma` entry point; the env that loads it."""
    site = tmp_path / "site"
    pkg = site / f"{name}_plugin"
    pkg.mkdir(parents=True, exist_ok=True)
    header = (
        "from norma_cli import hookimpl\n"
        "from norma_cli.core.contract import ContentBlock, Decision, Tool, ToolOutput\n\n"
    )
    (pkg / "__init__.py").write_text(header + textwrap.dedent(source))
    dist = site / f"{name}_plugin-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[norma]\n{name} = {name}_plugin\n")
    return {"PYTHONPATH": str(site), "NORMA_LOAD_PLUGINS": name}


def strict_lines(stdout: str) -> list[dict[str, Any]]:
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return [json.loads(line, parse_constant=refuse) for line in stdout.splitlines()]


# ----------------------------------------------------------------------- decision hooks
@pytest.mark.parametrize(
    "body",
    [
        "return Decision(5, 'plugin', 'x')",
        "return Decision('allow', 'plugin', 'x', updated_input='rm -rf /')",
        "return Decision('allow', 'plugin', object())",
        "class Sly(str):\n"
        "        def __eq__(self, other): return True\n"
        "        __hash__ = str.__hash__\n"
        "    return Sly('whatever')",
        "raise GeneratorExit()",
    ],
    ids=["int-behavior", "str-updated_input", "object-reason", "str-subclass", "generator-exit"],
)
def test_permission_decision_malformed_is_deny_naming_the_plugin(
    norma: RunNorma, tmp_path: Path, body: str
) -> None:
    env = plugin(
        tmp_path, f"@hookimpl\ndef permission_decision(tool, call, context):\n    {body}\n"
    )
    proc = norma(*READ, env=env)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    [res] = results(proc.stdout)
    assert res["norma"]["stage"] == "plugin" and "plugin:hostile" in res["norma"]["reason"]


ASK_BASH = """
@hookimpl
def resolve_ask(tool, call, decision, context):
    {body}
"""


@pytest.mark.parametrize(
    ("body", "runs"),
    [
        ("raise GeneratorExit()", False),
        ("return Decision('ALLOW', 'plugin', 'shouting')", False),
        ("return Decision('allow', 'plugin', 'fine')", True),  # the control: a real allow runs
    ],
    ids=["generator-exit", "upper-case-behavior", "well-formed-allow"],
)
def test_resolve_ask_runs_the_call_only_on_a_well_formed_allow(
    norma: RunNorma, tmp_path: Path, body: str, runs: bool
) -> None:
    marker = tmp_path / "ran"
    env = plugin(tmp_path, ASK_BASH.replace("{body}", body))
    proc = norma("run", "Bash", "-i", json.dumps({"command": f"touch {marker}"}), env=env)
    assert marker.exists() is runs, (proc.stdout, proc.stderr)
    assert proc.returncode == (0 if runs else 3), (proc.stdout, proc.stderr)


# ----------------------------------------------------------------------- registration hooks
def test_register_commands_raising_system_exit_is_a_clear_error(
    norma: RunNorma, tmp_path: Path
) -> None:
    env = plugin(tmp_path, "@hookimpl\ndef register_commands(cli):\n    raise SystemExit(0)\n")
    proc = norma("hostile-command", env=env)
    assert proc.returncode == 2 and "plugin 'hostile'" in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_system_exit_with_a_nonzero_code_at_import_is_exit_2(
    norma: RunNorma, tmp_path: Path
) -> None:
    proc = norma(*READ, env=plugin(tmp_path, "import sys\nsys.exit(9)\n"))
    assert proc.returncode == 2 and "SystemExit" in proc.stderr, proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("meta", "complaint"),
    [
        ("read_only='no'", "read_only must be true or false"),
        ("requires_approval=0", "requires_approval must be true or false"),
        ("destructive=None", "destructive must be true or false"),
        ("timeout=-1", "timeout must be a positive number"),
        ("timeout=float('nan')", "timeout must be a positive number"),
        ("call=print", "unknown tool metadata 'call'"),
        ("input_schema=['type', 'object']", "input_schema must be a JSON Schema object"),
    ],
)
def test_function_tool_metadata_is_checked(
    norma: RunNorma, tmp_path: Path, meta: str, complaint: str
) -> None:
    marker = tmp_path / "wrote"
    source = f"""
    @hookimpl
    def register_tools(register):
        def writer(text: str) -> str:
            \"\"\"Writes a file.\"\"\"
            open({str(marker)!r}, "w").write(text)
            return "wrote"
        register(writer, name="Writer", {meta})
    """
    proc = norma("run", "Writer", "-i", '{"text": "x"}', env=plugin(tmp_path, source))
    assert not marker.exists()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("norma: error: plugin 'hostile': tool 'Writer'"), proc.stderr
    assert complaint in proc.stderr and len(proc.stderr.splitlines()) == 1


class FlagTool(Tool):
    name = "Flag"
    input_schema = {"type": "object", "properties": {}}

    def call(self, tool_input: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput.text("ran")


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("read_only", 1),
        ("concurrency_safe", "yes"),
        ("edits_files", []),
        ("raw_input", None),
        ("input_schema", "not a schema"),
        ("input_schema", None),
        ("timeout", True),
        ("timeout", "5"),
    ],
)
def test_tool_class_attributes_of_the_wrong_type_are_refused(attr: str, value: Any) -> None:
    """A Tool subclass sets its metadata as class attributes, with no **meta to check."""
    tool = type("Bad", (FlagTool,), {attr: value})()
    with pytest.raises(InvalidTool) as caught:
        ToolRegistry().register(tool, plugin="shady")
    assert isinstance(caught.value, ConfigError) and caught.value.exit_code == 2
    assert "plugin 'shady'" in str(caught.value) and attr in str(caught.value)


def test_well_formed_tool_metadata_still_registers() -> None:
    tool = type("Good", (FlagTool,), {"read_only": True, "timeout": 2.5})()
    registry = ToolRegistry()
    assert registry.register(tool, plugin="fine", concurrency_safe=True) is tool
    assert tool.concurrency_safe is True and registry.get("Flag") is tool


# ----------------------------------------------------------------------- strict JSON out
def test_json_block_wire_form_has_no_bare_nan() -> None:
    data = {"a": [math.inf, (1.5, math.nan)], "b": {"c": -math.inf}, "d": 2.0}
    wire = ContentBlock("json", data=data).to_wire()
    assert json.loads(json.dumps(wire, allow_nan=False))["json"] == {
        "a": ["Infinity", [1.5, "NaN"]],
        "b": {"c": "-Infinity"},
        "d": 2.0,
    }
    assert data["a"][0] == math.inf  # the tool's own object is left alone
    finite = {"x": [1.0, {"y": "z"}]}
    assert ContentBlock("json", data=finite).to_wire()["json"] is finite  # nothing copied


def test_tool_output_built_with_a_nan_block_prints_strict_json(
    norma: RunNorma, tmp_path: Path
) -> None:
    source = """
    class Inf(Tool):
        name = "Inf"
        input_schema = {"type": "object", "properties": {}}
        read_only = True

        def call(self, tool_input, ctx):
            return ToolOutput([ContentBlock("json", data=[float("inf"), float("nan")])])

    @hookimpl
    def register_tools(register):
        register(Inf())
    """
    proc = norma("run", "Inf", "-i", "{}", env=plugin(tmp_path, source))
    assert proc.returncode == 0, proc.stderr
    [res] = strict_lines(proc.stdout)
    assert res["content"][0]["json"] == ["Infinity", "NaN"]


# ----------------------------------------------------------------------- NORMA_LOAD_PLUGINS
def test_each_missing_plugin_is_named_once_and_present_ones_are_not(
    norma: RunNorma, tmp_path: Path
) -> None:
    env = plugin(tmp_path, "")
    env["NORMA_LOAD_PLUGINS"] = "hostile, guard-one,guard-two"
    proc = norma(*READ, env=env)
    assert proc.returncode == 0, proc.stderr  # the exit code is as before
    lines = proc.stderr.splitlines()
    assert [line for line in lines if "guard-one" in line] == [lines[0]]
    assert sum("guard-two" in line for line in lines) == 1
    assert "hostile" not in proc.stderr
    assert results(proc.stdout)[0]["content"][0]["text"].endswith("hello")


# ----------------------------------------------------------------------- approvals
def test_approve_refuses_a_blank_or_short_id(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "norma.toml"
    cfg.write_text('[intercept]\ntools = ["Read"]\ndefault = "ask"\n')
    asked = norma("--config", str(cfg), "run", "--no-wait", *READ[1:])
    assert asked.returncode == 4
    pending_id = results(asked.stdout)[0]["norma"]["pending_id"]
    blank = norma("--config", str(cfg), "approve", "   ")
    assert blank.returncode == 2 and "empty" in blank.stderr, blank.stderr
    short = norma("--config", str(cfg), "approve", pending_id[:3])
    assert short.returncode == 2 and "at least its first 4" in short.stderr, short.stderr
    assert norma("--config", str(cfg), "run", "--no-wait", *READ[1:]).returncode == 4
    assert norma("--config", str(cfg), "approve", pending_id[:4]).returncode == 0
    assert norma("--config", str(cfg), "run", "--no-wait", *READ[1:]).returncode == 0
