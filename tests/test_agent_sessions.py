"""Transcripts and resume of `norma run -p` (SPEC §16): every message in the session's JSONL
transcript and the store, --session/--resume continuing a conversation (with its unlocks), and
SIGINT/SIGTERM mid-tool leaving a well-formed transcript, ended tasks and a fired SessionEnd."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RunNorma
from fake_providers import FakeProvider, Reply


def config(tmp_path: Path, fake: FakeProvider, extra: str = "") -> Path:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(fake.toml() + extra)
    return cfg


def transcript(home: Path, session: str) -> list[dict]:
    path = home / "data" / "sessions" / session / "transcript.jsonl"
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # every line is a complete object


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_transcript_and_messages_table(norma: RunNorma, tmp_path: Path, isolated_env: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    script = [
        Reply(text="Let me look.", calls=[("c1", "Read", {"file_path": "a.txt"})], usage=(10, 3)),
        Reply(text="alpha"),
    ]
    with FakeProvider("openai", script) as fake:
        proc = norma(
            "--config",
            str(config(tmp_path, fake)),
            "run",
            "-p",
            "what is in a.txt?",
            "--session",
            "t1",
        )
    assert proc.returncode == 0, proc.stderr
    records = transcript(isolated_env, "t1")
    assert [r["type"] for r in records] == [
        "start",
        "message",
        "message",
        "message",
        "message",
        "end",
    ]
    messages = [r for r in records if r["type"] == "message"]
    assert [(m["seq"], m["message"]["role"]) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    result = messages[2]["message"]["content"][0]
    assert (
        result["type"] == "tool_result"
        and result["tool_use_id"] == "c1"
        and result["norma"]["decision"] == "allow"
    )
    assert messages[1]["usage"] == {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}
    assert records[-1]["reason"] == "finished" and records[-1]["exit_code"] == 0

    db = sqlite3.connect(isolated_env / "data" / "norma.db")
    rows = db.execute(
        "SELECT seq, role, content, input_tokens FROM messages WHERE session_id = 't1' ORDER BY seq"
    ).fetchall()
    assert [(s, r, json.loads(c)) for s, r, c, _ in rows] == [
        (m["seq"], m["message"]["role"], m["message"]) for m in messages
    ]
    assert rows[1][3] == 10


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_session_continues_the_conversation(norma: RunNorma, tmp_path: Path, kind: str) -> None:
    with FakeProvider(kind, [Reply(text="Paris"), Reply(text="About 2.1 million")]) as fake:
        cfg = config(tmp_path, fake)
        assert (
            norma(
                "--config", str(cfg), "run", "-p", "Capital of France?", "--session", "geo"
            ).stdout
            == "Paris\n"
        )
        proc = norma(
            "--config",
            str(cfg),
            "run",
            "--resume",
            "geo",
            "-p",
            "Its population?",
            "--output",
            "json",
        )
    assert proc.returncode == 0, proc.stderr
    assert fake.user_texts(1) == ["Capital of France?", "Its population?"]
    assistant = [m for m in fake.requests[1].body["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1
    out = json.loads(proc.stdout)
    assert (
        out["session_id"] == "geo"
        and out["session_usage"]["total_tokens"] == 36
        and out["usage"]["total_tokens"] == 18
    )


def test_resume_needs_a_transcript(norma: RunNorma, tmp_path: Path) -> None:
    with FakeProvider("openai", [Reply(text="x")]) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "--resume", "nope", "-p", "hi")
        assert proc.returncode == 2 and "no transcript for session 'nope'" in proc.stderr
        proc = norma(
            "--config",
            str(config(tmp_path, fake)),
            "run",
            "--resume",
            "a",
            "--session",
            "b",
            "-p",
            "hi",
        )
        assert proc.returncode == 2
    assert fake.requests == []


def test_a_session_in_use_is_refused(norma: RunNorma, tmp_path: Path, isolated_env: Path) -> None:
    folder = isolated_env / "data" / "sessions" / "busy"
    folder.mkdir(parents=True)
    with (
        open(folder / "transcript.jsonl", "a") as held,
        FakeProvider("openai", [Reply(text="x")]) as fake,
    ):
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = norma(
            "--config", str(config(tmp_path, fake)), "run", "-p", "hi", "--session", "busy"
        )
    assert (
        proc.returncode == 2
        and "in use by another norma run" in proc.stderr
        and fake.requests == []
    )


def test_a_torn_last_line_is_dropped_on_resume(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    with FakeProvider("anthropic", [Reply(text="one"), Reply(text="two")]) as fake:
        cfg = config(tmp_path, fake)
        assert (
            norma("--config", str(cfg), "run", "-p", "first", "--session", "torn").returncode == 0
        )
        path = isolated_env / "data" / "sessions" / "torn" / "transcript.jsonl"
        with open(path, "a") as fh:
            fh.write(
                '{"type": "message", "seq": 3, "message": {"role": "us'
            )  # a power cut mid-write
        proc = norma("--config", str(cfg), "run", "--resume", "torn", "-p", "second")
    assert proc.returncode == 0 and proc.stdout == "two\n", proc.stderr
    assert "dropped an incomplete last line" in proc.stderr
    assert [r["type"] for r in transcript(isolated_env, "torn")].count("message") == 4


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_a_tool_call_then_resume(
    tmp_path: Path, isolated_env: Path, sig: int, code: int
) -> None:
    ended = tmp_path / "ended.json"
    script = [
        Reply(
            calls=[
                (
                    "bg",
                    "Bash",
                    {
                        "command": f"echo $$ > {tmp_path}/bg.pid; exec sleep 60",
                        "run_in_background": True,
                    },
                )
            ]
        ),
        Reply(calls=[("fg", "Bash", {"command": f"echo $$ > {tmp_path}/fg.pid; sleep 30"})]),
        Reply(text="picked up where we left off"),
    ]
    with FakeProvider("openai", script) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.SessionEnd]]\ncommand = "cat > {ended}"\n')
        argv = [sys.executable, "-m", "norma_cli", "--config", str(cfg), "--allow", "Bash", "run", "-p", "work",
                "--output", "stream-json"]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 30
        while (
            not (tmp_path / "fg.pid").exists()
            and time.monotonic() < deadline
            and proc.poll() is None
        ):
            time.sleep(0.05)
        assert (tmp_path / "fg.pid").exists(), proc.communicate(timeout=10)
        time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code, err
        assert "Traceback" not in err

        assert json.loads(ended.read_text())["reason"] == "interrupt"
        pids = [int((tmp_path / f"{n}.pid").read_text()) for n in ("bg", "fg")]
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(
            alive(p) for p in pids
        )  # the foreground command and the background task ended

        session = json.loads(out.splitlines()[0])["session_id"]
        records = transcript(isolated_env, session)
        assert records[-1]["type"] == "end" and records[-1]["reason"] in ("interrupt", "terminated")
        closing = [r for r in records if r["type"] == "message"][-1]["message"]
        assert closing["role"] == "user" and closing["content"][0]["tool_use_id"] == "fg"
        assert (
            closing["content"][0]["is_error"]
            and "interrupted" in closing["content"][0]["content"][0]["text"]
        )

        resumed = subprocess.run([sys.executable, "-m", "norma_cli", "--config", str(cfg), "run", "--resume", session,
                                  "-p", "go on"], cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "picked up where we left off\n"
    assert [r["id"] for r in fake.results(2)] == ["bg", "fg"] and fake.results(2)[1]["is_error"]
    assert fake.user_texts(2) == ["work", "go on"]
    assert transcript(isolated_env, session)[-1]["reason"] == "finished"


def test_resume_restores_the_unlock_set(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    skills = isolated_env / "xdg-config" / "norma" / "skills" / "release"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(
        "---\nname: release\ndescription: Cut a release.\nallowed-tools: rotate_keys\n---\nRotate, then tag.\n"
    )
    extra = '[[custom_tools]]\nname = "rotate_keys"\nkind = "command"\nexec = "echo rotated {{vault}}"\ndeferred = true\n'
    execute = ("ExecuteExtraTool", {"name": "rotate_keys", "input": {"vault": "v1"}})
    script = [
        Reply(calls=[("s1", "Skill", {"name": "release"})]), Reply(text="skill loaded"),
        Reply(calls=[("x1", *execute)]), Reply(text="rotated"),
        Reply(calls=[("x2", *execute)]), Reply(text="refused"),
    ]  # fmt: skip
    with FakeProvider("anthropic", script) as fake:
        cfg = config(tmp_path, fake, extra)
        run = ("--config", str(cfg), "--allow", "rotate_keys", "run")
        assert norma(*run, "-p", "load the release skill", "--session", "rel").returncode == 0
        db = sqlite3.connect(isolated_env / "data" / "norma.db")
        with db:
            assert (
                db.execute("DELETE FROM session_unlocks WHERE session_id = 'rel'").rowcount == 1
            )  # the store lost it
        assert norma(*run, "--resume", "rel", "-p", "rotate the v1 keys").returncode == 0
        assert norma(*run, "-p", "rotate the v1 keys", "--session", "fresh").returncode == 0
    [unlocked] = fake.results(3)[1:]
    assert not unlocked["is_error"] and "rotated v1" in unlocked["text"]
    [locked] = fake.results(5)
    assert locked["is_error"] and "locked until the skill release is invoked" in locked["text"]
    assert os.path.exists(isolated_env / "data" / "sessions" / "fresh" / "transcript.jsonl")
