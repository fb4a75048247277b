"""Grep against real trees with the real ripgrep (from the `ripgrep` wheel) and the Python
engine: the two must report the same matches, confinement holds, and no input is an option."""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import CallContext, ToolOutput
from norma_cli.tools import ripgrep
from norma_cli.tools.grep import GrepTool, split_globs

WORDS = ["alpha", "beta", "gamma", "delta", "Needle", "needle", "haystack", "foo_bar", "x=1", "été"]


@pytest.fixture(autouse=True)
def fresh_lookup() -> Any:
    ripgrep.reset_cache()
    yield
    ripgrep.reset_cache()


def ctx_for(root: Path, cwd: Path | None = None) -> CallContext:
    return CallContext(session_id="s", cwd=cwd or root, roots=(root,))


def grep(root: Path, monkeypatch: pytest.MonkeyPatch, engine: str, **tool_input: Any) -> ToolOutput:
    if engine == "python":
        monkeypatch.setenv("NORMA_DISABLE_RIPGREP", "1")
    else:
        monkeypatch.delenv("NORMA_DISABLE_RIPGREP", raising=False)
    out = GrepTool().call(tool_input, ctx_for(root))
    assert isinstance(out, ToolOutput)
    return out


def body(out: ToolOutput) -> str:
    """The result text without the engine's name (the only line allowed to differ)."""
    first, _, rest = out.joined_text().partition("\n")
    return first.rsplit(" (engine:", 1)[0] + "\n" + rest


def write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8", newline="")


def make_tree(root: Path, seed: int = 7, files: int = 120) -> None:
    """A tree with ignore files, hidden files, VCS dirs, encodings and odd line endings."""
    rnd = random.Random(seed)
    dirs = [
        "",
        "src",
        "src/pkg",
        "src/pkg/deep",
        "docs",
        "build",
        "node_modules/lib",
        ".hidden",
        "vendor/x",
    ]
    exts = [".py", ".js", ".ts", ".tsx", ".md", ".txt", ".rs", ".json", ""]
    for i in range(files):
        d = rnd.choice(dirs)
        name = f"f{i}{rnd.choice(exts)}"
        lines = [
            " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 6)))
            for _ in range(rnd.randint(0, 25))
        ]
        ending = rnd.choice(["\n", "\n", "\r\n"])
        text = ending.join(lines) + (ending if rnd.random() < 0.8 else "")
        write(root / d / name, text)
    (root / ".git" / "info").mkdir(parents=True)
    write(root / ".git" / "config", "needle in the git dir\n")
    write(root / ".git" / "info" / "exclude", "*.secret\n")
    write(root / "keys.secret", "needle excluded by .git/info/exclude\n")
    write(
        root / ".gitignore",
        "build/\n/vendor\n*.log\n!keep.log\nnode_modules\n# comment\n\\#hash.txt\n",
    )
    write(root / "debug.log", "needle in an ignored log\n")
    write(root / "keep.log", "needle in a re-included log\n")
    write(root / "#hash.txt", "needle in a name ignored through an escaped #\n")
    write(root / "src" / ".gitignore", "generated_*.py\n!generated_keep.py\ndeep/*.md\n")
    write(root / "src" / "generated_a.py", "needle generated\n")
    write(root / "src" / "generated_keep.py", "needle generated but kept\n")
    write(root / "src" / ".ignore", "!generated_b.py\n")
    write(root / "src" / "generated_b.py", "needle re-included by .ignore over .gitignore\n")
    write(root / "docs" / ".rgignore", "private.md\n")
    write(root / "docs" / ".ignore", "!private.md\n")
    write(root / "docs" / "private.md", "needle hidden by .rgignore (beats .ignore)\n")
    write(root / ".env", "NEEDLE=dotfile is searched\n")
    write(root / "bom.txt", "\ufeffneedle after a BOM\n")
    write(root / "utf16.txt", "needle in utf-16\n".encode("utf-16"))
    write(root / "binary.bin", b"needle\x00binary\n")
    write(root / "empty.txt", "")
    write(root / "multi.txt", "start\nneedle one\nneedle two\nmiddle\nend needle\nlast line")
    write(root / "long.txt", "needle " + "z" * 5000 + "\n")
    os.symlink(root / "multi.txt", root / "link_to_multi.txt")
    os.symlink(root / "src", root / "link_to_src")


QUERIES: list[dict[str, Any]] = [
    {"pattern": "needle"},
    {"pattern": "needle", "-i": True},
    {"pattern": "needle", "output_mode": "count"},
    {"pattern": "needle", "output_mode": "count", "-i": True},
    {"pattern": "needle", "output_mode": "content"},
    {"pattern": "needle", "output_mode": "content", "-n": False},
    {"pattern": "Needle", "output_mode": "content", "-C": 2},
    {"pattern": "haystack", "output_mode": "content", "-A": 1, "-B": 3},
    {"pattern": "^needle", "output_mode": "content"},
    {"pattern": "needle$", "output_mode": "content"},
    {"pattern": r"\bx=1\b", "output_mode": "count"},
    {"pattern": "été", "output_mode": "content", "-i": True},
    {"pattern": "gamma", "glob": "*.py"},
    {"pattern": "gamma", "glob": "*.{ts,tsx}", "output_mode": "count"},
    {"pattern": "gamma", "glob": "src/**/*.js", "output_mode": "count"},
    {"pattern": "gamma", "glob": "!*.md", "output_mode": "count"},
    {"pattern": "needle", "glob": "*.log *.secret"},
    {"pattern": "gamma", "type": "py", "output_mode": "count"},
    {"pattern": "gamma", "type": "rust"},
    {"pattern": "gamma", "type": "js", "glob": "*.md", "output_mode": "count"},
    {"pattern": "needle.two", "multiline": True, "output_mode": "content"},
    {"pattern": r"one\nneedle", "multiline": True, "output_mode": "count"},
    {"pattern": "needle.*?middle", "multiline": True, "output_mode": "content", "-C": 1},
    {"pattern": "needle", "multiline": True, "output_mode": "count"},
    {"pattern": "needle", "output_mode": "content", "head_limit": 5},
    {"pattern": "gamma", "path": "src", "output_mode": "count"},
    {"pattern": "needle", "path": "src/pkg"},
    {"pattern": "needle", "path": "multi.txt", "output_mode": "content", "-B": 1},
    {"pattern": "needle", "path": "debug.log", "output_mode": "count"},
    {"pattern": "needle", "path": "binary.bin", "output_mode": "content"},
    {"pattern": "nothing-matches-this"},
]


@pytest.mark.parametrize("query", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
def test_engines_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: dict[str, Any]
) -> None:
    root = tmp_path / "tree"
    make_tree(root)
    rg = grep(root, monkeypatch, "ripgrep", **query)
    py = grep(root, monkeypatch, "python", **query)
    assert rg.metadata["engine"] == "ripgrep" and py.metadata["engine"] == "python"
    assert not rg.is_error, rg.joined_text()
    assert body(rg) == body(py)


def test_engines_agree_on_a_random_tree_in_every_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tree"
    make_tree(root, seed=99, files=300)
    for mode in ("files_with_matches", "content", "count"):
        for extra in ({}, {"-i": True}, {"-C": 1}, {"glob": "*.py,*.md"}):
            query = {"pattern": "gamma|foo_bar", "output_mode": mode, **extra}
            assert body(grep(root, monkeypatch, "ripgrep", **query)) == body(
                grep(root, monkeypatch, "python", **query)
            ), query


def test_what_is_skipped_and_what_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tree"
    make_tree(root)
    for engine in ("ripgrep", "python"):
        text = grep(root, monkeypatch, engine, pattern="needle", **{"-i": True}).joined_text()
        found = {
            Path(line).relative_to(root).as_posix()
            for line in text.splitlines()[1:]
            if line.startswith("/")
        }
        for name in (
            ".env",
            "keep.log",
            "src/generated_keep.py",
            "src/generated_b.py",
            "bom.txt",
            "utf16.txt",
            "multi.txt",
            "long.txt",
        ):
            assert name in found, (engine, name)
        for name in (
            ".git/config",
            "keys.secret",
            "debug.log",
            "#hash.txt",
            "src/generated_a.py",
            "docs/private.md",
            "binary.bin",
            "link_to_multi.txt",
            "link_to_src/generated_b.py",
        ):
            assert name not in found, (engine, name)


def test_files_mode_lists_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i, name in enumerate(["b.txt", "a.txt", "c.txt"]):
        write(tmp_path / name, "hit\n")
        os.utime(tmp_path / name, (1_000_000 + i * 100, 1_000_000 + i * 100))
    for engine in ("ripgrep", "python"):
        lines = grep(tmp_path, monkeypatch, engine, pattern="hit").joined_text().splitlines()
        assert lines[0] == f"Found 3 files (engine: {engine})"
        assert [Path(p).name for p in lines[1:]] == ["c.txt", "a.txt", "b.txt"]


def test_long_lines_are_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "long.txt", "x" * 50_000 + " needle\n")
    for engine in ("ripgrep", "python"):
        text = grep(
            tmp_path, monkeypatch, engine, pattern="x+", output_mode="content"
        ).joined_text()
        assert "[line truncated at 2000 characters]" in text and len(text) < 3000


def test_head_limit_and_no_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(12):
        write(tmp_path / f"f{i:02}.txt", "hit\n")
    out = grep(tmp_path, monkeypatch, "ripgrep", pattern="hit", head_limit=3)
    lines = out.joined_text().splitlines()
    assert (
        lines[0] == "Found 12 files (engine: ripgrep)"
        and len([x for x in lines if x.startswith("/")]) == 3
    )
    assert "showing the first 3 of 12 lines" in out.joined_text() and out.metadata["truncated"]
    none = grep(tmp_path, monkeypatch, "ripgrep", pattern="absent")
    assert none.joined_text() == "No matches found (engine: ripgrep)" and not none.is_error


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_bad_pattern_and_unknown_type_are_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    write(tmp_path / "a.txt", "a\n")
    bad = grep(tmp_path, monkeypatch, engine, pattern="(unclosed")
    assert bad.is_error and "regex parse error" in bad.joined_text()
    unknown = grep(tmp_path, monkeypatch, engine, pattern="a", type="nosuchtype")
    assert unknown.is_error and "nosuchtype" in unknown.joined_text()
    newline = grep(tmp_path, monkeypatch, engine, pattern="a\\nb")
    assert newline.is_error and "multiline" in newline.joined_text()


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_patterns_and_globs_are_never_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    marker = tmp_path / "pwned"
    write(tmp_path / "a.txt", f"--pre=touch {marker}\n-e\n")
    # `rg --pre=CMD` would run CMD on every file; as a pattern it is just text.
    out = grep(tmp_path, monkeypatch, engine, pattern=f"--pre=touch {marker}", output_mode="count")
    assert "a.txt:1" in out.joined_text() and not marker.exists()
    out = grep(tmp_path, monkeypatch, engine, pattern="-e", output_mode="count")
    assert "a.txt:1" in out.joined_text()
    out = grep(tmp_path, monkeypatch, engine, pattern="e", glob="--pre=sh", output_mode="count")
    assert "No matches found" in out.joined_text() and not out.is_error
    assert grep(tmp_path, monkeypatch, engine, pattern="a\x00").is_error


def test_confined_to_the_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    write(root / "a.txt", "needle\n")
    write(outside / "secret.txt", "needle\n")
    os.symlink(outside, root / "escape")
    for engine in ("ripgrep", "python"):
        for path in (str(outside), "../outside", "escape", "escape/secret.txt"):
            out = grep(root, monkeypatch, engine, pattern="needle", path=path)
            assert out.is_error and "outside the working roots" in out.joined_text(), (engine, path)
        text = grep(root, monkeypatch, engine, pattern="needle").joined_text()
        assert "secret" not in text and "a.txt" in text


def test_file_paths_make_read_rules_govern_grep(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / "secrets" / "k.txt", "needle\n")
    write(tmp_path / "ok.txt", "needle\n")
    (tmp_path / ".norma").mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[permissions]\ndeny = ["Read(./secrets/**)"]\n')
    denied = norma(
        "--config", str(cfg), "run", "Grep", "-i", '{"pattern": "needle", "path": "secrets/k.txt"}'
    )
    assert denied.returncode == 3, denied.stderr
    allowed = norma(
        "--config", str(cfg), "run", "Grep", "--arg", "pattern=needle", "--arg", "path=ok.txt"
    )
    assert allowed.returncode == 0 and "ok.txt" in results(allowed.stdout)[0]["content"][0]["text"]
    outside = norma("run", "Grep", "-i", json_input(pattern="needle", path=str(Path(sys.prefix))))
    assert outside.returncode == 3  # outside the roots: ask, and nobody can be asked


def json_input(**kw: Any) -> str:
    import json

    return json.dumps(kw)


def test_fresh_install_without_rg_on_path_uses_the_bundled_binary(
    norma: RunNorma, tmp_path: Path
) -> None:
    write(tmp_path / "a.txt", "needle\n")
    path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if os.path.isdir(p))
    assert shutil.which("rg", path=path) is None, (
        "this machine has a global rg; the test needs none"
    )
    proc = norma(
        "run",
        "Grep",
        "--arg",
        "pattern=needle",
        "--text",
        env={"PATH": path, "NORMA_RIPGREP_NO_INSTALL": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Found 1 file (engine: ripgrep)")
    found = ripgrep.find_ripgrep()
    assert found is not None and found.source == "bundled"
    assert Path(found.path).parent == Path(sys.executable).parent


def test_disable_ripgrep_forces_the_python_engine(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "needle\n")
    proc = norma(
        "run", "Grep", "--arg", "pattern=needle", "--text", env={"NORMA_DISABLE_RIPGREP": "1"}
    )
    assert proc.returncode == 0 and proc.stdout.startswith("Found 1 file (engine: python)")


def test_no_rg_anywhere_falls_back_to_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "a.txt", "needle\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "nowhere" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("sysconfig.get_path", lambda *a, **k: str(tmp_path / "nowhere"))
    out = grep(tmp_path, monkeypatch, "ripgrep", pattern="needle")
    assert out.metadata["engine"] == "python" and "a.txt" in out.joined_text()


def test_split_globs() -> None:
    assert split_globs("*.py") == ["*.py"]
    assert split_globs("*.{ts,tsx} *.js") == ["*.{ts,tsx}", "*.js"]
    assert split_globs("*.ts,*.tsx") == ["*.ts", "*.tsx"]


def test_metadata_is_honest() -> None:
    tool = GrepTool()
    assert tool.read_only and tool.concurrency_safe and not tool.requires_approval
    assert tool.file_paths({"pattern": "x"}, ctx_for(Path("/"))) == ["."]
    assert tool.file_paths({"pattern": "x", "path": "src"}, ctx_for(Path("/"))) == ["src"]


def test_schema_passes_the_provider_lint_profiles() -> None:
    from norma_cli.lint import Linter

    report = Linter(("openai", "anthropic")).lint_definitions([GrepTool().definition()])
    assert not report.errors, report.errors


@pytest.mark.parametrize("engine_env", [{}, {"NORMA_DISABLE_RIPGREP": "1"}])
def test_read_deny_rules_hide_matches_inside_protected_folders(
    norma, tmp_path: Path, engine_env: dict
) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token.txt").write_text("password = hunter2\n")
    (tmp_path / "app.py").write_text("password = os.environ['PW']\n")
    args = (
        "--deny",
        "Read(./secrets/**)",
        "run",
        "Grep",
        "-i",
        '{"pattern": "password", "output_mode": "content"}',
        "--text",
    )
    out = norma(*args, env=engine_env).stdout
    assert "app.py" in out and "hunter2" not in out and "token.txt" not in out
    assert "hunter2" in norma(*args[2:], env=engine_env).stdout  # without the rule it is found
