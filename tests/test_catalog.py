"""The tool catalog (SPEC §8): sync never reverts operator edits, vanished tools go stale,
data migrations run once, an unreadable catalog follows [catalog] on_error, and agents
assemble their own tool sets (with `tools list --explain` saying why)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from conftest import RunNorma, results

from norma_cli import hookimpl
from norma_cli.catalog.sync import sync
from norma_cli.core.contract import ToolCall
from norma_cli.runtime import Options, Runtime


def db_path() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "norma.db"


def write_config(tmp_path: Path, text: str) -> Path:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(text)
    return cfg


def show(norma: RunNorma, cfg: Path, name: str) -> dict[str, Any]:
    proc = norma("--config", str(cfg), "catalog", "show", name, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


GREET = """
[[custom_tools]]
name = "greet"
kind = "command"
exec = "echo hello {{who}}"
description = "%s"
"""


# ----------------------------------------------------------------------------- sync vs edits
def test_sync_never_reverts_operator_edits_and_updates_the_digest(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, GREET % "Greet someone.")
    proc = norma("--config", str(cfg), "catalog", "sync")
    assert proc.returncode == 0 and "+ greet" in proc.stdout, proc.stderr
    first = show(norma, cfg, "greet")
    assert first["enabled"] and first["description"] == "Greet someone." and first["edited"] == []

    proc = norma(
        "--config",
        str(cfg),
        "catalog",
        "set",
        "greet",
        "--disable",
        "--description",
        "Operator words.",
    )
    assert proc.returncode == 0, proc.stderr
    cfg.write_text(GREET % "Greet someone, politely.")  # the code-defined definition changes
    for _ in range(2):
        proc = norma("--config", str(cfg), "catalog", "sync", "--json")
        assert proc.returncode == 0, proc.stderr
    after = show(norma, cfg, "greet")
    assert after["enabled"] is False
    assert after["description"] == "Operator words."
    assert after["code_digest"] != first["code_digest"]
    assert sorted(after["edited"]) == ["description", "enabled"]

    proc = norma("--config", str(cfg), "--allow", "greet", "run", "greet", "-i", '{"who": "bob"}')
    assert proc.returncode == 3
    assert "disabled in the catalog" in results(proc.stdout)[0]["content"][0]["text"]


def test_second_sync_reports_what_the_first_changed(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, GREET % "v1")
    first = json.loads(norma("--config", str(cfg), "catalog", "sync", "--json").stdout)
    assert "greet" in first["added"] and first["data_migrations"]
    cfg.write_text(GREET % "v2")
    dry = json.loads(norma("--config", str(cfg), "catalog", "sync", "--dry-run", "--json").stdout)
    assert dry["updated"] == ["greet"] and dry["dry_run"]
    assert show(norma, cfg, "greet")["description"] == "v1"  # a dry run writes nothing
    second = json.loads(norma("--config", str(cfg), "catalog", "sync", "--json").stdout)
    assert (
        second["updated"] == ["greet"] and second["added"] == [] and second["data_migrations"] == {}
    )
    assert show(norma, cfg, "greet")["description"] == "v2"  # not edited: follows the code


class Versioned:
    """A plugin whose tool's description is set per instance (a new release of the plugin)."""

    def __init__(self, description: str) -> None:
        self.description = description

    @hookimpl
    def register_tools(self, register: Any) -> None:
        def shout(text: str) -> str:
            return text.upper()

        register(shout, description=self.description, read_only=True)


def build(tmp_path: Path, *plugins: tuple[str, Any], **kw: Any) -> Runtime:
    return Runtime.build(Options(cwd=tmp_path, plugins=plugins, interactive=False, **kw))


def run_sync(tmp_path: Path, *plugins: tuple[str, Any]) -> dict[str, Any]:
    rt = build(tmp_path, *plugins)
    try:
        assert rt.assembly.repo is not None
        return sync(rt.assembly, rt.assembly.repo).to_json()
    finally:
        rt.close()


def test_plugin_tool_edits_survive_a_new_release_and_removal_makes_it_stale(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, "")
    assert "shout" in run_sync(tmp_path, ("loud", Versioned("Shout v1.")))["added"]
    digest_v1 = show(norma, cfg, "shout")["code_digest"]
    proc = norma(
        "--config", str(cfg), "catalog", "set", "shout", "--disable", "--description", "Ops text."
    )
    assert proc.returncode == 0, proc.stderr

    report = run_sync(tmp_path, ("loud", Versioned("Shout v2, louder.")))
    assert report["updated"] == ["shout"] and report["kept_edits"] == {"shout": ["description"]}
    row = show(norma, cfg, "shout")
    assert (row["enabled"], row["description"], row["status"]) == (False, "Ops text.", "active")
    assert row["code_digest"] != digest_v1

    rt = build(tmp_path, ("loud", Versioned("Shout v2, louder.")))
    tool = rt.registry.get("shout")
    assert (
        tool is not None and tool.description == "Ops text."
    )  # the catalog's words reach the model
    assert "disabled" in rt.executor.run(ToolCall("t", "shout", {"text": "x"})).text()
    rt.close()

    assert run_sync(tmp_path)["stale"] == ["shout"]  # the plugin is gone
    row = show(norma, cfg, "shout")
    assert (
        row["status"] == "stale" and row["description"] == "Ops text." and row["enabled"] is False
    )
    explain = json.loads(norma("--config", str(cfg), "tools", "list", "--explain", "--json").stdout)
    state = next(t for t in explain["tools"] if t["name"] == "shout")
    assert state["exists"] is False and "stale" in state["reasons"][0]

    report = run_sync(tmp_path, ("loud", Versioned("Shout v2, louder.")))  # it comes back
    assert report["reactivated"] == ["shout"]
    assert show(norma, cfg, "shout")["enabled"] is False  # with the operator's edits


def test_data_migration_normalises_legacy_agent_lists_exactly_once(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, GREET % "g")
    assert norma("--config", str(cfg), "catalog", "list").returncode == 0  # creates the store
    legacy = (
        "name, source, enabled, agents, deferred, status, edited, created_by, created_at, updated_at",
        "?, 'custom', 1, ?, 0, 'active', '[]', 'sync', 0, 0",
    )
    with sqlite3.connect(db_path()) as db:
        db.execute(
            f"INSERT INTO tools ({legacy[0]}) VALUES ({legacy[1]})",
            ("greet", "worker, planner,worker"),
        )
    assert norma("--config", str(cfg), "catalog", "sync").returncode == 0
    assert show(norma, cfg, "greet")["agents"] == ["planner", "worker"]
    with sqlite3.connect(db_path()) as db:  # a legacy value written after the migration ran
        db.execute("UPDATE tools SET agents = 'b;a' WHERE name = 'greet'")
    proc = norma("--config", str(cfg), "catalog", "sync", "--json")
    assert json.loads(proc.stdout)["data_migrations"] == {}
    with sqlite3.connect(db_path()) as db:
        agents = db.execute("SELECT agents FROM tools WHERE name = 'greet'").fetchone()[0]
        applied = db.execute("SELECT name, detail FROM data_migrations").fetchall()
    assert agents == "b;a"  # not migrated a second time (a sync leaves unchanged rows alone)
    assert applied == [("0001_normalise_agent_lists", "normalised 1 agent list(s)")]


# ----------------------------------------------------------------------------- never synced
def test_without_any_row_every_tool_runs_with_code_defaults(
    norma: RunNorma, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("hi\n")
    proc = norma("run", "Read", "-i", '{"file_path": "f.txt"}', "--text")
    assert proc.returncode == 0 and "hi" in proc.stdout
    listed = norma("catalog", "list")
    assert listed.returncode == 0 and "no catalog rows yet" in listed.stderr


# ----------------------------------------------------------------------------- on_error
def broken_store(tmp_path: Path, kind: str) -> Path:
    target = tmp_path / "broken.db"
    if kind == "garbage":
        target.write_bytes(os.urandom(4096))
    else:
        target.mkdir()
    return target


def test_unreadable_catalog_fails_by_default(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("hi\n")
    for kind in ("garbage", "directory"):
        (tmp_path / kind).mkdir()
        target = broken_store(tmp_path / kind, kind)
        cfg = write_config(tmp_path, f'[store]\nurl = "sqlite:///{target}"\n')
        proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "f.txt"}')
        assert proc.returncode == 2, (kind, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and "tool catalog cannot be read" in lines[0] and "on_error" in lines[0]
        )
        assert proc.stdout == "" and "Traceback" not in proc.stderr


def test_unreadable_catalog_falls_back_to_code_defined_tools(
    norma: RunNorma, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("hi\n")
    target = broken_store(tmp_path, "garbage")
    cfg = write_config(
        tmp_path, f'[store]\nurl = "sqlite:///{target}"\n[catalog]\non_error = "fallback"\n'
    )
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "f.txt"}', "--text")
    assert proc.returncode == 0 and "hi" in proc.stdout
    assert "running with the code-defined tools" in proc.stderr and "fallback" in proc.stderr
    listed = norma("--config", str(cfg), "tools", "list")
    assert listed.returncode == 0 and "Read" in listed.stdout


def test_read_only_listing_does_not_create_the_store(norma: RunNorma) -> None:
    assert norma("tools", "list").returncode == 0
    assert not db_path().exists()


# ----------------------------------------------------------------------------- agents
AGENTS = """
[agents.reader]
tools = ["Read", "LS"]
deny = ["Read(./secret.txt)"]

[agents.writer]
tools = ["Read", "Write"]
mode = "acceptEdits"
"""


def test_unknown_agent_is_a_usage_error(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, AGENTS)
    for args in (("run", "Read", "-i", "{}"), ("tools", "list")):
        proc = norma("--config", str(cfg), "--agent", "nobody", *args)
        assert proc.returncode == 2 and "unknown agent 'nobody'" in proc.stderr
        assert "reader" in proc.stderr and "writer" in proc.stderr


def test_agent_base_tools_rules_and_mode(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, AGENTS)
    (tmp_path / "secret.txt").write_text("s")
    (tmp_path / "open.txt").write_text("o")

    proc = norma(
        "--config",
        str(cfg),
        "--agent",
        "reader",
        "run",
        "Write",
        "-i",
        '{"file_path": "x", "content": ""}',
    )
    assert proc.returncode == 3 and "not one of agent reader's tools" in proc.stdout
    assert not (tmp_path / "x").exists()

    denied = results(
        norma(
            "--config",
            str(cfg),
            "--agent",
            "reader",
            "run",
            "Read",
            "-i",
            '{"file_path": "secret.txt"}',
        ).stdout
    )[0]
    assert denied["norma"]["decision"] == "deny"
    assert denied["norma"]["source"] == f"{cfg}:4"  # the agent's own rule, with file:line
    assert (
        norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "secret.txt"}').returncode
        == 0
    )

    proc = norma(
        "--config",
        str(cfg),
        "--agent",
        "writer",
        "run",
        "Write",
        "-i",
        '{"file_path": "w.txt", "content": "c"}',
    )
    assert proc.returncode == 0, proc.stdout  # acceptEdits from the agent's mode
    proc = norma(
        "--config",
        str(cfg),
        "--agent",
        "writer",
        "--mode",
        "default",
        "run",
        "Write",
        "-i",
        '{"file_path": "w2.txt", "content": "c"}',
    )
    assert proc.returncode == 3  # --mode beats the agent's mode

    listed = norma("--config", str(cfg), "--agent", "reader", "tools", "list", "--json")
    assert sorted(t["name"] for t in json.loads(listed.stdout)) == ["LS", "Read"]


LS_DOT = '{"path": "."}'


def test_catalog_binding_and_explain(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, AGENTS + GREET % "g" + "deferred = true\n")
    assert norma("--config", str(cfg), "catalog", "set", "LS", "--agents", "writer").returncode == 0
    assert norma("--config", str(cfg), "catalog", "set", "Read", "--disable").returncode == 0

    proc = norma("--config", str(cfg), "--agent", "reader", "tools", "list", "--explain", "--json")
    assert proc.returncode == 0, proc.stderr
    states = {t["name"]: t for t in json.loads(proc.stdout)["tools"]}
    assert (
        states["LS"]["callable"] is False
        and "bound to agents writer, not reader" in states["LS"]["reasons"][0]
    )
    assert (
        states["Read"]["exists"]
        and not states["Read"]["exposed"]
        and "disabled" in states["Read"]["reasons"][0]
    )
    assert (
        states["Write"]["callable"] is False
        and "not one of agent reader's tools" in states["Write"]["reasons"][0]
    )
    greet = states["greet"]
    assert (greet["exists"], greet["exposed"], greet["callable"]) == (True, False, True)
    assert "deferred" in greet["reasons"][0]

    text = norma("--config", str(cfg), "--agent", "reader", "tools", "list", "--explain").stdout
    assert "EXISTS  EXPOSED  CALLABLE" in text and "# agent reader" in text

    # no --agent: a bound tool is refused too (a binding names who may use it)
    proc = norma("--config", str(cfg), "run", "LS", "-i", LS_DOT)
    assert proc.returncode == 3 and "this run has no --agent" in proc.stdout
    assert (
        norma("--config", str(cfg), "--agent", "writer", "run", "LS", "-i", LS_DOT).returncode == 3
    )  # not in writer's tools
    assert norma("--config", str(cfg), "catalog", "set", "LS", "--agents", "*").returncode == 0
    assert norma("--config", str(cfg), "run", "LS", "-i", LS_DOT).returncode == 0


def test_catalog_schema_defaults_fill_missing_scalars(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path,
        """
[[custom_tools]]
name = "hello"
kind = "command"
exec = "echo {{greeting}} {{who}}"
input_schema = { type = "object", properties = { greeting = { type = "string", default = "hello" }, who = { type = "string" } }, required = ["who", "greeting"] }
""",
    )
    allow = ("--config", str(cfg), "--allow", "hello")
    assert (
        norma(*allow, "run", "hello", "-i", '{"who": "bob"}', "--text").stdout.strip()
        == "hello bob"
    )
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "greeting": {"type": "string", "default": "bonjour"},
                    "who": {"type": "string"},
                },
                "required": ["who", "greeting"],
                "additionalProperties": False,
            }
        )
    )
    assert (
        norma("--config", str(cfg), "catalog", "set", "hello", "--schema", f"@{schema}").returncode
        == 0
    )
    assert (
        norma(*allow, "run", "hello", "-i", '{"who": "bob"}', "--text").stdout.strip()
        == "bonjour bob"
    )
    shown = json.loads(norma("--config", str(cfg), "tools", "show", "hello", "--json").stdout)
    assert shown["input_schema"]["properties"]["greeting"]["default"] == "bonjour"
    bad = norma("--config", str(cfg), "catalog", "set", "hello", "--schema", '{"type": "array"}')
    assert bad.returncode == 2 and "type" in bad.stderr


def test_catalog_set_unknown_tool_and_reset(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("catalog", "set", "Nope", "--disable")
    assert proc.returncode == 2 and "no tool 'Nope'" in proc.stderr
    assert norma("catalog", "set", "Read", "--description", "Mine.").returncode == 0
    row = json.loads(norma("catalog", "show", "Read", "--json").stdout)
    assert row["edited"] == ["description"] and row["this_run"]["callable"] is True
    assert norma("catalog", "set", "Read", "--reset", "description").returncode == 0
    shown = json.loads(norma("tools", "show", "Read", "--json").stdout)
    assert shown["description"] != "Mine."  # the code's description applies again


def test_catalog_add_creates_a_custom_tool_row(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma(
        "catalog",
        "add",
        "stamp",
        "--kind",
        "command",
        "--exec",
        "echo stamped {{label}}",
        "--description",
        "Stamp a label.",
    )
    assert proc.returncode == 0, proc.stderr
    out = norma("--allow", "stamp", "run", "stamp", "-i", '{"label": "a b"}', "--text")
    assert out.returncode == 0 and out.stdout.strip() == "stamped a b"
    assert (
        json.loads(norma("catalog", "show", "stamp", "--json").stdout)["created_by"] == "operator"
    )
    report = json.loads(norma("catalog", "sync", "--json").stdout)
    assert "stamp" not in report["stale"]  # operator rows are not code's to retire
    again = norma("catalog", "add", "stamp", "--kind", "command", "--exec", "true")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_an_untrusted_projects_stricter_mode_beats_the_agents_mode(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, AGENTS)
    (tmp_path / ".norma").mkdir()
    (tmp_path / ".norma" / "config.toml").write_text('[permissions]\nmode = "plan"\n')
    proc = norma(
        "--config",
        str(cfg),
        "--agent",
        "writer",
        "run",
        "Write",
        "-i",
        '{"file_path": "w.txt", "content": "c"}',
    )
    assert proc.returncode == 3 and "plan mode" in proc.stdout and not (tmp_path / "w.txt").exists()


def test_agent_option_on_tools_list_and_policy_check(norma: RunNorma, tmp_path: Path) -> None:
    import json as _json

    cfg = write_config(tmp_path, AGENTS)
    listed = _json.loads(
        norma("--config", str(cfg), "tools", "list", "--agent", "reader", "--json").stdout
    )
    assert sorted(t["name"] for t in listed) == ["LS", "Read"]
    report = norma(
        "--config", str(cfg), "policy", "check", "Read", "--agent", "reader",
        "-i", '{"file_path": "secret.txt"}', "--json",
    )  # fmt: skip
    assert _json.loads(report.stdout)["decision"] == "deny"
    plain = norma(
        "--config",
        str(cfg),
        "policy",
        "check",
        "Read",
        "-i",
        '{"file_path": "secret.txt"}',
        "--json",
    )
    assert _json.loads(plain.stdout)["decision"] == "allow"
