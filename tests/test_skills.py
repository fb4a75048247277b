"""Skills (SPEC §8): SKILL.md folders from the project, the user config dir and plugins; the
`Skill` tool; an untrusted project's skills are listed but unlock nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import RunNorma

from norma_cli.catalog.skills import parse_front_matter
from norma_cli.errors import ConfigError

GATED = """
[[custom_tools]]
name = "rotate_keys"
kind = "command"
exec = "echo rotated {{vault}}"
deferred = true
"""


def skill_dir(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text)
    return folder


def user_skills() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "norma" / "skills"


def skill_text(name: str, description: str, tools: str = "", body: str = "Do the thing.") -> str:
    return f"---\nname: {name}\ndescription: {description}\nallowed-tools: {tools}\n---\n{body}\n"


def listing(norma: RunNorma, *args: str) -> dict[str, dict]:
    proc = norma(*args, "skills", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    return {s["name"]: s for s in json.loads(proc.stdout)}


# ----------------------------------------------------------------------------- front matter
def test_front_matter_subset() -> None:
    meta, body = parse_front_matter(
        "---\n"
        "name: release\n"
        'description: "Cut a release: tag, build, publish"\n'
        "allowed-tools: [Bash, rotate_keys]\n"
        "mcps:\n"
        "  - git\n"
        "  - 'github'\n"
        "notes: >\n"
        "  folded\n"
        "  text\n"
        "# a comment\n"
        "---\n"
        "# Steps\n"
        "1. tag\n",
        "SKILL.md",
    )
    assert meta == {
        "name": "release",
        "description": "Cut a release: tag, build, publish",
        "allowed-tools": ["Bash", "rotate_keys"],
        "mcps": ["git", "github"],
        "notes": "folded text",
    }
    assert body == "# Steps\n1. tag"
    assert parse_front_matter("no front matter", "x") == ({}, "no front matter")


@pytest.mark.parametrize(
    "text", ["---\nname: x\n", "---\n  indented: no\n---\n", "---\nnot a pair\n---\n"]
)
def test_front_matter_errors_name_the_line(text: str) -> None:
    with pytest.raises(ConfigError, match=r"SKILL.md:\d+"):
        parse_front_matter(text, "SKILL.md")


# ----------------------------------------------------------------------------- sources and trust
def test_user_and_project_skills_and_trust(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(GATED)
    skill_dir(user_skills(), "notes", skill_text("notes", "Write release notes."))
    project = tmp_path / ".norma"
    skill_dir(project / "skills", "release", skill_text("release", "Cut a release.", "rotate_keys"))
    (project / "config.toml").write_text('[permissions]\ndeny = ["Bash(rm:*)"]\n')

    found = listing(norma, "--config", str(cfg))
    assert found["notes"]["origin"] == "user" and found["notes"]["trusted"]
    release = found["release"]
    assert release["origin"] == "project" and not release["trusted"]
    assert (
        release["allowed_tools"] == ["rotate_keys"] and release["gates"] == []
    )  # ignored while untrusted

    # untrusted: readable, but it neither locks nor unlocks anything
    run = ("--config", str(cfg), "--allow", "rotate_keys", "run", "--session", "t1")
    assert norma(*run, "rotate_keys", "-i", '{"vault": "v"}').returncode == 0
    out = norma(*run, "Skill", "-i", '{"name": "release"}', "--text")
    assert (
        out.returncode == 0 and "Do the thing." in out.stdout and "untrusted project" in out.stdout
    )

    assert norma("config", "trust").returncode == 0
    found = listing(norma, "--config", str(cfg))
    assert found["release"]["trusted"] and found["release"]["gates"] == ["rotate_keys"]
    run = ("--config", str(cfg), "--allow", "rotate_keys", "run", "--session", "t2")
    assert norma(*run, "rotate_keys", "-i", '{"vault": "v"}').returncode == 3  # locked now
    assert norma(*run, "Skill", "-i", '{"name": "release"}').returncode == 0
    assert norma(*run, "rotate_keys", "-i", '{"vault": "v"}').returncode == 0


def test_an_untrusted_project_skill_does_not_replace_a_trusted_one(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(GATED)
    skill_dir(
        user_skills(), "release", skill_text("release", "The user's.", "rotate_keys", "User steps.")
    )
    skill_dir(
        tmp_path / ".norma" / "skills",
        "release",
        skill_text("release", "The repo's.", "", "Repo steps."),
    )
    proc = norma("--config", str(cfg), "skills", "list", "--json")
    (skill,) = json.loads(proc.stdout)
    assert skill["origin"] == "user" and skill["gates"] == ["rotate_keys"]
    assert "does not replace the trusted one" in proc.stderr
    locked = norma(
        "--config", str(cfg), "--allow", "rotate_keys", "run", "rotate_keys", "-i", '{"vault": "v"}'
    )
    assert locked.returncode == 3  # the repo could not lift the user's lock by shadowing the skill


def test_agents_see_only_their_skills(norma: RunNorma, tmp_path: Path) -> None:
    skill_dir(user_skills(), "a", skill_text("a", "Skill A."))
    skill_dir(user_skills(), "b", skill_text("b", "Skill B."))
    cfg = tmp_path / "agents.toml"
    cfg.write_text('[agents.only_a]\nskills = ["a"]\n')
    found = listing(norma, "--config", str(cfg), "--agent", "only_a")
    assert found["a"]["visible"] and not found["b"]["visible"]
    shown = json.loads(
        norma("--config", str(cfg), "--agent", "only_a", "tools", "show", "Skill", "--json").stdout
    )
    assert (
        shown["input_schema"]["properties"]["name"]["enum"] == ["a"]
        and "Skill A." in shown["description"]
    )
    proc = norma("--config", str(cfg), "--agent", "only_a", "run", "Skill", "-i", '{"name": "b"}')
    assert proc.returncode == 1 and "invalid input" in proc.stdout


def test_a_broken_skill_is_a_config_error(norma: RunNorma, tmp_path: Path) -> None:
    skill_dir(user_skills(), "bad", "---\nname: bad\n")
    proc = norma("skills", "list")
    assert proc.returncode == 2 and "SKILL.md:1" in proc.stderr and "never ends" in proc.stderr


def test_no_skills(norma: RunNorma) -> None:
    proc = norma("skills", "list")
    assert proc.returncode == 0 and proc.stdout == "" and "no skills" in proc.stderr
    assert "Skill" not in norma("tools", "list").stdout
