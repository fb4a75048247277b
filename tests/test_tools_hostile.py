"""File tools and the Python Grep engine against what is not an ordinary file or pattern:
FIFOs, sockets, device nodes, procfs files that report no size, and regexes that backtrack
without end. Real files, real device nodes (as root), the real CLI where the policy matters."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import CallContext, ToolOutput
from norma_cli.tools import confine, ripgrep
from norma_cli.tools.files import EditTool, MultiEditTool, ReadTool, WriteTool
from norma_cli.tools.grep import GrepTool, build_query, run_search


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


def ctx_for(root: Path) -> CallContext:
    return CallContext(session_id="s", cwd=root, roots=(root,))


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def make_dir(path: Path) -> None:
    path.mkdir()


def make_device(path: Path) -> None:
    # A character device with no driver behind it (a major for local/experimental use):
    # opening it fails with ENXIO, so a refusal that names its kind shows it was never opened.
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(61, 7))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")


MAKERS: dict[str, Callable[[Path], None]] = {
    "fifo": make_fifo,
    "socket": make_socket,
    "directory": make_dir,
    "device": make_device,
}
KIND_TEXT = {
    "fifo": "a FIFO",
    "socket": "a socket",
    "directory": "is a directory",
    "device": "a character device",
}


def writers(name: str) -> list[tuple[Any, dict[str, Any]]]:
    return [
        (WriteTool(), {"file_path": name, "content": "replaced"}),
        (EditTool(), {"file_path": name, "old_string": "", "new_string": "created"}),
        (EditTool(), {"file_path": name, "old_string": "a", "new_string": "b"}),
        (
            MultiEditTool(),
            {"file_path": name, "edits": [{"old_string": "", "new_string": "created"}]},
        ),
    ]


# ----------------------------------------------------------------------------- Write & co
@pytest.mark.parametrize("kind", list(MAKERS))
def test_writers_refuse_what_is_not_a_regular_file_and_leave_it(
    tmp_path: Path, method: str, kind: str
) -> None:
    root = tmp_path.resolve()
    target = root / "target"
    MAKERS[kind](target)
    before = target.lstat()
    for tool, tool_input in writers("target"):
        out = tool.call(tool_input, ctx_for(root))
        assert isinstance(out, ToolOutput)
        assert out.is_error, (tool.name, out.joined_text())
        text = out.joined_text()
        assert KIND_TEXT[kind] in text, (tool.name, text)
        assert "No such device" not in text  # refused for what it is, not after an open
        after = target.lstat()
        assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (
            before.st_ino,
            stat.S_IFMT(before.st_mode),
        )
    assert sorted(p.name for p in root.iterdir()) == ["target"]  # no temp file left behind


def test_write_still_replaces_a_regular_file_and_creates_a_new_one(
    tmp_path: Path, method: str
) -> None:
    root = tmp_path.resolve()
    (root / "old.txt").write_text("old\n")
    out = WriteTool().call({"file_path": "old.txt", "content": "new\n"}, ctx_for(root))
    assert not out.is_error and (root / "old.txt").read_text() == "new\n"
    out = WriteTool().call({"file_path": "d/new.txt", "content": "n\n"}, ctx_for(root))
    assert not out.is_error and (root / "d" / "new.txt").read_text() == "n\n"


def test_write_refuses_a_device_node_through_the_cli(norma: RunNorma, tmp_path: Path) -> None:
    # what the QA run did to /dev/full as root, on a node of our own
    node = tmp_path / "full"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # the /dev/full device
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    proc = norma(
        "--mode", "acceptEdits", "run", "Write", "-i", '{"file_path": "full", "content": "x"}'
    )
    res = results(proc.stdout)[0]
    assert proc.returncode == 1 and res["is_error"]
    assert "not a regular file (a character device)" in res["content"][0]["text"]
    assert stat.S_ISCHR(node.lstat().st_mode) and node.lstat().st_rdev == os.makedev(1, 7)


# ----------------------------------------------------------------------------- Read
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_read_names_the_kind_of_special_file_it_refuses(
    tmp_path: Path, method: str, kind: str
) -> None:
    root = tmp_path.resolve()
    MAKERS[kind](root / "target")
    out = ReadTool().call({"file_path": "target"}, ctx_for(root))
    assert out.is_error and f"not a regular file ({KIND_TEXT[kind]})" in out.joined_text()


@pytest.mark.parametrize(
    ("path", "needle"),
    [("/proc/self/status", "Name:"), ("/proc/cpuinfo", "processor"), ("/proc/self/maps", "[")],
)
def test_read_shows_procfs_files_that_report_no_size(
    norma: RunNorma, path: str, needle: str
) -> None:
    assert os.stat(path).st_size == 0  # the point: the size says nothing about the content
    proc = norma("--allow", "Read(//proc/**)", "run", "Read", "-i", f'{{"file_path": "{path}"}}')
    res = results(proc.stdout)[0]
    assert proc.returncode == 0, res
    text = res["content"][0]["text"]
    assert needle in text and text.startswith("     1\t"), text[:200]


def test_read_pages_through_a_procfs_file_with_offset_and_limit(norma: RunNorma) -> None:
    proc = norma(
        "--allow",
        "Read(//proc/**)",
        "run",
        "Read",
        "-i",
        '{"file_path": "/proc/self/status", "offset": 2, "limit": 2}',
    )
    text = results(proc.stdout)[0]["content"][0]["text"]
    lines = text.split("\n")
    assert lines[0].startswith("     2\t") and lines[1].startswith("     3\t"), text
    assert "read on with offset=4" in text


def test_an_empty_regular_file_is_still_empty(tmp_path: Path, method: str) -> None:
    root = tmp_path.resolve()
    (root / "empty.txt").write_bytes(b"")
    out = ReadTool().call({"file_path": "empty.txt"}, ctx_for(root))
    assert not out.is_error and out.joined_text() == f"{root / 'empty.txt'} is empty (0 bytes)."


# ----------------------------------------------------------------------------- Grep (Python)
@pytest.fixture
def python_engine(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("NORMA_DISABLE_RIPGREP", "1")
    ripgrep.reset_cache()
    yield
    ripgrep.reset_cache()


def test_a_runaway_regex_is_cut_with_nothing_found(norma: RunNorma, tmp_path: Path) -> None:
    # `regex` itself gets through "(a+)+$" at once; "(a|aa)+$" still backtracks without end
    (tmp_path / "f.txt").write_text("a" * 40 + "!\n")
    started = time.monotonic()
    proc = norma(
        "run",
        "Grep",
        "-i",
        '{"pattern": "(a|aa)+$", "output_mode": "content"}',
        env={"NORMA_DISABLE_RIPGREP": "1"},
        timeout=30,
    )
    assert time.monotonic() - started < 20
    res = results(proc.stdout)[0]
    assert proc.returncode == 1 and res["is_error"]
    text = res["content"][0]["text"]
    assert "the search was cut at" in text and "with nothing found" in text, text
    assert "f.txt" in text and "simplify the pattern" in text


def test_a_runaway_regex_keeps_what_was_found_before_the_cut(
    tmp_path: Path, python_engine: Any
) -> None:
    # the files of a directory are searched before its subdirectories
    (tmp_path / "good.txt").write_text("aa\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.txt").write_text("a" * 40 + "!\n")
    out = GrepTool().call(
        {"pattern": "(a|aa)+$", "output_mode": "content"}, ctx_for(tmp_path.resolve())
    )
    text = out.joined_text()
    assert not out.is_error, text
    assert text.startswith("Found 1 matching line in 1 file (engine: python)")
    assert f"{tmp_path.resolve() / 'good.txt'}:1:aa" in text
    assert "the search was cut at" in text and "results are incomplete" in text
    assert out.metadata["truncated"] is True


def test_the_search_deadline_stops_a_regex_call_too(tmp_path: Path, python_engine: Any) -> None:
    (tmp_path / "f.txt").write_text("a" * 40 + "!\n")
    query = build_query(
        {"pattern": "(a|aa)+$", "output_mode": "count"}, ctx_for(tmp_path.resolve()), timeout=1.0
    )
    started = time.monotonic()
    result = run_search(query)
    assert time.monotonic() - started < 4
    assert result.engine == "python" and result.files == []
    assert result.notes == ["the search stopped at its time limit; results are incomplete"]


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        # negative look-ahead at a line end: the line alone matches, the text with its "\n"
        # after it would not (each line is judged alone, as ripgrep does)
        ("ab\nxb\n", r"b(?!\s)", ["1:ab", "2:xb"]),
        # a class that could match a line end never joins two lines
        ("ab\nbca\nb\na\n", r"b[^x]a", ["2:bca"]),
        ("a\n\nb\n", r"^$", ["2:"]),
        ("ab\nZ9\n", r"\p{Lu}\d", ["2:Z9"]),  # syntax of `regex` (and ripgrep), not of `re`
    ],
)
def test_python_engine_judges_each_line_alone(
    tmp_path: Path, python_engine: Any, text: str, pattern: str, expected: list[str]
) -> None:
    (tmp_path / "t.txt").write_text(text)
    out = GrepTool().call(
        {"pattern": pattern, "path": "t.txt", "output_mode": "content", "-n": True},
        ctx_for(tmp_path.resolve()),
    )
    lines = out.joined_text().splitlines()[1:]
    assert [line.split(":", 1)[1] for line in lines] == expected, out.joined_text()


@pytest.mark.parametrize(
    "query",
    [
        {"pattern": r"[[:digit:]]+", "output_mode": "content"},
        {"pattern": r"\p{Lu}\w+", "output_mode": "count"},
        {"pattern": r"(a|aa)+b", "output_mode": "content"},
        {"pattern": r"x\s+y", "output_mode": "content"},
        {"pattern": "w.*", "output_mode": "count"},
    ],
)
def test_engines_agree_on_timed_patterns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: dict[str, Any]
) -> None:
    (tmp_path / "a.txt").write_text("Word 12\nx  y\naab\nno\n")
    (tmp_path / "b.txt").write_text("x\ny\nAlpha beta 7\r\nwww\n")
    outs = []
    for disable in ("", "1"):
        monkeypatch.setenv("NORMA_DISABLE_RIPGREP", disable)
        if not disable:
            monkeypatch.delenv("NORMA_DISABLE_RIPGREP")
        ripgrep.reset_cache()
        out = GrepTool().call(query, ctx_for(tmp_path.resolve()))
        first, _, rest = out.joined_text().partition("\n")
        outs.append((out.metadata.get("engine"), first.rsplit(" (engine:", 1)[0], rest))
    ripgrep.reset_cache()
    (rg_engine, *rg), (py_engine, *py) = outs
    assert (rg_engine, py_engine) == ("ripgrep", "python")
    assert rg == py
