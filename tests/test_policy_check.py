"""`norma policy check`: the decision, its stage, the exact rule and its file:line; nothing runs."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import RunNorma

POLICY = """[permissions]
allow = [
  "Bash(git log:*)",
  "Bash(touch:*)",
]
ask = ["Bash(git push:*)"]
deny = ["Bash(rm:*)", "Edit(//etc/**)"]
"""


def check(norma: RunNorma, cfg: Path, tool: str, tool_input: dict) -> dict:
    proc = norma(
        "--config", str(cfg), "policy", "check", tool, "-i", json.dumps(tool_input), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_allow_ask_deny_name_rule_and_line(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    allow = check(norma, cfg, "Bash", {"command": "git log --oneline"})
    assert (allow["decision"], allow["stage"], allow["rule"], allow["source"]) == (
        "allow",
        "rule",
        "Bash(git log:*)",
        f"{cfg}:3",
    )
    ask = check(norma, cfg, "Bash", {"command": "git push origin main"})
    assert (ask["decision"], ask["rule"], ask["source"]) == ("ask", "Bash(git push:*)", f"{cfg}:6")
    deny = check(norma, cfg, "Bash", {"command": "git log && rm -rf build"})
    assert (deny["decision"], deny["rule"], deny["source"]) == ("deny", "Bash(rm:*)", f"{cfg}:7")
    assert set(deny) == {"decision", "stage", "rule", "source", "reason", "subcommands"}


def test_bash_subcommand_verdicts(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    report = check(norma, cfg, "Bash", {"command": "git log | head; touch ok > /etc/passwd"})
    rows = {(s["command"], s["decision"], s["rule"]) for s in report["subcommands"]}
    assert ("git log", "allow", "Bash(git log:*)") in rows
    assert ("head", "ask", None) in rows
    assert ("> /etc/passwd", "deny", "Edit(//etc/**)") in rows
    assert report["decision"] == "deny"


def test_check_executes_nothing(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    report = check(norma, cfg, "Bash", {"command": "touch created.txt"})
    assert report["decision"] == "allow"
    assert not (tmp_path / "created.txt").exists()


def test_text_output_and_errors(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    proc = norma("--config", str(cfg), "policy", "check", "Bash", "-i", '{"command": "rm -rf /"}')
    assert proc.returncode == 0 and proc.stdout.startswith("DENY") and f"{cfg}:7" in proc.stdout
    proc = norma("policy", "check", "Nope", "-i", "{}")
    assert proc.returncode == 2 and "unknown tool" in proc.stderr
    proc = norma("policy", "check", "Read", "-i", '{"file_path": 1}')
    assert proc.returncode == 2 and "/file_path" in proc.stderr


def test_file_rules_and_cli_flag_source(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    proc = norma(
        "--deny",
        "Read(./secrets/**)",
        "policy",
        "check",
        "Read",
        "-i",
        '{"file_path": "./src/../secrets/k"}',
        "--json",
    )
    report = json.loads(proc.stdout)
    assert (report["decision"], report["rule"], report["source"]) == (
        "deny",
        "Read(./secrets/**)",
        "--deny",
    )


def test_redirection_rows_use_the_directory_the_decision_used(
    norma: RunNorma, tmp_path: Path
) -> None:
    """A redirection's row is judged where the engine resolved it: after ``cd build &&`` in
    ./build (allowed by the Edit rule), after ``cd build;`` in ./ or ./build (./out.txt is
    not covered: ask) — not on its own from the working directory."""
    (tmp_path / "build").mkdir()
    cfg = tmp_path / "policy.toml"
    cfg.write_text(
        '[permissions]\nallow = ["Bash(cd:*)", "Bash(echo:*)", "Edit(./build/**)"]\n'
        'deny = ["Edit(./build/secret.txt)"]\n'
    )
    chained = check(norma, cfg, "Bash", {"command": "cd build && echo x > out.txt"})
    assert chained["decision"] == "allow"
    rows = {s["command"]: s for s in chained["subcommands"]}
    assert set(rows) == {"cd build", "echo x", "> out.txt"}
    assert (rows["> out.txt"]["decision"], rows["> out.txt"]["rule"]) == (
        "allow",
        "Edit(./build/**)",
    )
    assert rows["> out.txt"]["source"] == f"{cfg}:2"

    maybe = check(norma, cfg, "Bash", {"command": "cd build; echo x > out.txt"})
    assert maybe["decision"] == "ask"
    rows = {s["command"]: s for s in maybe["subcommands"]}
    assert (rows["> out.txt"]["decision"], rows["> out.txt"]["rule"]) == ("ask", None)
    assert rows["echo x"]["decision"] == "allow"

    # the deny side resolves the same way: ./build/secret.txt, which no rule names as written
    denied = check(norma, cfg, "Bash", {"command": "cd build && echo x > secret.txt"})
    rows = {s["command"]: s for s in denied["subcommands"]}
    assert denied["decision"] == "deny" and denied["rule"] == "Edit(./build/secret.txt)"
    assert (rows["> secret.txt"]["decision"], rows["> secret.txt"]["rule"]) == (
        "deny",
        "Edit(./build/secret.txt)",
    )


def test_each_row_is_the_command_as_the_line_read_it(norma: RunNorma, tmp_path: Path) -> None:
    """Rows come from the line's own parse, nested commands included once each (no reparse)."""
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    report = check(norma, cfg, "Bash", {"command": "git log $(rm -rf x) && sudo rm y"})
    rows = [(s["command"], s["decision"], s["rule"]) for s in report["subcommands"]]
    assert report["decision"] == "deny"
    assert ("rm -rf x", "deny", "Bash(rm:*)") in rows
    assert ("sudo rm y", "deny", "Bash(rm:*)") in rows  # its deny-only reading: rm y
    # the outer command's own words (git log, then a value not known): not literal
    assert ("git log $(rm -rf x)", "ask", "<unparseable shell>") in rows


def test_input_that_is_not_utf8_is_a_usage_error(norma: RunNorma) -> None:
    proc = norma("policy", "check", "Bash", "-i", '{"command": "echo \\ud800"}')
    assert proc.returncode == 2 and proc.stderr.startswith("norma: error: input is not valid UTF-8")
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
