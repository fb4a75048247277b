"""The click-free reader of `norma run NAME ...` must behave exactly like the click CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import RunNorma

from norma_cli.oneshot import fast_argv

CASES = [
    ["run", "Read", "-i", '{"file_path": "a.txt"}'],
    ["run", "Read", '--input={"file_path": "a.txt"}', "--text"],
    ["run", "Read", "--arg", "file_path=a.txt", "--arg", "offset=1"],
    ["--deny", "Read", "run", "Read", "-i", '{"file_path": "a.txt"}'],
    ["--mode", "plan", "run", "Write", "-i", '{"file_path": "b.txt", "content": "x"}'],
    ["--allow=Write", "run", "Write", "-i", '{"file_path": "b.txt", "content": "x"}', "--dry-run"],
    ["run", "Read", "-i", '{"file_path":'],
    ["run", "Read", "-i", "@missing.json"],
    ["run", "Nope", "-i", "{}"],
    ["run", "Read", "-i", '{"file_path": 3}'],
    ["-v", "run", "Read", "--arg", "nokey"],
    ["--config", "missing.toml", "run", "Read", "-i", "{}"],
    ["run", "Read", "--session", "s1", "-i", '{"file_path": "a.txt"}'],
]


def normalise(text: str) -> str:
    text = re.sub(r'"(tool_use_id|trace_id)": "[^"]*"', r'"\1": "X"', text)
    return re.sub(r'"duration_ms": [0-9.]+', '"duration_ms": 0', text)


@pytest.mark.parametrize("argv", CASES, ids=lambda a: " ".join(a)[:40])
def test_fast_path_matches_click(norma: RunNorma, tmp_path: Path, argv: list[str]) -> None:
    assert fast_argv(argv) is not None  # these are all the simple form
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    fast = norma(*argv)
    slow = norma(*argv, env={"NORMA_NO_FAST_PATH": "1"})
    # with -v the tracebacks differ in their frames; the message line must not
    last = (lambda err: err.strip().splitlines()[-1:]) if "-v" in argv else (lambda err: err)
    assert (fast.returncode, normalise(fast.stdout), last(fast.stderr)) == (
        slow.returncode,
        normalise(slow.stdout),
        last(slow.stderr),
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["run"],
        ["run", "--help"],
        ["run", "Read", "--calls", "x"],
        ["run", "-p", "hi"],
        ["run", "Read", "Write"],
        ["run", "Read", "-i", "{}", "-i", "{}"],
        ["--mode", "sometimes", "run", "Read"],
        ["--unknown", "run", "Read"],
        ["tools", "list"],
        ["run", "Read", "--max-concurrency", "2"],
        ["run", "Read", "--arg"],
    ],
)
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert fast_argv(argv) is None


def test_fast_path_reads_globals_and_flags() -> None:
    run = fast_argv(
        ["--cwd", "/tmp", "--allow", "A", "--allow=B", "-v", "run", "X", "--no-wait", "--text"]
    )
    assert run is not None
    assert run.name == "X" and run.no_wait and run.text and not run.dry_run
    assert run.globals["allow"] == ("A", "B") and run.globals["verbose"] is True
    assert str(run.globals["cwd"]) == "/tmp"
