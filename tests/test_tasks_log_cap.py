"""A background task's log is bounded (as the foreground Bash output): past the bound one
marker line is written and the rest is drained and dropped, while the command runs on, its
exit status is its own, and TaskStop still ends everything, the drain included."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.runtime import Options, Runtime
from norma_cli.tools.tasks import LOG_MAX_ENV, members

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")

CAP = 100_000
MARKER = f"[norma: output beyond {CAP} bytes was dropped]"


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv(LOG_MAX_ENV, str(CAP))
    runtime = Runtime.build(
        Options(cwd=tmp_path, allow=("Bash",), with_store=False, interactive=False)
    )
    yield runtime
    runtime.close()


def run(rt: Runtime, name: str, **tool_input: Any) -> ToolResult:
    return rt.executor.run(ToolCall(f"toolu_{time.monotonic_ns()}", name, tool_input))


def start(rt: Runtime, command: str) -> str:
    result = run(rt, "Bash", command=command, run_in_background=True)
    assert result.exit_code() == 0, result.text()
    m = re.search(r"task (task_\d+)", result.text())
    assert m, result.text()
    return m.group(1)


def log_of(rt: Runtime, task: str) -> Path:
    return rt.session.dir / "tasks" / f"{task}.log"


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_output_beyond_the_cap_is_dropped_and_the_command_runs_on(
    rt: Runtime, tmp_path: Path
) -> None:
    done = tmp_path / "done"
    task = start(rt, f"yes | head -c 1000000; echo done-marker >&2; touch {done}; exit 3")
    final = run(rt, "Monitor", task_id=task, timeout=20_000)
    assert final.exit_code() == 0, final.text()
    assert done.exists()  # it ran to the end: the cap neither blocked nor killed it
    data = log_of(rt, task).read_bytes()
    marker_line = f"\n{MARKER}\n".encode()
    assert data == b"y\n" * (CAP // 2) + marker_line  # nothing after the marker, not even stderr
    listed = run(rt, "TaskList").text()
    assert f"{task}  exited with code 3" in listed and "still running" not in listed
    assert not (rt.session.dir / "tasks" / f"{task}.fifo").exists()


def test_output_under_the_cap_is_whole_and_read_at_once(rt: Runtime) -> None:
    task = start(rt, "printf 'a%.0s' $(seq 5000); echo; echo err >&2; exit 7")
    out = run(rt, "TaskOutput", task_id=task, block=True, timeout=10_000)
    # exited means the drain has written everything: no race with the last bytes
    assert out.text() == f"Task {task}: exited with code 7.\n\n{'a' * 5000}\nerr", out.text()
    assert MARKER not in log_of(rt, task).read_text()


def test_log_is_written_promptly_while_the_task_runs(rt: Runtime) -> None:
    task = start(rt, "echo ready; sleep 30")
    matched = run(rt, "Monitor", task_id=task, pattern="^ready$", timeout=5_000)
    assert matched.exit_code() == 0 and matched.text().startswith("Matched: ready")
    assert run(rt, "TaskStop", task_id=task).exit_code() == 0


def test_task_stop_ends_a_capped_runaway_and_its_drain(rt: Runtime) -> None:
    task = start(rt, "yes")
    log = log_of(rt, task)
    assert wait_for(lambda: MARKER.encode() in log.read_bytes())
    rec_pgid = int(json.loads(log.with_suffix(".json").read_text())["pgid"])
    assert len(members(rec_pgid)) >= 3  # wrapper, yes, drain
    size = log.stat().st_size
    time.sleep(0.3)
    assert log.stat().st_size == size <= CAP + len(MARKER) + 2  # still bounded while it runs
    assert run(rt, "TaskOutput", task_id=task).text().startswith(f"Task {task}: running.")
    stopped = run(rt, "TaskStop", task_id=task)
    assert stopped.exit_code() == 0, stopped.text()
    assert members(rec_pgid) == []  # no orphan drain
