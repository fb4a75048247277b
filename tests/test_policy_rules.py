"""Rule syntax, self-testing examples, lazy imports and the end-to-end CLI path of the engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RunNorma, results
from policy_fixtures import TOOLS, Bash, make_workspace

from norma_cli.core.contract import CallContext
from norma_cli.errors import ConfigError
from norma_cli.policy.rules import Rule, RuleSet
from norma_cli.policy.selftest import check_examples
from norma_cli.policy.shell import _parse, parse_script


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Bash(git 'log:*)", "cannot split the command"),
        ("Bash(git * log)", "only allowed at the end"),
        ("Bash(git:* log)", "only allowed at the end"),
        ("Read(../up/**)", "'..' is not allowed"),
        ("Read(~other/x)", "only ~/"),
        ("WebFetch(domain:exa mple.com)", "expected example.com"),
        ("WebFetch(domain:ex*ample.com)", "expected example.com"),
        ("mcp__x__y(no-colon-here)", "expected param:glob"),
        ("mcp__x__*(./src/**)", "expected param:glob"),
    ],
)
def test_bad_specifiers_are_config_errors_naming_the_source(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        Rule.parse(text, "deny", "policy.toml:7")
    assert str(exc.value).startswith("policy.toml:7: rule ") and message in str(exc.value)


@pytest.mark.parametrize(
    "text",
    [
        "Bash(git log:*)",
        "Bash(npm test)",
        "Bash(git log *)",
        "Bash(*)",
        'Bash(git commit -m "a b")',
        "Read(./src/**)",
        "Read(//etc/**)",
        "Read(~/.ssh/**)",
        "Read(*.env)",
        "Read(/src/**)",
        "Edit(src/**/*.py)",
        "Read(file_path:/srv/**)",
        "WebFetch(domain:*.example.com)",
        "WebFetch(domain:bücher.de)",
        "WebFetch(url:https://*)",
        "mcp__git__*(repo_path:/srv/**)",
        "mcp__x__*",
    ],
)
def test_good_specifiers_parse(text: str) -> None:
    assert Rule.parse(text, "allow", "t").compiled is not None or "(" not in text


def test_prefix_spellings_are_equivalent(tmp_path: Path) -> None:
    for spelling in ("Bash(git log:*)", "Bash(git log *)"):
        ws = make_workspace(tmp_path, {"allow": [spelling]})
        assert ws.evaluate(Bash(), {"command": "git log -3"}).behavior == "allow"
        assert ws.evaluate(Bash(), {"command": "git logx"}).behavior == "ask"


def test_leading_slash_means_the_working_root(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, {"deny": ["Read(/secrets/**)"]})
    assert ws.evaluate(TOOLS["Read"], {"file_path": "secrets/k"}).behavior == "deny"
    assert ws.evaluate(TOOLS["Read"], {"file_path": "/secrets/k"}).behavior != "deny"


def _ctx(tmp_path: Path) -> CallContext:
    return CallContext("t", tmp_path, (tmp_path,))


def test_examples_that_hold_report_nothing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    cases = [
        (
            "Bash(git log:*)",
            "allow",
            ["git log", "git log -3 | git log"],
            ["git logx", "git log && rm x", "git log $X"],
        ),
        (
            "Bash(rm:*)",
            "deny",
            ["rm x", "git log && rm x", "bash -c 'rm x'", "a=rm; $a x"],
            ["rmdir x", "echo rm"],
        ),
        ("Bash(git push:*)", "ask", ["git push", "sudo git push"], ["git pull", "echo $X"]),
        ("Read(./secrets/**)", "deny", ["secrets/k", {"file_path": "./x/../secrets/k"}], ["src/k"]),
        (
            "WebFetch(domain:*.example.com)",
            "allow",
            ["https://a.example.com/"],
            ["https://example.com/"],
        ),
        (
            "mcp__git__*(repo_path:/srv/**)",
            "allow",
            [{"tool": "mcp__git__commit", "input": {"repo_path": "/srv/a"}}],
            [{"tool": "mcp__git__commit", "input": {"repo_path": "/etc"}}],
        ),
    ]
    for text, behavior, match, not_match in cases:
        rule = Rule.parse(text, behavior, "t")  # type: ignore[arg-type]
        assert check_examples(rule, match, not_match, ctx) == [], text


def test_examples_that_fail_are_reported_one_by_one(tmp_path: Path) -> None:
    rule = Rule.parse("Bash(git log:*)", "allow", "t")
    failures = check_examples(rule, ["git logx", "git log"], ["git log --all", 5], _ctx(tmp_path))
    assert failures == [
        "example 'git logx' should match but does not",
        "example 'git log --all' should not match but does",
        "example 5: an example is a string or an input object",
    ]
    wild = Rule.parse("mcp__git__*(repo_path:/srv/**)", "deny", "t")
    assert "wildcard name" in check_examples(wild, [{"repo_path": "/srv"}], [], _ctx(tmp_path))[0]


def test_config_refuses_to_load_when_a_bash_example_fails(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[permissions.rules]]\nrule = "Bash(git log:*)"\ndecision = "allow"\n'
        'match = ["git log --oneline"]\nnot_match = ["git logx", "git log && rm -rf x"]\n'
    )
    assert norma("--config", str(cfg), "config", "validate").returncode == 0
    cfg.write_text(
        '[[permissions.rules]]\nrule = "Bash(rm:*)"\ndecision = "deny"\n'
        "not_match = [\"bash -c 'rm -rf x'\"]\n"
    )
    proc = norma("--config", str(cfg), "config", "validate")
    assert proc.returncode == 2 and "should not match but does" in proc.stderr


def test_norma_run_denies_a_chained_command_and_names_the_rule(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[permissions]\nallow = ["Bash(echo:*)"]\ndeny = [\n  "Bash(rm:*)",\n]\n')
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    command = json.dumps({"command": f"echo hi && timeout 5 rm -f {victim}"})
    proc = norma("--config", str(cfg), "run", "Bash", "-i", command)
    assert proc.returncode == 3 and victim.exists()
    meta = results(proc.stdout)[0]["norma"]
    assert (meta["decision"], meta["rule"], meta["source"]) == ("deny", "Bash(rm:*)", f"{cfg}:4")


def test_one_evaluation_parses_the_line_once(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    command = "git log && git status # unique-6f1c"
    before = _parse.cache_info()
    assert ws.evaluate(Bash(), {"command": command}).behavior == "allow"
    after = _parse.cache_info()
    assert after.misses - before.misses == 1 and after.hits - before.hits >= 2


def test_rules_added_later_take_effect(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, {"allow": ["Bash(git log:*)"]})
    assert ws.evaluate(Bash(), {"command": "git log"}).behavior == "allow"
    ws.engine.rules.add(Rule.parse("Bash(git:*)", "deny", "late"))
    assert ws.evaluate(Bash(), {"command": "git log"}).behavior == "deny"
    ws.engine.rules.rules["deny"].clear()
    assert ws.evaluate(Bash(), {"command": "git log"}).behavior == "allow"


def test_ruleset_find_is_the_seam_for_family_rules(tmp_path: Path) -> None:
    rules = RuleSet(
        [Rule.parse("Read(./secrets/**)", "deny", "t"), Rule.parse("Edit(//etc/**)", "deny", "t")]
    )
    ctx = _ctx(tmp_path)
    assert rules.find("deny", TOOLS["Glob"], {"path": "secrets"}, ctx) is not None
    assert rules.find("deny", TOOLS["Write"], {"file_path": "/etc/x"}, ctx) is not None
    assert rules.find("deny", TOOLS["Bash"], {"command": "echo > /etc/x"}, ctx) is not None
    assert rules.find("deny", TOOLS["Edit"], {"file_path": "secrets/k"}, ctx) is None


def test_parse_is_cached_and_immutable() -> None:
    a = parse_script("git log | head")
    assert parse_script("git log | head") is a
    with pytest.raises(AttributeError):
        a.commands[0].words = ("rm",)  # type: ignore[misc]


def test_importing_and_matching_without_shell_lines_never_loads_tree_sitter() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from norma_cli.core.contract import CallContext, Tool\n"
        "from norma_cli.policy.rules import Rule, RuleSet\n"
        "class Read(Tool):\n"
        "    name = 'Read'\n"
        "    def file_paths(self, i, c): return [i['file_path']]\n"
        "rules = RuleSet([Rule.parse('Bash(rm:*)', 'deny', 't'), Rule.parse('Read(./s/**)', 'deny', 't')])\n"
        "ctx = CallContext('s', Path('/tmp'), (Path('/tmp'),))\n"
        "assert rules.find('deny', Read(), {'file_path': 's/k'}, ctx) is not None\n"
        "assert 'tree_sitter' not in sys.modules, 'tree_sitter imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
