"""Deferred tools (SPEC §8): hidden schemas found by SearchExtraTools, run by ExecuteExtraTool
through the whole pipeline under the inner tool's own name (rules, hooks, trace), and skill
locks that only the skill opens — kept per session across `norma run --session ID`."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli import hookimpl
from norma_cli.catalog.deferred import Entry, SearchIndex
from norma_cli.core.contract import ToolCall
from norma_cli.runtime import Options, Runtime

TOOLS = """
[[custom_tools]]
name = "deploy_service"
kind = "command"
exec = "echo deployed {{service}}"
description = "Deploy a service to the staging cluster."
deferred = true

[[custom_tools]]
name = "rotate_keys"
kind = "command"
exec = "echo rotated {{vault}}"
description = "Rotate the keys of a vault."
deferred = true
"""


def setup(tmp_path: Path, extra: str = "") -> tuple[str, str]:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(TOOLS + extra)
    return "--config", str(cfg)


def execute(name: str, tool_input: dict[str, object]) -> tuple[str, ...]:
    return ("run", "ExecuteExtraTool", "-i", json.dumps({"name": name, "input": tool_input}))


def traces() -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(Path(os.environ["NORMA_HOME"]) / "norma.db") as db:
        return db.execute(
            "SELECT tool_use_id, tool, status, decision FROM traces ORDER BY created_at"
        ).fetchall()


def test_deferred_tool_is_hidden_searchable_and_runs_through_execute(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = setup(tmp_path)
    listed = [t["name"] for t in json.loads(norma(*cfg, "tools", "list", "--json").stdout)]
    assert "deploy_service" not in listed and {"SearchExtraTools", "ExecuteExtraTool"} <= set(
        listed
    )
    every = [t["name"] for t in json.loads(norma(*cfg, "tools", "list", "--all", "--json").stdout)]
    assert "deploy_service" in every

    found = norma(*cfg, "run", "SearchExtraTools", "-i", '{"query": "deploy staging"}', "--text")
    assert found.returncode == 0, found.stdout
    matches = json.loads(found.stdout)
    assert (
        matches[0]["name"] == "deploy_service"
        and "service" in matches[0]["input_schema"]["properties"]
    )

    ran = norma(
        *cfg, "--allow", "deploy_service", *execute("deploy_service", {"service": "api"}), "--text"
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "deployed api"
    # globally deferred: callable by its own name from the start, only its schema is hidden
    direct = norma(
        *cfg,
        "--allow",
        "deploy_service",
        "run",
        "deploy_service",
        "-i",
        '{"service": "db"}',
        "--text",
    )
    assert direct.returncode == 0 and direct.stdout.strip() == "deployed db"


def test_deny_on_the_inner_tool_decides_and_the_trace_shows_both(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = setup(tmp_path)
    proc = norma(
        *cfg, "--allow", "*", "--deny", "rotate_keys", *execute("rotate_keys", {"vault": "prod"})
    )
    assert proc.returncode == 3
    result = results(proc.stdout)[0]
    assert result["norma"]["rule"] == "rotate_keys" and result["norma"]["decision"] == "deny"
    rows = traces()
    outer = next(r for r in rows if r[1] == "ExecuteExtraTool")
    inner = next(r for r in rows if r[1] == "rotate_keys")
    assert (
        inner[0] == outer[0] + ".inner" and inner[2:] == ("denied", "deny") and outer[2] == "denied"
    )

    # an ask on the inner tool asks (nobody can answer here → denied), whatever allows the dispatcher
    proc = norma(
        *cfg,
        "--allow",
        "ExecuteExtraTool",
        "--ask",
        "rotate_keys",
        *execute("rotate_keys", {"vault": "x"}),
    )
    assert proc.returncode == 3 and "asks for approval" in proc.stdout

    # without a rule, the inner tool is not allowed just because the dispatcher was
    proc = norma(*cfg, *execute("rotate_keys", {"vault": "x"}))
    assert proc.returncode == 3 and "no rule allows rotate_keys" in proc.stdout


def test_pre_tool_use_hooks_fire_under_the_inner_name(norma: RunNorma, tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        f"open({str(log)!r}, 'a').write(event['tool_name'] + '\\n')\n"
        "if event['tool_input'].get('vault') == 'prod':\n"
        "    print('no prod rotation', file=sys.stderr); sys.exit(2)\n"
    )
    cfg = setup(tmp_path, f'\n[[hooks.PreToolUse]]\ncommand = "{sys.executable} {hook}"\n')
    ok = norma(*cfg, "--allow", "rotate_keys", *execute("rotate_keys", {"vault": "dev"}), "--text")
    assert ok.returncode == 0 and ok.stdout.strip() == "rotated dev"
    assert log.read_text().split() == ["ExecuteExtraTool", "rotate_keys"]
    blocked = norma(*cfg, "--allow", "rotate_keys", *execute("rotate_keys", {"vault": "prod"}))
    assert blocked.returncode == 3 and "no prod rotation" in blocked.stdout


def test_plan_mode_reaches_the_inner_call(norma: RunNorma, tmp_path: Path) -> None:
    cfg = setup(tmp_path)
    proc = norma(
        *cfg, "--mode", "plan", "--allow", "rotate_keys", *execute("rotate_keys", {"vault": "x"})
    )
    assert proc.returncode == 3 and "plan mode" in proc.stdout


SKILL = """---
name: release
description: How to cut a release.
allowed-tools: [rotate_keys]
---
1. Rotate the keys of the release vault.
"""


def user_skill(text: str = SKILL, name: str = "release") -> None:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "norma" / "skills" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text)


def test_skill_locked_tool_opens_with_the_skill_and_stays_open_on_resume(
    norma: RunNorma, tmp_path: Path
) -> None:
    user_skill()
    cfg = (*setup(tmp_path), "--allow", "rotate_keys")
    locked = norma(*cfg, "run", "--session", "s1", "rotate_keys", "-i", '{"vault": "v"}')
    assert locked.returncode == 3 and "locked until the skill release is invoked" in locked.stdout
    via = norma(*cfg, "run", "--session", "s1", *execute("rotate_keys", {"vault": "v"})[1:])
    assert via.returncode == 3 and "locked" in via.stdout
    found = json.loads(
        norma(*cfg, "run", "SearchExtraTools", "-i", '{"query": "rotate"}', "--text").stdout
    )
    assert found[0]["name"] == "rotate_keys" and "Skill" in found[0]["locked"]

    skill = norma(*cfg, "run", "--session", "s1", "Skill", "-i", '{"name": "release"}', "--text")
    assert (
        skill.returncode == 0 and "Rotate the keys" in skill.stdout and "Unlocked" in skill.stdout
    )

    for args in (
        ("rotate_keys", "-i", '{"vault": "v"}'),
        execute("rotate_keys", {"vault": "v"})[1:],
    ):
        resumed = norma(*cfg, "run", "--session", "s1", *args, "--text")
        assert resumed.returncode == 0 and resumed.stdout.strip() == "rotated v"
    other = norma(*cfg, "run", "--session", "s2", "rotate_keys", "-i", '{"vault": "v"}')
    assert other.returncode == 3  # unlocks belong to the session that invoked the skill
    explain = json.loads(norma(*cfg, "tools", "list", "--explain", "--json").stdout)
    state = next(t for t in explain["tools"] if t["name"] == "rotate_keys")
    assert state["exists"] and not state["callable"] and "locked" in state["reasons"][0]


def test_an_agent_that_cannot_see_the_skill_does_not_gate_by_it(
    norma: RunNorma, tmp_path: Path
) -> None:
    user_skill()
    cfg = setup(tmp_path, "\n[agents.ops]\nskills = []\n")
    proc = norma(
        *cfg,
        "--agent",
        "ops",
        "--allow",
        "rotate_keys",
        "run",
        "rotate_keys",
        "-i",
        '{"vault": "v"}',
    )
    assert proc.returncode == 0, (
        proc.stdout
    )  # globally deferred for ops (SPEC §8: visible skills gate)
    assert (
        norma(*cfg, "--agent", "ops", "run", "Skill", "-i", '{"name": "release"}').returncode == 1
    )  # not offered


# ----------------------------------------------------------------------------- the index
def test_search_ranks_name_over_parameters_over_prose() -> None:
    index = SearchIndex(
        [
            Entry("git_commit", "Record changes.", {"properties": {"message": {}}}),
            Entry("send_mail", "Send a commit summary by mail.", {"properties": {"to": {}}}),
            Entry("annotate", "Add notes.", {"properties": {"commit_sha": {}}}),
            Entry("repository_stats", "Statistics.", {"properties": {}}),
        ]
    )
    assert [e.name for e in index.search("commit", 3)] == ["git_commit", "annotate", "send_mail"]
    assert [e.name for e in index.search("repo", 5)] == ["repository_stats"]  # a prefix finds it
    assert [e.name for e in index.search("annotate", 1)] == ["annotate"]
    assert index.search("nothing matches this", 5) == []
    assert len(index.search("commit", 1)) == 1


@pytest.mark.parametrize("query", ["GitCommit", "git-commit", "GIT_COMMIT"])
def test_search_splits_names_like_the_model_writes_them(query: str) -> None:
    index = SearchIndex([Entry("git_commit", "", {}), Entry("other", "git things", {})])
    assert index.search(query, 1)[0].name == "git_commit"


class GitServer:
    """Stands in for an MCP server's tools (mcp__git__*) and a skill that names the server."""

    @hookimpl
    def register_tools(self, register: Any) -> None:
        def status() -> str:
            """Show the working tree status."""
            return "clean"

        register(status, name="mcp__git__status", read_only=True)

    @hookimpl
    def register_skills(self, register: Any) -> None:
        register(name="gitflow", description="Git workflow.", instructions="Use git.", mcps=["git"])


def test_a_skills_mcps_gate_every_tool_of_those_servers(tmp_path: Path) -> None:
    rt = Runtime.build(Options(cwd=tmp_path, plugins=(("git", GitServer()),), interactive=False))
    try:
        exposed = [t.name for t in rt.assembly.exposed()]
        assert "mcp__git__status" not in exposed and "ExecuteExtraTool" in exposed
        assert rt.assembly.resolved["mcp__git__status"].source == "mcp"
        locked = rt.executor.run(ToolCall("t1", "mcp__git__status", {}))
        assert locked.exit_code() == 3 and "locked until the skill gitflow" in locked.text()
        assert rt.executor.run(ToolCall("t2", "Skill", {"name": "gitflow"})).exit_code() == 0
        assert rt.executor.run(ToolCall("t3", "mcp__git__status", {})).text() == "clean"
    finally:
        rt.close()


def test_an_agent_sees_mcp_tools_of_its_servers_or_through_its_skills(tmp_path: Path) -> None:
    cfg = tmp_path / "agents.toml"
    cfg.write_text(
        '[agents.blind]\nmcp = []\nskills = []\n[agents.skilled]\nmcp = []\n[agents.direct]\nmcp = ["git"]\nskills = []\n'
    )

    def call(agent: str) -> str:
        rt = Runtime.build(
            Options(
                cwd=tmp_path,
                config=cfg,
                agent=agent,
                plugins=(("git", GitServer()),),
                interactive=False,
            )
        )
        try:
            return rt.executor.run(ToolCall("t", "mcp__git__status", {})).text()
        finally:
            rt.close()

    assert "from MCP server git, which agent blind does not see" in call("blind")
    assert "locked until the skill gitflow" in call(
        "skilled"
    )  # not seen directly, but its skill names it
    assert call("direct") == "clean"  # seen directly and not tied to a skill it sees


def test_plugin_function_tool_can_be_deferred(tmp_path: Path) -> None:
    class Plugin:
        @hookimpl
        def register_tools(self, register):  # type: ignore[no-untyped-def]
            def rare_lookup(code: str) -> str:
                """Look up a rarely needed code."""
                return code

            register(rare_lookup, read_only=True, deferred=True)

    rt = Runtime.build(
        Options(cwd=tmp_path, plugins=(("p", Plugin()),), with_store=False, interactive=False)
    )
    assert "rare_lookup" not in [t.name for t in rt.registry.exposed()]
    assert "rare_lookup" in rt.registry
