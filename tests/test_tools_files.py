"""The file tools against real files: reading, writing, editing, listing, globbing, confinement."""

from __future__ import annotations

import base64
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from norma_cli.core.contract import CallContext, Tool, ToolCall, ToolOutput
from norma_cli.core.executor import Executor
from norma_cli.core.hooks import HookRunner
from norma_cli.core.output import OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.registry import ToolRegistry
from norma_cli.policy.rules import RuleSet
from norma_cli.tools import confine
from norma_cli.tools.confine import ConfinementError, locate, open_beneath, open_location
from norma_cli.tools.files import (
    FILE_TOOLS,
    MAX_GLOB_RESULTS,
    MAX_LINE_CHARS,
    MAX_READ_BYTES,
    EditTool,
    GlobTool,
    LSTool,
    MultiEditTool,
    ReadTool,
    WriteTool,
    write_atomic,
)

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture(params=["openat2", "walk"])
def method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under both confinement mechanisms."""
    if request.param == "walk":
        monkeypatch.setenv("NORMA_CONFINE", "walk")
    else:
        monkeypatch.delenv("NORMA_CONFINE", raising=False)
        if not confine.openat2_available():
            pytest.skip("openat2 is not available on this kernel")
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret.txt").write_text("top secret\n")
    return o.resolve()


def ctx_for(root: Path, session: Any = None, mode: str = "default") -> CallContext:
    return CallContext(session_id="t", cwd=root, roots=(root,), mode=mode, session=session)


def run(tool: Tool, ctx: CallContext, **tool_input: Any) -> ToolOutput:
    out = tool.call(tool_input, ctx)
    assert isinstance(out, ToolOutput)
    return out


# ----------------------------------------------------------------------------- contract
def test_schemas_are_draft_2020_12_closed_objects_with_required_fields() -> None:
    from jsonschema import Draft202012Validator

    names = []
    for cls in FILE_TOOLS:
        tool = cls()
        names.append(tool.name)
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.input_schema["required"]
        assert tool.description and tool.prompt
    assert names == ["Read", "Write", "Edit", "MultiEdit", "LS", "Glob"]
    edits = MultiEditTool().input_schema["properties"]["edits"]["items"]
    assert edits["additionalProperties"] is False and edits["required"] == [
        "old_string",
        "new_string",
    ]


def test_metadata_is_honest() -> None:
    for cls in (ReadTool, LSTool, GlobTool):
        t = cls()
        assert (t.read_only, t.concurrency_safe, t.requires_approval) == (True, True, False)
    for cls in (WriteTool, EditTool, MultiEditTool):
        t = cls()
        assert (t.read_only, t.concurrency_safe, t.edits_files, t.requires_approval) == (
            False,
            False,
            True,
            True,
        )


def test_file_paths_report_the_paths_as_spelled(root: Path) -> None:
    ctx = ctx_for(root)
    assert ReadTool().file_paths({"file_path": "a.txt"}, ctx) == ["a.txt"]
    assert WriteTool().file_paths({"file_path": "/x/y", "content": ""}, ctx) == ["/x/y"]
    assert MultiEditTool().file_paths({"file_path": "m.py", "edits": []}, ctx) == ["m.py"]
    assert LSTool().file_paths({"path": "src"}, ctx) == ["src"]
    assert GlobTool().file_paths({"pattern": "**/*.py"}, ctx) == ["."]
    assert GlobTool().file_paths({"pattern": "*.py", "path": "src"}, ctx) == ["src"]
    # a pattern that leads out of its path is judged too
    assert GlobTool().file_paths({"pattern": "/etc/*.conf"}, ctx) == [".", "/etc"]


# ----------------------------------------------------------------------------- Read
def test_read_numbers_lines_like_cat_n(root: Path) -> None:
    (root / "a.txt").write_text("alpha\nbeta\r\ngamma")
    out = run(ReadTool(), ctx_for(root), file_path="a.txt")
    assert not out.is_error
    assert out.joined_text() == "     1\talpha\n     2\tbeta\n     3\tgamma"


def test_read_offset_and_limit_with_a_continue_note(root: Path) -> None:
    (root / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = run(ReadTool(), ctx_for(root), file_path=str(root / "n.txt"), offset=4, limit=3)
    lines = out.joined_text().split("\n")
    assert lines[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "offset=7" in out.joined_text()
    tail = run(ReadTool(), ctx_for(root), file_path="n.txt", offset=9)
    assert tail.joined_text() == "     9\tline 9\n    10\tline 10"
    past = run(ReadTool(), ctx_for(root), file_path="n.txt", offset=50)
    assert not past.is_error and "past the end" in past.joined_text()


def test_read_defaults_to_2000_lines(root: Path) -> None:
    (root / "long.txt").write_text("x\n" * 2500)
    text = run(ReadTool(), ctx_for(root), file_path="long.txt").joined_text()
    assert "  2000\tx" in text and "  2001\tx" not in text
    assert "offset=2001" in text


def test_read_truncates_long_lines_with_a_marker(root: Path) -> None:
    (root / "wide.txt").write_text("a" * 50_000 + "\nshort\n")
    text = run(ReadTool(), ctx_for(root), file_path="wide.txt").joined_text()
    first, second = text.split("\n")
    assert first.startswith("     1\t" + "a" * MAX_LINE_CHARS)
    assert "line truncated" in first and "a" * (MAX_LINE_CHARS + 1) not in first
    assert second == "     2\tshort"


def test_read_refuses_binary_files(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"ELF\x00\x01\x02" * 100)
    out = run(ReadTool(), ctx_for(root), file_path="blob.bin")
    assert out.is_error and "binary" in out.joined_text()


@pytest.mark.parametrize(
    ("data", "media"),
    [
        (PNG_1PX, "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 50, "image/jpeg"),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"),
        (b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00", "image/webp"),
    ],
)
def test_read_returns_images_by_magic_bytes(root: Path, data: bytes, media: str) -> None:
    (root / "pic.dat").write_bytes(data)  # the extension is ignored on purpose
    out = run(ReadTool(), ctx_for(root), file_path="pic.dat")
    assert not out.is_error
    [block] = out.content
    assert block.type == "image" and block.media_type == media
    assert base64.b64decode(block.data) == data


def test_read_empty_file_says_so(root: Path) -> None:
    (root / "empty").touch()
    out = run(ReadTool(), ctx_for(root), file_path="empty")
    assert not out.is_error and "empty" in out.joined_text()


def test_read_large_file_needs_offset_or_limit_and_then_streams(root: Path) -> None:
    big = root / "big.log"
    with big.open("wb") as fh:
        fh.write(b"".join(b"row %d\n" % i for i in range(1, 2001)))
        fh.truncate(MAX_READ_BYTES + 1)  # sparse tail: cheap to make
    out = run(ReadTool(), ctx_for(root), file_path="big.log")
    assert out.is_error and "offset and limit" in out.joined_text()
    piece = run(ReadTool(), ctx_for(root), file_path="big.log", offset=1000, limit=2)
    assert not piece.is_error
    assert piece.joined_text().startswith("  1000\trow 1000\n  1001\trow 1001")


def test_read_errors_for_missing_files_and_directories(root: Path) -> None:
    missing = run(ReadTool(), ctx_for(root), file_path="nope.txt")
    assert missing.is_error and "does not exist" in missing.joined_text()
    (root / "d").mkdir()
    directory = run(ReadTool(), ctx_for(root), file_path="d")
    assert directory.is_error and "directory" in directory.joined_text()


def test_read_relative_paths_resolve_against_cwd(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "f.txt").write_text("in sub\n")
    ctx = CallContext(session_id="t", cwd=root / "sub", roots=(root,))
    assert run(ReadTool(), ctx, file_path="f.txt").joined_text() == "     1\tin sub"


# ----------------------------------------------------------------------------- confinement
def test_paths_outside_the_roots_are_refused(root: Path, outside: Path, method: str) -> None:
    ctx = ctx_for(root)
    out = run(ReadTool(), ctx, file_path=str(outside / "secret.txt"))
    assert out.is_error and "outside the working roots" in out.joined_text()
    dotdot = run(ReadTool(), ctx, file_path="../outside/secret.txt")
    assert dotdot.is_error and "outside the working roots" in dotdot.joined_text()
    wrote = run(WriteTool(), ctx, file_path="../outside/new.txt", content="x")
    assert wrote.is_error and not (outside / "new.txt").exists()


def test_symlinks_leading_outside_are_refused(root: Path, outside: Path, method: str) -> None:
    (root / "leak.txt").symlink_to(outside / "secret.txt")  # absolute symlink, file
    (root / "door").symlink_to(outside)  # absolute symlink, directory
    (root / "rel").symlink_to("../outside")  # relative symlink escaping
    ctx = ctx_for(root)
    for path in ("leak.txt", "door/secret.txt", "rel/secret.txt"):
        out = run(ReadTool(), ctx, file_path=path)
        assert out.is_error and "outside the working roots" in out.joined_text(), path
        assert "top secret" not in out.joined_text()
    assert run(LSTool(), ctx, path="door").is_error
    assert run(WriteTool(), ctx, file_path="door/planted.txt", content="x").is_error
    assert run(EditTool(), ctx, file_path="leak.txt", old_string="top", new_string="no").is_error
    assert not (outside / "planted.txt").exists()
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlinks_inside_the_root_are_followed(root: Path, method: str) -> None:
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("hello\n")
    (root / "alias").symlink_to("real")
    (root / "f-link").symlink_to(root / "real" / "f.txt")
    ctx = ctx_for(root)
    assert run(ReadTool(), ctx, file_path="alias/f.txt").joined_text() == "     1\thello"
    assert run(ReadTool(), ctx, file_path="f-link").joined_text() == "     1\thello"
    out = run(EditTool(), ctx, file_path="f-link", old_string="hello", new_string="bye")
    assert not out.is_error
    # the target changed; the link is still a link
    assert (root / "real" / "f.txt").read_text() == "bye\n"
    assert (root / "f-link").is_symlink()


def test_open_beneath_refuses_escapes_with_either_mechanism(
    root: Path, outside: Path, method: str
) -> None:
    (root / "door").symlink_to(outside)
    (root / "leak").symlink_to(outside / "secret.txt")
    (root / "ok").mkdir()
    (root / "ok" / "f").write_text("fine")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in (
            "door/secret.txt",
            "leak",
            "../outside/secret.txt",
            "ok/../../outside/secret.txt",
            "/etc/passwd",
        ):
            with pytest.raises(ConfinementError):
                os.close(open_beneath(fd, rel, os.O_RDONLY))
        good = open_beneath(fd, "ok/f", os.O_RDONLY)
        assert os.read(good, 10) == b"fine"
        os.close(good)
        with pytest.raises(FileNotFoundError):
            open_beneath(fd, "ok/missing", os.O_RDONLY)
    finally:
        os.close(fd)


def test_a_directory_swapped_for_a_symlink_mid_call_cannot_escape(
    root: Path, outside: Path, method: str
) -> None:
    """The path check passes on a real directory; the open happens after it became a link."""
    (root / "work").mkdir()
    (root / "work" / "secret.txt").write_text("inside\n")
    ctx = ctx_for(root)
    read_loc = locate("work/secret.txt", ctx)
    write_loc = locate("work/planted.txt", ctx)
    assert read_loc.root == root and read_loc.rel == "work/secret.txt"

    (root / "work").rename(root / "work.old")
    (root / "work").symlink_to(outside)  # the swap

    with pytest.raises(ConfinementError):
        os.close(open_location(read_loc, os.O_RDONLY))
    with pytest.raises(ConfinementError):
        write_atomic(write_loc, b"planted")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_file_swapped_for_a_symlink_mid_call_cannot_escape(
    root: Path, outside: Path, method: str
) -> None:
    (root / "notes.txt").write_text("mine\n")
    loc = locate("notes.txt", ctx_for(root))
    (root / "notes.txt").unlink()
    (root / "notes.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ConfinementError):
        os.close(open_location(loc, os.O_RDONLY))


def test_extra_roots_from_allow_rules_open_named_outside_paths(
    root: Path, outside: Path, method: str
) -> None:
    other = outside / "other.txt"
    other.write_text("other\n")
    session = SimpleNamespace(extra_roots=(outside / "secret.txt",))
    ctx = ctx_for(root, session=session)
    assert (
        run(ReadTool(), ctx, file_path=str(outside / "secret.txt")).joined_text()
        == "     1\ttop secret"
    )
    # only the named file: its siblings stay out of reach
    assert run(ReadTool(), ctx, file_path=str(other)).is_error
    dir_ctx = ctx_for(root, session=SimpleNamespace(extra_roots=(outside,)))
    assert not run(ReadTool(), dir_ctx, file_path=str(other)).is_error
    assert not run(
        WriteTool(), dir_ctx, file_path=str(outside / "made" / "x.txt"), content="ok"
    ).is_error
    assert (outside / "made" / "x.txt").read_text() == "ok"


# ----------------------------------------------------------------------------- Write
def test_write_creates_parents_atomically(root: Path, method: str) -> None:
    out = run(WriteTool(), ctx_for(root), file_path="a/b/c.txt", content="héllo\n")
    assert not out.is_error and "Created" in out.joined_text()
    assert (root / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "héllo\n"
    assert sorted(p.name for p in (root / "a" / "b").iterdir()) == ["c.txt"]  # no temp left


def test_write_overwrite_keeps_the_file_mode(root: Path) -> None:
    target = root / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    inode = target.stat().st_ino
    out = run(WriteTool(), ctx_for(root), file_path="run.sh", content="#!/bin/sh\necho new\n")
    assert not out.is_error and "Updated" in out.joined_text()
    assert target.read_text() == "#!/bin/sh\necho new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != inode  # replaced by rename, not rewritten in place


def test_write_refuses_a_directory(root: Path) -> None:
    (root / "d").mkdir()
    out = run(WriteTool(), ctx_for(root), file_path="d", content="x")
    assert out.is_error and "directory" in out.joined_text()


# ----------------------------------------------------------------------------- Edit
def test_edit_replaces_a_unique_string_and_shows_the_region(root: Path) -> None:
    (root / "m.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = run(
        EditTool(), ctx_for(root), file_path="m.py", old_string="return 1", new_string="return 10"
    )
    assert not out.is_error
    assert (root / "m.py").read_text() == "def f():\n    return 10\n\ndef g():\n    return 2\n"
    assert "     2\t    return 10" in out.joined_text()
    assert out.metadata["replacements"] == 1


def test_edit_error_messages(root: Path) -> None:
    (root / "m.py").write_text("x = 1\nx = 1\n")
    ctx = ctx_for(root)
    missing = run(EditTool(), ctx, file_path="m.py", old_string="y = 2", new_string="y = 3")
    assert missing.is_error and "not found" in missing.joined_text()
    twice = run(EditTool(), ctx, file_path="m.py", old_string="x = 1", new_string="x = 2")
    assert (
        twice.is_error
        and "found 2 times" in twice.joined_text()
        and "replace_all" in twice.joined_text()
    )
    same = run(EditTool(), ctx, file_path="m.py", old_string="x = 1", new_string="x = 1")
    assert same.is_error and "same" in same.joined_text()
    assert (root / "m.py").read_text() == "x = 1\nx = 1\n"
    nofile = run(EditTool(), ctx, file_path="ghost.py", old_string="a", new_string="b")
    assert nofile.is_error and "does not exist" in nofile.joined_text()


def test_edit_replace_all(root: Path) -> None:
    (root / "m.py").write_text("foo(foo)\nfoo\n")
    out = run(
        EditTool(),
        ctx_for(root),
        file_path="m.py",
        old_string="foo",
        new_string="bar",
        replace_all=True,
    )
    assert not out.is_error and out.metadata["replacements"] == 3
    assert (root / "m.py").read_text() == "bar(bar)\nbar\n"


def test_edit_keeps_crlf_and_undecodable_bytes(root: Path) -> None:
    (root / "w.txt").write_bytes(b"one\r\ntwo\r\n\xff\xfe end\r\n")
    out = run(
        EditTool(), ctx_for(root), file_path="w.txt", old_string="one\ntwo", new_string="1\n2"
    )
    assert not out.is_error, out.joined_text()
    assert (root / "w.txt").read_bytes() == b"1\r\n2\r\n\xff\xfe end\r\n"


def test_edit_with_empty_old_string_creates_a_file(root: Path) -> None:
    out = run(
        EditTool(), ctx_for(root), file_path="new/mod.py", old_string="", new_string="x = 1\n"
    )
    assert not out.is_error and "Created" in out.joined_text()
    assert (root / "new" / "mod.py").read_text() == "x = 1\n"
    again = run(EditTool(), ctx_for(root), file_path="new/mod.py", old_string="", new_string="y")
    assert again.is_error


# ----------------------------------------------------------------------------- MultiEdit
def test_multiedit_applies_edits_in_sequence(root: Path) -> None:
    (root / "c.txt").write_text("a b c\n")
    edits = [
        {"old_string": "a", "new_string": "A"},
        {"old_string": "A b", "new_string": "AB"},  # sees the first edit's result
        {"old_string": "c", "new_string": "C", "replace_all": True},
    ]
    out = run(MultiEditTool(), ctx_for(root), file_path="c.txt", edits=edits)
    assert not out.is_error and out.metadata["replacements"] == 3
    assert (root / "c.txt").read_text() == "AB C\n"


def test_multiedit_is_all_or_nothing(root: Path) -> None:
    (root / "c.txt").write_text("keep me\n")
    before = (root / "c.txt").stat().st_mtime_ns
    edits = [
        {"old_string": "keep", "new_string": "lose"},
        {"old_string": "absent", "new_string": "x"},
    ]
    out = run(MultiEditTool(), ctx_for(root), file_path="c.txt", edits=edits)
    assert out.is_error
    assert "edit 2 of 2" in out.joined_text() and "not found" in out.joined_text()
    assert (root / "c.txt").read_text() == "keep me\n"
    assert (root / "c.txt").stat().st_mtime_ns == before


# ----------------------------------------------------------------------------- LS
def test_ls_lists_sorted_entries_with_markers_and_ignores(root: Path) -> None:
    (root / "b.txt").write_text("")
    (root / "a").mkdir()
    (root / "c.pyc").write_text("")
    (root / "node_modules").mkdir()
    (root / "ln").symlink_to("b.txt")
    out = run(LSTool(), ctx_for(root), path=".", ignore=["*.pyc", "node_modules"])
    assert not out.is_error
    assert out.joined_text().split("\n")[1:] == ["  a/", "  b.txt", "  ln -> b.txt"]


def test_ls_refuses_files_and_outside_paths(root: Path, outside: Path) -> None:
    (root / "f").write_text("")
    assert "not a directory" in run(LSTool(), ctx_for(root), path="f").joined_text()
    assert run(LSTool(), ctx_for(root), path=str(outside)).is_error


# ----------------------------------------------------------------------------- Glob
def _touch(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.utime(path, (mtime, mtime))


def test_glob_recursive_newest_first_skipping_vcs(root: Path, method: str) -> None:
    now = time.time()
    _touch(root / "old.py", now - 300)
    _touch(root / "pkg" / "mid.py", now - 200)
    _touch(root / "pkg" / "deep" / "new.py", now - 100)
    _touch(root / "pkg" / "notes.md", now)
    _touch(root / ".git" / "hooks" / "x.py", now)
    out = run(GlobTool(), ctx_for(root), pattern="**/*.py")
    assert out.joined_text().split("\n") == [
        str(root / "pkg" / "deep" / "new.py"),
        str(root / "pkg" / "mid.py"),
        str(root / "old.py"),
    ]
    top = run(GlobTool(), ctx_for(root), pattern="*.py")
    assert top.joined_text() == str(root / "old.py")
    scoped = run(GlobTool(), ctx_for(root), pattern="*.{md,py}", path="pkg")
    assert scoped.joined_text().split("\n") == [
        str(root / "pkg" / "notes.md"),
        str(root / "pkg" / "mid.py"),
    ]
    prefixed = run(GlobTool(), ctx_for(root), pattern="pkg/**/n*")
    assert set(prefixed.joined_text().split("\n")) == {
        str(root / "pkg" / "notes.md"),
        str(root / "pkg" / "deep" / "new.py"),
    }
    assert run(GlobTool(), ctx_for(root), pattern="**/*.rs").joined_text() == "No files found."


def test_glob_does_not_follow_symlinked_directories_out(root: Path, outside: Path) -> None:
    (root / "door").symlink_to(outside)
    out = run(GlobTool(), ctx_for(root), pattern="**/*.txt")
    assert "secret" not in out.joined_text()
    refused = run(GlobTool(), ctx_for(root), pattern=str(outside) + "/*.txt")
    assert refused.is_error and "outside the working roots" in refused.joined_text()
    escaped = run(GlobTool(), ctx_for(root), pattern="*.txt", path="door")
    assert escaped.is_error


def test_glob_caps_results_with_a_note(root: Path) -> None:
    for i in range(MAX_GLOB_RESULTS + 5):
        (root / f"f{i:04}.txt").write_text("")
    out = run(GlobTool(), ctx_for(root), pattern="*.txt")
    lines = out.joined_text().split("\n")
    assert len([ln for ln in lines if ln.startswith("/")]) == MAX_GLOB_RESULTS
    assert f"of {MAX_GLOB_RESULTS + 5} matches" in out.joined_text()
    assert out.metadata["matches"] == MAX_GLOB_RESULTS + 5


# ----------------------------------------------------------------------------- through the executor
def make_executor(root: Path, mode: str = "default", session: Any = None) -> Executor:
    registry = ToolRegistry()
    for cls in FILE_TOOLS:
        registry.register(cls())
    return Executor(
        registry,
        PermissionEngine(RuleSet()),
        HookRunner(),
        OutputCapper(),
        CallContext(session_id="t", cwd=root, roots=(root,), mode=mode, session=session),
    )


def test_executor_allows_read_only_tools_inside_the_roots(root: Path) -> None:
    (root / "a.txt").write_text("hi\n")
    ex = make_executor(root)
    results = ex.run_batch(
        [
            ToolCall("1", "Read", {"file_path": "a.txt"}),
            ToolCall("2", "LS", {"path": "."}),
            ToolCall("3", "Glob", {"pattern": "*.txt"}),
        ]
    )
    assert [r.tool_use_id for r in results] == ["1", "2", "3"]
    assert all(not r.is_error for r in results), [r.text() for r in results]
    assert results[0].text() == "     1\thi"
    assert results[0].meta.decision == "allow" and results[0].meta.stage == "read_only"


def test_executor_asks_for_reads_outside_the_roots(root: Path, outside: Path) -> None:
    result = make_executor(root).run(
        ToolCall("1", "Read", {"file_path": str(outside / "secret.txt")})
    )
    assert result.is_error and result.meta.decision == "deny"
    assert "top secret" not in result.text()


def test_executor_validates_the_schemas(root: Path) -> None:
    ex = make_executor(root)
    bad_offset = ex.run(ToolCall("1", "Read", {"file_path": "a", "offset": -1}))
    assert bad_offset.is_error and bad_offset.meta.stage == "schema"
    extra = ex.run(ToolCall("2", "Write", {"file_path": "a", "content": "", "mode": 0o777}))
    assert extra.is_error and extra.meta.stage == "schema"
    missing = ex.run(ToolCall("3", "Edit", {"file_path": "a", "old_string": "x"}))
    assert missing.is_error and missing.meta.stage == "schema"
    bad_edit = ex.run(
        ToolCall("4", "MultiEdit", {"file_path": "a", "edits": [{"old_string": "x"}]})
    )
    assert bad_edit.is_error and bad_edit.meta.stage == "schema"


def test_executor_edits_need_approval_or_accept_edits(root: Path) -> None:
    call = ToolCall("1", "Write", {"file_path": "w.txt", "content": "ok\n"})
    denied = make_executor(root).run(call)
    assert denied.is_error and not (root / "w.txt").exists()
    accepted = make_executor(root, mode="acceptEdits").run(call)
    assert not accepted.is_error and (root / "w.txt").read_text() == "ok\n"
    edit = make_executor(root, mode="acceptEdits").run(
        ToolCall("2", "Edit", {"file_path": "w.txt", "old_string": "ok", "new_string": "fine"})
    )
    assert not edit.is_error and (root / "w.txt").read_text() == "fine\n"


def test_executor_caps_a_large_read(root: Path, tmp_path: Path) -> None:
    (root / "wide.txt").write_text("y" * 1500 + "\n" * 1 + ("z" * 1500 + "\n") * 100)
    registry = ToolRegistry()
    registry.register(ReadTool())
    spill_dir = tmp_path / "spill"
    ex = Executor(
        registry,
        PermissionEngine(RuleSet()),
        HookRunner(),
        OutputCapper(spill_dir=spill_dir),
        CallContext(session_id="t", cwd=root, roots=(root,)),
    )
    result = ex.run(ToolCall("1", "Read", {"file_path": "wide.txt"}))
    assert not result.is_error
    assert result.meta.spill is not None and Path(result.meta.spill.path).parent == spill_dir
    assert "full output in" in result.text()


def test_read_deny_rules_hide_entries_from_glob_and_ls(norma, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json as _json

    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("k")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("a")
    (tmp_path / "private.env").write_text("p")
    deny = ("--deny", "Read(./secrets/**)", "--ask", "Read(*.env)")
    out = norma(*deny, "run", "Glob", "-i", '{"pattern": "**/*"}', "--text").stdout
    assert "app.py" in out and "key.txt" not in out and "private.env" not in out
    out = norma(*deny, "run", "LS", "-i", _json.dumps({"path": "."}), "--text").stdout
    assert "src/" in out and "secrets" not in out and "private.env" not in out
    # without the rules everything is listed
    assert "key.txt" in norma("run", "Glob", "-i", '{"pattern": "**/*"}', "--text").stdout


def test_allow_rule_naming_an_outside_path_lets_read_open_it(
    norma, tmp_path: Path, tmp_path_factory
) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path_factory.mktemp("outside")
    (outside / "notes.txt").write_text("outside notes")
    work = tmp_path / "work"
    work.mkdir()
    target = str(outside / "notes.txt")
    assert norma("run", "Read", "--arg", f"file_path={target}", cwd=work).returncode == 3
    proc = norma(
        "--allow", f"Read(/{outside}/**)", "run", "Read", "--arg", f"file_path={target}", cwd=work
    )
    assert proc.returncode == 0 and "outside notes" in proc.stdout
