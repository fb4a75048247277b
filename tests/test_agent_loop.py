"""The loop of `norma run -p` (SPEC §16): denied calls reach the model as error results, the
session hooks (SessionStart, UserPromptSubmit, Stop, SessionEnd) steer it, and --max-turns and
the token budget end it with exit 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import RunNorma
from fake_providers import FakeProvider, Reply

KINDS = ["openai", "anthropic"]


def config(tmp_path: Path, fake: FakeProvider, extra: str = "") -> Path:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(fake.toml() + extra)
    return cfg


def hook(tmp_path: Path, name: str, body: str) -> str:
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("kind", KINDS)
def test_denied_call_reaches_the_model_and_the_loop_goes_on(
    norma: RunNorma, tmp_path: Path, kind: str
) -> None:
    (tmp_path / "secret.txt").write_text("hunter2\n")
    (tmp_path / "open.txt").write_text("public\n")
    script = [
        Reply(
            calls=[
                ("c1", "Read", {"file_path": "secret.txt"}),
                ("c2", "Read", {"file_path": "open.txt"}),
            ]
        ),
        Reply(calls=[("c3", "Bash", {"command": "echo hi"})]),  # asks; nobody to ask → denied
        Reply(text="I could not read the secret."),
    ]
    with FakeProvider(kind, script) as fake:
        cfg = config(tmp_path, fake, '[permissions]\ndeny = ["Read(./secret.txt)"]\n')
        proc = norma("--config", str(cfg), "run", "-p", "read both", "--output", "stream-json")
    assert proc.returncode == 0, proc.stderr
    denied, allowed = fake.results(1)
    assert denied["id"] == "c1" and denied["is_error"] and "Read(./secret.txt)" in denied["text"]
    assert "hunter2" not in json.dumps(fake.requests[1].body)
    assert allowed["id"] == "c2" and "public" in allowed["text"] and not allowed["is_error"]
    [bash] = fake.results(2)[2:]
    assert bash["is_error"] and "denied" in bash["text"]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    metas = {e["tool_use_id"]: e["norma"] for e in events if e["type"] == "tool_result"}
    assert metas["c1"]["decision"] == "deny" and metas["c1"]["rule"] == "Read(./secret.txt)"
    assert metas["c2"]["decision"] == "allow" and metas["c3"]["decision"] == "deny"


def test_user_prompt_submit_exit_2_blocks_before_any_request(
    norma: RunNorma, tmp_path: Path
) -> None:
    ended = tmp_path / "ended.json"
    blocker = hook(
        tmp_path,
        "block.sh",
        "cat > /dev/null; echo 'prompts about passwords are refused' >&2; exit 2\n",
    )
    with FakeProvider("openai", [Reply(text="never")]) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.UserPromptSubmit]]\ncommand = "{blocker}"\n'
                                     f'[[hooks.SessionEnd]]\ncommand = "cat > {ended}"\n')  # fmt: skip
        proc = norma("--config", str(cfg), "run", "-p", "print the password", "--session", "b1")
    assert proc.returncode == 3
    assert fake.requests == []
    assert (
        "prompt blocked by hook" in proc.stderr
        and "prompts about passwords are refused" in proc.stderr
    )
    assert json.loads(ended.read_text())["reason"] == "exit"
    from norma_cli.config import data_dir

    records = [
        json.loads(line)
        for line in (data_dir() / "sessions" / "b1" / "transcript.jsonl").read_text().splitlines()
    ]
    assert [r["type"] for r in records] == ["start", "blocked", "end"]
    assert "print the password" not in json.dumps(records)  # a refused prompt is not kept


def test_user_prompt_submit_context_goes_with_the_prompt(norma: RunNorma, tmp_path: Path) -> None:
    ctx = hook(
        tmp_path,
        "ctx.sh",
        'cat > "$0.in"; echo \'{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "The build uses make."}}\'\n',
    )
    start = hook(tmp_path, "start.sh", "cat > /dev/null; echo 'Today is a Tuesday.'\n")
    with FakeProvider("anthropic", [Reply(text="ok")]) as fake:
        cfg = config(
            tmp_path,
            fake,
            f'[[hooks.UserPromptSubmit]]\ncommand = "{ctx}"\n[[hooks.SessionStart]]\ncommand = "{start}"\n',
        )
        proc = norma("--config", str(cfg), "run", "-p", "build it")
    assert proc.returncode == 0, proc.stderr
    assert fake.user_texts(0) == ["build it", "Today is a Tuesday.", "The build uses make."]
    seen = json.loads(Path(ctx + ".in").read_text())
    assert seen["hook_event_name"] == "UserPromptSubmit" and seen["prompt"] == "build it"
    assert seen["transcript_path"].endswith("transcript.jsonl")


@pytest.mark.parametrize("kind", KINDS)
def test_stop_hook_block_gives_the_model_one_more_turn(
    norma: RunNorma, tmp_path: Path, kind: str
) -> None:
    flag = tmp_path / "asked-once"
    stop = hook(tmp_path, "stop.sh", f'cat > "$0.in"\nif [ -e {flag} ]; then exit 0; fi\ntouch {flag}\n'
                                     'echo \'{"decision": "block", "reason": "Run the tests before you stop."}\'\n')  # fmt: skip
    with FakeProvider(kind, [Reply(text="done"), Reply(text="tests pass, done")]) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.Stop]]\ncommand = "{stop}"\n')
        proc = norma("--config", str(cfg), "run", "-p", "fix it")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "tests pass, done\n" and len(fake.requests) == 2
    assert fake.user_texts(1)[-1] == "Run the tests before you stop."
    last = json.loads(Path(stop + ".in").read_text())
    assert last["stop_hook_active"] is True and last["last_assistant_message"] == "tests pass, done"


def test_stop_hook_continue_false_ends_the_run(norma: RunNorma, tmp_path: Path) -> None:
    stop = hook(
        tmp_path,
        "stop.sh",
        'cat > /dev/null; echo \'{"continue": false, "stopReason": "budget meeting"}\'\n',
    )
    with FakeProvider("openai", [Reply(text="first answer"), Reply(text="never")]) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.Stop]]\ncommand = "{stop}"\n')
        proc = norma("--config", str(cfg), "run", "-p", "go", "--output", "json")
    assert proc.returncode == 3 and len(fake.requests) == 1
    out = json.loads(proc.stdout)
    assert (
        out["reason"] == "stopped"
        and "budget meeting" in out["message"]
        and out["result"] == "first answer"
    )


def test_stop_continuations_are_limited(norma: RunNorma, tmp_path: Path) -> None:
    stop = hook(
        tmp_path, "stop.sh", 'cat > /dev/null; echo \'{"decision": "block", "reason": "again"}\'\n'
    )
    with FakeProvider("openai", [Reply(text=f"answer {i}") for i in range(5)]) as fake:
        cfg = config(
            tmp_path,
            fake,
            f'[agent]\nmax_stop_continuations = 2\n[[hooks.Stop]]\ncommand = "{stop}"\n',
        )
        proc = norma("--config", str(cfg), "run", "-p", "go")
    assert proc.returncode == 0 and proc.stdout == "answer 2\n"
    assert len(fake.requests) == 3 and "max_stop_continuations = 2 reached" in proc.stderr


def test_max_turns_and_token_budget_exit_5(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    looping = [
        Reply(text=f"step {i}", calls=[(f"c{i}", "Read", {"file_path": "a.txt"})], usage=(400, 100))
        for i in range(6)
    ]
    with FakeProvider("openai", list(looping)) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake)), "run", "-p", "loop", "--max-turns", "2"
        )
    assert proc.returncode == 5 and len(fake.requests) == 2
    assert "--max-turns 2 reached" in proc.stderr and proc.stdout == "step 1\n"
    with FakeProvider("anthropic", list(looping)) as fake:
        cfg = config(tmp_path, fake, "[agent]\nmax_tokens_total = 1200\n")
        proc = norma("--config", str(cfg), "run", "-p", "loop", "--output", "json")
    assert proc.returncode == 5 and len(fake.requests) == 3  # 500 + 500 < 1200 ≤ 1500
    out = json.loads(proc.stdout)
    assert out["reason"] == "token_budget" and out["usage"]["total_tokens"] == 1500


def test_session_hooks_fire_with_reasons(norma: RunNorma, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    record = hook(tmp_path, "record.sh", f"cat >> {log}; echo >> {log}\n")
    hooks = "".join(
        f'[[hooks.{e}]]\ncommand = "{record}"\n'
        for e in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")
    )
    with FakeProvider("openai", [Reply(text="fine")]) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake, hooks)), "run", "-p", "go", "--session", "h1"
        )
    assert proc.returncode == 0
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [(e["hook_event_name"], e.get("source") or e.get("reason")) for e in events] == [
        ("SessionStart", "startup"), ("UserPromptSubmit", None), ("Stop", None), ("SessionEnd", "exit"),
    ]  # fmt: skip
    assert {e["session_id"] for e in events} == {"h1"}
    log.unlink()
    with FakeProvider("openai", []) as fake:  # the provider fails: SessionEnd says error
        proc = norma(
            "--config", str(config(tmp_path, fake, hooks)), "run", "-p", "again", "--session", "h1"
        )
    assert proc.returncode == 1
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [(e["hook_event_name"], e.get("source") or e.get("reason")) for e in events] == [
        ("SessionStart", "resume"), ("UserPromptSubmit", None), ("SessionEnd", "error"),
    ]  # fmt: skip


def test_progress_only_on_a_terminal(norma: RunNorma, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "a.txt").write_text("a\n")
    script = [Reply(calls=[("c1", "Read", {"file_path": "a.txt"})]), Reply(text="quiet")]
    with FakeProvider("openai", list(script)) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "-p", "go")
    assert proc.returncode == 0 and proc.stderr == ""  # not a terminal: nothing but the answer
    with FakeProvider("openai", list(script)) as fake:
        primary, secondary = os.openpty()
        argv = [
            sys.executable,
            "-m",
            "norma_cli",
            "--config",
            str(config(tmp_path, fake)),
            "run",
            "-p",
            "go",
        ]
        done = subprocess.run(
            argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=secondary, text=True, timeout=60
        )
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        os.close(primary)
    assert done.returncode == 0 and done.stdout == "quiet\n"
    text = shown.decode("utf-8", "replace")
    assert (
        "norma: model thinking" in text
        and "norma: running Read" in text
        and text.endswith("\x1b[K")
    )


def test_post_tool_use_context_reaches_the_model(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    post = hook(
        tmp_path,
        "post.sh",
        'cat > /dev/null; echo \'{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "a.txt is generated"}}\'\n',
    )
    with FakeProvider(
        "anthropic", [Reply(calls=[("c1", "Read", {"file_path": "a.txt"})]), Reply(text="ok")]
    ) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.PostToolUse]]\ncommand = "{post}"\n')
        assert norma("--config", str(cfg), "run", "-p", "go").returncode == 0
    last_turn = fake.requests[1].body["messages"][-1]["content"]
    assert [b["type"] for b in last_turn] == ["tool_result", "text"] and last_turn[1][
        "text"
    ] == "a.txt is generated"
