"""Layered configuration, clear errors with file:line:key, rule provenance and project trust."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import RunNorma, results


def user_config(isolated_env: Path) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "norma" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def project_config(root: Path, text: str) -> Path:
    path = root / ".norma" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_broken_toml_is_exit_2_naming_file_and_line(norma: RunNorma, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[permissions]\nmode = "default"\nallow = [\n')
    proc = norma("--config", str(bad), "tools", "list")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"{bad}:3: invalid TOML" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_key_and_wrong_type_name_file_line_key(norma: RunNorma, tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text('[permissions]\nmode = "default"\n\n[output]\nmax_charz = 10\n')
    proc = norma("--config", str(bad), "config", "validate")
    assert proc.returncode == 2
    assert f"{bad}:5: output.max_charz: unknown key" in proc.stderr

    bad.write_text('[permissions]\nmode = "sometimes"\n')
    proc = norma("--config", str(bad), "config", "validate")
    assert proc.returncode == 2 and f"{bad}:2: permissions.mode: expected one of" in proc.stderr

    bad.write_text(
        '[[hooks.PreToolUse]]\ncommand = "x"\n\n[[hooks.PreToolUse]]\ncommand = "y"\ntimeout = "slow"\n'
    )
    proc = norma("--config", str(bad), "config", "validate")
    assert (
        proc.returncode == 2
        and f"{bad}:6: hooks.PreToolUse[1].timeout: expected a number" in proc.stderr
    )


def test_bad_rule_syntax_is_exit_2(norma: RunNorma, tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text('[permissions]\ndeny = ["Read(unclosed"]\n')
    proc = norma("--config", str(bad), "config", "validate")
    assert proc.returncode == 2 and "cannot parse rule" in proc.stderr and f"{bad}:2" in proc.stderr


def test_layers_merge_scalars_override_and_rules_accumulate(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    user_config(isolated_env).write_text(
        '[permissions]\ndeny = ["Write"]\n[output]\nmax_chars = 5000\n'
    )
    extra = tmp_path / "extra.toml"
    extra.write_text('[permissions]\ndeny = ["Edit"]\n[output]\nmax_chars = 7000\n')
    proc = norma("--config", str(extra), "--deny", "Bash", "config", "show", "--json")
    assert proc.returncode == 0, proc.stderr
    import json

    shown = json.loads(proc.stdout)
    assert shown["config"]["output"]["max_chars"] == 7000
    assert shown["config"]["permissions"]["deny"] == ["Write", "Edit"]
    assert [layer["kind"] for layer in shown["layers"]] == ["user", "explicit"]


def test_deny_rule_source_is_file_and_line(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '# policy\n[permissions]\nallow = [\n  "LS",\n]\ndeny = [\n  "Glob",\n  "Read",\n]\n'
    )
    (tmp_path / "a.txt").write_text("hi")
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "a.txt"}')
    assert proc.returncode == 3
    meta = results(proc.stdout)[0]["norma"]
    assert (meta["decision"], meta["stage"], meta["rule"], meta["source"]) == (
        "deny",
        "rule",
        "Read",
        f"{cfg}:8",
    )


def test_rule_examples_checked_at_load(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[permissions.rules]]\nrule = "Read"\ndecision = "deny"\n'
        'match = [{file_path = "a"}]\nnot_match = [{file_path = "b"}]\n'
    )
    proc = norma("--config", str(cfg), "config", "validate")
    assert proc.returncode == 2
    assert f"{cfg}:2" in proc.stderr and "should not match but does" in proc.stderr

    cfg.write_text(
        '[[permissions.rules]]\nrule = "Read"\ndecision = "deny"\nmatch = [{file_path = "a"}]\n'
    )
    assert norma("--config", str(cfg), "config", "validate").returncode == 0


def test_untrusted_project_config_only_tightens(norma: RunNorma, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    hook_marker = tmp_path / "hook-ran"
    cfg = project_config(
        project,
        '[permissions]\nallow = ["Write"]\ndeny = ["Glob"]\n'
        f'[[hooks.PreToolUse]]\ncommand = "touch {hook_marker}"\n',
    )
    # found upward from a subdirectory
    proc = norma(
        "run", "Write", "-i", '{"file_path": "x.txt", "content": "x"}', cwd=project / "sub"
    )
    assert proc.returncode == 3  # the allow rule did not apply
    assert "untrusted project config" in proc.stderr and "permissions.allow" in proc.stderr
    assert "[hooks]" in proc.stderr
    assert not hook_marker.exists()
    assert (
        norma("run", "Glob", "-i", '{"pattern": "*"}', cwd=project).returncode == 3
    )  # deny applies

    trust = norma("config", "trust", cwd=project / "sub")
    assert trust.returncode == 0 and str(cfg) in trust.stdout
    proc = norma("run", "Write", "-i", '{"file_path": "x.txt", "content": "x"}', cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert hook_marker.exists() and (project / "x.txt").read_text() == "x"

    cfg.write_text(cfg.read_text() + "\n# edited\n")
    proc = norma("run", "Write", "-i", '{"file_path": "y.txt", "content": "y"}', cwd=project)
    assert proc.returncode == 3 and "untrusted" in proc.stderr


def test_untrusted_project_cannot_loosen_mode(norma: RunNorma, tmp_path: Path) -> None:
    project_config(tmp_path, '[permissions]\nmode = "bypassPermissions"\n')
    proc = norma("run", "Write", "-i", '{"file_path": "x.txt", "content": "x"}')
    assert proc.returncode == 3 and "looser" in proc.stderr
    project_config(tmp_path, '[permissions]\nmode = "plan"\n')
    (tmp_path / "r.txt").write_text("r")
    proc = norma("--allow", "Write", "run", "Write", "-i", '{"file_path": "x.txt", "content": "x"}')
    assert proc.returncode == 3
    assert results(proc.stdout)[0]["norma"]["stage"] == "mode"


def test_config_show_reports_trust(norma: RunNorma, tmp_path: Path) -> None:
    project_config(tmp_path, '[permissions]\ndeny = ["Bash"]\n')
    proc = norma("config", "show")
    assert "UNTRUSTED" in proc.stdout
    norma("config", "trust")
    assert "[trusted]" in norma("config", "show").stdout


def test_config_path_lists_locations(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("config", "path")
    assert proc.returncode == 0
    assert "user" in proc.stdout and "project" in proc.stdout and "data" in proc.stdout


def test_example_config_documents_and_validates(norma: RunNorma) -> None:
    example = Path(__file__).resolve().parents[1] / "config.example.toml"
    proc = norma("config", "validate", str(example))
    assert proc.returncode == 0, proc.stderr
    from norma_cli import config_schema

    text = example.read_text()

    def keys(spec: config_schema.Spec, prefix: str) -> list[str]:
        if isinstance(spec, config_schema.Table):
            out = []
            for key, sub in spec.keys.items():
                out.append(key)
                out.extend(keys(sub, key))
            return out
        if isinstance(spec, config_schema.ListOf | config_schema.MapOf):
            return keys(spec.item, prefix)
        return []

    missing = sorted({k for k in keys(config_schema.SCHEMA, "") if k not in text})
    assert missing == [], f"config.example.toml does not mention: {missing}"


def test_linux_xdg_locations_match_platformdirs(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import platformdirs

    from norma_cli import config

    monkeypatch.delenv("NORMA_HOME", raising=False)
    for env in (
        {},
        {
            "XDG_DATA_HOME": "/x/data",
            "XDG_CONFIG_HOME": "/x/cfg",
            "XDG_CONFIG_DIRS": "/etc/a:/etc/b",
        },
    ):
        for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS"):
            monkeypatch.delenv(var, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert str(config.data_dir()) == platformdirs.user_data_dir("norma", appauthor=False)
        assert str(config.user_config_path().parent) == platformdirs.user_config_dir(
            "norma", appauthor=False
        )
        assert str(config.system_config_path().parent) == platformdirs.site_config_dir(
            "norma", appauthor=False
        )
