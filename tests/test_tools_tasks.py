"""Background tasks with real processes: Bash run_in_background, TaskOutput, Monitor,
TaskStop, TaskList, moving a foreground command to the background, session close, named
sessions across invocations, and SIGINT/SIGTERM ending a one-shot run without orphans."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.errors import UsageError
from norma_cli.runtime import Options, Runtime
from norma_cli.tools.tasks import members

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
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


def pgid_of(rt: Runtime, task_id: str) -> int:
    rec = json.loads((rt.session.dir / "tasks" / f"{task_id}.json").read_text())
    return int(rec["pgid"])


def sleepers(prefix: str) -> list[int]:
    """Live ``sleep N`` processes whose N starts with ``prefix`` (the tests' markers)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[:-1]
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        sleeping = (
            len(argv) == 2 and argv[0].endswith(b"sleep") and argv[1].startswith(prefix.encode())
        )
        if sleeping and state not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


# ----------------------------------------------------------------------------- reading
def test_background_returns_at_once_and_output_reads_incrementally(rt: Runtime) -> None:
    task = start(rt, "echo one; sleep 0.6; echo two; sleep 0.3; echo three; exit 3")
    assert wait_for(lambda: "one" in (rt.session.dir / "tasks" / f"{task}.log").read_text())
    first = run(rt, "TaskOutput", task_id=task)
    assert first.exit_code() == 0
    assert first.text() == f"Task {task}: running.\n\none"
    matched = run(rt, "Monitor", task_id=task, pattern="^tw.$", timeout=10_000)
    assert matched.exit_code() == 0 and matched.text().startswith("Matched: two")
    assert "one" not in matched.text()  # already read
    final = run(rt, "TaskOutput", task_id=task, block=True, timeout=10_000)
    assert final.text() == f"Task {task}: exited with code 3.\n\nthree"
    again = run(rt, "TaskOutput", task_id=task)
    assert again.text() == f"Task {task}: exited with code 3.\n\n(no new output)"


def test_large_output_is_read_in_pieces_without_loss(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[output]\nmax_chars = 1000\n")
    runtime = Runtime.build(
        Options(cwd=tmp_path, config=cfg, allow=("Bash",), with_store=False, interactive=False)
    )
    try:
        # multi-byte characters straddle every read boundary somewhere
        task = start(runtime, "python3 -c \"print('é€x' * 3000)\"")
        assert run(runtime, "Monitor", task_id=task, timeout=10_000).exit_code() == 0  # exited
        pieces = []
        for _ in range(100):
            result = run(runtime, "TaskOutput", task_id=task)
            body = result.text().split("\n\n", 1)[1]
            if body == "(no new output)":
                break
            assert result.meta.spill is None  # each piece fits under the cap
            pieces.append(body.replace("\n\n[more output is waiting: call TaskOutput again]", ""))
        assert "".join(pieces).rstrip("\n") == "é€x" * 3000
        assert len(pieces) > 5
    finally:
        runtime.close()


def test_monitor_timeout_exit_and_bad_pattern(rt: Runtime) -> None:
    task = start(rt, "echo waiting; sleep 30")
    timeout = run(rt, "Monitor", task_id=task, pattern="ready", timeout=300)
    assert timeout.exit_code() == 1
    assert "not seen within 0.3 s" in timeout.text() and "running" in timeout.text()
    # a timeout consumes nothing
    assert run(rt, "TaskOutput", task_id=task).text().endswith("waiting")
    bad = run(rt, "Monitor", task_id=task, pattern="(", timeout=100)
    assert bad.exit_code() == 1 and "/pattern: invalid regular expression" in bad.text()

    done = start(rt, "echo a; echo b")
    missed = run(rt, "Monitor", task_id=done, pattern="^c$", timeout=10_000)
    assert (
        missed.exit_code() == 1
        and "exited with code 0" in missed.text()
        and "'^c$' was not seen" in missed.text()
    )
    # without a pattern Monitor waits for the exit; a partial last line still matches at exit
    tail = start(rt, "sleep 0.2; printf 'no newline at end'")
    assert run(rt, "Monitor", task_id=tail, pattern="newline at", timeout=10_000).exit_code() == 0
    # the shell exits at once; what it left running may still print the awaited line
    late = start(rt, "(sleep 0.5; echo late line) &")
    assert run(rt, "Monitor", task_id=late, pattern="^late", timeout=10_000).exit_code() == 0


def test_task_list_and_unknown_ids(rt: Runtime) -> None:
    assert run(rt, "TaskList").text() == "No background tasks in this session."
    task = start(rt, "sleep 30")
    listing = run(rt, "TaskList").text()
    assert listing.startswith(f"{task}  running  started ") and listing.endswith("$ sleep 30")
    unknown = run(rt, "TaskOutput", task_id="task_99")
    assert (
        unknown.exit_code() == 1
        and f"no task 'task_99' in this session (tasks: {task})" in unknown.text()
    )
    bad = run(rt, "TaskStop", task_id="../../etc/passwd")
    assert bad.exit_code() == 1 and bad.meta.stage == "schema" and "/task_id" in bad.text()


# ----------------------------------------------------------------------------- stopping
def test_task_stop_ends_the_whole_group(rt: Runtime) -> None:
    task = start(rt, "bash -c 'sleep 3101 & sleep 3101' & sleep 3102")
    pgid = pgid_of(rt, task)
    assert wait_for(lambda: len(sleepers("310")) == 3)
    assert set(sleepers("310")) <= set(members(pgid))
    stopped = run(rt, "TaskStop", task_id=task)
    assert stopped.exit_code() == 0 and stopped.meta.stage == "tool", stopped.text()
    assert sleepers("310") == [] and members(pgid) == []
    assert (
        run(rt, "TaskOutput", task_id=task).text().startswith(f"Task {task}: stopped by TaskStop.")
    )
    assert "Nothing to stop" in run(rt, "TaskStop", task_id=task).text()


def test_session_close_ends_tasks_and_removes_their_logs(tmp_path: Path) -> None:
    runtime = Runtime.build(
        Options(cwd=tmp_path, allow=("Bash",), with_store=False, interactive=False)
    )
    task = start(runtime, "sleep 3111 & sleep 3112; echo never")
    pgid = pgid_of(runtime, task)
    tasks_dir = runtime.session.dir / "tasks"
    assert wait_for(lambda: len(sleepers("311")) == 2)
    runtime.close()
    assert sleepers("311") == [] and members(pgid) == []
    assert not tasks_dir.exists()


def test_stop_after_leader_exit_ends_leftovers(rt: Runtime) -> None:
    task = start(rt, "sleep 3121 &")  # the shell exits at once, the sleeper stays in the group
    assert wait_for(lambda: sleepers("3121") != [])
    assert run(rt, "Monitor", task_id=task, timeout=5_000).exit_code() == 0
    listing = run(rt, "TaskList").text()
    assert "exited with code 0; 1 process(es) it started still running" in listing
    assert run(rt, "TaskStop", task_id=task).exit_code() == 0
    assert sleepers("3121") == []


# ----------------------------------------------------------------------------- foreground → background
def test_background_on_timeout_moves_the_command_instead_of_killing_it(rt: Runtime) -> None:
    moved = run(
        rt,
        "Bash",
        command="echo started; sleep 1; echo finished",
        timeout=300,
        background_on_timeout=True,
    )
    assert moved.exit_code() == 0, moved.text()
    m = re.search(r"moved to the background as task (task_\d+)", moved.text())
    assert m and moved.text().endswith("Output so far:\nstarted")
    done = run(rt, "Monitor", task_id=m.group(1), pattern="finished", timeout=10_000)
    assert done.exit_code() == 0 and done.text().startswith("Matched: finished")

    quick = run(rt, "Bash", command="echo fast; exit 4", timeout=30_000, background_on_timeout=True)
    assert quick.exit_code() == 1 and quick.text() == "fast\n\nexit code 4"
    tasks = run(rt, "TaskList").text()
    assert m.group(1) in tasks and tasks.count("task_") == 1  # the quick one left no task behind

    plain = run(rt, "Bash", command="sleep 5; echo x", timeout=200)
    assert plain.exit_code() == 1 and "timed out" in plain.text()


def test_background_can_be_disabled(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[tools]\nbackground = false\n")
    runtime = Runtime.build(
        Options(cwd=tmp_path, config=cfg, allow=("Bash",), with_store=False, interactive=False)
    )
    try:
        assert (
            runtime.registry.get("TaskOutput") is None and runtime.registry.get("Monitor") is None
        )
        refused = run(runtime, "Bash", command="sleep 1", run_in_background=True)
        assert refused.exit_code() == 1 and "background tasks are not enabled" in refused.text()
        assert run(runtime, "Bash", command="echo ok", background_on_timeout=True).exit_code() == 1
    finally:
        runtime.close()
    default = Runtime.build(Options(cwd=tmp_path, with_store=False))
    assert all(
        default.registry.get(n) is not None
        for n in ("TaskOutput", "TaskStop", "TaskList", "Monitor")
    )
    assert default.registry.get("ShellStart") is None  # opt-in
    default.close()


def test_task_tool_metadata() -> None:
    from norma_cli.tools.tasks import MonitorTool, TaskListTool, TaskOutputTool, TaskStopTool

    for cls in (TaskOutputTool, TaskListTool, MonitorTool):
        assert (cls.read_only, cls.concurrency_safe, cls.requires_approval) == (True, True, False)
    assert (TaskStopTool.read_only, TaskStopTool.concurrency_safe) == (False, False)


# ----------------------------------------------------------------------------- named sessions
def test_session_ids_must_be_safe_path_components(tmp_path: Path, norma: RunNorma) -> None:
    for bad in ("../x", "a/b", "", ".hidden", "x" * 129):
        with pytest.raises(UsageError):
            Runtime.build(Options(cwd=tmp_path, session_id=bad, with_store=False))
    proc = norma("run", "--session", "../../etc", "TaskList")
    assert (
        proc.returncode == 2
        and "invalid session id" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_named_session_tasks_outlive_the_invocation(norma: RunNorma, tmp_path: Path) -> None:
    started = norma(
        "--allow",
        "Bash",
        "run",
        "--session",
        "build-1",
        "Bash",
        "-i",
        json.dumps({"command": "echo hello; sleep 3131", "run_in_background": True}),
    )
    assert started.returncode == 0, started.stderr
    text = results(started.stdout)[0]["content"][0]["text"]
    task = re.search(r"task (task_\d+)", text).group(1)  # type: ignore[union-attr]
    assert "keeps running after this norma exits" in text
    assert wait_for(lambda: sleepers("3131") != [])  # norma exited, the task did not

    listed = norma("run", "--session", "build-1", "TaskList", "--text")
    assert listed.stdout.startswith(f"{task}  running")
    out = norma(
        "run", "--session", "build-1", "TaskOutput", "-i", json.dumps({"task_id": task}), "--text"
    )
    assert out.stdout.strip() == f"Task {task}: running.\n\nhello"
    other = norma("run", "--session", "other", "TaskOutput", "-i", json.dumps({"task_id": task}))
    assert other.returncode == 1  # tasks belong to their session
    stop = norma("run", "--session", "build-1", "TaskStop", "-i", json.dumps({"task_id": task}))
    assert stop.returncode == 0, stop.stdout
    assert sleepers("3131") == []


def test_a_recycled_pid_is_never_signalled(norma: RunNorma, tmp_path: Path) -> None:
    started = norma(
        "--allow",
        "Bash",
        "run",
        "--session",
        "s2",
        "Bash",
        "-i",
        json.dumps({"command": "sleep 0.1", "run_in_background": True}),
    )
    task = re.search(r"task (task_\d+)", started.stdout).group(1)  # type: ignore[union-attr]
    home = Path(os.environ["NORMA_HOME"])
    record_path = home / "sessions" / "s2" / "tasks" / f"{task}.json"
    assert wait_for(lambda: not sleepers("0.1"))
    # An unrelated process now owns a pid and group the record names (as after pid reuse).
    victim = subprocess.Popen(["sleep", "3141"], start_new_session=True)
    try:
        record = json.loads(record_path.read_text())
        record.update(pid=victim.pid, pgid=victim.pid)  # start time still the task's
        record_path.write_text(json.dumps(record))
        (record_path.with_suffix(".exit")).unlink()
        stop = norma("run", "--session", "s2", "TaskStop", "-i", json.dumps({"task_id": task}))
        assert "Nothing to stop" in stop.stdout
        assert victim.poll() is None  # untouched
    finally:
        victim.kill()
        victim.wait()


# ----------------------------------------------------------------------------- signals
BLOCKERS = {
    # the batch blocks in a foreground Bash command (main thread)...
    "foreground": [("Bash", {"command": "sleep {block}", "timeout": 600_000})],
    # ...in a foreground command that would move to the background at its timeout...
    "movable": [
        ("Bash", {"command": "sleep {block}", "timeout": 600_000, "background_on_timeout": True})
    ],
    # ...or in two Monitors waiting in parallel on worker threads (task ids count up: task_1)
    "monitors": [
        ("Monitor", {"task_id": "task_1", "pattern": "never", "timeout": 600_000}),
        ("Monitor", {"task_id": "task_1", "pattern": "never", "timeout": 600_000}),
    ],
}


@pytest.mark.parametrize("blocker", sorted(BLOCKERS))
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_leaves_no_orphans(
    tmp_path: Path, sig: signal.Signals, code: int, blocker: str
) -> None:
    n = f"3{int(sig):02d}{len(blocker)}"
    bg, block = f"{n}2", f"{n}1"
    calls = [("Bash", {"command": f"bash -c 'sleep {bg} & sleep {bg}'", "run_in_background": True})]
    calls += [
        (name, json.loads(json.dumps(inp).replace("{block}", block)))
        for name, inp in BLOCKERS[blocker]
    ]
    batch = "\n".join(
        json.dumps({"type": "tool_use", "id": f"t{i}", "name": name, "input": inp})
        for i, (name, inp) in enumerate(calls)
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "norma_cli", "--allow", "Bash", "run", "--calls", "-"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(batch + "\n")
        proc.stdin.close()
        first = json.loads(proc.stdout.readline())
        pgid = int(re.search(r"\(pid (\d+)\)", first["content"][0]["text"]).group(1))  # type: ignore[union-attr]
        assert wait_for(lambda: len(sleepers(bg)) == 2)
        if blocker != "monitors":
            assert wait_for(lambda: sleepers(block) != [])
        else:
            time.sleep(0.3)  # let both Monitors start waiting
        assert set(sleepers(bg)) <= set(members(pgid))
        proc.send_signal(sig)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, proc.stderr.read() if proc.stderr else ""
    assert members(pgid) == [] and sleepers(bg) == [] and sleepers(block) == []
    assert not list((Path(os.environ["NORMA_HOME"]) / "sessions").glob("*/tasks"))


def test_cancel_releases_waits_on_worker_threads(rt: Runtime) -> None:
    import threading

    task = start(rt, "sleep 30")
    calls = [
        ToolCall(f"m{i}", "Monitor", {"task_id": task, "pattern": "never", "timeout": 600_000})
        for i in range(2)
    ]
    out: list[list[ToolResult]] = []
    worker = threading.Thread(target=lambda: out.append(rt.executor.run_batch(calls)))
    worker.start()
    time.sleep(0.3)
    rt.session.cancelled.set()  # what the SIGINT/SIGTERM handler does first
    worker.join(10)
    assert not worker.is_alive()
    assert [r.text() for r in out[0]] == ["Monitor: interrupted"] * 2
