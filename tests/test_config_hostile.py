"""Hostile config files: what is not a regular file, numbers and regexes that would only fail
later, rule provenance in very large files, unsearchable folders, and `config trust` refusing
what does not load. Each error is one `norma: error:` line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RunNorma, results


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("norma: error:"), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def trust_file() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "trusted-configs.json"


# ---------------------------------------------------------------- what is not a config file
def test_a_config_path_that_is_a_directory_says_so(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    proc = norma("run", "Read", "-i", "{}", env={"NORMA_CONFIG": str(tmp_path / "conf.d")})
    one_line_error(proc, f"{tmp_path / 'conf.d'}: config file is a directory")


def test_a_fifo_as_config_is_refused_without_waiting_for_a_writer(
    norma: RunNorma, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "pipe")
    proc = norma("config", "validate", "pipe", timeout=10)
    one_line_error(proc, "pipe: config file is not a regular file (a named pipe)")


def test_a_device_as_config_is_never_read(norma: RunNorma) -> None:
    proc = norma("run", "Read", "-i", "{}", env={"NORMA_CONFIG": "/dev/zero"}, timeout=10)
    one_line_error(proc, "/dev/zero: config file is not a regular file (a device)")


def test_a_missing_config_is_still_not_found(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("--config", str(tmp_path / "nope.toml"), "run", "Read", "-i", "{}")
    one_line_error(proc, f"{tmp_path / 'nope.toml'}: config file not found")


def test_a_user_config_that_is_a_directory_is_an_error_not_skipped(norma: RunNorma) -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "norma" / "config.toml"
    path.mkdir(parents=True)
    one_line_error(norma("run", "Read", "-i", "{}"), f"{path}: config file is a directory")


def test_a_project_config_that_is_a_directory_does_not_fall_through_to_a_parent(
    norma: RunNorma, tmp_path: Path
) -> None:
    # the parent's config allows everything; the project's `.norma/config.toml` is a folder
    write(tmp_path / ".norma" / "config.toml", '[permissions]\nmode = "bypassPermissions"\n')
    inner = tmp_path / "project"
    (inner / ".norma" / "config.toml").mkdir(parents=True)
    proc = norma("--cwd", str(inner), "run", "Read", "-i", "{}")
    one_line_error(proc, f"{inner / '.norma' / 'config.toml'}: config file is a directory")
    assert "(a directory)" in norma("--cwd", str(inner), "config", "path").stdout


def test_an_unsearchable_project_folder_upward_is_an_error_naming_it(tmp_path: Path) -> None:
    locked = tmp_path / ".norma"
    locked.mkdir()
    (tmp_path / "project").mkdir()
    locked.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "norma_cli", "run", "Read", "-i", "{}"],
            cwd=tmp_path / "project",
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        locked.chmod(0o755)
    one_line_error(proc, f"{tmp_path}: cannot search for .norma/config.toml: Permission denied")


# ---------------------------------------------------------------- values that fail only later
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("[web]\ntimeout = nan\n", 2, "web.timeout: must be a finite number, got nan"),
        ("[intercept.ask]\ntimeout_s = inf\n", 2, "intercept.ask.timeout_s: must be a finite"),
        ("[mcp]\n\ncall_timeout = -inf\n", 3, "mcp.call_timeout: must be a finite number"),
        ("[[hooks.Stop]]\ncommand = 'x'\ntimeout = 1e300\n", 3, "timeout: must be at most 1e+08"),
        ("[output]\nmax_chars = 99999999999999999999\n", 2, "must fit in a 64-bit integer"),
        ("[agent]\nmax_turns = inf\n", 2, "agent.max_turns: expected an integer, got float"),
    ],
    ids=["nan", "inf", "minus-inf", "years-long-timeout", "int-past-64-bits", "inf-for-int"],
)
def test_numbers_that_would_overflow_later_are_config_errors(
    norma: RunNorma, tmp_path: Path, text: str, line: int, needle: str
) -> None:
    cfg = write(tmp_path / "c.toml", text)
    one_line_error(norma("config", "validate", str(cfg)), f"{cfg}:{line}:", needle)


@pytest.mark.parametrize("matcher", ["*", "", "Read|Bash", "mcp__.*"])
def test_valid_hook_matchers_still_load(norma: RunNorma, tmp_path: Path, matcher: str) -> None:
    cfg = write(
        tmp_path / "c.toml", f'[[hooks.PreToolUse]]\ncommand = "true"\nmatcher = "{matcher}"\n'
    )
    proc = norma("config", "validate", str(cfg))
    assert proc.returncode == 0, proc.stderr


def test_a_bad_matcher_names_the_hook_it_belongs_to(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.toml",
        '[[hooks.PreToolUse]]\ncommand = "true"\nmatcher = "Read"\n\n'
        '[[hooks.PreToolUse]]\ncommand = "true"\nmatcher = "[Bash"\n',
    )
    one_line_error(
        norma("config", "validate", str(cfg)),
        f"{cfg}:7: hooks.PreToolUse[1].matcher: invalid regular expression '[Bash'",
    )


# ---------------------------------------------------------------- provenance in big files
def test_thirty_thousand_rules_load_quickly_with_each_rule_on_its_line(
    norma: RunNorma, tmp_path: Path
) -> None:
    rules = [f"Bash(tool{i}:*)" for i in range(30_000)]
    rules[29_000] = "Read"  # line 3 + 29,000: far past any fixed search window
    body = ",\n".join(f'  "{r}"' for r in rules)
    cfg = write(tmp_path / "c.toml", f"[permissions]\ndeny = [\n{body}\n]\n")
    write(tmp_path / "a.txt", "x")
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "a.txt"}', timeout=20)
    assert proc.returncode == 3, proc.stderr
    assert results(proc.stdout)[0]["norma"]["source"] == f"{cfg}:{3 + 29_000}"


def test_a_rule_is_cited_inside_its_own_table_and_in_any_quoting(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write(
        tmp_path / "c.toml",
        '# "Read" mentioned in a comment before the rules\n'
        "[permissions]\n"
        "allow = ['Glob']\n"
        "deny = [\n"
        "  'LS',\n"
        '  "Re\\u0061d",\n'  # an escape: the same string, spelled differently
        "]\n"
        "[agents.reviewer]\n"
        'tools = ["Read"]\n',
    )
    write(tmp_path / "a.txt", "x")
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "a.txt"}')
    assert proc.returncode == 3, proc.stderr
    assert results(proc.stdout)[0]["norma"]["source"] == f"{cfg}:6"


# ---------------------------------------------------------------- config trust
def test_trust_refuses_a_config_whose_rule_does_not_parse(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / ".norma" / "config.toml", '[permissions]\nallow = ["Bash(ls"]\n')
    proc = norma("config", "trust")
    one_line_error(proc, ".norma/config.toml:2")
    assert not trust_file().exists()


def test_trust_refuses_a_directory_and_records_nothing(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / ".norma" / "config.toml").mkdir(parents=True)
    one_line_error(norma("config", "trust"), "config file is a directory")
    assert not trust_file().exists()


def test_trust_records_the_digest_of_a_valid_project_config(
    norma: RunNorma, tmp_path: Path
) -> None:
    import hashlib

    cfg = write(tmp_path / ".norma" / "config.toml", '[permissions]\nallow = ["Bash(ls:*)"]\n')
    proc = norma("config", "trust")
    assert proc.returncode == 0, proc.stderr
    digest = hashlib.sha256(cfg.read_bytes()).hexdigest()
    assert json.loads(trust_file().read_text()) == {str(cfg.resolve()): digest}
    shown = json.loads(norma("config", "show", "--json").stdout)
    assert [layer["trusted"] for layer in shown["layers"]] == [True]
