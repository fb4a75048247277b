"""Approvals across real processes: a waiting `norma run`, `norma approve` from another process,
`--no-wait` and one-time grants bound to the exact input, expiry, SIGTERM, the interactive mode."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

CONFIG = """
[intercept]
tools = ["Read"]
[[intercept.rules]]
rule = "Read(./guarded/**)"
decision = "ask"
reason = "guarded files need a human"
[intercept.ask]
timeout_s = {timeout}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "guarded").mkdir()
    (tmp_path / "guarded" / "a.txt").write_text("alpha secret\n")
    (tmp_path / "guarded" / "b.txt").write_text("beta secret\n")
    (tmp_path / "open.txt").write_text("open\n")
    return tmp_path


def config(tmp_path: Path, timeout: float = 60, extra: str = "") -> str:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(CONFIG.format(timeout=timeout) + extra)
    return str(cfg)


def spawn(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "norma_cli", *args], cwd=tmp_path, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def db() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "norma.db"


def wait_for_pending(proc: subprocess.Popen[str], timeout: float = 20) -> dict[str, Any]:
    """The pending approval row, read straight from the store as soon as the run has made it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db().exists():
            try:
                con = sqlite3.connect(db())
                con.row_factory = sqlite3.Row
                rows = con.execute("SELECT * FROM approvals WHERE status = 'pending'").fetchall()
                con.close()
            except sqlite3.OperationalError:  # tables not migrated yet
                rows = []
            if rows:
                return dict(rows[0])
        time.sleep(0.05)
    raise AssertionError("no pending approval appeared")


def trace_of(norma: RunNorma, cfg: str, trace_id: str) -> dict[str, Any]:
    proc = norma("--config", cfg, "trace", "show", trace_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


READ_A = ("run", "Read", "-i", '{"file_path": "guarded/a.txt"}')


# ----------------------------------------------------------------------------- waiting runs
def test_waiting_run_continues_promptly_when_approved_elsewhere(
    norma: RunNorma, project: Path
) -> None:
    cfg = config(project)
    proc = spawn(project, "--config", cfg, *READ_A)
    pending = wait_for_pending(proc)
    assert pending["tool"] == "Read" and pending["reason"] == "guarded files need a human"
    assert (
        json.loads(pending["input"])["file_path"] == "guarded/a.txt"
        and len(pending["input_digest"]) == 64
    )
    approved = norma("--config", cfg, "approve", pending["id"], "--reason", "fine by me")
    assert approved.returncode == 0 and "approved" in approved.stdout
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    [result] = results(out)
    assert "alpha secret" in result["content"][0]["text"]
    assert (
        f"norma approve {pending['id']}" in err
    )  # the run said what it waits for, and how to answer
    entry = trace_of(norma, cfg, result["norma"]["trace_id"])
    executing = next(e for e in entry["events"] if e["state"] == "executing")
    assert executing["by"].startswith("user:") and "fine by me" in executing["reason"]
    # woke well within a second of the decision (polling the row, not sleeping out a timeout)
    assert 0 <= executing["t"] - executing["decided_at"] < 1.0


def test_waiting_run_denied_elsewhere_exits_3(norma: RunNorma, project: Path) -> None:
    cfg = config(project)
    proc = spawn(project, "--config", cfg, *READ_A)
    pending = wait_for_pending(proc)
    assert (
        norma("--config", cfg, "approve", pending["id"], "--deny", "--reason", "not now").returncode
        == 0
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 3
    [result] = results(out)
    assert "not now" in result["norma"]["reason"] and "alpha" not in out


def test_no_decision_before_expiry_exits_3_expired(norma: RunNorma, project: Path) -> None:
    cfg = config(project, timeout=1)
    started = time.monotonic()
    proc = norma("--config", cfg, *READ_A)
    assert proc.returncode == 3 and time.monotonic() - started < 20
    [result] = results(proc.stdout)
    assert "expired" in result["norma"]["reason"] and result["norma"]["stage"] == "expiry"
    listed = json.loads(norma("--config", cfg, "approve", "--list", "--all", "--json").stdout)
    assert [a["status"] for a in listed] == ["expired"]
    late = norma("--config", cfg, "approve", listed[0]["id"])
    assert late.returncode == 1 and "already expired" in late.stderr


# ----------------------------------------------------------------------------- --no-wait
def test_no_wait_then_approve_runs_the_same_call_once(norma: RunNorma, project: Path) -> None:
    cfg = config(project)
    first = norma("--config", cfg, *READ_A, "--no-wait")
    assert first.returncode == 4
    pending_id = results(first.stdout)[0]["norma"]["pending_id"]
    assert pending_id and f"pending approval {pending_id}" in first.stderr
    # asking again before a decision rejoins the same request instead of queueing a duplicate
    assert (
        results(norma("--config", cfg, *READ_A, "--no-wait").stdout)[0]["norma"]["pending_id"]
        == pending_id
    )
    assert norma("--config", cfg, "approve", pending_id).returncode == 0

    # the same tool with a different input is never covered by that approval
    other = norma(
        "--config", cfg, "run", "Read", "-i", '{"file_path": "guarded/b.txt"}', "--no-wait"
    )
    assert other.returncode == 4 and "beta" not in other.stdout

    second = norma("--config", cfg, *READ_A, "--no-wait")
    assert second.returncode == 0, second.stdout
    assert "alpha secret" in results(second.stdout)[0]["content"][0]["text"]

    third = norma("--config", cfg, *READ_A, "--no-wait")
    assert third.returncode == 4  # the approval was used up by one run
    assert results(third.stdout)[0]["norma"]["pending_id"] not in (None, pending_id)
    rows = (
        sqlite3.connect(db())
        .execute("SELECT id, status, consumed_at IS NOT NULL FROM approvals ORDER BY created_at")
        .fetchall()
    )
    assert rows[0] == (pending_id, "approved", 1)


def test_denied_answer_reaches_the_next_no_wait_run(norma: RunNorma, project: Path) -> None:
    cfg = config(project)
    pending_id = results(norma("--config", cfg, *READ_A, "--no-wait").stdout)[0]["norma"][
        "pending_id"
    ]
    assert (
        norma("--config", cfg, "approve", pending_id, "--deny", "--reason", "never").returncode == 0
    )
    proc = norma("--config", cfg, *READ_A, "--no-wait")
    assert proc.returncode == 3 and "never" in results(proc.stdout)[0]["norma"]["reason"]
    assert norma("--config", cfg, *READ_A, "--no-wait").returncode == 4  # a new request


def test_approve_list_and_errors(norma: RunNorma, project: Path) -> None:
    cfg = config(project)
    assert (
        norma("--config", cfg, "approve", "--list").stderr.strip() == "no pending approval requests"
    )
    pending_id = results(norma("--config", cfg, *READ_A, "--no-wait").stdout)[0]["norma"][
        "pending_id"
    ]
    listed = norma("--config", cfg, "approve", "--list")
    assert (
        pending_id in listed.stdout
        and "guarded/a.txt" in listed.stdout
        and "guarded files need a human" in listed.stdout
    )
    [row] = json.loads(norma("--config", cfg, "approve", "--list", "--json").stdout)
    assert row["id"] == pending_id and row["status"] == "pending" and row["stage"] == "intercept"
    assert (
        norma("--config", cfg, "approve", pending_id[:4]).returncode == 0
    )  # a unique prefix will do
    again = norma("--config", cfg, "approve", pending_id, "--deny")
    assert (
        again.returncode == 1
        and "already approved" in again.stderr
        and "Traceback" not in again.stderr
    )
    unknown = norma("--config", cfg, "approve", "ffffffffff")
    assert unknown.returncode == 1 and "no approval request" in unknown.stderr
    no_tty = norma("--config", cfg, "approve")
    assert no_tty.returncode == 2 and "terminal" in no_tty.stderr


def test_interactive_mode_walks_the_queue(norma: RunNorma, project: Path) -> None:
    import pty

    cfg = config(project)
    ids = [results(norma("--config", cfg, "run", "Read", "-i", json.dumps({"file_path": f"guarded/{n}.txt"}), "--no-wait").stdout)[0]["norma"]["pending_id"]
           for n in ("a", "b")]  # fmt: skip
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "norma_cli", "--config", cfg, "approve"], cwd=project,
                            stdin=slave, stdout=slave, stderr=slave, env=dict(os.environ))  # fmt: skip
    os.close(slave)
    os.write(master, b"y\nn\n")
    output = b""
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            output += os.read(master, 4096)
        except OSError:
            break
    proc.wait(timeout=10)
    os.close(master)
    assert proc.returncode == 0, output.decode(errors="replace")
    statuses = dict(sqlite3.connect(db()).execute("SELECT id, status FROM approvals").fetchall())
    assert statuses == {ids[0]: "approved", ids[1]: "denied"}
    assert b"guarded/a.txt" in output


# ----------------------------------------------------------------------------- SIGTERM
def test_sigterm_while_waiting_closes_the_session_and_cancels(
    norma: RunNorma, project: Path
) -> None:
    marker = project / "ended.json"
    cfg = config(project, extra=f'[[hooks.SessionEnd]]\ncommand = "cat > {marker}"\n')
    proc = spawn(project, "--config", cfg, *READ_A)
    pending = wait_for_pending(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert json.loads(marker.read_text())["hook_event_name"] == "SessionEnd"  # the session closed
    row = (
        sqlite3.connect(db())
        .execute("SELECT status, decider FROM approvals WHERE id = ?", (pending["id"],))
        .fetchone()
    )
    assert row == ("cancelled", "requester")
    entries = [
        json.loads(line)
        for line in norma("--config", cfg, "trace", "list", "--json").stdout.splitlines()
    ]
    assert [(e["status"], e["pending_id"]) for e in entries] == [("denied", pending["id"])]
    assert (
        entries[0]["events"][-1]["state"] == "denied"
        and "cancelled" in entries[0]["events"][-1]["reason"]
    )
    assert norma("--config", cfg, "trace", "verify").returncode == 0
    activity = [
        json.loads(line)
        for line in norma(
            "--config", cfg, "trace", "records", "activity", "--json"
        ).stdout.splitlines()
    ]
    assert [(a["event"], a["reason"]) for a in activity] == [
        ("start", "startup"),
        ("end", "interrupt"),
    ]
    assert {a["session_id"] for a in activity} == {entries[0]["session_id"]}
